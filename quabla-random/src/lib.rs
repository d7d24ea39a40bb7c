//! Keyed random numbers: keys (`split`, `fold_in`) and host samplers, bit for bit as
//! `spec/numerics.md` §9 prescribes.
//!
//! Not yet built. Keys are never traceable.
