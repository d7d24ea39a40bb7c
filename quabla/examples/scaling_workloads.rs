//! How the cost of each workload family grows with its size, for `cargo xtask bench --scaling`
//! (which times the same families in JAX and writes docs/performance.md's tables).
//!
//! `cargo run --release --example scaling_workloads` prints one
//! `scaling=<family> n=<size> seconds=<median seconds>` line per point:
//!
//! - `elementwise`: the jitted chain `sin(x)^2 + cos(x)` over `n` float32 values;
//! - `matmul`: a jitted `n x n` float64 product;
//! - `first_call`: trace, compile and run a fresh function of `n` nodes;
//! - `vmap_grad`: per-example gradients of `sum(tanh(w * x))` with respect to `w` (64 values),
//!   `vmap(grad)` over a batch of `n` examples, jitted;
//! - `fori`: a jitted `fori_loop` of `n` iterations of a scalar body;
//! - `first_call_loop`: trace, differentiate, compile and run a fresh `grad` of a 10-trip
//!   `fori_loop` whose body is a chain of `n` nodes on an 8-element carry;
//! - `first_call_nested`: the same for `n` `fori_loop`s nested in one another (one trip each,
//!   a two-node body innermost);
//! - `loop_state_{fori,scan}_{elementwise,arithmetic,matmul}`: 100 iterations of a jitted
//!   `fori_loop` and of a `scan_over` whose carry has `n` elements (float64, held as
//!   `[n / 8, 8]`), `n` from 8 to 4096 in half octaves ([`LOOP_STATE_SIZES`]), with an
//!   elementwise body `c * 0.999 + sin(c) * 1e-3` (whose cost is mostly the `sin`), one of
//!   cheap arithmetic only, `c * 0.999 + c * c * 1e-3` (where the cost of running each node
//!   shows), or a body with a product by a fixed 8 x 8 matrix `w`,
//!   `c * 0.999 + sin(c @ w) * 1e-3`. Every body does work proportional to `n`, and adjacent
//!   sizes differ by at most 1.5x (2x from 8 to 16), so while a loop runs the same way its time
//!   grows by at most that from one size to the next; more marks a change of how it runs. The
//!   scan also reads one scalar of `xs` per step (added times 1e-3) and stacks its new carry as
//!   the per-step output, as a trajectory is kept.
//!
//! `-- --only <substring>[,<substring>...]` measures only the families whose name contains one
//! of the substrings.
//!
//! `cargo run --release --example scaling_workloads -- --plot <tsv> <png>` draws the table
//! xtask wrote (`family`, `n`, ours, JAX per line) as log-log curves, one panel per family.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::time::Instant;

#[path = "support/pixel_text.rs"]
mod pixel_text;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, tsv, png] if flag == "--plot" => {
            plot::draw(std::path::Path::new(tsv), std::path::Path::new(png))
        }
        [] => Ok(measure(&Only(Vec::new()))?),
        [flag, list] if flag == "--only" => {
            let parts: Vec<String> = list
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
            if parts.is_empty() {
                return Err("`--only` needs a substring of a family name".into());
            }
            Ok(measure(&Only(parts))?)
        }
        _ => Err(format!(
            "unknown arguments {args:?}; usage: scaling_workloads [--only <substring>[,...]] or scaling_workloads --plot <tsv> <png>"
        )
        .into()),
    }
}

/// The families to measure: all, or those whose name contains one of the substrings.
struct Only(Vec<String>);

impl Only {
    /// Whether the family runs.
    fn wants(&self, family: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|f| family.contains(f.as_str()))
    }

    /// `sizes` when the family runs, none otherwise.
    fn sizes<const N: usize>(&self, family: &str, sizes: [usize; N]) -> Vec<usize> {
        if self.wants(family) {
            sizes.to_vec()
        } else {
            Vec::new()
        }
    }
}

/// Median seconds of one call of `f`, each timing averaging `inner` calls (so that a point
/// lasts at least about a millisecond), over `runs` timings after a warm-up call.
fn median_seconds(
    runs: usize,
    inner: usize,
    mut f: impl FnMut() -> qb::Result<Tensor>,
) -> qb::Result<f64> {
    std::hint::black_box(f()?);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        for _ in 0..inner {
            std::hint::black_box(f()?);
        }
        times.push(start.elapsed().as_secs_f64() / inner as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[runs / 2])
}

fn report(family: &str, n: usize, seconds: f64) {
    println!("scaling={family} n={n} seconds={seconds:e}");
}

fn measure(only: &Only) -> qb::Result<()> {
    let chain = qb::jit(|x: Tensor| x.sin().powi(2).add(x.cos()));
    for n in only.sizes(
        "elementwise",
        [1_000, 10_000, 100_000, 1_000_000, 10_000_000],
    ) {
        let x = qb::F32.linspace(-3.0, 3.0, n)?;
        let t = median_seconds(7, (1_000_000 / n).max(1), || chain.call(&x))?;
        report("elementwise", n, t);
    }

    let matmul = qb::jit(|(a, b): (Tensor, Tensor)| a.matmul(&b));
    for n in only.sizes("matmul", [32, 64, 128, 256, 512, 1024]) {
        let a = qb::linspace(-1.0, 1.0, n * n)?.reshape([n as isize, n as isize])?;
        let args = (a.clone(), a.t()?.sin()?);
        let inner = (1 << 27) / (n * n * n) + 1;
        let t = median_seconds(7, inner, || matmul.call(&args))?;
        report("matmul", n, t);
    }

    // Each call builds a new function, so each one traces and compiles afresh.
    let x = qb::ones([64])?;
    for n in only.sizes("first_call", [100, 1_000, 10_000]) {
        let t = median_seconds(3, 1, || {
            let f = qb::jit(move |x: Tensor| {
                let mut x = x;
                for i in 0..n / 2 {
                    x = (x.sin()? * (1.0 + i as f64 * 1e-6))?;
                }
                Ok(x)
            });
            f.call(&x)
        })?;
        report("first_call", n, t);
    }

    let per_example = qb::jit(|(w, xs): (Tensor, Tensor)| {
        qb::vmap(|(w, x): (Tensor, Tensor)| {
            qb::grad(|w: Tensor| (&w * &x).tanh()?.sum()).call::<Tensor, Tensor>(&w)
        })
        .in_axes(&[None, Some(0)])
        .call::<Tensor>(&(w, xs))
    });
    let w = qb::linspace(-1.0, 1.0, 64)?;
    for n in only.sizes("vmap_grad", [1, 16, 256, 4_096]) {
        let args = (w.clone(), qb::linspace(-2.0, 2.0, n)?);
        let t = median_seconds(7, (20_000 / n).max(1), || per_example.call(&args))?;
        report("vmap_grad", n, t);
    }

    // The gradient of a loop compiles its body several times over (forward, recomputation,
    // reverse), so the cost of a large body or a deep nest shows here first.
    let x = qb::linspace(0.1, 0.8, 8)?;
    for n in only.sizes("first_call_loop", [250, 1_000, 2_000, 4_000, 10_000]) {
        let t = median_seconds(3, 1, || {
            let body = move |_: qb::LoopIndex, c: Tensor, _: &[Tensor]| {
                let mut c = c;
                for i in 0..n / 2 {
                    c = (c.sin()? * (1.0 + i as f64 * 1e-6))?;
                }
                Ok(c)
            };
            let loss = move |x: Tensor| qb::fori_loop(0, 10, body, &x).eval()?.sum();
            let f = qb::jit(move |x: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&x));
            f.call(&x)
        })?;
        report("first_call_loop", n, t);
    }
    for n in only.sizes("first_call_nested", [1, 2, 5, 10, 20, 50]) {
        let t = median_seconds(3, 1, || {
            let loss = move |x: Tensor| nested_loops(x, n)?.sum();
            let f = qb::jit(move |x: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&x));
            f.call(&x)
        })?;
        report("first_call_nested", n, t);
    }

    for n in only.sizes("fori", [100, 1_000, 10_000, 100_000, 1_000_000]) {
        let fori = qb::jit(move |c: Tensor| {
            qb::fori_loop(0, n, |_, c, _| (&c * 0.999999).add(1e-6), &c).eval()
        });
        let c = qb::array(1.0)?;
        let t = median_seconds(5, (100_000 / n).max(1), || fori.call(&c))?;
        report("fori", n, t);
    }
    loop_state(only)
}

/// The trip count of the loop-state sweep.
const LOOP_STATE_TRIPS: usize = 100;
/// Its carry sizes: `8 * round(2^(k / 2))`, every power of two from 8 to 4096 and the half
/// octaves between them (the JAX script lists the same).
const LOOP_STATE_SIZES: [usize; 18] = [
    8, 16, 24, 32, 48, 64, 88, 128, 184, 256, 360, 512, 728, 1024, 1448, 2048, 2896, 4096,
];

/// The loop-state sweep (see the module docs): for each body, a `fori_loop` and a `scan_over`
/// over carries of 8 to 4096 elements.
fn loop_state(only: &Only) -> qb::Result<()> {
    let w = Tensor::from_vec(
        [8, 8],
        (0..64).map(|k| (k as f64 * 0.37).sin() * 0.3).collect(),
    )?;
    let xs = qb::linspace(0.0, 1.0, LOOP_STATE_TRIPS)?;
    type Body = fn(&Tensor, &Tensor) -> qb::Result<Tensor>;
    let elementwise: Body = |c, _| (c * 0.999)? + c.sin()?.mul(1e-3)?;
    let with_matmul: Body = |c, w| (c * 0.999)? + c.matmul(w)?.sin()?.mul(1e-3)?;
    let arithmetic: Body = |c, _| (c * 0.999)? + (c * c)?.mul(1e-3)?;
    let bodies = [
        ("elementwise", elementwise),
        ("arithmetic", arithmetic),
        ("matmul", with_matmul),
    ];
    for (name, body) in bodies {
        let fori_family = format!("loop_state_fori_{name}");
        let scan_family = format!("loop_state_scan_{name}");
        for n in LOOP_STATE_SIZES {
            let c = qb::linspace(0.1, 0.8, n)?.reshape([(n / 8) as isize, 8])?;
            let inner = (20_000 / n).max(2);
            // A function per size, as each family of this example does: one jit keeps at
            // most 8 traces, and there are 18 sizes.
            if only.wants(&fori_family) {
                let fori = qb::jit(move |(c, w): (Tensor, Tensor)| {
                    qb::fori_loop(0, LOOP_STATE_TRIPS, |_, c, o| body(&c, &o[0]), &c)
                        .operands(&[w])
                        .eval()
                });
                let args = (c.clone(), w.clone());
                report(
                    &fori_family,
                    n,
                    median_seconds(7, inner, || fori.call(&args))?,
                );
            }
            if only.wants(&scan_family) {
                let scan = qb::jit(move |(c, w, xs): (Tensor, Tensor, Tensor)| {
                    let step =
                        |c: Tensor, x: Tensor, o: &[Tensor]| -> qb::Result<(Tensor, Tensor)> {
                            let c = (body(&c, &o[0])? + x.mul(1e-3)?)?;
                            Ok((c.clone(), c))
                        };
                    qb::scan_over(step, &c, &xs).operands(&[w]).eval::<Tensor>()
                });
                // The final carry and the trajectory, both kept, as JAX's twin returns them.
                let args = (c.clone(), w.clone(), xs.clone());
                let t = median_seconds(7, inner, || Ok(scan.call(&args)?.1))?;
                report(&scan_family, n, t);
            }
        }
    }
    Ok(())
}

/// `depth` one-trip `fori_loop`s nested in one another around `sin(x) * 1.0001`.
fn nested_loops(x: Tensor, depth: usize) -> qb::Result<Tensor> {
    if depth == 0 {
        return x.sin()?.mul(1.0001);
    }
    qb::fori_loop(0, 1, move |_, c, _| nested_loops(c, depth - 1), &x).eval()
}

mod plot {
    //! The log-log picture of `cargo xtask bench --scaling`.

    use super::pixel_text::{pixel_text, text_width};
    use plotters::prelude::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    const OURS: RGBColor = RGBColor(214, 39, 40);
    const JAX: RGBColor = RGBColor(31, 119, 180);

    /// `family -> [(n, ours, jax)]` from the lines `family<TAB>n<TAB>ours<TAB>jax`.
    type Table = BTreeMap<String, Vec<(f64, f64, f64)>>;

    fn read(tsv: &Path) -> Result<Table, Box<dyn std::error::Error>> {
        let mut table = Table::new();
        for line in std::fs::read_to_string(tsv)?.lines() {
            let parts: Vec<&str> = line.split('\t').collect();
            if let [family, n, ours, jax] = parts.as_slice() {
                table.entry(family.to_string()).or_default().push((
                    n.parse()?,
                    ours.parse()?,
                    jax.parse()?,
                ));
            }
        }
        Ok(table)
    }

    /// One panel per family: seconds against size, both axes log10, ours red, JAX blue.
    pub fn draw(tsv: &Path, png: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let table = read(tsv)?;
        if let Some(dir) = png.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Three panels a row, one per family and one for the legend.
        let rows = (table.len() + 1).div_ceil(3).max(1);
        let root = BitMapBackend::new(png, (1500, 450 * rows as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((rows, 3));
        let scale = 2;
        for ((family, points), area) in table.iter().zip(panels.iter()) {
            let logs: Vec<(f64, f64, f64)> = points
                .iter()
                .filter(|p| p.0 > 0.0 && p.1 > 0.0 && p.2 > 0.0)
                .map(|&(n, o, j)| (n.log10(), o.log10(), j.log10()))
                .collect();
            if logs.is_empty() {
                continue;
            }
            let x_lo = logs.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
            let x_hi = logs.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
            let ys = logs.iter().flat_map(|p| [p.1, p.2]);
            let y_lo = ys.clone().fold(f64::INFINITY, f64::min).floor();
            let y_hi = ys.fold(f64::NEG_INFINITY, f64::max).ceil().max(y_lo + 1.0);
            let mut chart = ChartBuilder::on(area)
                .margin_top(50)
                .margin_right(20)
                .x_label_area_size(40)
                .y_label_area_size(120)
                .build_cartesian_2d(x_lo - 0.1..x_hi + 0.1, y_lo..y_hi)?;
            chart
                .configure_mesh()
                .x_labels(0)
                .y_labels(0)
                .axis_style(BLACK)
                .draw()?;
            for (color, pick) in [(OURS, 1usize), (JAX, 2usize)] {
                let series = logs
                    .iter()
                    .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }));
                chart.draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))?;
                chart.draw_series(series.map(|p| Circle::new(p, 4, color.filled())))?;
            }
            // A size's label is skipped when it would overlap the previous one (the dense
            // sizes of the loop-state sweep).
            let mut last_right = i32::MIN;
            for &(x, _, _) in &logs {
                let (px, py) = chart.backend_coord(&(x, y_lo));
                let label = format!("1e{}", x.round() as i64);
                let label = if (x - x.round()).abs() < 1e-9 {
                    label
                } else {
                    format!("{}", 10f64.powf(x).round())
                };
                let left = px - text_width(&label, scale) / 2;
                if left < last_right + 8 {
                    continue;
                }
                last_right = left + text_width(&label, scale);
                // Chart coordinates are the picture's, so ticks are drawn on the root area.
                pixel_text(&root, &label, (left, py + 10), scale, BLACK)?;
            }
            for e in y_lo as i64..=y_hi as i64 {
                let (px, py) = chart.backend_coord(&(x_lo - 0.1, e as f64));
                let label = format!("1e{e} s");
                pixel_text(
                    &root,
                    &label,
                    (px - 10 - text_width(&label, scale), py - 8),
                    scale,
                    BLACK,
                )?;
            }
            pixel_text(area, family, (20, 12), scale, BLACK)?;
        }
        if let Some(legend) = panels.last() {
            pixel_text(legend, "red: quabla", (40, 60), scale, OURS)?;
            pixel_text(legend, "blue: JAX", (40, 90), scale, JAX)?;
            pixel_text(legend, "seconds against size,", (40, 130), scale, BLACK)?;
            pixel_text(legend, "both axes log10", (40, 155), scale, BLACK)?;
        }
        root.present()?;
        Ok(())
    }
}
