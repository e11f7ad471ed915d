//! `pinforge report` (issue #21, "a report people can look at"): one self-contained HTML page
//! (and text and Markdown) from real records: the tiny project's two real builds (manifests,
//! diff, patch attribution; text and Markdown snapshots), and a real validation run and a real
//! soak flip record over the default recipe's ASan builds, loaded in a real headless Chromium:
//! no console message at all (the page has no script; a CSP violation or an injected handler
//! would log one, which the negative control proves), one SVG mark per row counted in the DOM
//! Chromium built, and a screenshot. Inputs of unknown kinds and a symlink at `-o` are
//! refused with exit 2 and nothing written.

pub(crate) use crate::common::report::{check_in_chromium, CHROMIUM};
use crate::{code, json, pinforge, stderr, stdout, Installed};
use std::path::Path;

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
    // Issue #35: `-o -` is standard output (the same text, no summary line after it), never
    // a file named `-`; with --json it would be two documents there, and is refused.
    let o = report(ws, &[u, p, "-o", "-", "--format", "text"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim_end(), text.trim_end());
    assert!(!ws.join("-").exists(), "no file named -");
    let o = report(ws, &[u, p, "-o", "-", "--json"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("-o -"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty() && !ws.join("-").exists());
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
