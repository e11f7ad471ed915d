//! From a pin to a patched tree: recipes, verified upstream sources, the attributed patch
//! bundle, and carrying that bundle to a newer upstream (audit, rebase).

pub mod audit;
pub mod patch;
pub mod rebase;
pub mod recipe;
pub mod upstream;
