//! The compile scope of one plan, in which each region call is compiled once.

use super::*;

/// Compiled regions of the plan being compiled, by region address and outputs used.
type Compiled = HashMap<(usize, Vec<usize>), Arc<Exec>>;

thread_local! {
    static COMPILED: RefCell<Option<Compiled>> = const { RefCell::new(None) };
}

/// The scope of one plan compile, in which a region called in several places (with the same
/// outputs used) is compiled once, its bodies, schedules and machine code shared. Derivatives
/// of nested loops call one inner loop from many bodies (the forward pass, the recomputation
/// of each checkpointed block, the body's VJP): compiled per call, a loop nested `d` deep was
/// compiled `O(d)` times over, and the plan's compile grew as `d²`. Addresses identify regions
/// only while the plan's graph holds them, which it does for the whole compile; the outermost
/// [`compile_schedule`] opens the scope and its guard closes it.
pub(super) struct CompileScope {
    owner: bool,
}

impl CompileScope {
    /// Opens the scope, or joins the one already open on this thread.
    pub(crate) fn enter() -> CompileScope {
        let owner = COMPILED.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c.is_none();
            if fresh {
                *c = Some(HashMap::new());
            }
            fresh
        });
        CompileScope { owner }
    }

    pub(super) fn key(region: &Region, used: &[usize]) -> (usize, Vec<usize>) {
        (std::ptr::from_ref(region) as usize, used.to_vec())
    }

    pub(super) fn lookup(region: &Region, used: &[usize]) -> Option<Arc<Exec>> {
        COMPILED.with(|c| {
            c.borrow()
                .as_ref()
                .and_then(|m| m.get(&Self::key(region, used)).cloned())
        })
    }

    pub(super) fn remember(region: &Region, used: Vec<usize>, exec: &Arc<Exec>) {
        COMPILED.with(|c| {
            if let Some(m) = c.borrow_mut().as_mut() {
                m.insert(Self::key(region, &used), Arc::clone(exec));
            }
        });
    }
}

impl Drop for CompileScope {
    fn drop(&mut self) {
        if self.owner {
            COMPILED.with(|c| *c.borrow_mut() = None);
        }
    }
}
