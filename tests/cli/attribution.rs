//! `patch check-attribution` (issue #26 §3): the bundle's claims checked against a real git
//! history built with the git CLI (authors, dates, tags, squash-merge subjects), each false claim
//! found and named by file and line; and the shipped bundle's own headers against the registry
//! trees, where no history exists and only content can speak.

use crate::{code, json, pinforge, stderr, stdout};
use std::path::Path;
use std::process::Command;

/// Run git in `dir` as `author` at `when` (seconds), so commits and tags have the identity and
/// order the test states.
fn git_as(dir: &Path, author: (&str, &str), when: i64, args: &[&str]) -> String {
    let date = format!("{when} +0000");
    let o = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", author.0)
        .env("GIT_AUTHOR_EMAIL", author.1)
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_NAME", "Maintainer")
        .env("GIT_COMMITTER_EMAIL", "maint@example.org")
        .env("GIT_COMMITTER_DATE", &date)
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

const UP: (&str, &str) = ("Up Author", "up@example.org");
const OTHER: (&str, &str) = ("Other Dev", "other@example.org");

/// An upstream: v1, then `fix foo (#12)` by Up Author, `other (#13)` tagged v2, then PR #20
/// landing and tagged v3. Returns the repository and the full id of the #12 commit.
fn upstream(root: &Path) -> (std::path::PathBuf, String) {
    let up = root.join("up");
    std::fs::create_dir_all(&up).expect("mkdir");
    git_as(&up, UP, 1_700_000_000, &["init", "-q", "-b", "main"]);
    std::fs::write(up.join("f.c"), "int a;\nint b;\nint c;\n").expect("write");
    git_as(&up, UP, 1_700_000_000, &["add", "."]);
    git_as(&up, UP, 1_700_000_000, &["commit", "-qm", "init"]);
    git_as(&up, UP, 1_700_000_000, &["tag", "v1"]);
    std::fs::write(up.join("f.c"), "int a;\nint B;\nint c;\n").expect("write");
    git_as(
        &up,
        UP,
        1_700_000_100,
        &["commit", "-qam", "fix foo (#12)\n\nfix #7"],
    );
    let fix = git_as(&up, UP, 1_700_000_100, &["rev-parse", "HEAD"]);
    std::fs::write(up.join("g.c"), "int g;\n").expect("write");
    git_as(&up, OTHER, 1_700_000_200, &["add", "."]);
    git_as(&up, OTHER, 1_700_000_200, &["commit", "-qm", "other (#13)"]);
    git_as(&up, OTHER, 1_700_000_200, &["tag", "v2"]);
    std::fs::write(up.join("g.c"), "int g2;\n").expect("write");
    git_as(
        &up,
        OTHER,
        1_700_000_300,
        &["commit", "-qam", "land the pending change (#20)"],
    );
    git_as(&up, OTHER, 1_700_000_300, &["tag", "v3"]);
    (up, fix)
}

const DIFF: &str = "---\ndiff --git a/f.c b/f.c\n--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,3 @@\n int a;\n-int b;\n+int B;\n int c;\n";

fn backport(from: &str, commit: &str, pr: u64, applied: &str) -> String {
    format!(
        "From: {from}\nSubject: fix foo\nDescription: fix foo\nUpstream-Status: Backport\nUpstream-PR: https://github.com/o/r/pull/{pr}\nUpstream-Commit: {commit}\nUpstream-Author: up\nOrigin: https://github.com/o/r/pull/{pr}\nApplied-Upstream: {applied}\nLast-Update: 2026-12-01\n\n{DIFF}"
    )
}

fn bundle(dir: &Path, patches: &[(&str, String)]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut series = String::new();
    for (name, text) in patches {
        std::fs::write(dir.join(name), text).expect("write");
        series.push_str(name);
        series.push('\n');
    }
    std::fs::write(dir.join("series"), series).expect("series");
}

#[test]
fn check_attribution_finds_every_false_claim_in_a_real_history() {
    let t = tempfile::tempdir().expect("tmp");
    let (up, fix) = upstream(t.path());
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    let short = &fix[..9];
    let pending = "From: Rep <rep@example.org>\nSubject: pending thing\nDescription: pending thing\nUpstream-Status: Pending\nUpstream-PR: https://github.com/o/r/pull/20\nReported-by: rep\nOrigin: https://github.com/o/r/pull/20\nLast-Update: 2026-12-01\n\n---\ndiff --git a/g.c b/g.c\n--- a/g.c\n+++ b/g.c\n@@ -1 +1 @@\n-int g;\n+int g3;\n".to_string();
    bundle(
        &ws.join("patches"),
        &[
            (
                "0001-true.patch",
                backport("Up Author <up@example.org>", short, 12, "v2"),
            ),
            (
                "0002-no-such-commit.patch",
                backport("Up Author <up@example.org>", "deadbeef1", 12, "v2"),
            ),
            (
                "0003-wrong-pr-tag-author.patch",
                backport("Bundle <bundle@example.invalid>", short, 99, "v3"),
            ),
            ("0004-pending-landed.patch", pending),
        ],
    );
    let spec = format!("git:{}@v3", up.display());
    let o = pinforge(
        &ws,
        &["patch", "check-attribution", "--upstream", &spec, "--json"],
    );
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    assert_eq!(j["schema"], "pinforge.patch-check-attribution/v1");
    let p = &j["patches"];
    let fields = |i: usize| -> Vec<String> {
        p[i]["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| f["field"].as_str().expect("field").to_string())
            .collect()
    };
    // 0001: every claim true.
    assert_eq!(p[0]["commit_found"], true, "{j:#}");
    assert_eq!(p[0]["first_tag"], "v2");
    assert_eq!(p[0]["upstream_author"], "Up Author <up@example.org>");
    assert!(fields(0).is_empty(), "{j:#}");
    // 0002: the commit does not exist.
    assert_eq!(p[1]["commit_found"], false);
    assert_eq!(fields(1), ["Upstream-Commit"]);
    // 0003: the PR does not match, v3 is not the first tag, From: is not the author.
    let mut f3 = fields(2);
    f3.sort();
    assert_eq!(f3, ["Applied-Upstream", "From", "Upstream-PR"], "{j:#}");
    let pr = p[2]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["field"] == "Upstream-PR")
        .expect("pr finding");
    assert_eq!(pr["claimed"], "#99");
    assert!(pr["found"].as_str().expect("found").contains("#12"), "{pr}");
    let applied = p[2]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["field"] == "Applied-Upstream")
        .expect("applied finding");
    assert!(
        applied["found"].as_str().expect("found").contains("v2"),
        "{applied}"
    );
    // 0004: still called Pending, but PR #20 landed (first in v3).
    assert_eq!(fields(3), ["Upstream-Status"]);
    let landed = p[3]["findings"][0]["found"].as_str().expect("found");
    assert!(
        landed.contains("PR #20 landed") && landed.contains("v3"),
        "{landed}"
    );

    // The human report names file:line for each, and exits 1 too.
    let o = pinforge(&ws, &["patch", "check-attribution", "--upstream", &spec]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(
        out.contains("0002-no-such-commit.patch:6: Upstream-Commit"),
        "{out}"
    );
    assert!(out.contains("0001-true.patch: ok"), "{out}");
    assert!(out.contains("4 patch(es): 5 false claim(s)"), "{out}");

    // Checked against v2 (before PR #20 landed), the pending patch is still pending.
    let o = pinforge(
        &ws,
        &[
            "patch",
            "check-attribution",
            "--upstream",
            &format!("git:{}@v2", up.display()),
            "--json",
        ],
    );
    let j = json(&o);
    assert_eq!(
        j["patches"][3]["findings"].as_array().expect("f").len(),
        0,
        "{j:#}"
    );
}

#[test]
fn check_attribution_input_errors_exit_2() {
    let t = tempfile::tempdir().expect("tmp");
    let (up, _) = upstream(t.path());
    let ws = t.path().join("ws");
    bundle(
        &ws.join("patches"),
        &[("0001-x.patch", backport("U <u@x.org>", "abc1234", 1, "v1"))],
    );
    for spec in [
        format!("git:{}@no-such-tag", up.display()),
        format!("git:{}@v1", t.path().join("missing").display()),
        "nonsense".to_string(),
    ] {
        let o = pinforge(&ws, &["patch", "check-attribution", "--upstream", &spec]);
        assert_eq!(code(&o), 2, "{spec}: {}{}", stdout(&o), stderr(&o));
    }
}

/// The shipped bundle against its own registry tree (0.1.135, the tree it is written for):
/// no history, so the report says so; every change is absent (the patches apply) and no
/// claim is refuted by content.
#[test]
fn shipped_bundle_without_history_says_so_and_checks_content() {
    let t = tempfile::tempdir().expect("tmp");
    let ws = t.path();
    let patches = crate::repo_root().join("patches");
    let o = pinforge(
        ws,
        &[
            "patch",
            "check-attribution",
            "--dir",
            &patches.display().to_string(),
            "--upstream",
            "crate:llama-cpp-sys-2@0.1.135",
            "--json",
        ],
    );
    if code(&o) == 2 && stderr(&o).contains("cargo") {
        crate::skip("no registry access for llama-cpp-sys-2");
        return;
    }
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    assert!(
        j["history"]
            .as_str()
            .expect("history")
            .contains("no git history"),
        "{j:#}"
    );
    for p in j["patches"].as_array().expect("patches") {
        assert_eq!(p["content"], "absent", "{p}");
    }
}

/// A PR that landed and was reverted has not landed: the revert names the PR too, and neither
/// it nor the undone landing makes a Pending patch a false claim (review finding).
#[test]
fn a_pending_patch_whose_pr_landed_and_was_reverted_is_still_pending() {
    let t = tempfile::tempdir().expect("tmp");
    let (up, _) = upstream(t.path());
    std::fs::write(up.join("g.c"), "int g30;\n").expect("write");
    git_as(
        &up,
        OTHER,
        1_700_000_400,
        &["commit", "-qam", "land thirty (#30)"],
    );
    let landed = git_as(&up, OTHER, 1_700_000_400, &["rev-parse", "HEAD"]);
    git_as(&up, OTHER, 1_700_000_500, &["revert", "--no-edit", &landed]);
    git_as(&up, OTHER, 1_700_000_500, &["tag", "v4"]);
    let ws = t.path().join("ws");
    let pending = "From: Rep <rep@example.org>\nSubject: pending thirty\nDescription: pending\nUpstream-Status: Pending\nUpstream-PR: https://github.com/o/r/pull/30\nReported-by: rep\nOrigin: https://github.com/o/r/pull/30\nLast-Update: 2026-12-01\n\n---\ndiff --git a/g.c b/g.c\n--- a/g.c\n+++ b/g.c\n@@ -1 +1 @@\n-int g2;\n+int g31;\n".to_string();
    bundle(
        &ws.join("patches"),
        &[("0001-pending-thirty.patch", pending)],
    );
    let spec = format!("git:{}@v4", up.display());
    let o = pinforge(
        &ws,
        &["patch", "check-attribution", "--upstream", &spec, "--json"],
    );
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    assert_eq!(
        j["patches"][0]["findings"].as_array().map(Vec::len),
        Some(0),
        "{j:#}"
    );
}
