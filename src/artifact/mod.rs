//! From a patched tree to recorded artifacts: toolchains and CUDA toolkits, the CMake build,
//! the in-toto/SLSA manifest, the stated reproducibility rule, and manifest comparison.

pub(crate) mod build;
pub(crate) mod cudakit;
pub(crate) mod diff;
pub(crate) mod manifest;
pub(crate) mod normalize;
pub(crate) mod sign;
pub(crate) mod toolchain;
