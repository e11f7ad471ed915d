//! Rebase placeholder.
