//! pinforge-base: the leaves every layer stands on. It owns the one error type and the exit
//! codes, typed digests, the name rules, the file edges that refuse special files (`fsx`), the
//! archive extraction policy (`archive`), process helpers, time, the text rule (control
//! characters), tree models, ELF tables, the progress trait, the test hooks (feature
//! `test-hooks`) and the workspace layout. It depends on `pinforge-sys` only, and names no git
//! library: a host that verifies records links no libgit2.
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod digest;
pub mod error;
pub mod fs;
pub mod hooks;
pub mod proc;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod txn;
pub mod workspace;

// The modules' long-standing paths (`pinforge_base::fsx`, `pinforge_base::time`): every crate
// of the workspace names them, and the folders above are only the source's grouping.
pub use fs::{archive, elf, fsx, hashing, tree};
pub use proc::{proc_wait, process};
pub use text::{names, progress, time};
