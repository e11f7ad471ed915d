//! A flip's final files, the completed `record.json` and `summary.md`, appear in its record
//! folder at once (`trial::record::commit_final`, as an ablation's do): killed after staging
//! (`flip:1`) the folder holds the registered record and no summary; killed after the exchange
//! (`flip:2`) it holds the completed record and its summary; a folder never holds a summary of
//! another state than its record's. The stage a kill leaves is removed by the next flip. The
//! tiny recipe's flip to a variant that cannot configure is the one cheap enough to kill at
//! every step.

use crate::ablate_txn::entries;
use crate::flip::tiny_with_broken_variant;
use crate::{code, pinforge, pinforge_cmd, stderr};
use std::path::Path;

fn state(dir: &Path) -> String {
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("record.json")).expect("record"))
            .expect("json");
    rec["state"].as_str().expect("state").to_string()
}

#[test]
fn a_flip_killed_at_every_step_of_its_final_commit_leaves_a_whole_folder() {
    let t = tiny_with_broken_variant();
    let args = [
        "flip",
        "recipes/tiny.toml",
        "--from",
        "patched",
        "--to",
        "broken",
        "--hypothesis",
        "the C flags are the defect",
    ];
    let flips = t.ws.join("flips");
    use pinforge_base::txn::Step;
    // Every step of the final commit, as the library declares them.
    for &at in pinforge_trial::flip::FlipStep::ALL {
        let step = at.index();
        let o = pinforge_cmd(&t.ws)
            .args(args)
            .env("PINFORGE_CRASH_AT", at.crash_at())
            .output()
            .expect("flip");
        assert_eq!(o.status.code(), None, "step {step}: killed: {}", stderr(&o));
        let dir = flips.join(format!("tiny--patched--broken-{step:04}"));
        let stages: Vec<String> = entries(&flips)
            .into_iter()
            .filter(|n| n.starts_with(".pinforge-final-"))
            .collect();
        assert_eq!(
            stages.len(),
            1,
            "step {step}: the stage a kill leaves: {stages:?}"
        );
        if at == pinforge_trial::flip::FlipStep::Staged {
            assert_eq!(state(&dir), "registered", "step 1: not yet complete");
            assert_eq!(entries(&dir), ["record.json"], "step 1: no summary yet");
        } else {
            assert_eq!(state(&dir), "complete", "step 2: complete");
            assert_eq!(entries(&dir), ["record.json", "summary.md"], "step 2");
            let summary = std::fs::read_to_string(dir.join("summary.md")).expect("summary");
            assert!(summary.contains("**Verdict:** invalid"), "{summary}");
        }
    }
    // A run that is not killed completes its own folder and removes the dead runs' stages.
    let o = pinforge(&t.ws, &args);
    assert_eq!(code(&o), 1, "invalid: {}", stderr(&o));
    let dir = flips.join("tiny--patched--broken-0003");
    assert_eq!(state(&dir), "complete");
    assert_eq!(entries(&dir), ["record.json", "summary.md"]);
    let left: Vec<String> = entries(&flips)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "stages left: {left:?}");
}
