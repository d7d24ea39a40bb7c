//! Derive macros of Quabla: `#[derive(Tree)]` with `#[tree(static)]` meta fields.
//!
//! Not yet built: arrives with pytrees.
