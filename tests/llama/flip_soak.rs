//! `pinforge flip --trial soak` (issue #21): each side's evidence is a validation run of N rows,
//! the sides interleaved for `--repeats`, the verdict from the crash-class rows, and `verify`
//! of the flip record re-checking every linked run. Real builds of the default recipe through
//! the shared llama.cpp workspace (the same builds tests/cli/flip.rs and validate.rs use).

use crate::{code, json, listing, llama_build, llama_ws, pinforge, pinforge_cmd, stderr, stdout};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn read_json(p: &Path) -> serde_json::Value {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn soak_flip(from: &str, to: &str, rows: &str, extra: &[&str]) -> serde_json::Value {
    let started = Instant::now();
    let mut args = vec![
        "flip",
        "--from",
        from,
        "--to",
        to,
        "--arch",
        "qwen2vl",
        "--hypothesis",
        "this axis is issue #20093's defect",
        "--trial",
        "soak",
        "--rows",
        rows,
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = pinforge(llama_ws(), &args);
    let j = json(&o);
    eprintln!(
        "soak flip {from} -> {to}, {rows} rows {extra:?}: {:.1}s, {} ({})",
        started.elapsed().as_secs_f64(),
        j["verdict"],
        j["reason"]
    );
    let want = if matches!(j["verdict"].as_str(), Some("supported" | "falsified")) {
        0
    } else {
        1
    };
    assert_eq!(code(&o), want, "{}", stderr(&o));
    j
}

fn run_of<'a>(j: &'a serde_json::Value, repeat: usize, side: &str) -> &'a serde_json::Value {
    &j["soak"]["repeats"][repeat]["runs"][side]
}

fn verify(record: &Path) -> (i32, serde_json::Value) {
    let o = pinforge(
        llama_ws(),
        &["verify", record.to_str().expect("utf-8"), "--json"],
    );
    (code(&o), json(&o))
}

// issue #21 "`flip --trial soak --rows 100` from unpatched-asan to patched-asan: supported with
// the from side's onset row"; the record links both runs' evidence and `verify` re-checks it.
#[test]
fn a_soak_flip_of_the_patch_set_under_asan_is_supported_with_the_from_onset_row() {
    llama_build("unpatched-asan");
    llama_build("patched-asan");
    let j = soak_flip("unpatched-asan", "patched-asan", "100", &[]);
    assert_eq!(j["verdict"], "supported", "{}", j["reason"]);
    let from = run_of(&j, 0, "from");
    let to = run_of(&j, 0, "to");
    assert_eq!(from["rows"], 100);
    assert_eq!(to["rows"], 100);
    // The sanitizer shows the over-read at the first restore: every row of the from side.
    let onset = from["onset_row"].as_u64().expect("from onset");
    assert!(
        j["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("onset row {onset}"))),
        "{}",
        j["reason"]
    );
    let sig = from["signatures"][0]["signature"].as_str().expect("sig");
    assert!(sig.starts_with("heap-buffer-overflow in "), "{sig}");
    assert_eq!(to["counts"]["crash"], 0);
    assert!(to["onset_row"].is_null());
    // Crash rows never enter the timing comparison; the clean side's rows all do.
    let t = &j["soak"]["timing"];
    assert_eq!(t["to"]["rows"], 100);
    assert_eq!(
        t["from"]["excluded_rows"].as_u64(),
        from["counts"]["crash"].as_u64()
    );
    // Both runs' evidence is linked and re-checks.
    let record = PathBuf::from(j["record"].as_str().expect("record"));
    for side in ["from", "to"] {
        let ev = PathBuf::from(
            run_of(&j, 0, side)["evidence"]["manifest"]
                .as_str()
                .expect("ev"),
        );
        assert!(ev.is_file(), "{}", ev.display());
    }
    let (c, v) = verify(&record);
    assert_eq!(c, 0, "{v}");
    assert_eq!(crate::schemas::validate(&v), "pinforge.verify-soak/v1");
    assert_eq!(crate::schemas::validate(&j), "pinforge.flip/v1");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(2), "{v}");
    // A copy of the record whose digest of one run's evidence is not the manifest's: exit 1,
    // naming the run; one that points at another path: refused without reading it.
    let rec = read_json(&record);
    let id = rec["id"].as_str().expect("id");
    for (n, (key, value)) in [
        ("sha256", "0".repeat(64)),
        ("manifest", "/etc/passwd".to_string()),
    ]
    .into_iter()
    .enumerate()
    {
        let mut bad = rec.clone();
        bad["soak"]["repeats"][0]["runs"]["to"]["evidence"][key] = value.into();
        let dir = llama_ws().join("flips").join(format!("{id}-tampered-{n}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("record.json"), bad.to_string()).expect("write");
        let (c, v) = verify(&dir.join("record.json"));
        assert_eq!(c, 1, "{v}");
        let problem = v["runs"][1]["problem"].as_str().unwrap_or("");
        assert!(
            problem.contains(if n == 0 { "changed" } else { "not at" }),
            "{v}"
        );
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}

// issue #21 "the gcc → clang flip of unpatched-asan under the soak trial: falsified with both
// onsets". 20 rows prove it as well as 100: the sanitizer reports at the first restore.
#[test]
fn a_soak_flip_of_the_host_compiler_is_falsified_with_both_onsets() {
    llama_build("unpatched-asan");
    llama_build("unpatched-asan-clang");
    let j = soak_flip("unpatched-asan", "unpatched-asan-clang", "20", &[]);
    assert_eq!(j["axis"], "toolchain");
    assert_eq!(j["verdict"], "falsified", "{}", j["reason"]);
    let a = run_of(&j, 0, "from")["onset_row"]
        .as_u64()
        .expect("from onset");
    let b = run_of(&j, 0, "to")["onset_row"].as_u64().expect("to onset");
    let reason = j["reason"].as_str().expect("reason");
    assert!(
        reason.contains(&format!("onset row {a} on the from side")),
        "{reason}"
    );
    assert!(
        reason.contains(&format!("row {b} on the to side")),
        "{reason}"
    );
}

// issue #21 "a flip between two Release builds under the soak trial: invalid with the reason
// (the over-read is silent without a sanitizer)".
#[test]
fn a_soak_flip_between_two_release_builds_is_invalid_because_the_over_read_is_silent() {
    llama_build("unpatched");
    llama_build("patched");
    let j = soak_flip("unpatched", "patched", "30", &[]);
    assert_eq!(j["verdict"], "invalid", "{}", j["reason"]);
    let reason = j["reason"].as_str().expect("reason");
    assert!(
        reason.contains("never showed a crash-class row in 30 rows"),
        "{reason}"
    );
    assert!(reason.contains("unknown (0 of 30)"), "{reason}");
    assert!(reason.contains("has no sanitizer"), "{reason}");
    assert_eq!(run_of(&j, 0, "from")["counts"]["crash"], 0);
    assert_eq!(run_of(&j, 0, "from")["counts"]["ok"], 30);
}

// issue #21 "`--repeats 3` interleaved, and a side whose outcome changes between repeats gives
// `inconclusive`" (the test hook reads the from side's second run as clean).
#[test]
fn three_interleaved_repeats_agree_and_a_flip_flop_is_inconclusive_with_the_table() {
    llama_build("unpatched-asan");
    llama_build("patched-asan");
    let j = soak_flip("unpatched-asan", "patched-asan", "8", &["--repeats", "3"]);
    assert_eq!(j["verdict"], "supported", "{}", j["reason"]);
    let order: Vec<&str> = j["soak"]["order"]
        .as_array()
        .expect("order")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert_eq!(
        order,
        ["from#1", "to#1", "from#2", "to#2", "from#3", "to#3"]
    );
    let repeats = j["soak"]["repeats"].as_array().expect("repeats");
    assert_eq!(repeats.len(), 3);
    assert!(repeats.iter().all(|r| r["verdict"] == "supported"));
    // Six distinct runs, each with its own evidence.
    let runs: std::collections::BTreeSet<&str> = repeats
        .iter()
        .flat_map(|r| ["from", "to"].map(|s| r["runs"][s]["run"].as_str().expect("run")))
        .collect();
    assert_eq!(runs.len(), 6);

    let o = pinforge_cmd(llama_ws())
        .args([
            "flip",
            "--from",
            "unpatched-asan",
            "--to",
            "patched-asan",
            "--arch",
            "qwen2vl",
            "--hypothesis",
            "the patch set is the defect",
            "--trial",
            "soak",
            "--rows",
            "8",
            "--repeats",
            "3",
        ])
        .env("PINFORGE_SOAK_FORCE_CLEAN", "from:2")
        .output()
        .expect("run");
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}{}", stderr(&o));
    assert!(out.contains("verdict: inconclusive"), "{out}");
    assert!(
        out.contains("repeat 1 supported, repeat 2 invalid, repeat 3 supported"),
        "{out}"
    );
    let table: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2', '3']))
        .collect();
    assert_eq!(table.len(), 3, "{out}");
    assert!(
        table[1].contains("clean (8 rows)") && table[1].contains("forced"),
        "{out}"
    );
    let rec_line = out
        .lines()
        .find(|l| l.starts_with("record"))
        .expect("record");
    let rec = read_json(Path::new(rec_line.trim_start_matches("record").trim()));
    assert_eq!(rec["verdict"], "inconclusive");
    assert!(rec["soak"]["repeats"][1]["runs"]["from"]["forced"].is_string());
}

// The soak flags are checked before anything is registered or built: exit 2, nothing written.
#[test]
fn soak_flags_out_of_place_or_range_are_refused_with_exit_2_and_write_nothing() {
    let ws = llama_ws();
    let before = listing(&ws.join("flips"));
    for (args, says) in [
        (vec!["--trial", "soak"], "--rows"),
        (vec!["--rows", "10"], "soak trial only"),
        (
            vec!["--trial", "soak", "--rows", "10", "--repeats", "0"],
            "--repeats 0",
        ),
        (vec!["--trial", "soak", "--rows", "0"], "--rows 0"),
    ] {
        let mut all = vec![
            "flip",
            "--from",
            "unpatched-asan",
            "--to",
            "patched-asan",
            "--hypothesis",
            "h",
        ];
        all.extend(args.iter());
        let o = pinforge(ws, &all);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(listing(&ws.join("flips")), before);
}
