//! pinforge: pin an upstream native inference engine (llama.cpp first), carry attributed
//! patches, build variants through CMake reproducibly, and record SHA-256 provenance that
//! someone else can verify later. The binary is a thin layer over [`cli`].
//!
//! The folders read as the pipeline, and each imports only from the folders above it:
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | `base` | error, digest, names, fsx, process, proc_wait, git, time, tree, elf, progress, hooks, workspace | leaves: errors and exit codes, typed digests, name rules, file/process edges, layout |
//! | `sys` | shim, mount_ns, cuda | the only `unsafe` code: the one binding of the C smoke shim, the build's mount namespace, the CUDA probe |
//! | `source` | recipe, upstream, patch, audit, rebase | pin → verified source → patched tree; carrying patches to a new pin |
//! | `artifact` | toolchain, cudakit, build, manifest, normalize, diff | toolchains, the CMake build, provenance, the reproducibility rule |
//! | `deploy` | install, model, smoke | the rollback root, the tiny model, smoke decodes |
//! | `trial` | flip, ablate, validate | single-axis flips, ablation, the A/B soak |
//! | `cli` | one file per command, output, reporter, schema | clap, rendering, hints, JSON Schemas |

#![deny(unsafe_code)]
// Every item is as visible as its users need: the binary and the integration tests use only
// what is re-exported or `pub` here, so the compiler reports dead code everywhere else.
#![warn(unreachable_pub)]
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub(crate) mod artifact;
pub mod base;
pub mod cli;
pub(crate) mod deploy;
pub(crate) mod source;
// The one room allowed `unsafe` (foreign and system calls behind safe functions).
#[allow(unsafe_code)]
pub(crate) mod sys;
pub(crate) mod trial;

pub use base::error::{Error, Result};
/// The crash points of install and rollback, for the crash-consistency tests (one test per step).
pub use deploy::install::{InstallStep, RollbackStep};
