//! pinforge-source: from a pin to a patched tree. It owns the recipes, the git helpers (libgit2
//! lives here and in no crate below), verified upstream sources (git, registry crate, npm
//! bundle, tarball, folder), the attributed patch bundle (header, lint, apply, export,
//! bibliography), its attribution checked against upstream history, and carrying the bundle to
//! a newer upstream (audit, rebase). Below it: `pinforge-base`, `pinforge-sys`,
//! `pinforge-record` (the tree check that `verify` takes).
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod attribution;
pub mod audit;
pub mod bisect;
pub mod git;
pub mod patch;
pub mod rebase;
pub mod recipe;
pub mod upstream;
