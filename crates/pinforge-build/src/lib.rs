//! pinforge-build: from a patched tree to recorded artifacts. It owns host toolchains by exact
//! version, CUDA toolkits provisioned from pinned wheels (`cudakit`), the CMake build (fixed
//! build path, compile cache, configure, stage, stamp for no-op builds, runtime settings), the
//! manifest it writes through `pinforge-record`, and the comparison of two builds (`diff`).
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod build;
pub mod cudakit;
pub mod diff;
pub mod toolchain;
