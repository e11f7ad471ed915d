//! What the fast (`tests/cli/flip.rs`) and slow (`tests/llama/flip.rs`) tests share.

use std::path::Path;

pub(crate) fn read_json(p: &Path) -> serde_json::Value {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
