//! Which launcher started this process, read from the environment it sets: Open MPI's
//! `mpirun` (`OMPI_COMM_WORLD_RANK`/`_SIZE`), MPICH and Intel MPI's Hydra (`PMI_RANK`/
//! `PMI_SIZE`), PMIx launchers (`PMIX_RANK` with one of the sizes) and Slurm's `srun`
//! (`SLURM_PROCID`/`SLURM_NTASKS` inside a job step). The values only decide whether to
//! start MPI and what [`super::rank`] says before [`super::init`]; once MPI runs, its own rank
//! and size are the truth.
//!
//! This module reads the environment only.

/// A launcher and the rank and size it assigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    pub launcher: &'static str,
    pub rank: usize,
    pub size: usize,
}

fn var(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// The launcher of this process, if any.
pub(crate) fn detect() -> Option<Launch> {
    detect_in(&|name| var(name))
}

/// [`detect`] over any environment (for tests).
fn detect_in(get: &dyn Fn(&str) -> Option<usize>) -> Option<Launch> {
    let candidates: [(&'static str, &str, &str); 3] = [
        (
            "mpirun (Open MPI)",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
        ),
        ("mpiexec (Hydra)", "PMI_RANK", "PMI_SIZE"),
        ("srun (Slurm)", "SLURM_PROCID", "SLURM_NTASKS"),
    ];
    for (launcher, rank, size) in candidates {
        // Slurm sets its variables for the batch script too; only a job step (srun) has a
        // step id.
        if launcher.starts_with("srun") && get("SLURM_STEP_ID").is_none() {
            continue;
        }
        if let (Some(rank), Some(size)) = (get(rank), get(size)) {
            if size >= 1 && rank < size {
                return Some(Launch {
                    launcher,
                    rank,
                    size,
                });
            }
        }
    }
    // A PMIx launcher that sets no size of its own (prterun, mpirun of Open MPI 5).
    if let (Some(rank), Some(size)) = (get("PMIX_RANK"), get("OMPI_UNIVERSE_SIZE")) {
        if rank < size {
            return Some(Launch {
                launcher: "a PMIx launcher",
                rank,
                size,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn detect_from(vars: &[(&str, usize)]) -> Option<Launch> {
        let env: HashMap<String, usize> = vars.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        detect_in(&|name| env.get(name).copied())
    }

    #[test]
    fn launchers_are_read_from_their_variables() {
        assert_eq!(detect_from(&[]), None);
        let ompi = detect_from(&[("OMPI_COMM_WORLD_RANK", 1), ("OMPI_COMM_WORLD_SIZE", 4)]);
        assert_eq!(ompi.map(|l| (l.rank, l.size)), Some((1, 4)));
        let hydra = detect_from(&[("PMI_RANK", 0), ("PMI_SIZE", 2)]);
        assert_eq!(hydra.map(|l| (l.rank, l.size)), Some((0, 2)));
        // A batch script is not a job step.
        assert_eq!(
            detect_from(&[("SLURM_PROCID", 0), ("SLURM_NTASKS", 8)]),
            None
        );
        let srun = detect_from(&[
            ("SLURM_PROCID", 3),
            ("SLURM_NTASKS", 8),
            ("SLURM_STEP_ID", 0),
        ]);
        assert_eq!(srun.map(|l| (l.rank, l.size)), Some((3, 8)));
        // Inconsistent values are no launch.
        assert_eq!(
            detect_from(&[("OMPI_COMM_WORLD_RANK", 4), ("OMPI_COMM_WORLD_SIZE", 4)]),
            None
        );
    }
}
