//! pinforge: pin an upstream native inference engine (llama.cpp first), carry attributed
//! patches, build variants through CMake reproducibly, and record SHA-256 provenance that
//! someone else can verify later. The binary is a thin layer over [`cli`].
//!
//! Module map (one owner per concern; a concern that outgrows a file becomes a folder):
//!
//! | module | owns |
//! |---|---|
//! | `recipe` | the recipe TOML, variants, validation with line/column errors |
//! | `upstream` | pins → verified sources, safe extraction, vendor trees as git repositories |
//! | `patch` | headers and lint, series, apply (no fuzz), bundle and commit-message export |
//! | `toolchain` | compilers, CMake, Ninja, nvcc by exact version and digest |
//! | `build` | configure/build/stage/collect per variant; `build::stamp` the no-op fast path |
//! | `manifest`, `diff`, `normalize` | the in-toto/SLSA provenance, verify, manifest comparison, the stated reproducibility rule |
//! | `install` | the three-layer install root: store, generations, journal, recovery, gc |
//! | `smoke`, `model`, `cuda` | smoke decodes, the tiny GGUF model, the CUDA probe |
//! | `cli` | clap commands (one file each), rendering, hints, `cli::schema` (JSON Schemas) |
//! | `digest`, `tree`, `fsx`, `process`, `time`, `elf` | typed digests, tree models, file and process edges, time, ELF tables |
//! | `hooks` | test hooks, compiled only with the `test-hooks` feature |
//! | `error`, `output`, `progress`, `workspace` | errors and exit codes, stdout, progress, layout |

pub mod ablate;
pub mod audit;
pub mod build;
pub mod cli;
pub mod cuda;
pub mod cudakit;
pub mod diff;
pub mod digest;
pub mod elf;
pub mod error;
pub mod flip;
pub mod fsx;
pub mod git;
pub mod hooks;
pub mod install;
pub mod manifest;
pub mod model;
pub mod normalize;
pub mod output;
pub mod patch;
pub mod process;
pub mod progress;
pub mod rebase;
pub mod recipe;
pub mod smoke;
pub mod time;
pub mod toolchain;
pub mod tree;
pub mod upstream;
pub mod validate;
pub mod workspace;

pub use error::{Error, Result};
