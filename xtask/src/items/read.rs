//! Reading one crate's files into an [`Index`], with `syn`. What counts as public:
//!
//! * `pub fn`, `pub struct`/`enum`/`union`/`trait`/`type`/`const`/`static`/`mod` (not
//!   `pub(crate)` and the like) in a module, and `pub` functions and constants in an `impl`;
//! * every function and constant of a `pub trait`, and of an `impl Trait for Type`;
//! * the variants of a `pub enum`;
//! * `#[macro_export] macro_rules!` macros, at the crate root;
//! * the items of macros (the arms of a definition, pasted where it is invoked, and the input
//!   of a `name! { .. }` invocation), and the functions and trait implementations that macros
//!   generate (see `macros.rs`).
//!
//! The owner of an `impl`'s members is the last segment of its type's path (`Tensor` for
//! `&'a mut ops::Tensor`); a type that is not a path (a tuple, a slice, a macro parameter)
//! leaves them without owner. This module never decides what a report counts as used.

use std::collections::BTreeSet;
use std::path::Path;

use proc_macro2::{Ident, TokenStream};
use syn::{Attribute, ImplItem, Item as SynItem, TraitItem, Visibility};

use super::macros::{
    arm_bodies, camel_case_idents, generated_fns, invokes, loose_items, paste, writes_parameter,
    Loose, PARAMETER,
};
use super::uses::use_paths;
use super::{join_module, module_of, Index, Item, Kind, Reexport, TestModule, TraitImpl};
use crate::source::{read, rust_files, sanitize};
use crate::Result;

impl Index {
    /// The index of the crate whose sources are under `src_dir` (`lib.rs` is the root).
    pub(crate) fn of_crate(src_dir: &Path) -> Result<Index> {
        let mut scan = Scan::default();
        for file in rust_files(src_dir, true)? {
            let module = module_of(src_dir, &file);
            let source = read(&file)?;
            scan.file(&module, &source)
                .map_err(|e| format!("cannot parse {}: {e}", file.display()))?;
        }
        Ok(scan.finish())
    }

    /// The index of one file taken as a crate root (for tests).
    #[cfg(test)]
    pub(crate) fn of_text(text: &str) -> Index {
        let mut scan = Scan::default();
        scan.file("", text).expect("the test source parses");
        scan.finish()
    }
}

/// A `macro_rules!` definition or an invocation, kept until every file is read.
#[derive(Debug)]
struct Macro {
    name: String,
    tokens: TokenStream,
    module: String,
}

/// What one pass over the files collects before macros are expanded.
#[derive(Debug, Default)]
struct Scan {
    index: Index,
    definitions: Vec<Macro>,
    invocations: Vec<Macro>,
}

/// Where the items being read are: their module, and the sanitized text of their file
/// (`None` in a macro's arms, which have no text of their own) for `#[cfg(test)]` modules.
#[derive(Clone, Copy)]
struct Place<'a> {
    module: &'a str,
    text: Option<&'a str>,
}

impl Scan {
    /// Reads one file of the module `module`.
    fn file(&mut self, module: &str, source: &str) -> syn::Result<()> {
        let file = syn::parse_file(source)?;
        self.index.modules.insert(module.to_string());
        let text = sanitize(source);
        let place = Place {
            module,
            text: Some(&text),
        };
        for item in &file.items {
            self.item(item, place);
        }
        Ok(())
    }

    fn item(&mut self, item: &SynItem, place: Place<'_>) {
        let module = place.module;
        match item {
            SynItem::Fn(f) if is_public(&f.vis) => self.add(&f.sig.ident, Kind::Fn, None, module),
            SynItem::Struct(s) => self.type_item(&s.ident, &s.vis, &s.attrs, module),
            SynItem::Union(u) => self.type_item(&u.ident, &u.vis, &u.attrs, module),
            SynItem::Type(t) => self.type_item(&t.ident, &t.vis, &t.attrs, module),
            SynItem::Enum(e) => {
                self.type_item(&e.ident, &e.vis, &e.attrs, module);
                if is_public(&e.vis) {
                    for variant in &e.variants {
                        let owner = Some(e.ident.to_string());
                        self.add(&variant.ident, Kind::Variant, owner, module);
                    }
                }
            }
            SynItem::Trait(t) => self.trait_item(t, module),
            SynItem::Impl(i) => self.impl_item(i, module),
            SynItem::Const(c) if is_public(&c.vis) => self.add(&c.ident, Kind::Value, None, module),
            SynItem::Static(s) if is_public(&s.vis) => {
                self.add(&s.ident, Kind::Value, None, module)
            }
            SynItem::Mod(m) => self.mod_item(m, place),
            SynItem::Use(u) if is_public(&u.vis) => {
                for (path, name) in use_paths(&u.tree) {
                    let module = module.to_string();
                    self.index.reexports.push(Reexport { module, path, name });
                }
            }
            SynItem::Macro(m) => {
                let name = last_segment(&m.mac.path);
                match &m.ident {
                    Some(defined) if name == "macro_rules" => {
                        if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) {
                            self.add(defined, Kind::Macro, None, "");
                        }
                        self.macro_rules(defined.to_string(), &m.mac.tokens, module);
                    }
                    _ => self.invocation(&m.mac, module),
                }
            }
            _ => {}
        }
    }

    /// A struct, union, type alias or enum: public, or a private type's name.
    fn type_item(&mut self, name: &Ident, vis: &Visibility, attrs: &[Attribute], module: &str) {
        for trait_name in derives(attrs) {
            self.index.trait_impls.push(TraitImpl {
                trait_name,
                ty: Some(name.to_string()),
            });
        }
        if is_public(vis) {
            self.add(name, Kind::Type, None, module);
        } else {
            self.index.private_types.insert(name.to_string());
        }
    }

    fn trait_item(&mut self, t: &syn::ItemTrait, module: &str) {
        let public = is_public(&t.vis);
        if public {
            self.add(&t.ident, Kind::Type, None, module);
        } else {
            self.index.private_types.insert(t.ident.to_string());
        }
        let owner = || Some(t.ident.to_string());
        for member in &t.items {
            match member {
                TraitItem::Fn(f) if public => self.add(&f.sig.ident, Kind::Fn, owner(), module),
                TraitItem::Const(c) if public => self.add(&c.ident, Kind::Value, owner(), module),
                TraitItem::Macro(m) => self.invocation(&m.mac, module),
                _ => {}
            }
        }
    }

    fn impl_item(&mut self, i: &syn::ItemImpl, module: &str) {
        let ty = type_name(&i.self_ty);
        let trait_name = i
            .trait_
            .as_ref()
            .map(|(_, path, _)| last_segment(path))
            .filter(|name| name != PARAMETER);
        if let Some(trait_name) = &trait_name {
            self.index.trait_impls.push(TraitImpl {
                trait_name: trait_name.clone(),
                ty: ty.clone(),
            });
        }
        // The members of a trait implementation are as public as the trait.
        let all_public = trait_name.is_some();
        for member in &i.items {
            match member {
                ImplItem::Fn(f) if all_public || is_public(&f.vis) => {
                    self.add(&f.sig.ident, Kind::Fn, ty.clone(), module)
                }
                ImplItem::Const(c) if all_public || is_public(&c.vis) => {
                    self.add(&c.ident, Kind::Value, ty.clone(), module)
                }
                ImplItem::Macro(m) => self.invocation(&m.mac, module),
                _ => {}
            }
        }
    }

    fn mod_item(&mut self, m: &syn::ItemMod, place: Place<'_>) {
        let inner = join_module(place.module, &m.ident.to_string());
        let cfg_test = m.attrs.iter().any(is_cfg_test);
        match &m.content {
            Some((brace, _)) if cfg_test => {
                if let Some(text) = place.text {
                    let from = brace.span.open().byte_range().end;
                    let to = brace.span.close().byte_range().start;
                    self.index.test_modules.push(TestModule {
                        module: inner,
                        text: text.get(from..to).unwrap_or_default().to_string(),
                    });
                }
            }
            content => {
                self.index.modules.insert(inner.clone());
                if is_public(&m.vis) {
                    self.add(&m.ident, Kind::Module, None, place.module);
                }
                for item in content.iter().flat_map(|(_, items)| items) {
                    let place = Place {
                        module: &inner,
                        ..place
                    };
                    self.item(item, place);
                }
            }
        }
    }

    /// A `macro_rules!` definition: its arms are read as items of `module`.
    fn macro_rules(&mut self, name: String, tokens: &TokenStream, module: &str) {
        for body in arm_bodies(tokens) {
            self.loose_items(paste(body), module);
        }
        self.definitions.push(Macro {
            name,
            tokens: tokens.clone(),
            module: module.to_string(),
        });
    }

    /// A macro invocation; the items of a `name! { .. }` are read as items of `module`.
    fn invocation(&mut self, mac: &syn::Macro, module: &str) {
        if let syn::MacroDelimiter::Brace(_) = mac.delimiter {
            self.loose_items(mac.tokens.clone(), module);
        }
        self.invocations.push(Macro {
            name: last_segment(&mac.path),
            tokens: mac.tokens.clone(),
            module: module.to_string(),
        });
    }

    /// The items of a macro's input or arm (see [`loose_items`]).
    fn loose_items(&mut self, tokens: TokenStream, module: &str) {
        let place = Place { module, text: None };
        for loose in loose_items(tokens) {
            match loose {
                Loose::Item(item) => self.item(&item, place),
                Loose::Trait(ident) => self.add(&ident, Kind::Type, None, module),
                Loose::Enum(e) => {
                    self.type_item(&e.ident, &e.vis, &e.attrs, module);
                    if is_public(&e.vis) {
                        for variant in &e.variants {
                            let owner = Some(e.ident.to_string());
                            self.add(variant, Kind::Variant, owner, module);
                        }
                    }
                }
            }
        }
    }

    fn add(&mut self, name: &impl ToString, kind: Kind, owner: Option<String>, module: &str) {
        let name = name.to_string();
        if name == PARAMETER {
            return;
        }
        self.index.items.push(Item {
            name,
            kind,
            owner,
            module: module.to_string(),
        });
    }

    /// Expands what the macros generate, once every definition is known.
    fn finish(mut self) -> Index {
        let fn_macros: BTreeSet<&str> = self
            .definitions
            .iter()
            .filter(|d| writes_parameter(&d.tokens, "fn"))
            .map(|d| d.name.as_str())
            .collect();
        // Macros that write `impl $trait`, or invoke one that does.
        let mut impl_macros: BTreeSet<&str> = self
            .definitions
            .iter()
            .filter(|d| writes_parameter(&d.tokens, "impl"))
            .map(|d| d.name.as_str())
            .collect();
        loop {
            let more: Vec<&str> = self
                .definitions
                .iter()
                .filter(|d| !impl_macros.contains(d.name.as_str()))
                .filter(|d| impl_macros.iter().any(|m| invokes(&d.tokens, m)))
                .map(|d| d.name.as_str())
                .collect();
            if more.is_empty() {
                break;
            }
            impl_macros.extend(more);
        }
        for call in &self.invocations {
            if fn_macros.contains(call.name.as_str()) {
                for name in generated_fns(&call.tokens) {
                    self.index.items.push(Item {
                        name,
                        kind: Kind::Fn,
                        owner: None,
                        module: call.module.clone(),
                    });
                }
            }
            if impl_macros.contains(call.name.as_str()) {
                for trait_name in camel_case_idents(&call.tokens) {
                    self.index.trait_impls.push(TraitImpl {
                        trait_name,
                        ty: None,
                    });
                }
            }
        }
        self.index
    }
}

/// `pub`, not `pub(crate)`, `pub(super)` or `pub(in path)`.
fn is_public(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn is_cfg_test(attr: &Attribute) -> bool {
    let meta: String = quote_tokens(attr)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    meta.contains("cfg(test)")
}

fn quote_tokens(attr: &Attribute) -> String {
    use quote::ToTokens;
    attr.meta.to_token_stream().to_string()
}

/// The traits of the `#[derive(..)]` attributes, by their last path segment.
fn derives(attrs: &[Attribute]) -> Vec<String> {
    let mut traits = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let _ = attr.parse_nested_meta(|meta| {
            traits.push(last_segment(&meta.path));
            Ok(())
        });
    }
    traits
}

fn last_segment(path: &syn::Path) -> String {
    path.segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default()
}

/// The last path segment of a type (`&'a mut dyn path::Name<..>` is `Name`); `None` for a
/// macro parameter or a type that is not a path.
fn type_name(ty: &syn::Type) -> Option<String> {
    let name = match ty {
        syn::Type::Path(p) => last_segment(&p.path),
        syn::Type::Reference(r) => return type_name(&r.elem),
        syn::Type::Paren(p) => return type_name(&p.elem),
        syn::Type::TraitObject(t) => match t.bounds.first() {
            Some(syn::TypeParamBound::Trait(bound)) => last_segment(&bound.path),
            _ => return None,
        },
        _ => return None,
    };
    (name != PARAMETER).then_some(name)
}
