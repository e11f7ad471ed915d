//! `pinforge report` (issue #21, "a report people can look at"): one self-contained HTML page
//! (and text and Markdown) from real records: the tiny project's two real builds (manifests,
//! diff, patch attribution; text and Markdown snapshots), and a real validation run and a real
//! soak flip record over the default recipe's ASan builds, loaded in a real headless Chromium:
//! no console message at all (the page has no script; a CSP violation or an injected handler
//! would log one, which the negative control proves), one SVG mark per row counted in the DOM
//! Chromium built, and a screenshot. Inputs of unknown kinds and a symlink at `-o` are
//! refused with exit 2 and nothing written.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/report.rs`.

use crate::common::report::{check_in_chromium, CHROMIUM, HOSTILE};
use crate::{code, json, llama_build, llama_ws, pinforge, stderr};
use std::path::{Path, PathBuf};

fn rows_in(run_dir: &Path) -> usize {
    std::fs::read_to_string(run_dir.join("rows.jsonl"))
        .expect("rows")
        .lines()
        .count()
}

/// Issue #21 "`report` on a validation run and on a flip record, checked in headless
/// Chromium": a 12-row validation run of unpatched-asan against patched-asan, copied to a
/// folder whose name is not UTF-8, and a 12-row soak flip whose hypothesis is markup; the
/// page shows one mark per row of both, the onset, and no element from the record.
#[test]
fn report_on_a_real_validation_run_and_soak_flip_loads_cleanly_in_headless_chromium() {
    if !Path::new(CHROMIUM).exists() {
        crate::skip("no /usr/bin/chromium (tools/bootstrap.sh installs it when root)");
        return;
    }
    let manifest = |v: &str| {
        llama_build(v);
        llama_ws().join(format!("build/mrope-cpu/{v}/manifest.json"))
    };
    let (from, to) = (manifest("unpatched-asan"), manifest("patched-asan"));
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    let o = pinforge(
        &ws,
        &[
            "validate",
            from.to_str().expect("utf8"),
            to.to_str().expect("utf8"),
            "--rows",
            "12",
            "--arch",
            "qwen2vl",
            "--json",
        ],
    );
    let v = json(&o);
    let run_dir = PathBuf::from(v["run_dir"].as_str().expect("run_dir"));
    // A run folder whose name holds bytes that are not UTF-8 and markup.
    use std::os::unix::ffi::OsStrExt;
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"run-\xff\xfe-<b>x&"));
    std::fs::create_dir(&odd).expect("odd folder");
    for e in std::fs::read_dir(&run_dir).expect("run").flatten() {
        std::fs::copy(e.path(), odd.join(e.file_name())).expect("copy");
    }
    let o = pinforge(
        llama_ws(),
        &[
            "flip",
            "--from",
            "unpatched-asan",
            "--to",
            "patched-asan",
            "--arch",
            "qwen2vl",
            "--hypothesis",
            HOSTILE,
            "--trial",
            "soak",
            "--rows",
            "12",
            "--json",
        ],
    );
    let f = json(&o);
    assert_eq!(f["verdict"], "supported", "{}", f["reason"]);
    let record = PathBuf::from(f["record"].as_str().expect("record"));
    let mut rows = rows_in(&odd);
    for side in ["from", "to"] {
        let ev = f["soak"]["repeats"][0]["runs"][side]["evidence"]["manifest"]
            .as_str()
            .expect("evidence");
        rows += rows_in(Path::new(ev).parent().expect("run folder"));
    }
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-shots");
    std::fs::create_dir_all(&shots).expect("shots");
    let page = shots.join("report.html");
    let mut c = crate::pinforge_cmd(&ws);
    c.arg("report")
        .arg(&odd)
        .arg(&record)
        .arg(&from)
        .arg(&to)
        .arg("-o")
        .arg(&page)
        .arg("--json");
    let o = c.output().expect("report");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.report/v1");
    assert_eq!(j["rows"].as_u64(), Some(rows as u64));
    assert_eq!(j["inputs"][0]["kind"], "validation-run");
    assert_eq!(j["inputs"][1]["kind"], "soak-flip-record");
    let dom = check_in_chromium(&page, dir.path(), rows, &shots.join("report.png"));
    assert!(
        dom.contains("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"),
        "hypothesis shown as text"
    );
    assert!(dom.contains("onset row"), "the onset is marked");
    assert!(
        dom.contains("run-\u{fffd}\u{fffd}-&lt;b&gt;x&amp;"),
        "the odd folder name is shown escaped"
    );
    assert!(
        dom.contains("heap-buffer-overflow"),
        "the signature is shown"
    );
    let text_out = shots.join("report.txt");
    let mut c = crate::pinforge_cmd(&ws);
    c.arg("report")
        .arg(&odd)
        .arg(&record)
        .arg("-o")
        .arg(&text_out)
        .args(["--format", "text"]);
    let o = c.output().expect("report text");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = std::fs::read_to_string(&text_out).expect("text");
    assert!(text.contains('X') && text.contains('^'), "{text}");
}
