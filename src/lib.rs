//! pinforge: pin an upstream native inference engine (llama.cpp first), carry attributed
//! patches, build variants through CMake reproducibly, and record SHA-256 provenance that
//! someone else can verify later. This package is the command line ([`cli`]) over the
//! workspace's library crates, in their dependency order (Cargo enforces it):
//!
//! | crate | owns |
//! |---|---|
//! | `pinforge-sys` | the only `unsafe` code: the C smoke shim's binding, the build's mount namespace, the CUDA probe, signals |
//! | `pinforge-base` | errors and exit codes, typed digests, names, safe file edges, archives, processes, time, text, trees, ELF, progress, test hooks, workspace layout |
//! | `pinforge-record` | manifests (in-toto + SLSA), verify, the normalization rule, signing (DSSE, SSHSIG) |
//! | `pinforge-source` | git, recipes, upstream pins, the patch bundle, attribution, audit, rebase |
//! | `pinforge-build` | toolchains, CUDA toolkits, the CMake build, artifact diff |
//! | `pinforge-deploy` | the install root, the tiny model, smoke, serve, ship |
//! | `pinforge-trial` | flip, ablate, the audit gate, validate and soak, records, reports |
//! | `pinforge` | clap commands (one file each), output, hints, JSON Schemas |

// The workspace lints forbid it already; said here too, where a reader of the binary crate
// looks first (only pinforge-sys may hold `unsafe`).
#![forbid(unsafe_code)]
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod cli;

pub use pinforge_base::error::{Error, Result};
/// The crash points of install and rollback, for the crash-consistency tests (one test per step).
pub use pinforge_deploy::install::{InstallStep, RepairStep, RollbackStep};
