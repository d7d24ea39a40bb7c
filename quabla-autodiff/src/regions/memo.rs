//! The forward-mode derivatives of regions already built in one outermost `jvp_graph`, so
//! that a region differentiated in several places with the same activity is differentiated
//! once and its derivative shared.
//!
//! A derivative of nested loops calls each inner loop from several bodies (the forward pass,
//! each recomputation, the body's VJP); differentiated per call, forward over reverse of loops
//! nested `d` deep was a program of `d²` parts. The memo lives for one outermost `jvp_graph`
//! on one thread ([`JvpScope`]) and changes no result, only how often one is built. It builds
//! nothing itself.

use quabla_ir::{Region, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Derived regions by the address of the region they derive from and the activity that
/// shaped them. The entry holds its source, so that the address cannot be reused while the
/// entry lives.
type Derived = HashMap<(usize, Vec<bool>), (Arc<Region>, Arc<Region>)>;

thread_local! {
    static JVP_REGIONS: RefCell<Option<Derived>> = const { RefCell::new(None) };
}

/// The scope of one outermost `jvp_graph`: the memo is created by the outermost one and
/// dropped with it.
pub(crate) struct JvpScope {
    owner: bool,
}

impl JvpScope {
    pub(crate) fn enter() -> JvpScope {
        let owner = JVP_REGIONS.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c.is_none();
            if fresh {
                *c = Some(HashMap::new());
            }
            fresh
        });
        JvpScope { owner }
    }
}

impl Drop for JvpScope {
    fn drop(&mut self) {
        if self.owner {
            JVP_REGIONS.with(|c| *c.borrow_mut() = None);
        }
    }
}

/// The forward-mode derivative of `region` under the activity `key`, built by `build` unless
/// this scope built it already.
pub(super) fn shared_jvp(
    region: &Arc<Region>,
    key: &[bool],
    build: impl FnOnce() -> Result<Region>,
) -> Result<Arc<Region>> {
    let key = (Arc::as_ptr(region) as usize, key.to_vec());
    let known = JVP_REGIONS.with(|c| {
        c.borrow()
            .as_ref()
            .and_then(|m| m.get(&key).map(|(_, d)| Arc::clone(d)))
    });
    if let Some(derived) = known {
        return Ok(derived);
    }
    let derived = Arc::new(build()?);
    JVP_REGIONS.with(|c| {
        if let Some(m) = c.borrow_mut().as_mut() {
            m.insert(key, (Arc::clone(region), Arc::clone(&derived)));
        }
    });
    Ok(derived)
}
