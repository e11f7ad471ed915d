//! `patch bundle` and `patch commit-message` (issue #9): one portable file that `git am`
//! applies onto the pinned tree and that reproduces pinforge's patched tree exactly.

use crate::{code, json, pinforge, stderr, stdout, Tiny, TINY_PATCH};
use std::path::Path;
use std::process::Command;

/// A second attributed patch for the tiny bundle: it creates a file.
const NOTES_PATCH: &str = "From: Bundle <bundle@example.invalid>\nDate: Tue, 1 Dec 2026 00:00:00 +0000\nSubject: [PATCH] tiny: add NOTES\nDescription: Document the return value.\nUpstream-Status: Submitted [https://example.invalid/o/tiny/pull/8]\nUpstream-PR: https://example.invalid/o/tiny/pull/8\nUpstream-Author: someone-else\nOrigin: https://example.invalid/o/tiny/pull/8\nLast-Update: 2026-12-01\n\n---\ndiff --git a/NOTES b/NOTES\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES\n@@ -0,0 +1 @@\n+tiny_value() returns 2.\n";

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn the_bundle_applies_with_git_am_and_reproduces_the_patched_tree_exactly() {
    let t = Tiny::new();
    std::fs::write(t.ws.join("patches/0002-tiny-notes.patch"), NOTES_PATCH).expect("write");
    std::fs::write(
        t.ws.join("patches/series"),
        "0001-tiny-return-2.patch\n0002-tiny-notes.patch\n",
    )
    .expect("series");
    let b = t.build("patched");
    assert_eq!(code(&b), 0, "{}", stderr(&b));
    let source = json(&b)["source_tree"]
        .as_str()
        .expect("source_tree")
        .to_string();
    let want = git(Path::new(&source), &["rev-parse", "HEAD^{tree}"]);

    let mbox = t.ws.join("tiny.mbox");
    let o = pinforge(
        &t.ws,
        &[
            "patch",
            "bundle",
            "-o",
            mbox.to_str().expect("utf8"),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["patches"], 2);
    let text = std::fs::read_to_string(&mbox).expect("mbox");
    assert!(
        text.contains("pinforge patch bundle: 2 patch(es)"),
        "{text}"
    );
    assert!(text.contains("issue https://example.invalid/o/tiny/issues/7"));
    assert!(text.contains("PR https://example.invalid/o/tiny/pull/8"));

    let clone = t.ws.join("clone");
    git(
        &t.ws,
        &["clone", "-q", t.upstream.to_str().expect("utf8"), "clone"],
    );
    git(&clone, &["checkout", "-q", &t.v1.to_string()]);
    git(&clone, &["am", "-q", mbox.to_str().expect("utf8")]);
    assert_eq!(
        git(&clone, &["rev-parse", "HEAD^{tree}"]),
        want,
        "same tree as pinforge's"
    );
    // git am kept the subjects, not the bibliography notes, as commit messages.
    let log = git(&clone, &["log", "--format=%s%n%b", "-2"]);
    assert!(
        log.contains("tiny: return 2") && log.contains("tiny: add NOTES"),
        "{log}"
    );
    assert!(!log.contains("pinforge patch bundle"), "{log}");
}

#[test]
fn the_commit_message_lists_every_patch_with_its_attribution_and_digest() {
    let t = Tiny::new();
    let o = pinforge(&t.ws, &["patch", "commit-message"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let m = stdout(&o);
    assert!(m.starts_with("Apply 1 attributed patch(es)"), "{m}");
    assert!(m.contains("0001-tiny-return-2.patch"), "{m}");
    assert!(m.contains("by someone"), "{m}");
    let digest = crate::sha2_like::digest_hex(TINY_PATCH.as_bytes());
    assert!(
        m.contains(&format!(
            "Pinforge-Patch: 0001-tiny-return-2.patch sha256:{digest}"
        )),
        "{m}"
    );
}

#[test]
fn a_bundle_with_an_unattributed_patch_is_refused_and_writes_nothing() {
    let t = Tiny::new();
    std::fs::write(
        t.ws.join("patches/0001-tiny-return-2.patch"),
        TINY_PATCH.replace("Upstream-Status: Pending\n", ""),
    )
    .expect("write");
    let mbox = t.ws.join("tiny.mbox");
    let o = pinforge(
        &t.ws,
        &["patch", "bundle", "-o", mbox.to_str().expect("utf8")],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!mbox.exists(), "nothing half-written");
}
