//! Static values of a tree: [`StaticValue`] (anything hashable that a structure can hold),
//! [`StaticBox`] (one, shared and compared by value) and [`Static`] (a static leaf of a tree).

use super::*;
use crate::error::Result;
use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A static (hashable) value carried in a tree structure: a `#[tree(static)]` field or a
/// [`Static`] leaf. Compared by `==` and hashed by `Hash` of the concrete type.
pub trait StaticValue: Any + fmt::Debug + Send + Sync {
    #[doc(hidden)]
    fn dyn_eq(&self, other: &dyn StaticValue) -> bool;
    #[doc(hidden)]
    fn dyn_hash(&self, state: &mut dyn Hasher);
    #[doc(hidden)]
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + fmt::Debug + Hash + Eq + Send + Sync> StaticValue for T {
    fn dyn_eq(&self, other: &dyn StaticValue) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
    fn dyn_hash(&self, mut state: &mut dyn Hasher) {
        std::any::TypeId::of::<T>().hash(&mut state);
        self.hash(&mut state);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A shared static value inside a [`TreeDef`].
#[derive(Clone)]
pub struct StaticBox(pub Arc<dyn StaticValue>);

impl StaticBox {
    pub fn new<T: StaticValue>(v: T) -> StaticBox {
        StaticBox(Arc::new(v))
    }

    /// The value, if it has type `T`.
    pub fn get<T: Any + Clone>(&self) -> Option<T> {
        self.0.as_any().downcast_ref::<T>().cloned()
    }

    /// The value as type `T`, also when it was read back from a file: a file stores every
    /// integer as an `i64`, so an `i64` box converts to any Rust integer type that holds its
    /// value (what `load_as` needs to restore a `#[tree(static)] n: usize` field).
    pub fn get_saved<T: Any + Clone>(&self) -> Option<T> {
        if let Some(v) = self.get::<T>() {
            return Some(v);
        }
        let i = self.get::<i64>()?;
        // Dispatch on the requested type first, then convert: a value that does not fit one
        // integer type must not stop the search for the one `T` is.
        macro_rules! convert {
            ($($t:ty),*) => {$(
                if std::any::TypeId::of::<T>() == std::any::TypeId::of::<$t>() {
                    let v = <$t>::try_from(i).ok()?;
                    return (&v as &dyn Any).downcast_ref::<T>().cloned();
                }
            )*};
        }
        convert!(i8, i16, i32, isize, u8, u16, u32, u64, usize, i128, u128);
        None
    }

    /// The value as a file can hold it (a string, an integer or a bool); `None` for a value
    /// of another type, AR19 for an integer outside the signed 64-bit range.
    pub(crate) fn saved_value(&self) -> Result<Option<Value>> {
        if let Some(s) = self.get::<String>() {
            return Ok(Some(Value::Str(s)));
        }
        if let Some(b) = self.get::<bool>() {
            return Ok(Some(Value::Bool(b)));
        }
        let any = self.0.as_any();
        macro_rules! int {
            ($($t:ty),*) => {$(
                if let Some(v) = any.downcast_ref::<$t>() {
                    return match i64::try_from(*v) {
                        Ok(i) => Ok(Some(Value::Int(i))),
                        Err(_) => Err(integer_range_error(v)),
                    };
                }
            )*};
        }
        int!(i64, i8, i16, i32, isize, u8, u16, u32, u64, usize, i128, u128);
        if let Some(s) = any.downcast_ref::<&'static str>() {
            return Ok(Some(Value::Str((*s).to_string())));
        }
        Ok(None)
    }
}

impl PartialEq for StaticBox {
    fn eq(&self, other: &Self) -> bool {
        self.0.dyn_eq(other.0.as_ref())
    }
}

impl Eq for StaticBox {}

impl Hash for StaticBox {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.dyn_hash(state);
    }
}

impl fmt::Debug for StaticBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A value that is always static: part of the structure (and so of every signature), never a
/// leaf. `qb::Static(3usize)` passes a loop count to a jitted function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Static<T>(pub T);

impl<T: StaticValue + Clone> Tree for Static<T> {
    fn flatten(&self, _: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::Static(StaticBox::new(self.0.clone()))
    }
    fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::Static(v) => v
                .get::<T>()
                .map(Static)
                .ok_or_else(|| mismatch("a static value of another type", def)),
            other => Err(mismatch("a static value", other)),
        }
    }
}
