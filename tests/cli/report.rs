//! `pinforge report` (issue #21, "a report people can look at"): one self-contained HTML page
//! (and text and Markdown) from real records: the tiny project's two real builds (manifests,
//! diff, patch attribution; text and Markdown snapshots), and a real validation run and a real
//! soak flip record over the default recipe's ASan builds, loaded in a real headless Chromium:
//! no console message at all (the page has no script; a CSP violation or an injected handler
//! would log one, which the negative control proves), one SVG mark per row counted in the DOM
//! Chromium built, and a screenshot. Inputs of unknown kinds and a symlink at `-o` are
//! refused with exit 2 and nothing written.

use crate::{code, json, llama_build, llama_ws, pinforge, stderr, stdout, Installed};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

/// A string a record may hold that would run script if it reached the page unescaped.
const HOSTILE: &str = "</script><img src=x onerror=alert(1)><svg onload=alert(2)>";

/// Chromium's output for `page`: (the DOM it built, its stderr), with console messages logged
/// to stderr (`…:INFO:CONSOLE:…`). `extra` adds flags (a screenshot).
fn headless(page: &Path, profile: &Path, extra: &[String]) -> (String, String) {
    let url = format!("file://{}", page.display());
    let o = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        o.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// The negative control: the same policy as a report page, with the hostile string left
/// unescaped, must log console messages here; otherwise the check below could not fail.
fn console_check_can_fail(dir: &Path) {
    let page = dir.join("control.html");
    std::fs::write(
        &page,
        format!("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"></head><body>{HOSTILE}</body></html>"),
    )
    .expect("control page");
    let (_, err) = headless(&page, &dir.join("profile-control"), &[]);
    assert!(
        !console_lines(&err).is_empty(),
        "the control page logged nothing: console messages are not being captured\n{err}"
    );
}

/// Chromium loads the page with no console message, and the marks in its DOM are `rows`.
fn check_in_chromium(page: &Path, dir: &Path, rows: usize, shot: &Path) -> String {
    console_check_can_fail(dir);
    let (dom, err) = headless(
        page,
        &dir.join("profile"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1100,2600".into(),
        ],
    );
    let console = console_lines(&err);
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert_eq!(
        dom.matches("<rect class=\"mark\"").count(),
        rows,
        "marks in the DOM"
    );
    assert!(!dom.contains("<img"), "an element was injected");
    assert!(!dom.contains("<script"), "a script element is in the page");
    let png = std::fs::read(shot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());
    dom
}

fn report(ws: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    pinforge(ws, &all)
}

/// Issue #21: a report of two real builds' manifests: the diff, the patch with its
/// attribution links and the evidence checked now, as text and Markdown snapshots and as a
/// page; inputs of unknown kinds and a symlink at `-o` are refused (exit 2, nothing written).
#[test]
fn report_of_two_real_builds_shows_the_diff_patches_and_evidence_in_every_format() {
    let i = Installed::new();
    let ws = &i.t.ws;
    let (u, p) = (
        i.unpatched.to_str().expect("utf8"),
        i.patched.to_str().expect("utf8"),
    );
    let txt = ws.join("report.txt");
    let o = report(
        ws,
        &[u, p, "-o", txt.to_str().expect("utf8"), "--format", "text"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = std::fs::read_to_string(&txt).expect("text");
    assert!(
        text.contains("Upstream-Issue: https://example.invalid/o/tiny/issues/7"),
        "{text}"
    );
    assert!(text.contains("tiny/unpatched → tiny/patched"), "{text}");
    insta::with_settings!({filters => vec![
        (r"/tmp/[^\s|)]*", "[PATH]"),
        (r"\b[0-9a-f]{12,64}\b", "[HEX]"),
    ]}, {
        insta::assert_snapshot!("report_tiny_text", text);
        let md = ws.join("report.md");
        let o = report(ws, &[u, p, "-o", md.to_str().expect("utf8"), "--format", "md"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        insta::assert_snapshot!("report_tiny_md", std::fs::read_to_string(&md).expect("md"));
    });
    let html = ws.join("report.html");
    let o = report(ws, &[u, p, "-o", html.to_str().expect("utf8"), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.report/v1");
    assert_eq!(j["inputs"][0]["kind"], "manifest");
    let page = std::fs::read_to_string(&html).expect("page");
    assert!(page.contains("<a href=\"https://example.invalid/o/tiny/issues/7\""));
    assert!(!page.contains("src=\"http") && !page.contains("<script"));
    if Path::new(CHROMIUM).exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        check_in_chromium(&html, dir.path(), 0, &dir.path().join("tiny.png"));
    }

    // Refusals: nothing is written.
    let bad = ws.join("other.json");
    std::fs::write(&bad, br#"{"schema":"pinforge.status/v1"}"#).expect("write");
    let out = ws.join("never.html");
    let o = report(
        ws,
        &[
            u,
            bad.to_str().expect("utf8"),
            "-o",
            out.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("other.json") && stderr(&o).contains("expected"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    let target = ws.join("kept.html");
    std::fs::write(&target, "kept").expect("write");
    let link = ws.join("link.html");
    std::os::unix::fs::symlink(&target, &link).expect("link");
    let o = report(ws, &[u, "-o", link.to_str().expect("utf8")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "kept");
    // A manifest changed after its build: the page is written, the evidence says FAIL, exit 1.
    let changed = i
        .patched
        .parent()
        .expect("build folder")
        .join("changed.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&i.patched).expect("read")).expect("json");
    m["subject"][0]["digest"]["sha256"] = serde_json::Value::from("0".repeat(64));
    std::fs::write(&changed, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    let o = report(
        ws,
        &[
            changed.to_str().expect("utf8"),
            "-o",
            out.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(std::fs::read_to_string(&out)
        .expect("page")
        .contains("FAIL"));
}

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
