//! Reasoning over builds: single-axis flips with a pre-registered hypothesis, ablation over
//! the patch bundle, and the A/B validation soak.

pub(crate) mod ablate;
pub(crate) mod axis;
pub(crate) mod check;
pub(crate) mod config;
pub(crate) mod flip;
pub(crate) mod record;
pub(crate) mod render;
pub(crate) mod report;
pub(crate) mod soak;
pub(crate) mod validate;
pub(crate) mod verdict;
