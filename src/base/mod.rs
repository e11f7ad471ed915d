//! The leaves every layer stands on: errors and exit codes, typed digests, the file and process
//! edges, git helpers, time, the text rule (control characters), tree models, ELF tables, the
//! progress trait, test hooks and the workspace layout. Nothing here imports from a layer above.

pub(crate) mod archive;
pub(crate) mod digest;
pub mod elf;
pub mod error;
pub(crate) mod fsx;
pub(crate) mod git;
pub(crate) mod hashing;
pub(crate) mod hooks;
pub(crate) mod names;
pub(crate) mod proc_wait;
pub(crate) mod process;
pub(crate) mod progress;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod text;
pub(crate) mod time;
pub(crate) mod tree;
pub(crate) mod workspace;
