//! `qb::distributed` on in-process groups (threads of this process): the checks of
//! `distributed_checks` on 1, 2 and 4 ranks, the way `tests/distributed_mpi.rs` runs them on
//! MPI processes, plus the faults that threads can stage (a rank that leaves mid-training, a
//! rank that never arrives).

mod distributed_checks;

use distributed_checks::CHECKS;
use qb::distributed::{self, Options};
use qb::Error;
use quabla as qb;
use std::time::Duration;

/// Runs `check` on every rank of an in-process group of `size`; every rank must succeed.
fn on_ranks(size: usize, name: &str, check: fn() -> qb::Result<()>) {
    let results = distributed::run_local(size, Options::default(), check).unwrap();
    for (rank, r) in results.into_iter().enumerate() {
        if let Err(e) = r {
            panic!("{name} on rank {rank} of {size}: {e}");
        }
    }
}

fn run_check(name: &str) {
    let check = CHECKS.iter().find(|(n, _)| *n == name).unwrap().1;
    for size in [1, 2, 4] {
        on_ranks(size, name, check);
    }
}

#[test]
fn collectives_are_the_left_fold_in_rank_order() {
    run_check("collectives");
}

#[test]
fn ranks_that_disagree_get_errors_naming_both() {
    run_check("disagreements");
}

#[test]
fn data_parallel_gradients_equal_the_full_batch_gradient() {
    run_check("gradients");
}

#[test]
fn misuse_raises_tf12_on_every_rank() {
    run_check("misuse");
}

#[test]
fn a_rank_that_raises_is_named_by_the_others() {
    run_check("a_rank_that_raises");
}

#[test]
fn pinn_trainer_over_two_ranks_equals_one_process() {
    let check = CHECKS
        .iter()
        .find(|(n, _)| *n == "trainer_matches_one_process")
        .unwrap()
        .1;
    on_ranks(2, "trainer", check);
}

#[test]
fn failed_steps_change_nothing() {
    run_check("failed_steps_change_nothing");
}

#[test]
fn checkpoints_are_written_once_and_load_anywhere() {
    run_check("checkpoints");
}

#[test]
fn the_data_parallel_example_trains_as_one_process_does() {
    run_check("the_example_trains");
}

#[test]
fn a_unique_id_is_shared_from_rank_zero_or_its_failure_is_everyones() {
    let results = distributed::run_local(3, Options::default(), || {
        let group = distributed::current()?;
        let id =
            distributed::share_unique_id(&group, 128, || Ok((0..128).map(|i| i as u8).collect()))?;
        assert_eq!(id, (0..128).map(|i| i as u8).collect::<Vec<u8>>());
        let err = distributed::share_unique_id(&group, 128, || {
            Err(qb::Error::user("libnccl.so.2 could not be loaded"))
        })
        .unwrap_err();
        if distributed::rank() == 0 {
            assert!(matches!(err, Error::User { .. }), "{err}");
        } else {
            assert!(
                err.to_string()
                    .contains("rank 0 failed: libnccl.so.2 could not be loaded"),
                "{err}"
            );
        }
        Ok(())
    })
    .unwrap();
    results.into_iter().for_each(|r| r.unwrap());
}

#[test]
fn a_rank_that_leaves_fails_the_others_at_once() {
    let limit = Duration::from_secs(5);
    let results = distributed::run_local(3, Options::default(), || {
        distributed_checks::killed_rank(|| {}, limit)
    })
    .unwrap();
    for (rank, r) in results.into_iter().enumerate() {
        match (rank, r) {
            (1, Ok(None)) => {}
            (_, Ok(Some(seconds))) => assert!(seconds < 5.0, "{seconds}"),
            (_, other) => panic!("rank {rank}: {other:?}"),
        }
    }
}

#[test]
fn a_rank_that_never_arrives_is_named_after_the_timeout() {
    let options = Options::default().timeout(Some(Duration::from_millis(300)));
    let results = distributed::run_local(3, options, || {
        if distributed::rank() == 2 {
            // Never calls the barrier; stays alive past the others' timeout.
            std::thread::sleep(Duration::from_millis(1500));
            return Ok(());
        }
        let started = std::time::Instant::now();
        let err = distributed::barrier().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        match &err {
            Error::Distributed { ranks, message } => {
                assert_eq!(ranks, &[2], "{message}");
                assert!(
                    message.contains("rank 2 did not reach it within 0.3 s"),
                    "{message}"
                );
            }
            other => panic!("{other}"),
        }
        // The group is unusable afterwards.
        let again = distributed::barrier().unwrap_err().to_string();
        assert!(again.contains("failed earlier"), "{again}");
        Ok(())
    })
    .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn one_rank_data_parallel_trainer_equals_the_plain_trainer_bit_for_bit() {
    use distributed_checks::pinn;
    use qb::optim::{self, Trainer};
    let results = distributed::run_local(1, Options::default(), || {
        let data = pinn::collocation()?;
        let params = pinn::init(&qb::random::key(0))?;
        let opt = || optim::Adam::new(optim::exponential_decay(1e-2, 1000, 0.5)).clip_norm(5.0);
        let mut a = Trainer::new(pinn::loss, params.clone(), opt(), data.clone())
            .distributed(true)
            .build()?;
        let mut b = Trainer::new(pinn::loss, params, opt(), data).build()?;
        for _ in 0..20 {
            a.step()?;
            b.step()?;
        }
        let (pa, pb) = (a.params()?, b.params()?);
        for (la, lb) in pa.iter().zip(&pb) {
            for k in ["w", "b"] {
                let (x, y) = (la[k].to_vec::<f64>()?, lb[k].to_vec::<f64>()?);
                assert!(
                    x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "{k}"
                );
            }
        }
        Ok(())
    })
    .unwrap();
    results.into_iter().for_each(|r| r.unwrap());
}

#[test]
fn the_single_process_is_rank_zero_of_one() {
    // No launcher in the test environment: the world is one process, and every collective
    // is the identity.
    std::thread::spawn(|| {
        distributed::init().unwrap();
        assert_eq!((distributed::rank(), distributed::size()), (0, 1));
        let x = qb::array([1.5, -2.0]).unwrap();
        let y = distributed::all_reduce(&x, distributed::ReduceOp::Mean).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.5, -2.0]);
        let b = distributed::broadcast(&x, 0).unwrap();
        assert_eq!(b.to_vec::<f64>().unwrap(), vec![1.5, -2.0]);
        assert_eq!(distributed::all_gather(&x).unwrap().shape(), [1, 2]);
        distributed::barrier().unwrap();
        // One process's data-parallel gradient is the gradient.
        let f = |(w, x): (qb::Tensor, qb::Tensor)| (&w * &x)?.sum();
        let w = qb::array([2.0, 3.0]).unwrap();
        let xs = qb::array([[1.0, 2.0], [3.0, 4.0]]).unwrap();
        let (v, g): (qb::Tensor, qb::Tensor) = distributed::value_and_grad(f)
            .shard_argnums(&[1])
            .call(&(w, xs))
            .unwrap();
        assert_eq!(v.item().unwrap(), 2.0 + 6.0 + 6.0 + 12.0);
        assert_eq!(g.to_vec::<f64>().unwrap(), vec![4.0, 6.0]);
    })
    .join()
    .unwrap();
}
