//! Issue #11: `pinforge validate`, the A/B row harness, on the default recipe's real
//! AddressSanitizer builds installed as control (unpatched-asan) and live (patched-asan) in a
//! root of the test's own; resume after a SIGKILL; input errors before anything is written.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/validate.rs`.

use crate::{code, llama_build, llama_ws, pinforge, pinforge_cmd, stderr};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The two ASan builds installed as control and live into a fresh root, and a fresh workspace
/// for the runs (the shared llama workspace is never written).
struct Arms {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    root: PathBuf,
}

fn manifest(variant: &str) -> String {
    llama_build(variant);
    llama_ws()
        .join(format!("build/mrope-cpu/{variant}/manifest.json"))
        .display()
        .to_string()
}

fn installed_arms() -> Arms {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    let root = dir.path().join("root");
    for (variant, layer) in [("unpatched-asan", "control"), ("patched-asan", "live")] {
        let m = manifest(variant);
        let o = pinforge(
            &ws,
            &[
                "install",
                &m,
                "--layer",
                layer,
                "--root",
                root.to_str().expect("utf8"),
            ],
        );
        assert_eq!(code(&o), 0, "install {variant}: {}", stderr(&o));
    }
    Arms {
        _dir: dir,
        ws,
        root,
    }
}

impl Arms {
    fn validate(&self, extra: &[&str]) -> (i32, serde_json::Value, String) {
        let mut args = vec![
            "validate",
            "--installed",
            "control,live",
            "--root",
            self.root.to_str().expect("utf8"),
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = pinforge(&self.ws, &args);
        let j = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "validate {extra:?}: not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                stderr(&o)
            )
        });
        (code(&o), j, stderr(&o))
    }
}

fn counts(arm: &serde_json::Value, outcome: &str) -> u64 {
    arm["counts"][outcome].as_u64().expect("count")
}

fn rows_of(run_dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run_dir.join("rows.jsonl"))
        .expect("rows")
        .lines()
        .map(|l| serde_json::from_str(l).expect("row line"))
        .collect()
}

const SCHEMA: &str = r#"{"type":"object","properties":{"ok":{"type":"boolean"},
"n":{"type":"integer"},"tag":{"enum":["cat","hat"]}},"required":["ok","tag"]}"#;

/// Issue #11 "what must be shown": the unpatched control crashes with the heap-buffer-overflow
/// signature from an onset row on, the patched candidate never does; with a small budget and
/// a JSON schema both arms have token-budget rows, counted apart from crashes; the qwen2
/// control model crashes neither arm; the evidence re-verifies and a changed row is named.
#[test]
fn validate_soaks_control_and_live_and_classifies_every_row() {
    let arms = installed_arms();
    let t0 = Instant::now();
    let (c, j, err) = arms.validate(&["--rows", "200", "--arch", "qwen2vl"]);
    let soak_s = t0.elapsed().as_secs_f64();
    assert_eq!(c, 0, "the candidate passes: {j}\n{err}");
    assert_eq!(j["schema"], "pinforge.validate/v1");
    let (control, live) = (&j["arms"][0], &j["arms"][1]);
    assert_eq!(control["name"], "control");
    assert_eq!(live["name"], "live");
    assert_eq!(control["rows"], 200);
    assert_eq!(live["rows"], 200);
    assert!(counts(control, "crash") > 0, "{control}");
    let onset = control["onset_row"].as_u64().expect("onset row");
    let sig = control["signatures"][0]["signature"]
        .as_str()
        .expect("signature");
    assert!(sig.contains("heap-buffer-overflow"), "{sig}");
    assert!(sig.contains("apply_ubatch"), "{sig}");
    assert_eq!(control["signatures"][0]["first_row"], onset);
    assert_eq!(counts(live, "crash"), 0, "{live}");
    assert_eq!(counts(live, "mismatch"), 0, "{live}");
    assert_eq!(counts(live, "error"), 0, "{live}");
    assert!(live["onset_row"].is_null());
    assert_eq!(j["verdict"], "live: no crash-class failure in 200 rows");
    for key in ["common_failures", "latency_ms", "evidence"] {
        assert!(j.get(key).is_some(), "--json lacks {key}");
    }
    assert!(j["latency_ms"]["live"]["p99"].as_f64().expect("p99") > 0.0);
    // The rows: the crash row records the signature and how many rows its engine ran; the
    // live arm restored the slot's state between rows (the M-RoPE path was exercised).
    let run_dir = PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let rows = rows_of(&run_dir);
    assert_eq!(rows.len(), 400);
    let first_crash = rows
        .iter()
        .find(|r| r["arm"] == "control" && r["row"] == onset)
        .expect("onset row recorded");
    assert_eq!(first_crash["outcome"], "crash");
    assert!(
        first_crash["evidence"]["rows_since_restart"]
            .as_u64()
            .expect("since")
            >= 1
    );
    let restored = rows
        .iter()
        .filter(|r| r["arm"] == "live" && r["evidence"]["restored"] == true)
        .count();
    assert!(
        restored >= 150,
        "{restored} live rows restored a saved state"
    );
    eprintln!(
        "issue #11 soak: 200 rows per arm in {soak_s:.1}s; throughput {}; timing {}",
        j["throughput"], j["timing"]
    );

    // The evidence manifest re-verifies; a changed row is named.
    let ev = j["evidence"]["manifest"]
        .as_str()
        .expect("evidence path")
        .to_string();
    let o = pinforge(&arms.ws, &["verify", &ev]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rows_path = run_dir.join("rows.jsonl");
    let text = std::fs::read_to_string(&rows_path).expect("rows");
    std::fs::write(
        &rows_path,
        text.replacen("\"outcome\":\"crash\"", "\"outcome\":\"ok\"", 1),
    )
    .expect("edit a row");
    let o = pinforge(&arms.ws, &["verify", "--json", &ev]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("verify json");
    let roles: BTreeSet<&str> = v["mismatches"]
        .as_array()
        .expect("mismatches")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert!(
        roles.contains("rows.jsonl") && roles.contains("summary"),
        "{v}"
    );

    // Grammar-constrained rows with a small budget: token-budget rows on both arms, apart
    // from the crashes (which stay on the control arm only).
    let schema = arms.ws.join("schema.json");
    std::fs::write(&schema, SCHEMA).expect("schema");
    let (c, j, err) = arms.validate(&[
        "--rows",
        "60",
        "--arch",
        "qwen2vl",
        "--budget",
        "26",
        "--schema",
        schema.to_str().expect("utf8"),
        "--seed",
        "3",
    ]);
    assert_eq!(c, 0, "{j}\n{err}");
    let (control, live) = (&j["arms"][0], &j["arms"][1]);
    assert!(counts(live, "token-budget") > 0, "{live}");
    assert!(
        counts(live, "ok") > 0,
        "some rows complete their JSON: {live}"
    );
    assert!(counts(control, "token-budget") > 0, "{control}");
    assert!(counts(control, "crash") > 0, "{control}");
    assert_eq!(counts(live, "crash"), 0, "{live}");
    assert_eq!(
        j["verdict"], "live: no crash-class failure in 60 rows",
        "token-budget rows are not crash-class"
    );
    let run_dir = PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let tb = rows_of(&run_dir)
        .into_iter()
        .find(|r| r["outcome"] == "token-budget")
        .expect("a token-budget row");
    assert_eq!(tb["evidence"]["budget_exhausted"], true);
    assert_eq!(tb["evidence"]["eog"], false);
    assert_eq!(tb["tokens_out"], 26);
    assert!(
        tb["evidence"]["text"]
            .as_str()
            .expect("text")
            .starts_with("{\""),
        "the grammar shaped the output: {tb}"
    );

    // The classical-RoPE control model: neither arm crashes.
    let (c, j, err) = arms.validate(&["--rows", "80", "--arch", "qwen2"]);
    assert_eq!(c, 0, "{j}\n{err}");
    for arm in j["arms"].as_array().expect("arms") {
        assert_eq!(counts(arm, "crash"), 0, "{arm}");
        assert_eq!(counts(arm, "mismatch"), 0, "{arm}");
        assert_eq!(counts(arm, "ok"), 80, "{arm}");
    }
}

/// Issue #11: a run killed halfway (SIGKILL, with a torn last line on disk) resumes from its
/// row file and ends with every (arm, row) recorded exactly once, the rows written before the
/// kill unchanged.
#[test]
fn a_killed_validate_run_resumes_without_losing_or_duplicating_a_row() {
    let arms = installed_arms();
    let args = [
        "validate",
        "--installed",
        "control,live",
        "--root",
        arms.root.to_str().expect("utf8"),
        "--rows",
        "60",
        "--arch",
        "qwen2vl",
        "--jobs",
        "2",
    ];
    let mut child = pinforge_cmd(&arms.ws)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn validate");
    let vdir = arms.ws.join("validate");
    let deadline = Instant::now() + Duration::from_secs(300);
    let run_dir = loop {
        assert!(Instant::now() < deadline, "no rows appeared");
        let run = std::fs::read_dir(&vdir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path());
        if let Some(run) = run {
            let n = std::fs::read(run.join("rows.jsonl"))
                .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                .unwrap_or(0);
            if n >= 30 {
                break run;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Our own child, by its id.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill");
    let _ = child.wait();
    let rows_path = run_dir.join("rows.jsonl");
    let mut before = std::fs::read(&rows_path).expect("rows");
    let whole = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    let n_before = before.iter().filter(|&&c| c == b'\n').count();
    assert!(n_before < 120, "killed before the end ({n_before} rows)");
    // A torn tail, as a crash in the middle of a write would leave.
    before.extend_from_slice(br#"{"row":59,"arm":"live","layer_dig"#);
    std::fs::write(&rows_path, &before).expect("tear");

    let run_id = run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("id")
        .to_string();
    let mut resumed: Vec<&str> = args.to_vec();
    resumed.extend(["--resume", &run_id, "--json"]);
    let o = pinforge(&arms.ws, &resumed);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        j["resumed_rows"].as_u64().expect("resumed"),
        n_before as u64
    );
    assert!(j["torn_bytes"].as_u64().expect("torn") > 0);
    let after = std::fs::read(&rows_path).expect("rows");
    assert_eq!(
        &after[..whole],
        &before[..whole],
        "rows before the kill unchanged"
    );
    let rows = rows_of(&run_dir);
    let keys: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["arm"].as_str().expect("arm").to_string(),
                r["row"].as_u64().expect("row"),
            )
        })
        .collect();
    let set: BTreeSet<(String, u64)> = keys.iter().cloned().collect();
    assert_eq!(keys.len(), set.len(), "no row recorded twice");
    let want: BTreeSet<(String, u64)> = ["control", "live"]
        .iter()
        .flat_map(|a| (0..60).map(move |r| (a.to_string(), r)))
        .collect();
    assert_eq!(set, want, "every row of both arms recorded");
    assert_eq!(j["arms"][0]["rows"], 60);
    assert_eq!(j["arms"][1]["rows"], 60);
    // A resume with other settings is refused, and nothing is appended.
    let mut other: Vec<&str> = args.to_vec();
    other[6] = "61";
    other.extend(["--resume", &run_id]);
    let o = pinforge(&arms.ws, &other);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("rows"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&rows_path).expect("rows"), after);
}
