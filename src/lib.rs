//! pinforge: pin an upstream native inference engine (llama.cpp first), carry attributed
//! patches, build variants through CMake reproducibly, and record SHA-256 provenance that
//! someone else can verify later. The binary is a thin layer over [`cli`].

pub mod audit;
pub mod build;
pub mod cli;
pub mod cuda;
pub mod cudakit;
pub mod diff;
pub mod digest;
pub mod error;
pub mod fsx;
pub mod git;
pub mod install;
pub mod manifest;
pub mod model;
pub mod output;
pub mod patch;
pub mod process;
pub mod progress;
pub mod rebase;
pub mod recipe;
pub mod smoke;
pub mod toolchain;
pub mod tree;
pub mod upstream;
pub mod validate;
pub mod workspace;

pub use error::{Error, Result};
