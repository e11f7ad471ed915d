//! What the fast (`tests/cli/shard.rs`) and slow (`tests/llama/shard.rs`) tests share.

use crate::{code, pinforge, stderr};
use serde_json::Value;
use std::collections::BTreeMap;
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

/// What a row's outcome and tokens are, keyed by (arm, row): everything a row records except
/// its timings and how many rows its engine had run (which differ by design between splits).
pub(crate) fn row_facts(dir: &Path) -> BTreeMap<(String, u64), Value> {
    std::fs::read_to_string(dir.join("rows.jsonl"))
        .expect("rows")
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).expect("row");
            let key = (
                r["arm"].as_str().expect("arm").to_string(),
                r["row"].as_u64().expect("row"),
            );
            let o = r.as_object_mut().expect("row object");
            for k in ["wall_ms", "tokens_per_second"] {
                o.remove(k);
            }
            let ev = o["evidence"].as_object_mut().expect("evidence");
            for k in ["engine_ms", "decode_ms", "rows_since_restart", "detail"] {
                ev.remove(k);
            }
            (key, r)
        })
        .collect()
}
