//! The checked-in coverage table (`backends/cuda/coverage.md`, op × dtype × lowered/refused) is
//! what the lowering does: it is regenerated here and compared. `BLESS=1` rewrites the file
//! (review the diff).

use quabla_backend::Precision;
use quabla_cuda::coverage::{self, Cell};
use std::path::Path;

#[test]
fn coverage_table_matches_the_lowering() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("coverage.md");
    let table = coverage::markdown();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &table).expect("writing coverage.md");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == table,
        "backends/cuda/coverage.md differs from the lowering (BLESS=1 rewrites it):\n{table}"
    );
}

#[test]
fn every_op_lowers_at_every_dtype_it_has_except_custom_rules_and_float32_in_float64() {
    let mut integer_cells = 0;
    for (op, cells) in coverage::table() {
        for ((column, dtype, _), cell) in coverage::COLUMNS.iter().zip(&cells) {
            if let Cell::Refused(why) = cell {
                let expected = op == "custom"
                    || (column.contains("precision") && why.contains("cannot contain float32"));
                assert!(expected, "{op} at {column} is refused: {why}");
            }
            if dtype.is_integer() && matches!(cell, Cell::Lowered(_)) {
                integer_cells += 1;
            }
        }
    }
    // Integers lower at least wherever the table has a row for them: elementwise ops,
    // reductions, layout and indexed ops, and every region form.
    assert!(integer_cells > 120, "{integer_cells} integer cells lower");
}

#[test]
fn every_dtype_of_the_ir_has_a_column() {
    for (i, &(name, dtype, precision)) in coverage::COLUMNS.iter().enumerate() {
        if precision == Precision::Reference {
            assert_eq!(coverage::column_of(dtype), i, "column {name}");
        }
    }
}
