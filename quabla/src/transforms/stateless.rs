//! The identity of a stateless function, under which the free functions `qb::jvp` and
//! `qb::vjp` keep their trace caches (they have no object to own one).
//!
//! Rust has no identity for a closure value, and a closure's type alone does not determine its
//! behaviour: the same closure expression evaluated twice may capture different values, which
//! a cached trace would have frozen. A zero-sized function (a closure that captures nothing, or
//! a fn item) has no state, so every value of its type is the same function and a cached trace
//! is exactly what tracing again would record. Its identity is the address of [`call_through`]
//! instantiated for it — code that calls that function and nothing else — with the type names
//! as a second discriminator. Two different functions cannot share the address (distinct code
//! has distinct addresses; the linker may only merge identical code, which computes the same
//! thing); one function may get several addresses (one per codegen unit), which only costs a
//! trace per address. A closure with captures gets no key and is traced on every call.

use crate::error::Result;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The identity of one stateless function under one transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FnKey {
    transform: &'static str,
    code: usize,
    function: &'static str,
    args: &'static str,
    result: &'static str,
}

/// Calls `f`: instantiated once per function type, its address identifies that type.
fn call_through<A, R, F: Fn(A) -> Result<R>>(f: &F, a: A) -> Result<R> {
    f(a)
}

/// The key of `F` when it is stateless (zero-sized); `None` for closures with captures.
pub(crate) fn stateless_key<A, R, F: Fn(A) -> Result<R>>(
    transform: &'static str,
    _: &F,
) -> Option<FnKey> {
    if std::mem::size_of::<F>() != 0 {
        return None;
    }
    let code = call_through::<A, R, F> as fn(&F, A) -> Result<R> as usize;
    Some(FnKey {
        transform,
        code,
        function: std::any::type_name::<F>(),
        args: std::any::type_name::<A>(),
        result: std::any::type_name::<R>(),
    })
}

/// Per-thread caches of one kind, one per stateless function.
pub(crate) type Caches<C> = RefCell<HashMap<FnKey, Rc<C>>>;

/// The cache `key` names in `caches` (created on first use); a fresh one, used for this call
/// only, when there is no key.
pub(crate) fn cache_for<C: Default>(
    caches: &'static std::thread::LocalKey<Caches<C>>,
    key: Option<FnKey>,
) -> Rc<C> {
    match key {
        Some(key) => caches.with(|c| c.borrow_mut().entry(key).or_default().clone()),
        None => Rc::new(C::default()),
    }
}
