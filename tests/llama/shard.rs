//! Issue #21, sharded soaks: `validate --shard I/N` runs merged by `validate merge` equal the
//! unsharded run row for row on real AddressSanitizer builds (the row-independent restore of
//! `engine::slot`), and every refusal of `merge`, its crash points and its JSON document, on
//! verified stub engines (fast: no llama.cpp build).
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/shard.rs`.

use crate::common::shard::{row_facts, run_dir, validate};
use crate::{code, llama_build, llama_ws, pinforge, stderr};
use std::time::Instant;

fn manifest(variant: &str) -> String {
    llama_build(variant);
    llama_ws()
        .join(format!("build/mrope-cpu/{variant}/manifest.json"))
        .display()
        .to_string()
}

// issue #21 "A 200-row run as `--shard 0/2` and `--shard 1/2`, merged, equal to the unsharded
// 200-row run" (outcomes and tokens; timings aside), and `verify` accepts the merged run. The
// control crashes from row 1 on at every restore (the state a row restores is row - 1's,
// whichever engine ran it), so the crash rows land on the same indices in every split.
#[test]
fn two_shards_of_a_200_row_soak_merge_into_the_unsharded_run_row_for_row() {
    let arms = [manifest("unpatched-asan"), manifest("patched-asan")];
    let arms = [arms[0].as_str(), arms[1].as_str()];
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let common = ["--rows", "200", "--arch", "qwen2vl", "--budget", "8"];
    let t0 = Instant::now();
    let (c, whole) = validate(ws, arms, &common);
    let whole_s = t0.elapsed().as_secs_f64();
    assert_eq!(c, 0, "the patched candidate passes: {whole}");
    let mut shards = Vec::new();
    let t1 = Instant::now();
    for s in ["0/2", "1/2"] {
        let mut a = common.to_vec();
        a.extend(["--shard", s]);
        let (c, j) = validate(ws, arms, &a);
        assert_eq!(c, 0, "shard {s}: {j}");
        shards.push(run_dir(&j));
    }
    let shards_s = t1.elapsed().as_secs_f64();
    let out = ws.join("merged");
    let o = pinforge(
        ws,
        &[
            "validate",
            "merge",
            shards[0].to_str().expect("utf8"),
            shards[1].to_str().expect("utf8"),
            "-o",
            out.to_str().expect("utf8"),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let m = crate::json(&o);
    assert_eq!(crate::schemas::validate(&m), "pinforge.validate-merge/v1");

    let want = row_facts(&run_dir(&whole));
    let got = row_facts(&out);
    assert_eq!(want.len(), 400);
    let differ: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .take(5)
        .map(|(k, v)| format!("{k:?}: unsharded {v}, merged {:?}", got.get(k)))
        .collect();
    assert!(differ.is_empty(), "rows differ:\n{}", differ.join("\n"));
    assert_eq!(got.len(), want.len());
    // The summaries agree (counts, onsets, signatures), and the control does crash.
    for (a, b) in whole["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .zip(m["arms"].as_array().expect("arms"))
    {
        for k in ["name", "rows", "counts", "onset_row", "signatures"] {
            assert_eq!(a[k], b[k], "{k}");
        }
    }
    let control = &m["arms"][0];
    assert_eq!(control["onset_row"], 1, "{control}");
    assert_eq!(control["counts"]["crash"], 199, "{control}");
    assert_eq!(m["arms"][1]["counts"]["ok"], 200, "{}", m["arms"][1]);
    assert_eq!(m["verdict"], whole["verdict"]);
    let o = pinforge(
        ws,
        &["verify", out.join("evidence.json").to_str().expect("utf8")],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    eprintln!(
        "issue #21 shards: unsharded 200 rows x 2 arms {whole_s:.1}s; two shards {shards_s:.1}s"
    );
}
