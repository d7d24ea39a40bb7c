//! The conformance suite, one `#[test]` per case and backend column.
//!
//! - `cpu`: the linked CPU backend as the registry provides it (fused, threaded), bit-identical
//!   to the reference (node by node, one thread);
//! - `cpu_plugin`: the CPU backend loaded as a plugin library, bit-identical as well;
//! - `cuda`, `mlx`: the linked device backends, within the tolerances of numerics.md §1.6, or
//!   skipped with the reason they are unavailable on this host.

use quabla_conformance::plugins::cpu_plugin_folder;
use quabla_conformance::{column, Column, Subject};

/// The column of a linked backend.
fn linked(label: &str) -> Column {
    column(label, &[]).unwrap_or_else(|| panic!("no linked backend column {label}"))
}

/// The column of the CPU plugin, loaded from a folder holding only it.
fn cpu_plugin() -> Column {
    let dir = cpu_plugin_folder().unwrap_or_else(|e| panic!("{e}"));
    let column = column("cpu-plugin", &[dir.to_path_buf()]).expect("the CPU plugin is listed");
    assert!(
        matches!(column.subject, Subject::Ready { .. }),
        "{:?}",
        column.subject
    );
    column
}

quabla_conformance::conformance_tests!(cpu, || linked("cpu"));
quabla_conformance::conformance_tests!(cpu_plugin, cpu_plugin);
quabla_conformance::conformance_tests!(cuda, || linked("cuda"));
quabla_conformance::conformance_tests!(mlx, || linked("mlx"));
