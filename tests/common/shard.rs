//! What the fast (`tests/cli/shard.rs`) and slow (`tests/llama/shard.rs`) tests share.

use crate::{code, pinforge, stderr};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `validate A B --json ARGS…` in `ws`: the exit code and the document.
pub(crate) fn validate(ws: &Path, arms: [&str; 2], extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["validate", arms[0], arms[1], "--json"];
    args.extend_from_slice(extra);
    let o = pinforge(ws, &args);
    let j = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("validate {extra:?}: not JSON ({e}): {}", stderr(&o)));
    (code(&o), j)
}

pub(crate) fn run_dir(j: &Value) -> PathBuf {
    PathBuf::from(j["run_dir"].as_str().expect("run_dir"))
}
