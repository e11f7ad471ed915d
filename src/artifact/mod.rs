//! From a patched tree to recorded artifacts: toolchains and CUDA toolkits, the CMake build,
//! the in-toto/SLSA manifest, the stated reproducibility rule, and manifest comparison.

pub mod build;
pub mod cudakit;
pub mod diff;
pub mod manifest;
pub mod normalize;
pub mod toolchain;
