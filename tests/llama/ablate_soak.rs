//! `pinforge ablate --trial soak` (issue #21): every subset of the M-RoPE patch set, built
//! under ASan on the shared llama.cpp workspace, soaked for a few rows; the analysis names
//! which patch's removal brings a crash back (with its onset rows), the record links every
//! run's evidence and `verify` re-checks it; and an outcome that changes between repeats leaves
//! that subset undetermined. The empty and full subsets are the shared `unpatched-asan` and
//! `patched-asan` builds; the other six build through the compile cache.

use crate::{code, json, llama_build, llama_ws, pinforge, pinforge_cmd, stderr, stdout};
use std::path::{Path, PathBuf};
use std::time::Instant;

const P1: &str = "0001-batch-size-ubatch-reserve-pos-for-mrope.patch";
const P3: &str = "0003-kv-cache-can-shift-mrope.patch";

fn by<'a>(j: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    j["subsets"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["label"] == label))
        .unwrap_or_else(|| panic!("subset {label}: {j}"))
}

fn soak_args<'a>(rows: &'a str, repeats: &'a str) -> Vec<&'a str> {
    vec![
        "ablate",
        "--variant",
        "patched-asan",
        "--arch",
        "qwen2vl",
        "--trial",
        "soak",
        "--rows",
        rows,
        "--repeats",
        repeats,
    ]
}

fn verify(record: &Path) -> (i32, serde_json::Value) {
    let o = pinforge(
        llama_ws(),
        &["verify", record.to_str().expect("utf-8"), "--json"],
    );
    (code(&o), json(&o))
}

// The ablation of the M-RoPE patch set under ASan, each subset soaked for 6 rows: 0001 alone
// is sufficient, the broadcast (0002) alone still overflows, 0003 does not touch the
// signature, and leaving 0001 out brings an overflow back (at its onset rows). Every run's
// evidence is linked and re-checks; a tampered copy of the record does not.
#[test]
fn a_soak_ablation_of_the_mrope_patches_names_the_patch_whose_removal_brings_the_crash_back() {
    llama_build("unpatched-asan");
    llama_build("patched-asan");
    let started = Instant::now();
    let mut args = soak_args("6", "1");
    args.push("--json");
    let o = pinforge(llama_ws(), &args);
    eprintln!(
        "soak ablation, 8 subsets x 6 rows: {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.ablate/v1");
    assert_eq!(j["soak"]["settings"]["rows"], 6);
    let subsets = j["subsets"].as_array().expect("subsets");
    assert_eq!(subsets.len(), 8);
    for s in subsets {
        eprintln!(
            "  {:<16} {:<13} {}",
            s["label"].as_str().unwrap_or(""),
            s["class"].as_str().unwrap_or(""),
            s["soak"]["runs"][0]["signatures"]
        );
        // A soak ablation soaks; it does not smoke. Each subset: one run of 6 rows with its
        // evidence.
        assert!(s["smoke"].is_null(), "{s}");
        let run = &s["soak"]["runs"][0];
        assert_eq!(run["rows"], 6, "{s}");
        assert!(run["evidence"]["manifest"].is_string(), "{s}");
        // Crash rows never enter a subset's timing.
        let crashes = run["counts"]["crash"].as_u64().unwrap_or(0);
        let t = &s["soak"]["timing"];
        assert_eq!(t["excluded_rows"].as_u64(), Some(crashes), "{s}");
        assert_eq!(t["rows"].as_u64(), Some(6 - crashes), "{s}");
    }
    assert_eq!(by(&j, "none")["built_as"], "unpatched-asan");
    assert_eq!(by(&j, "none")["class"], "signature");
    assert!(by(&j, "none")["soak"]["runs"][0]["onset_row"].is_u64());
    assert_eq!(by(&j, "0001")["class"], "clean");
    // The first row has no state to restore; every row after it overflows.
    let none_run = &by(&j, "none")["soak"]["runs"][0];
    assert_eq!(none_run["counts"]["crash"], 5, "{none_run}");
    assert_eq!(by(&j, "0002")["soak"]["runs"][0]["onset_row"], 1);
    assert_eq!(j["sufficient"], serde_json::json!([[P1]]), "{j}");
    assert_eq!(j["no_effect"], serde_json::json!([P3]), "{j}");
    // Leaving 0001 out brings an overflow back, from its onset row: whether it is the
    // signature under test (necessary) or the broadcast's own frame (another crash), the
    // record names 0001 and no other patch.
    let left_out = by(&j, "0002+0003");
    let onset = left_out["soak"]["runs"][0]["onset_row"].as_u64();
    assert!(onset.is_some(), "{left_out}");
    let named: Vec<&serde_json::Value> = j["necessary"]
        .as_array()
        .into_iter()
        .chain(j["other_crash_when_left_out"].as_array())
        .flatten()
        .collect();
    assert_eq!(named, [&serde_json::json!(P1)], "{j}");
    let rate = &j["soak"]["target_rate"];
    assert_eq!((&rate["rows"], &rate["of"]), (&5.into(), &6.into()), "{j}");

    let record = PathBuf::from(j["record"].as_str().expect("record"));
    let (c, v) = verify(&record);
    assert_eq!(c, 0, "{v}");
    assert_eq!(crate::schemas::validate(&v), "pinforge.verify-soak/v1");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(8), "{v}");
    assert_eq!(v["runs"][0]["side"], "none#1");
    // `report` of the record draws every linked run's rows (8 subsets x 6) and re-checks the
    // record through the same library.
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("report.md");
    let o = pinforge(
        llama_ws(),
        &[
            "report",
            record.to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
            "--format",
            "md",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r = json(&o);
    assert_eq!(crate::schemas::validate(&r), "pinforge.report/v1");
    assert_eq!(r["rows"].as_u64(), Some(48), "{r}");
    let md = std::fs::read_to_string(&out).expect("report");
    assert!(md.contains("8 linked runs re-checked"), "{md}");
    // A copy whose digest of one subset's evidence is not the manifest's: exit 1, naming it.
    let mut bad: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).expect("read")).expect("json");
    bad["subsets"][1]["soak"]["runs"][0]["evidence"]["sha256"] = "0".repeat(64).into();
    let dir = llama_ws()
        .join("ablations")
        .join(format!("{}-tampered", j["id"].as_str().expect("id")));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("record.json"), bad.to_string()).expect("write");
    let (c, v) = verify(&dir.join("record.json"));
    std::fs::remove_dir_all(&dir).expect("rm");
    assert_eq!(c, 1, "{v}");
    assert_eq!(v["runs"][1]["side"], "0001#1", "{v}");
    assert!(
        v["runs"][1]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("changed")),
        "{v}"
    );
}

// Two repeats, interleaved across the subsets; a test hook reads 0002's second run as clean,
// so its repeats disagree: 0002 is undetermined with the table (exit 1), shown in the text
// output (snapshot), and the rest of the analysis stands on the other subsets.
#[test]
fn a_subset_whose_repeats_disagree_is_undetermined_with_the_table_in_the_text_output() {
    llama_build("unpatched-asan");
    llama_build("patched-asan");
    let o = pinforge_cmd(llama_ws())
        .args(soak_args("3", "2"))
        .env("PINFORGE_SOAK_FORCE_CLEAN", "0002:2")
        .output()
        .expect("run");
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}{}", stderr(&o));
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("0002 "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("undetermined"), "{out}");
    assert!(row.contains("clean (3 rows) (forced)"), "{out}");
    assert!(
        out.contains("repeat 1 crash `heap-buffer-overflow") && out.contains("repeat 2 clean"),
        "{out}"
    );
    let rec_line = out
        .lines()
        .find(|l| l.starts_with("record"))
        .expect("record");
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(rec_line.trim_start_matches("record").trim()).expect("read"),
    )
    .expect("json");
    let order: Vec<&str> = rec["soak"]["order"]
        .as_array()
        .expect("order")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert_eq!(order.len(), 16);
    assert_eq!(&order[..2], ["none#1", "0001#1"]);
    assert_eq!(order[8], "none#2");
    // The patch whose removal brings a crash back is named with that subset's onset rows.
    assert!(
        out.contains(&format!(
            "without {P1}: subset 0002+0003: crash at row 1 (2 of 3); crash at row 1 (2 of 3)"
        )),
        "{out}"
    );
    insta::with_settings!({filters => vec![
        (r"/\S*/ablations/\S+", "[RECORD]"),
        (r"\b\d+\.\d+s\*?", "[SECS]"),
        (r"(signature|clean|undetermined|other-crash) +[0-9.]+ ", "$1 [MS] "),
        (r"\(p = [0-9.]+\)", "(p = [P])"),
        (r"[0-9a-f]{12,64}", "[HEX]"),
        (r"[ \t]+", " "),
    ]}, {
        insta::assert_snapshot!("ablate_soak_disagree", format!("exit {}\n{out}", code(&o)));
    });
}

// The soak flags of `ablate` are checked before anything is registered or built: exit 2,
// naming the flag, no record folder written.
#[test]
fn ablate_soak_flags_out_of_place_or_range_are_refused_with_exit_2_and_write_nothing() {
    let ws = llama_ws();
    let before = crate::listing(&ws.join("ablations"));
    for (args, says) in [
        (vec!["--trial", "soak"], "--rows"),
        (vec!["--rows", "10"], "soak trial only"),
        (vec!["--repeats", "2"], "soak trial only"),
        (
            vec!["--trial", "soak", "--rows", "10", "--repeats", "0"],
            "--repeats 0",
        ),
        (vec!["--trial", "soak", "--rows", "0"], "--rows 0"),
    ] {
        let mut all = vec!["ablate", "--variant", "patched-asan"];
        all.extend(args.iter());
        let o = pinforge(ws, &all);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(crate::listing(&ws.join("ablations")), before);
}
