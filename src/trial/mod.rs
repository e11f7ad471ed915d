//! Reasoning over builds: single-axis flips with a pre-registered hypothesis, ablation over
//! the patch bundle, and the A/B validation soak.

pub mod ablate;
pub mod axis;
pub mod config;
pub mod flip;
pub mod record;
pub mod report;
pub mod validate;
pub mod verdict;
