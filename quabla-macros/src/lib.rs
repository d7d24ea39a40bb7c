//! Derive macros of Quabla: `#[derive(Tree)]`, which makes a struct a pytree container.
//!
//! This crate owns only the code generation; the `Tree` trait, `TreeDef`, `StaticBox` and the
//! flatten/unflatten functions live in `quabla::tree`, and the derive is used through its
//! re-export `quabla::Tree`:
//!
//! ```ignore
//! use quabla as qb;
//!
//! #[derive(Clone, Debug, qb::Tree)]
//! struct Layer {
//!     w: qb::Tensor,
//!     b: qb::Tensor,
//! }
//!
//! #[derive(Clone, Debug, qb::Tree)]
//! struct Mlp {
//!     layers: Vec<Layer>,
//!     #[tree(static)]
//!     activation: String,
//! }
//! ```
//!
//! # What is generated
//!
//! An `impl ::quabla::tree::Tree` whose structure is
//! `TreeDef::Node { name, fields, meta }`:
//!
//! - `name` is the struct's identifier (`"Mlp"`), without generic arguments.
//! - `fields` holds the data fields, in declaration order (not sorted), each flattened with its
//!   own `Tree` impl. Their leaves are the struct's leaves; leaf paths use the field names
//!   (`layers/0/w`).
//! - `meta` holds the fields marked `#[tree(static)]`, in declaration order, as
//!   `StaticBox::new(field.clone())`. They are not leaves but part of the structure, so two
//!   values with different static fields have different `TreeDef`s (and so different trace
//!   signatures). A static field's type must be `Clone + Hash + Eq + Debug + Send + Sync +
//!   'static`.
//!
//! Tuple structs name their fields `"0"`, `"1"`, ...; a unit struct is a node without fields.
//! A struct is one container level: its flatten goes through
//! `quabla::tree::flatten_container`, so a recursive struct nested past
//! `quabla::tree::MAX_DEPTH` flattens into that limit's error instead of recursing on.
//!
//! `unflatten` accepts only a `Node` with the same name, the same data field names (in order)
//! and the same static field names, whose static values have the field types; anything else is
//! the error of `quabla::tree::structure_mismatch` ("pytree structures differ").
//!
//! # Generic structs
//!
//! Every type parameter that occurs in a data field's type is bounded by
//! `::quabla::tree::Tree`; every type parameter that occurs in a static field's type is bounded
//! by `Clone + Hash + Eq + Debug + Send + Sync + 'static`, and every lifetime that occurs in a
//! static field's type must outlive `'static`. Parameters that occur in no field are left
//! unbounded, and existing bounds and `where` clauses are kept.
//!
//! # Attributes
//!
//! `#[tree(static)]` on a field is the only option. Any other option is a compile error naming
//! it, and so is `#[derive(Tree)]` on an enum or a union.
//!
//! The generated code names the facade by absolute paths (`::quabla::tree::...`), so the
//! deriving crate must depend on `quabla` under that name.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{quote, quote_spanned};
use std::collections::BTreeSet;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{
    parse_macro_input, parse_quote, Data, DeriveInput, Fields, Ident, Lifetime, LitStr, Member,
    Type,
};

/// Derives `quabla::tree::Tree` for a struct; see the crate documentation.
///
/// Fields are data fields (flattened into leaves, in declaration order) unless marked
/// `#[tree(static)]`, which makes them static meta fields stored in the `TreeDef`.
#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// One field of the struct being derived.
struct Field {
    member: Member,
    /// The name recorded in the `TreeDef` (the identifier, or the position of a tuple field).
    name: LitStr,
    ty: Type,
    is_static: bool,
}

fn expand(input: DeriveInput) -> syn::Result<TokenStream2> {
    reject_struct_options(&input)?;
    let data = match &input.data {
        Data::Struct(data) => data,
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                "derive(Tree) supports structs only, not enums",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "derive(Tree) supports structs only, not unions",
            ))
        }
    };
    let fields = collect_fields(&data.fields)?;

    let ident = &input.ident;
    let name = LitStr::new(&ident.to_string(), ident.span());
    let generics = add_bounds(&input, &fields);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();

    let data_fields: Vec<&Field> = fields.iter().filter(|f| !f.is_static).collect();
    let meta_fields: Vec<&Field> = fields.iter().filter(|f| f.is_static).collect();

    let flatten_fields = data_fields.iter().map(|f| {
        let (member, name, ty) = (&f.member, &f.name, &f.ty);
        quote_spanned! {ty.span()=>
            (#name, <#ty as ::quabla::tree::Tree>::flatten(&self.#member, leaves))
        }
    });
    let flatten_meta = meta_fields.iter().map(|f| {
        let (member, name, ty) = (&f.member, &f.name, &f.ty);
        quote_spanned! {ty.span()=>
            (
                #name,
                ::quabla::tree::StaticBox::new::<#ty>(
                    <#ty as ::core::clone::Clone>::clone(&self.#member),
                ),
            )
        }
    });

    let data_names = data_fields.iter().map(|f| &f.name);
    let meta_names = meta_fields.iter().map(|f| &f.name);
    let rebuild = fields.iter().map(|f| {
        let (member, ty, name_lit) = (&f.member, &f.ty, &f.name);
        let position = if f.is_static {
            meta_fields.iter().position(|m| m.member == f.member)
        } else {
            data_fields.iter().position(|m| m.member == f.member)
        }
        .expect("every field is a data or a static field");
        if f.is_static {
            quote_spanned! {ty.span()=>
                #member: match ::quabla::tree::StaticBox::get_saved::<#ty>(&meta[#position].1) {
                    ::core::option::Option::Some(value) => value,
                    ::core::option::Option::None => {
                        return ::core::result::Result::Err(
                            ::quabla::tree::structure_mismatch(#name, def),
                        )
                    }
                }
            }
        } else {
            quote_spanned! {ty.span()=>
                #member: <#ty as ::quabla::tree::Tree>::unflatten(&fields[#position].1, leaves)
                    .map_err(::quabla::tree::within(#name_lit))?
            }
        }
    });

    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics ::quabla::tree::Tree for #ident #ty_generics #where_clause {
            fn flatten(
                &self,
                leaves: &mut ::std::vec::Vec<::quabla::tree::Leaf>,
            ) -> ::quabla::tree::TreeDef {
                // One container level: bounded by `quabla::tree::MAX_DEPTH` like every
                // container, so a recursive struct cannot overflow the stack.
                ::quabla::tree::flatten_container(|| ::quabla::tree::TreeDef::Node {
                    name: #name,
                    fields: ::std::vec![#(#flatten_fields),*],
                    meta: ::std::vec![#(#flatten_meta),*],
                })
            }

            fn unflatten(
                def: &::quabla::tree::TreeDef,
                leaves: &mut dyn ::core::iter::Iterator<Item = ::quabla::tree::Leaf>,
            ) -> ::core::result::Result<Self, ::quabla::Error> {
                const DATA_FIELDS: &[&str] = &[#(#data_names),*];
                const META_FIELDS: &[&str] = &[#(#meta_names),*];
                match def {
                    ::quabla::tree::TreeDef::Node { name, fields, meta }
                        if *name == #name
                            && fields.len() == DATA_FIELDS.len()
                            && fields.iter().zip(DATA_FIELDS).all(|((a, _), b)| a == b)
                            && meta.len() == META_FIELDS.len()
                            && meta.iter().zip(META_FIELDS).all(|((a, _), b)| a == b) =>
                    {
                        let _ = &leaves;
                        ::core::result::Result::Ok(Self { #(#rebuild),* })
                    }
                    // A struct read back from a file is a dict of its fields.
                    other => match ::quabla::tree::node_from_dict(
                        other, #name, DATA_FIELDS, META_FIELDS, leaves,
                    )? {
                        ::core::option::Option::Some((node, fields)) => {
                            <Self as ::quabla::tree::Tree>::unflatten(&node, &mut fields.into_iter())
                        }
                        ::core::option::Option::None => ::core::result::Result::Err(
                            ::quabla::tree::structure_mismatch(#name, def),
                        ),
                    },
                }
            }
        }
    })
}

/// `#[tree(...)]` on the struct itself has no options.
fn reject_struct_options(input: &DeriveInput) -> syn::Result<()> {
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            Err(meta.error(format!(
                "unknown derive(Tree) option `{}` on a struct; `#[tree(static)]` goes on fields",
                path_name(&meta.path)
            )))
        })?;
    }
    Ok(())
}

fn collect_fields(fields: &Fields) -> syn::Result<Vec<Field>> {
    let mut out = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let (member, name) = match &field.ident {
            Some(ident) => (
                Member::Named(ident.clone()),
                LitStr::new(&unraw(ident), ident.span()),
            ),
            None => (
                Member::Unnamed(syn::Index {
                    index: i as u32,
                    span: field.ty.span(),
                }),
                LitStr::new(&i.to_string(), field.ty.span()),
            ),
        };
        let mut is_static = false;
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("tree")) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("static") {
                    if is_static {
                        return Err(meta.error("duplicate derive(Tree) option `static`"));
                    }
                    if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
                        return Err(meta.error("derive(Tree) option `static` takes no value"));
                    }
                    is_static = true;
                    Ok(())
                } else {
                    Err(meta.error(format!(
                        "unknown derive(Tree) option `{}`; the only option is `#[tree(static)]`",
                        path_name(&meta.path)
                    )))
                }
            })?;
        }
        out.push(Field {
            member,
            name,
            ty: field.ty.clone(),
            is_static,
        });
    }
    Ok(out)
}

/// A field identifier without its `r#` prefix.
fn unraw(ident: &Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map(str::to_owned).unwrap_or(s)
}

fn path_name(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// Bounds the type parameters used by data fields by `Tree`, those used by static fields by
/// the static-value traits, and the lifetimes used by static fields by `'static`.
fn add_bounds(input: &DeriveInput, fields: &[Field]) -> syn::Generics {
    let mut generics = input.generics.clone();
    let mut params: BTreeSet<String> = generics
        .type_params()
        .map(|p| p.ident.to_string())
        .collect();
    params.extend(generics.lifetimes().map(|l| l.lifetime.to_string()));
    if params.is_empty() {
        return generics;
    }
    let used_by = |is_static: bool| {
        let mut finder = ParamFinder {
            params: &params,
            found: BTreeSet::new(),
        };
        for f in fields.iter().filter(|f| f.is_static == is_static) {
            finder.visit_type(&f.ty);
        }
        finder.found
    };
    let data_params = used_by(false);
    let static_params = used_by(true);
    let idents: Vec<Ident> = generics.type_params().map(|p| p.ident.clone()).collect();
    let lifetimes: Vec<Lifetime> = generics.lifetimes().map(|l| l.lifetime.clone()).collect();
    let where_clause = generics.make_where_clause();
    for ident in idents {
        let name = ident.to_string();
        if data_params.contains(&name) {
            where_clause
                .predicates
                .push(parse_quote!(#ident: ::quabla::tree::Tree));
        }
        if static_params.contains(&name) {
            where_clause.predicates.push(parse_quote!(
                #ident: ::core::clone::Clone
                    + ::core::hash::Hash
                    + ::core::cmp::Eq
                    + ::core::fmt::Debug
                    + ::core::marker::Send
                    + ::core::marker::Sync
                    + 'static
            ));
        }
    }
    for lifetime in lifetimes {
        if static_params.contains(&lifetime.to_string()) {
            where_clause
                .predicates
                .push(parse_quote!(#lifetime: 'static));
        }
    }
    generics
}

/// Collects the type parameters (`T`, `Vec<T>`, `T::Assoc`, ...) and lifetimes named in a type.
struct ParamFinder<'a> {
    params: &'a BTreeSet<String>,
    found: BTreeSet<String>,
}

impl<'ast> Visit<'ast> for ParamFinder<'_> {
    fn visit_type_path(&mut self, ty: &'ast syn::TypePath) {
        if ty.qself.is_none() {
            if let Some(first) = ty.path.segments.first() {
                let name = first.ident.to_string();
                if self.params.contains(&name) {
                    self.found.insert(name);
                }
            }
        }
        syn::visit::visit_type_path(self, ty);
    }

    fn visit_lifetime(&mut self, lifetime: &'ast Lifetime) {
        let name = lifetime.to_string();
        if self.params.contains(&name) {
            self.found.insert(name);
        }
    }
}
