//! The leaves every layer stands on: errors and exit codes, typed digests, the file and process
//! edges, git helpers, time, tree models, ELF tables, the progress trait, test hooks and the
//! workspace layout. Nothing here imports from a layer above.

pub mod digest;
pub mod elf;
pub mod error;
pub mod fsx;
pub mod git;
pub mod hooks;
pub mod names;
pub mod proc_wait;
pub mod process;
pub mod progress;
#[cfg(test)]
pub(crate) mod testing;
pub mod time;
pub mod tree;
pub mod workspace;
