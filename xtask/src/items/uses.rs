//! Use trees (`a::{b as c, d::*}`) as the paths they name and the names they bind: the
//! re-exports of the indexed crate, and the imports of test files (for `coverage_api.rs`).

use syn::UseTree;

/// The paths and bound names of a use tree: `a::{b as c, d::*}` gives `(a::b, Some(c))` and
/// `(a::d, None)`; `a::{self}` binds `a`; `x as _` binds nothing.
pub(super) fn use_paths(tree: &UseTree) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    walk_use_tree(tree, &mut Vec::new(), &mut out);
    out
}

fn walk_use_tree(
    tree: &UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            walk_use_tree(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let ident = n.ident.to_string();
            if ident == "self" {
                let bound = prefix.last().cloned().unwrap_or(ident);
                out.push((prefix.clone(), Some(bound)));
            } else {
                let mut path = prefix.clone();
                path.push(ident.clone());
                out.push((path, Some(ident)));
            }
        }
        UseTree::Rename(r) => {
            let (ident, alias) = (r.ident.to_string(), r.rename.to_string());
            if alias != "_" {
                let mut path = prefix.clone();
                if ident != "self" {
                    path.push(ident);
                }
                out.push((path, Some(alias)));
            }
        }
        UseTree::Glob(_) => out.push((prefix.clone(), None)),
        UseTree::Group(g) => {
            for tree in &g.items {
                walk_use_tree(tree, prefix, out);
            }
        }
    }
}

/// The paths and bound names of a use tree written as text (what follows `use`, up to and
/// with or without its `;`); nothing when it is not one.
pub(crate) fn use_tree(text: &str) -> Vec<(Vec<String>, Option<String>)> {
    let text = text.trim().trim_end_matches(';');
    match syn::parse_str::<UseTree>(text.trim_start_matches("::")) {
        Ok(tree) => use_paths(&tree),
        Err(_) => Vec::new(),
    }
}
