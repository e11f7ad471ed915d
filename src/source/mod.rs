//! From a pin to a patched tree: recipes, verified upstream sources, the attributed patch
//! bundle, its attribution checked against upstream history, and carrying that bundle to a newer
//! upstream (audit, rebase).

pub(crate) mod attribution;
pub(crate) mod audit;
pub(crate) mod patch;
pub(crate) mod rebase;
pub(crate) mod recipe;
pub(crate) mod upstream;
