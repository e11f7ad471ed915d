//! pinforge: pin an upstream native inference engine (llama.cpp first), carry attributed
//! patches, build variants through CMake reproducibly, and record SHA-256 provenance that
//! someone else can verify later. The binary is a thin layer over [`cli`].

pub mod ablate;
pub mod build;
pub mod cli;
pub mod cuda;
pub mod diff;
pub mod digest;
pub mod error;
pub mod flip;
pub mod fsx;
pub mod install;
pub mod manifest;
pub mod model;
pub mod output;
pub mod patch;
pub mod process;
pub mod progress;
pub mod recipe;
pub mod smoke;
pub mod toolchain;
pub mod tree;
pub mod upstream;
pub mod workspace;

pub use error::{Error, Result};
