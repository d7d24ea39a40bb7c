//! The benchmark workloads of `cargo xtask bench`: each prints one line
//! `workload=<name> seconds=<median seconds>`. Run in release mode through the xtask, which
//! times the same workloads in JAX with `--vs-jax`.
//!
//! `-- --only <substring>[,<substring>...]` runs only the rows whose name contains one of the
//! substrings (`cargo xtask bench --only` passes its filter here). The rows of programs
//! written as users write them (`support/user_rows.rs`) also print a
//! `check=<row> tol=<t> <key>=<value>...` line with what they computed, which xtask compares
//! with the JAX side's.

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;
use std::collections::BTreeMap;
use std::time::Instant;

#[path = "pinn.rs"]
#[allow(dead_code)]
mod pinn;

#[path = "support/mlp.rs"]
mod mlp;
use mlp::{mlp_loss, mlp_params};

#[path = "support/user_programs.rs"]
mod user_programs;

#[path = "support/user_rows.rs"]
mod user_rows;

/// The rows to run: all of them, or those whose name contains one of the substrings given
/// with `--only`.
#[derive(Debug)]
pub struct Only(Vec<String>);

impl Only {
    /// Reads `--only a,b` (or `--only=a,b`) from the command line; any other argument is an
    /// error.
    fn from_args() -> qb::Result<Only> {
        let mut args = std::env::args().skip(1);
        let mut filters = Vec::new();
        while let Some(arg) = args.next() {
            let list = match arg.strip_prefix("--only=") {
                Some(list) => list.to_owned(),
                None if arg == "--only" => args.next().unwrap_or_default(),
                None => {
                    return Err(qb::Error::InvalidArgument {
                        message: format!(
                            "bench_workloads: unknown argument `{arg}`; usage: bench_workloads [--only <substring>[,<substring>...]]"
                        ),
                    })
                }
            };
            let parts: Vec<String> = list
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
            if parts.is_empty() {
                return Err(qb::Error::InvalidArgument {
                    message: "bench_workloads: `--only` needs a substring of a row name, e.g. `--only ode_fit`".into(),
                });
            }
            filters.extend(parts);
        }
        Ok(Only(filters))
    }

    /// Whether the row `name` runs.
    pub fn wants(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|f| name.contains(f.as_str()))
    }
}

/// Median wall time of `runs` calls after one warm-up call.
pub fn median_seconds(
    runs: usize,
    mut f: impl FnMut() -> qb::Result<qb::Tensor>,
) -> qb::Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let out = f()?;
        std::hint::black_box(&out);
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[runs / 2])
}

fn main() -> qb::Result<()> {
    let only = Only::from_args()?;
    if only.wants("chain_f32_1e6") {
        let x = qb::F32.linspace(-3.0, 3.0, 1_000_000)?;
        let t = median_seconds(15, || x.sin().powi(2).add(x.cos()))?;
        println!("workload=chain_f32_1e6 seconds={t:e}");
    }

    for (name, dtype) in [("matmul_f32_512", qb::F32), ("matmul_f64_512", qb::F64)] {
        if !only.wants(name) {
            continue;
        }
        let a = dtype.linspace(-1.0, 1.0, 512 * 512)?.reshape([512, 512])?;
        let b = a.t()?.sin()?;
        let t = median_seconds(15, || a.matmul(&b))?;
        println!("workload={name} seconds={t:e}");
        if name == "matmul_f32_512" {
            println!(
                "note: matmul_f32_512 multiplies in float64 and rounds once (numerics.md §1.5), so it runs at float64 GEMM speed, half the float32 rate JAX uses"
            );
        }
    }

    if only.wants("matmul_f32_512_precision_f32") {
        // The same product jitted at precision("float32"): native float32 GEMM.
        let a = qb::F32
            .linspace(-1.0, 1.0, 512 * 512)?
            .reshape([512, 512])?;
        let b = a.t()?.sin()?;
        let native = qb::jit(|(a, b): (Tensor, Tensor)| a.matmul(&b)).precision(Some("float32"));
        let args = (a, b);
        let t = median_seconds(15, || native.call(&args))?;
        println!("workload=matmul_f32_512_precision_f32 seconds={t:e}");
    }

    if only.wants("sum_f64_1e7") {
        let big = qb::linspace(0.0, 1.0, 10_000_000)?;
        let t = median_seconds(15, || big.sum())?;
        println!("workload=sum_f64_1e7 seconds={t:e}");
        println!(
            "note: sum_f64_1e7 adds in the blocked order of numerics.md §1.5 (eight lanes per block of 1024, blocks over both cores), {:.2} ns per element",
            t / 1e7 * 1e9
        );
    }

    if only.wants("jit_elementwise_1e6_f32") {
        let x = qb::F32.linspace(-3.0, 3.0, 1_000_000)?;
        let chain = qb::jit(|x: Tensor| x.sin().powi(2).add(x.cos()));
        let t = median_seconds(15, || chain.call(&x))?;
        println!("workload=jit_elementwise_1e6_f32 seconds={t:e}");
    }

    // A cached call: signature, lookup, bind, run. Timed over batches of calls.
    let x8 = qb::F32.ones([8])?;
    const CALLS: usize = 20_000;
    if only.wants("jit_call_tiny") {
        let tiny = qb::jit(|x: Tensor| (&x * 2.0).add(1.0));
        let per_call = median_seconds(15, || {
            let mut out = tiny.call(&x8)?;
            for _ in 1..CALLS {
                out = tiny.call(&x8)?;
            }
            Ok(out)
        })? / CALLS as f64;
        println!("workload=jit_call_tiny seconds={per_call:e}");
    }

    // A cached call of a gradient: the same path for a derivative transform.
    if only.wants("grad_call_tiny") {
        let tiny_grad = qb::grad(|x: Tensor| (&x * &x).sum());
        let per_call = median_seconds(15, || {
            let mut out: Tensor = tiny_grad.call(&x8)?;
            for _ in 1..CALLS {
                out = tiny_grad.call(&x8)?;
            }
            Ok(out)
        })? / CALLS as f64;
        println!("workload=grad_call_tiny seconds={per_call:e}");
    }

    // Trace, compile and run a fresh 200-node function.
    if only.wants("first_call_200_nodes") {
        let x64 = qb::ones([64])?;
        let t = median_seconds(5, || {
            let f = qb::jit(|x: Tensor| {
                let mut x = x;
                for i in 0..100 {
                    x = (x.sin()? * (1.0 + i as f64 * 1e-3))?;
                }
                Ok(x)
            });
            f.call(&x64)
        })?;
        println!("workload=first_call_200_nodes seconds={t:e}");
    }

    // Trace, differentiate, compile and run `jit(value_and_grad(loss))` of a 1-16-16-1 tanh MLP
    // on 32 points, with a fresh function each time.
    if only.wants("first_call_mlp_value_and_grad") {
        let xs = qb::linspace(-1.0, 1.0, 32)?.reshape([32, 1])?;
        let ys = xs.sin()?;
        let params = mlp_params(16, 0.25)?;
        let t = median_seconds(5, || {
            let step = qb::jit(|(p, x, y): (Vec<Tensor>, Tensor, Tensor)| {
                qb::value_and_grad(mlp_loss).call::<Tensor, (Tensor, Vec<Tensor>)>(&(p, x, y))
            });
            Ok(step.call(&(params.clone(), xs.clone(), ys.clone()))?.0)
        })?;
        println!("workload=first_call_mlp_value_and_grad seconds={t:e}");
    }

    // The steady state of a small training loop: a cached call of the same step on a 1-64-64-1
    // network and 1024 points.
    let xs = qb::linspace(-1.0, 1.0, 1024)?.reshape([1024, 1])?;
    let ys = xs.sin()?;
    let args = (mlp_params(64, 0.125)?, xs, ys);
    if only.wants("mlp_value_and_grad_1024x64") {
        let step = qb::jit(|(p, x, y): (Vec<Tensor>, Tensor, Tensor)| {
            qb::value_and_grad(mlp_loss).call::<Tensor, (Tensor, Vec<Tensor>)>(&(p, x, y))
        });
        let t = median_seconds(15, || Ok(step.call(&args)?.0))?;
        println!("workload=mlp_value_and_grad_1024x64 seconds={t:e}");
    }

    // The same network trained by a `Trainer` with Adam: loss, gradient and update in one plan
    // whose state stays resident and is donated each step (per step, over 200 steps).
    if only.wants("trainer_step_mlp") {
        let (p, x, y) = &args;
        let mut trainer = qb::optim::Trainer::new(
            |p: &Vec<Tensor>, d: &(Tensor, Tensor)| mlp_loss((p.clone(), d.0.clone(), d.1.clone())),
            p.clone(),
            qb::optim::Adam::new(1e-3),
            (x.clone(), y.clone()),
        )
        .build()?;
        let t = median_seconds(5, || {
            for _ in 0..200 {
                trainer.step()?;
            }
            Ok(trainer.last_loss()?.unwrap_or(qb::array(0.0)?))
        })? / 200.0;
        println!("workload=trainer_step_mlp seconds={t:e}");
    }

    // The same step with float32 parameters and data, jitted at precision("float32").
    if only.wants("mlp_value_and_grad_1024x64_f32_precision_f32") {
        let (p, x, y) = &args;
        let p32 = p
            .iter()
            .map(|t| t.astype(qb::F32))
            .collect::<qb::Result<Vec<_>>>()?;
        let args32 = (p32, x.astype(qb::F32)?, y.astype(qb::F32)?);
        let step32 = qb::jit(|(p, x, y): (Vec<Tensor>, Tensor, Tensor)| {
            qb::value_and_grad(mlp_loss).call::<Tensor, (Tensor, Vec<Tensor>)>(&(p, x, y))
        })
        .precision(Some("float32"));
        let t = median_seconds(15, || Ok(step32.call(&args32)?.0))?;
        println!("workload=mlp_value_and_grad_1024x64_f32_precision_f32 seconds={t:e}");
    }

    // A jitted fori_loop of 1e5 iterations of a scalar body: the per-iteration cost of a
    // scalar loop in machine code.
    if only.wants("fori_1e5") {
        let fori = qb::jit(|c: Tensor| {
            qb::fori_loop(0, 100_000, |_, c, _| (&c * 0.999999).add(1e-6), &c).eval()
        });
        let c0 = qb::array(1.0)?;
        let t = median_seconds(7, || fori.call(&c0))?;
        println!("workload=fori_1e5 seconds={t:e}");
        println!(
            "note: fori_1e5 runs {:.1} ns per iteration: the CPU backend compiles the scalar loop to machine code (Cranelift), the carry in a register; the interpreter it replaces took 17-18 ns",
            t / 1e5 * 1e9
        );
    }

    ode_workloads(&only)?;
    linalg_workloads(&only)?;
    optim_workloads(&only)?;
    user_rows::run(&only)?;
    Ok(())
}

/// Lotka-Volterra with `th = [a, b, c, d]`.
fn lotka_volterra(y: &Tensor, _t: &Tensor, args: &[Tensor]) -> qb::Result<Tensor> {
    let th = &args[0];
    let (x, z) = (y.index(qb::s![0])?, y.index(qb::s![1])?);
    let xz = (&x * &z)?;
    let dx = (th.index(qb::s![0])? * &x)? - th.index(qb::s![1])? * &xz;
    let dz = (th.index(qb::s![2])? * &xz)? - th.index(qb::s![3])? * &z;
    qb::stack(&[dx?, dz?], 0)
}

/// Robertson's stiff chemical kinetics.
fn robertson(y: &Tensor, _t: &Tensor, _args: &[Tensor]) -> qb::Result<Tensor> {
    let (a, b, c) = (
        y.index(qb::s![0])?,
        y.index(qb::s![1])?,
        y.index(qb::s![2])?,
    );
    let bc = (&b * &c)?.mul(1e4)?;
    let bb = b.square()?.mul(3e7)?;
    let da = (a.mul(-0.04)? + &bc)?;
    let db = ((a.mul(0.04)? - &bc)? - &bb)?;
    qb::stack(&[da, db, bb], 0)
}

/// ODE solves: a jitted dopri5 solve of Lotka-Volterra over [0, 10] at rtol 1e-6 and
/// atol 1e-9, the gradient of a loss of that solve with respect to its 4 parameters, and a
/// rosenbrock23 solve of the stiff Robertson problem.
fn ode_workloads(only: &Only) -> qb::Result<()> {
    use qb::ode::{odeint, Method, OdeInfo};
    let theta = qb::array([1.5, 1.0, 1.0, 3.0])?;
    let y0 = qb::array([1.0, 1.0])?;
    let lv = |th: &Tensor| {
        odeint(lotka_volterra, &y0, (0.0, 10.0))
            .method(Method::Dopri5)
            .args(&[th])
            .rtol(1e-6)
            .atol(1e-9)
            .eval_with_info()
    };
    if only.wants("ode_dopri5_lotka_volterra") {
        let solve = qb::jit(|th: Tensor| lv(&th));
        let t = median_seconds(15, || Ok(solve.call(&theta)?.0))?;
        println!("workload=ode_dopri5_lotka_volterra seconds={t:e}");
        let (_, info): (Tensor, OdeInfo) = solve.call(&theta)?;
        println!(
            "note: ode_dopri5_lotka_volterra takes {} accepted and {} rejected steps; the traced solve is a while_loop bounded to max_steps = 512 trips that stops at t1",
            info.accepted_steps.item()?,
            info.rejected_steps.item()?
        );
    }
    if only.wants("ode_dopri5_lotka_volterra_grad") {
        let loss = |th: Tensor| lv(&th)?.0.square()?.sum();
        let grad = qb::jit(|th: Tensor| qb::grad(loss).call::<Tensor, Tensor>(&th));
        let t = median_seconds(15, || grad.call(&theta))?;
        println!("workload=ode_dopri5_lotka_volterra_grad seconds={t:e}");
    }

    if only.wants("ode_rosenbrock23_robertson") {
        let stiff = qb::jit(|y0: Tensor| {
            odeint(robertson, &y0, (0.0, 40.0))
                .method(Method::Rosenbrock23)
                .rtol(1e-4)
                .atol(1e-8)
                .max_steps(1024)
                .eval_with_info()
        });
        let r0 = qb::array([1.0, 0.0, 0.0])?;
        let t = median_seconds(15, || Ok(stiff.call(&r0)?.0))?;
        println!("workload=ode_rosenbrock23_robertson seconds={t:e}");
        let (_, info): (Tensor, OdeInfo) = stiff.call(&r0)?;
        println!(
            "note: ode_rosenbrock23_robertson (t in [0, 40], rtol 1e-4, atol 1e-8) takes {} accepted and {} rejected steps; JAX runs diffrax's Kvaerno3 (an implicit ESDIRK method; diffrax has no Rosenbrock solver) with the same tolerances",
            info.accepted_steps.item()?,
            info.rejected_steps.item()?
        );
    }
    Ok(())
}

/// Dense linear algebra at 256 x 256 float64, jitted: `cholesky` and `eigh` of a symmetric
/// positive-definite matrix, `solve` with one right-hand side, `svd` (all factors), and the
/// gradient of `slogdet(a).logabsdet`.
fn linalg_workloads(only: &Only) -> qb::Result<()> {
    let n = 256usize;
    // A deterministic well-conditioned matrix: a smooth pattern plus a dominant diagonal.
    let values: Vec<f64> = (0..n * n)
        .map(|k| {
            let (i, j) = ((k / n) as f64, (k % n) as f64);
            (0.37 * i + 0.11 * j).sin() * 0.5 + if k / n == k % n { n as f64 } else { 0.0 }
        })
        .collect();
    let a = Tensor::from_vec([n, n], values)?;
    let spd = (a.matmul(a.t()?)?.mul(1.0 / n as f64))?;
    let b = qb::ones([n])?;
    if only.wants("linalg_cholesky_256_f64") {
        let chol = qb::jit(|m: Tensor| qb::linalg::cholesky(&m));
        let t = median_seconds(15, || chol.call(&spd))?;
        println!("workload=linalg_cholesky_256_f64 seconds={t:e}");
    }
    if only.wants("linalg_solve_256_f64") {
        let solve = qb::jit(|(m, r): (Tensor, Tensor)| qb::linalg::solve(&m, &r));
        let operands = (a.clone(), b);
        let t = median_seconds(15, || solve.call(&operands))?;
        println!("workload=linalg_solve_256_f64 seconds={t:e}");
    }
    if only.wants("linalg_eigh_256_f64") {
        let eigh = qb::jit(|m: Tensor| qb::linalg::eigh(&m));
        let t = median_seconds(7, || Ok(eigh.call(&spd)?.eigenvalues))?;
        println!("workload=linalg_eigh_256_f64 seconds={t:e}");
    }
    if only.wants("linalg_svd_256_f64") {
        let svd = qb::jit(|m: Tensor| qb::linalg::svd(&m).eval());
        let t = median_seconds(7, || Ok(svd.call(&a)?.s))?;
        println!("workload=linalg_svd_256_f64 seconds={t:e}");
    }
    if only.wants("linalg_grad_slogdet_256_f64") {
        let grad = qb::jit(|m: Tensor| {
            qb::grad(|m: Tensor| Ok(qb::linalg::slogdet(&m)?.logabsdet)).call::<Tensor, Tensor>(&m)
        });
        let t = median_seconds(15, || grad.call(&a))?;
        println!("workload=linalg_grad_slogdet_256_f64 seconds={t:e}");
    }
    Ok(())
}

/// The PINN of acceptance §13 through the `Trainer`, and E72's L-BFGS solve.
fn optim_workloads(only: &Only) -> qb::Result<()> {
    use qb::optim::{self, Lbfgs, Trainer};
    let data = pinn::collocation()?;
    let params = pinn::init(&qb::random::key(0))?;
    let adam = || optim::Adam::new(optim::exponential_decay(1e-2, 1000, 0.5));
    // From building the trainer (trace and compile of loss, gradient and update) to the end
    // of its first step; each repeat builds a new trainer, so each one traces afresh.
    if only.wants("pinn_first_call") {
        let mut first = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            let mut trainer =
                Trainer::new(pinn::loss, params.clone(), adam(), data.clone()).build()?;
            trainer.step()?;
            std::hint::black_box(trainer.last_loss()?);
            first.push(start.elapsed().as_secs_f64());
        }
        first.sort_by(f64::total_cmp);
        println!(
            "workload=pinn_first_call seconds={:e}",
            first[first.len() / 2]
        );
    }
    if only.wants("pinn_adam_2000") {
        let mut trainer = Trainer::new(pinn::loss, params, adam(), data).build()?;
        trainer.step()?;
        let mut runs = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..2000 {
                trainer.step()?;
            }
            std::hint::black_box(trainer.last_loss()?);
            runs.push(start.elapsed().as_secs_f64());
        }
        runs.sort_by(f64::total_cmp);
        println!("workload=pinn_adam_2000 seconds={:e}", runs[1]);
    }

    if only.wants("lbfgs_rosenbrock") {
        type Point = BTreeMap<String, Tensor>;
        let rosen = |p: &Point, _: &()| {
            let (x, y) = (&p["x"], &p["y"]);
            (1.0 - x)?.powi(2) + (y - x.powi(2)?)?.powi(2)?.mul(100.0)?
        };
        let start: Point = [("x", -1.2), ("y", 1.0)]
            .into_iter()
            .map(|(k, v)| Ok((k.to_string(), qb::array(v)?)))
            .collect::<qb::Result<_>>()?;
        // Bound once, as JAX's row jits its minimization once: the solves share one traced
        // plan.
        let solver = Lbfgs::new().minimizer(rosen);
        let mut iterations = 0;
        let t = median_seconds(15, || {
            let (sol, info) = solver.minimize(&start, &())?;
            iterations = info.iterations;
            Ok(sol["x"].clone())
        })?;
        println!("workload=lbfgs_rosenbrock seconds={t:e}");
        println!("note: lbfgs_rosenbrock takes {iterations} L-BFGS iterations (strong Wolfe) through Lbfgs::minimizer (traced once); JAX's row is jax.scipy.optimize.minimize(method=\"BFGS\") on the same problem, jitted whole (JAX has no L-BFGS outside optax)");
    }
    Ok(())
}
