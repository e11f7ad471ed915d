//! pinforge-trial: reasoning over builds. It owns single-axis flips with a pre-registered
//! hypothesis, ablation over the patch bundle, the audit `--check` gate, the A/B validation
//! soak (in-process and served), their records (`record::schema`, `record::folder`), and the
//! Markdown summaries and HTML reports drawn from them. It is the top library layer: it uses
//! every crate below.
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod ablate;
pub mod axis;
pub mod bisect;
pub mod check;
pub mod config;
pub mod flip;
pub mod record;
pub mod render;
pub mod report;
pub mod soak;
pub mod validate;
pub mod verdict;
