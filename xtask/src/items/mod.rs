//! The public items of a crate's sources, read with `syn`, for the coverage reports.
//!
//! This module owns [`Index`]: every public item defined under a crate's `src` folder, with
//! the module it is defined in and, for methods, associated constants and enum variants, the
//! type or trait that owns it; the `pub use` re-exports of each module (named or glob); and
//! the trait implementations (`impl Trait for Type`, `#[derive(Trait)]`). Reports ask it
//! whether a name is reachable as `crate::module::name` ([`Index::visible`]), whether a type
//! has a member ([`Index::has_member`]), and the like. It lists items only: what a report
//! makes of them is the report's, and the bodies of functions are not looked into.
//!
//! `read.rs` parses each file and says what counts as public; `macros.rs` reads what
//! `macro_rules!` definitions and invocations define; `uses.rs` reads use trees. Items inside
//! `#[cfg(test)]` modules are not indexed; the modules' texts are kept apart
//! ([`Index::test_modules`]) as test code.

mod macros;
mod read;
mod uses;

pub(crate) use uses::use_tree;

use std::collections::BTreeSet;
use std::path::Path;

/// What a public item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A function or method.
    Fn,
    /// A struct, enum, union, trait or type alias.
    Type,
    /// A `const` or `static`.
    Value,
    /// A variant of an enum (the enum is its owner).
    Variant,
    /// An exported `macro_rules!` macro.
    Macro,
    /// A `pub mod`.
    Module,
}

/// A public item: its name, kind, owner (the `impl`'s type, the trait, or the enum) and the
/// module it is defined in (`linalg::dense`; empty for the crate root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) owner: Option<String>,
    pub(crate) module: String,
}

/// A `pub use` of `module`: the path it names (as written) and the name it binds (`None`
/// for a glob, `use path::*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reexport {
    pub(crate) module: String,
    pub(crate) path: Vec<String>,
    pub(crate) name: Option<String>,
}

/// A trait implementation: the trait's last path segment and the type's (`None` when the
/// type is a macro's parameter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TraitImpl {
    pub(crate) trait_name: String,
    pub(crate) ty: Option<String>,
}

/// A `#[cfg(test)]` module: the module path it has and its sanitized body.
#[derive(Clone, Debug)]
pub(crate) struct TestModule {
    pub(crate) module: String,
    pub(crate) text: String,
}

/// The public items, re-exports and trait implementations of one crate.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub(crate) items: Vec<Item>,
    pub(crate) reexports: Vec<Reexport>,
    pub(crate) trait_impls: Vec<TraitImpl>,
    pub(crate) test_modules: Vec<TestModule>,
    /// Every module path that has a file or an inline `mod` (the root is `""`).
    modules: BTreeSet<String>,
    /// The names of the structs, enums, unions, type aliases and traits that are not public.
    private_types: BTreeSet<String>,
}

impl Index {
    /// The names of every public function, in any module or type (the macro-generated
    /// ones included).
    pub(crate) fn fn_names(&self) -> BTreeSet<String> {
        self.items
            .iter()
            .filter(|i| i.kind == Kind::Fn)
            .map(|i| i.name.clone())
            .collect()
    }

    /// Whether `name` is reachable as `module::name`: defined there (not as a member of a
    /// type), re-exported there by name, or reachable in a module that `module` re-exports
    /// whole (`pub use ops::reduce::*`). A re-export of another crate's item counts by its
    /// name alone.
    pub(crate) fn visible(&self, module: &str, name: &str) -> bool {
        self.visible_from(module, name, 0)
    }

    fn visible_from(&self, module: &str, name: &str, depth: usize) -> bool {
        let defined = self
            .items
            .iter()
            .any(|i| i.owner.is_none() && i.module == module && i.name == name);
        let renamed = self
            .reexports
            .iter()
            .any(|r| r.module == module && r.name.as_deref() == Some(name));
        defined
            || renamed
            || (depth < 8
                && self
                    .reexports
                    .iter()
                    .filter(|r| r.module == module && r.name.is_none())
                    .filter_map(|r| self.resolve(&r.module, &r.path))
                    .any(|target| self.visible_from(&target, name, depth + 1)))
    }

    /// The module a `use` path of `module` names, when it is one of this crate's modules.
    fn resolve(&self, module: &str, path: &[String]) -> Option<String> {
        let mut segments: Vec<&str> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").collect()
        };
        let mut rest = path;
        if path.is_empty() {
            return None;
        }
        match path.first().map(String::as_str) {
            Some("crate") => {
                segments.clear();
                rest = &path[1..];
            }
            Some("self") => rest = &path[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    segments.pop();
                    rest = &rest[1..];
                }
            }
            _ => {
                // A path relative to `module` if its first segment is a child module, else a
                // path from the root (a crate-root name in a `use` of the root itself).
                let child = join(&segments, &path[..1]);
                if !self.modules.contains(&child) {
                    segments.clear();
                }
            }
        }
        let target = join(&segments, rest);
        self.modules.contains(&target).then_some(target)
    }

    /// The items named `name` owned by the type, trait or enum `owner` (methods,
    /// associated constants, variants).
    pub(crate) fn has_member(&self, owner: &str, name: &str) -> bool {
        self.items
            .iter()
            .any(|i| i.owner.as_deref() == Some(owner) && i.name == name)
    }

    /// Whether a function named `name` is defined anywhere: a free function, a trait's
    /// function, or a method of a type that is not private to the crate.
    pub(crate) fn has_fn(&self, name: &str) -> bool {
        self.items.iter().any(|i| {
            i.kind == Kind::Fn
                && i.name == name
                && i.owner.as_ref().is_none_or(|owner| {
                    !self.private_types.contains(owner) || self.is_public_type(owner)
                })
        })
    }

    fn is_public_type(&self, name: &str) -> bool {
        self.items
            .iter()
            .any(|i| i.kind == Kind::Type && i.owner.is_none() && i.name == name)
    }

    /// Whether any item (or re-export) anywhere has the name `name`.
    pub(crate) fn has_name(&self, name: &str) -> bool {
        self.items.iter().any(|i| i.name == name)
            || self
                .reexports
                .iter()
                .any(|r| r.name.as_deref() == Some(name))
    }

    /// Whether an exported macro is named `name`.
    pub(crate) fn has_macro(&self, name: &str) -> bool {
        self.items
            .iter()
            .any(|i| i.kind == Kind::Macro && i.name == name)
    }

    /// Whether `trait_name` is implemented for `ty` (for any type when `ty` is `None`; an
    /// implementation whose type is unknown matches every type).
    pub(crate) fn implements(&self, trait_name: &str, ty: Option<&str>) -> bool {
        self.trait_impls.iter().any(|t| {
            t.trait_name == trait_name && (ty.is_none() || t.ty.is_none() || t.ty.as_deref() == ty)
        })
    }

    /// The first segments of the paths of re-exports that name no module of this crate:
    /// the other crates that items are re-exported from (`quabla_ir` for
    /// `pub use quabla_ir::DType`).
    pub(crate) fn external_crates(&self) -> BTreeSet<String> {
        self.reexports
            .iter()
            .filter(|r| r.name.is_some())
            .filter(|r| {
                let first = r.path.first().map(String::as_str).unwrap_or("");
                !matches!(first, "crate" | "self" | "super")
                    && !self.modules.contains(&join_module(&r.module, first))
                    && !self.modules.contains(first)
            })
            .filter_map(|r| r.path.first().cloned())
            .collect()
    }
}

fn join(segments: &[&str], rest: &[String]) -> String {
    segments
        .iter()
        .copied()
        .chain(rest.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

pub(super) fn join_module(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

/// The module path of a source file: `lib.rs` is the root, `a/mod.rs` and `a.rs` are `a`,
/// `a/b.rs` is `a::b`.
pub(super) fn module_of(src_dir: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src_dir).unwrap_or(file);
    let mut segments: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = segments.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_string();
        let is_root = segments.is_empty() && (stem == "lib" || stem == "main");
        if stem != "mod" && !is_root {
            segments.push(stem);
        }
    }
    segments.join("::")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
pub fn sin(x: &Tensor) {}
impl Tensor { pub const fn cos(&self) {} fn tan(&self) {} pub const ZERO: f64 = 0.0; }
pub use ops::{a as exp, log, sub::{mod_, where_}};
pub use ops::reduce::*;
use private::hidden;
pub(crate) fn internal() {}
/// A dtype.
#[derive(Clone, Copy, PartialEq)]
pub enum Error { Tracer { kind: Kind }, #[doc = "x"] Unsupported(String, u8), Other = 3 }
pub struct Unit;
pub trait Ext { fn relu(self) -> Self; fn gelu(self) -> Self { self } }
impl fmt::Display for Tensor { fn fmt(&self) {} }
pub(super) struct Flat;
impl Flat { pub fn hidden_method(&self) {} }
mod ops {
    pub mod reduce { pub fn sum() {} }
    pub fn log() {}
}
macro_rules! reductions {
    ($($name:ident, $axes:ident => $kind:ident;)*) => {
        super::tensor_methods! { pub trait ReduceExt; $( pub fn $name(&self) {} )* }
        $( pub fn $name(x: T) {} )*
    };
}
reductions! {
    /// Sum.
    max, max_axes => Max;
    min, min_axes => Min;
}
macro_rules! arith { ($t:ident, $m:ident) => { impl $t<f64> for Tensor { fn $m(self) {} } }; }
macro_rules! all_arith { ($($t:ident, $m:ident;)*) => {$( arith!($t, $m); )*}; }
all_arith! { Add, add; Mul, mul; }
#[macro_export]
macro_rules! s { ($($x:expr),*) => { vec![] }; }
#[cfg(test)]
mod tests { pub fn hidden_helper() {} #[test] fn t() { qb::sin(&x); } }
"#;

    #[test]
    fn public_items_with_their_owners_and_modules() {
        let index = Index::of_text(SRC);
        let has = |name: &str, kind: Kind, owner: Option<&str>, module: &str| {
            index.items.iter().any(|i| {
                i.name == name
                    && i.kind == kind
                    && i.owner.as_deref() == owner
                    && i.module == module
            })
        };
        assert!(has("sin", Kind::Fn, None, ""));
        assert!(has("cos", Kind::Fn, Some("Tensor"), ""));
        assert!(!index.has_fn("tan") && !index.has_fn("internal"));
        assert!(!index.has_fn("hidden_method"), "a method of a private type");
        assert!(has("ZERO", Kind::Value, Some("Tensor"), ""));
        assert!(has("Error", Kind::Type, None, ""));
        for variant in ["Tracer", "Unsupported", "Other"] {
            assert!(has(variant, Kind::Variant, Some("Error"), ""), "{variant}");
        }
        assert!(!index.has_name("kind") && !index.has_name("doc"));
        assert!(has("Unit", Kind::Type, None, ""));
        assert!(has("relu", Kind::Fn, Some("Ext"), "") && has("gelu", Kind::Fn, Some("Ext"), ""));
        assert!(has("fmt", Kind::Fn, Some("Tensor"), ""));
        assert!(has("sum", Kind::Fn, None, "ops::reduce"));
        assert!(has("log", Kind::Fn, None, "ops"));
        assert!(has("s", Kind::Macro, None, ""));
        assert!(!index.has_name("hidden_helper"));
        assert_eq!(index.test_modules.len(), 1);
        assert_eq!(index.test_modules[0].module, "tests");
        assert!(index.test_modules[0].text.contains("qb::sin"));
    }

    #[test]
    fn macro_generated_functions_and_impls() {
        let index = Index::of_text(SRC);
        for name in ["max", "max_axes", "min", "min_axes"] {
            assert!(index.has_fn(name), "{name}");
        }
        assert!(!index.has_fn("Max") && !index.has_fn("kind"));
        assert!(index.implements("Add", Some("Tensor")));
        assert!(index.implements("Mul", None));
        assert!(index.implements("Display", Some("Tensor")));
        assert!(index.implements("PartialEq", Some("Error")));
        assert!(!index.implements("Display", Some("Error")));
        assert!(!index.implements("Sub", None));
    }

    #[test]
    fn visibility_follows_reexports_and_globs() {
        let index = Index::of_text(SRC);
        assert!(index.visible("", "sin"));
        assert!(index.visible("", "exp") && index.visible("", "where_"));
        assert!(index.visible("", "sum"), "through `pub use ops::reduce::*`");
        assert!(!index.visible("", "hidden") && !index.visible("", "cos"));
        assert!(index.visible("ops", "log") && !index.visible("ops", "sin"));
        assert!(index.has_member("Tensor", "cos") && index.has_member("Error", "Tracer"));
        assert!(index.external_crates().is_empty());
    }

    #[test]
    fn use_trees() {
        let tree = |text: &str| {
            use_tree(text)
                .into_iter()
                .map(|(path, name)| format!("{}={}", path.join("::"), name.unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            tree("quabla_ir::{DType, dtype::{self, Kind as K}, ops::*};"),
            [
                "quabla_ir::DType=DType",
                "quabla_ir::dtype=dtype",
                "quabla_ir::dtype::Kind=K",
                "quabla_ir::ops="
            ]
        );
        assert_eq!(tree("crate::a as _;"), Vec::<String>::new());
    }

    #[test]
    fn module_paths_of_files() {
        let src = Path::new("/c/src");
        let module = |f: &str| module_of(src, &src.join(f));
        assert_eq!(module("lib.rs"), "");
        assert_eq!(module("linalg/mod.rs"), "linalg");
        assert_eq!(module("linalg/dense.rs"), "linalg::dense");
        assert_eq!(module("tree.rs"), "tree");
    }
}
