//! What `macro_rules!` definitions and invocations define, read from their tokens: the
//! items of a definition's arms (each `$param` read as the placeholder [`PARAMETER`], never an
//! item's name, and each repetition `$( .. )*` as its contents once), the items of an
//! invocation's input, and what a macro generates without writing it out:
//!
//! * functions, for a macro whose arms define `fn $name`: for each invocation, the
//!   snake-case identifiers before `=>` in each `;`-separated entry (`sum, sum_axes,
//!   sum_keepdims => Sum;` defines `sum`, `sum_axes` and `sum_keepdims`);
//! * trait implementations, for a macro whose arms (or a macro they invoke) write
//!   `impl $trait`: every CamelCase identifier of its invocations, for a type left unknown.
//!
//! Nothing here expands a macro: what a macro defines is read from the tokens it is given.

use std::collections::BTreeSet;

use proc_macro2::{Delimiter, Group, Ident, Spacing, TokenStream, TokenTree};
use syn::parse::{discouraged::Speculative, ParseStream, Parser};
use syn::{Attribute, Item as SynItem, Token, Visibility};

/// The name a macro parameter (`$name`) is read as in a macro's arms: never an item's.
pub(super) const PARAMETER: &str = "__macro_parameter";

/// The bodies of a `macro_rules!` definition's arms: `(pattern) => { body }`, separated by
/// `;`.
pub(super) fn arm_bodies(tokens: &TokenStream) -> Vec<TokenStream> {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    let mut bodies = Vec::new();
    for (k, tree) in trees.iter().enumerate() {
        let arrow = k >= 2
            && is_punct(&trees[k - 1], '>')
            && is_punct(&trees[k - 2], '=')
            && matches!(&trees[k - 2], TokenTree::Punct(p) if p.spacing() == Spacing::Joint);
        if let (true, TokenTree::Group(body)) = (arrow, tree) {
            bodies.push(body.stream());
        }
    }
    bodies
}

fn is_punct(tree: &TokenTree, c: char) -> bool {
    matches!(tree, TokenTree::Punct(p) if p.as_char() == c)
}

/// A macro arm's body as the code it pastes, once: `$crate` is `crate`, every other
/// `$param` the placeholder [`PARAMETER`], and a repetition `$( .. ) sep op` its contents.
pub(super) fn paste(tokens: TokenStream) -> TokenStream {
    let mut out = Vec::new();
    let mut trees = tokens.into_iter().peekable();
    while let Some(tree) = trees.next() {
        match tree {
            TokenTree::Punct(p) if p.as_char() == '$' => match trees.next() {
                Some(TokenTree::Ident(i)) if i == "crate" => out.push(TokenTree::Ident(i)),
                Some(TokenTree::Ident(i)) => {
                    out.push(TokenTree::Ident(Ident::new(PARAMETER, i.span())));
                }
                Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
                    out.extend(paste(g.stream()));
                    // The separator, if any, then the repetition operator.
                    let is_op = |t: &TokenTree| ['*', '+', '?'].iter().any(|&c| is_punct(t, c));
                    if trees.peek().is_some_and(|t| !is_op(t)) {
                        trees.next();
                    }
                    if trees.peek().is_some_and(is_op) {
                        trees.next();
                    }
                }
                Some(other) => out.push(other),
                None => {}
            },
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), paste(g.stream()));
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}

/// What a macro's input or arm holds, read as far as it is made of items.
pub(super) enum Loose {
    Item(Box<SynItem>),
    /// `vis trait Name;`: the trait the items after it are declared in (how the facade's
    /// method macros name their trait).
    Trait(Ident),
    /// `vis enum Name { .. }` whose entries are not Rust variants (`Neg = 0 => "neg"`, the
    /// rows of the IR's tables).
    Enum(LooseEnum),
}

pub(super) struct LooseEnum {
    pub(super) attrs: Vec<Attribute>,
    pub(super) vis: Visibility,
    pub(super) ident: Ident,
    /// The leading identifier of each entry.
    pub(super) variants: Vec<Ident>,
}

/// The items of a macro's input or (pasted) arm: each item that parses, the two forms of
/// [`Loose`] that macros take and Rust does not, and nothing of the rest (expressions, a
/// macro's own syntax), skipped a token at a time.
pub(super) fn loose_items(tokens: TokenStream) -> Vec<Loose> {
    let parser = |input: ParseStream<'_>| {
        let mut out = Vec::new();
        while !input.is_empty() {
            let fork = input.fork();
            if let Ok(item) = fork.parse::<SynItem>() {
                input.advance_to(&fork);
                out.push(Loose::Item(Box::new(item)));
                continue;
            }
            let fork = input.fork();
            if let Ok(loose) = loose_form(&fork) {
                input.advance_to(&fork);
                out.push(loose);
                continue;
            }
            input.parse::<TokenTree>()?;
        }
        Ok(out)
    };
    parser.parse2(tokens).unwrap_or_default()
}

/// `vis trait Name;` or `vis enum Name { entries }` (see [`Loose`]).
fn loose_form(input: ParseStream<'_>) -> syn::Result<Loose> {
    let attrs = input.call(Attribute::parse_outer)?;
    let vis: Visibility = input.parse()?;
    if input.peek(Token![trait]) {
        input.parse::<Token![trait]>()?;
        let ident: Ident = input.parse()?;
        input.parse::<Token![;]>()?;
        return Ok(Loose::Trait(ident));
    }
    input.parse::<Token![enum]>()?;
    let ident: Ident = input.parse()?;
    let body;
    syn::braced!(body in input);
    let entries: TokenStream = body.parse()?;
    let trees = without_attributes(&entries);
    let variants = trees
        .split(|t| is_punct(t, ','))
        .filter_map(|entry| match entry.first() {
            Some(TokenTree::Ident(i)) => Some(i.clone()),
            _ => None,
        })
        .collect();
    Ok(Loose::Enum(LooseEnum {
        attrs,
        vis,
        ident,
        variants,
    }))
}

/// Whether a macro definition writes `<keyword> $param` (`fn $name`, `impl $trait`).
pub(super) fn writes_parameter(tokens: &TokenStream, keyword: &str) -> bool {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    trees.iter().enumerate().any(|(k, tree)| match tree {
        TokenTree::Ident(i) => {
            i == keyword && trees.get(k + 1).is_some_and(|next| is_punct(next, '$'))
        }
        TokenTree::Group(g) => writes_parameter(&g.stream(), keyword),
        _ => false,
    })
}

/// Whether `tokens` invoke the macro `name` (`name!`, `path::name!`).
pub(super) fn invokes(tokens: &TokenStream, name: &str) -> bool {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    trees.iter().enumerate().any(|(k, tree)| match tree {
        TokenTree::Ident(i) => i == name && trees.get(k + 1).is_some_and(|n| is_punct(n, '!')),
        TokenTree::Group(g) => invokes(&g.stream(), name),
        _ => false,
    })
}

/// The top-level tokens of a macro invocation, its attributes (`#[..]`, doc comments)
/// left out.
fn without_attributes(tokens: &TokenStream) -> Vec<TokenTree> {
    let mut out = Vec::new();
    let mut trees = tokens.clone().into_iter().peekable();
    while let Some(tree) = trees.next() {
        if is_punct(&tree, '#') {
            if trees.peek().is_some_and(|t| is_punct(t, '!')) {
                trees.next();
            }
            if matches!(trees.peek(), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket)
            {
                trees.next();
                continue;
            }
        }
        out.push(tree);
    }
    out
}

/// The functions an invocation of a function-generating macro defines: in each entry
/// (separated by `;`), the snake-case identifiers before `=>`, in entries whose part before
/// `=>` holds no bracket.
pub(super) fn generated_fns(tokens: &TokenStream) -> Vec<String> {
    let trees = without_attributes(tokens);
    let mut names = Vec::new();
    for entry in trees.split(|t| is_punct(t, ';')) {
        let arrow = entry.windows(2).position(|pair| {
            matches!(&pair[0], TokenTree::Punct(p) if p.as_char() == '=' && p.spacing() == Spacing::Joint)
                && is_punct(&pair[1], '>')
        });
        let Some(arrow) = arrow else {
            continue;
        };
        let head = &entry[..arrow];
        if head.iter().any(|t| matches!(t, TokenTree::Group(_))) {
            continue;
        }
        for tree in head {
            if let TokenTree::Ident(i) = tree {
                let name = i.to_string();
                if name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// The CamelCase identifiers of `tokens` (`Add`, `BitAnd`), each once, in order.
pub(super) fn camel_case_idents(tokens: &TokenStream) -> Vec<String> {
    fn walk(tokens: TokenStream, seen: &mut BTreeSet<String>, out: &mut Vec<String>) {
        for tree in tokens {
            match tree {
                TokenTree::Ident(i) => {
                    let name = i.to_string();
                    let camel = name.starts_with(|c: char| c.is_ascii_uppercase())
                        && name.bytes().any(|c| c.is_ascii_lowercase());
                    if camel && seen.insert(name.clone()) {
                        out.push(name);
                    }
                }
                TokenTree::Group(g) => walk(g.stream(), seen, out),
                _ => {}
            }
        }
    }
    let (mut seen, mut out) = (BTreeSet::new(), Vec::new());
    walk(tokens.clone(), &mut seen, &mut out);
    out
}
