//! `audit` and `rebase` over histories where upstream merged a patch's change and reverted it
//! (issue #26 §1): real git repositories, one per test, shaped like the histories the audit
//! met — ggml's, synced from llama.cpp, whose reverts name a llama.cpp commit id in their body
//! and tie themselves to the merged commit only by a `Revert "…" (llama/N)` subject; a plain
//! `git revert`; a revert with an unrelated subject that only its content identifies — and the
//! revert of a revert, which restores the change.

use crate::{code, commit_files, json, listing, pinforge, stderr, stdout};
use git2::Repository;
use std::path::{Path, PathBuf};

/// `x.c` of the upstream: `x_value()` starts `v` and `w` as given, below `top` comment lines.
fn source(v: u32, w: u32, top: usize) -> String {
    let mut s = String::new();
    for i in 0..top {
        s.push_str(&format!("/* upstream comment {i} */\n"));
    }
    s.push_str(&format!(
        "int x_head(void) {{\n    return 0;\n}}\n\nint x_value(void) {{\n    int v = {v};\n    int w = {w};\n    int u = 0;\n    int t = 0;\n    w = w + 1;\n    return v + w + u + t;\n}}\n"
    ));
    s
}

/// The bundle's one patch: `int v = 1;` becomes `int v = 2;`, a backport of `commit`.
fn patch(commit: &str) -> String {
    format!(
        "From: Bundle <bundle@example.invalid>\nDate: Mon, 30 Nov 2026 00:00:00 +0000\nSubject: [PATCH] x: value 2\nDescription: x_value() must start at 2.\nUpstream-Status: Backport [{commit}]\nUpstream-Commit: {commit}\nReported-by: someone\nOrigin: https://example.invalid/o/up/issues/123\nLast-Update: 2026-11-30\n\n---\ndiff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -4,6 +4,6 @@ int x_head(void) {{\n \n int x_value(void) {{\n-    int v = 1;\n+    int v = 2;\n     int w = 0;\n     int u = 0;\n     int t = 0;\n"
    )
}

/// A llama.cpp commit id: what a synced revert's body names, in no commit of this history.
const FOREIGN: &str = "4f1c2d3e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d";
const FOREIGN_2: &str = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d";

/// An upstream repository at `v1`, a commit `fix` that makes the patch's change, whatever
/// `after` commits, the tip tagged `v2`; and a workspace whose recipe pins `v1` with the
/// one-patch bundle backporting `fix`.
struct Upstream {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    path: PathBuf,
    recipe: PathBuf,
    fix: git2::Oid,
}

impl Upstream {
    fn new(fix_subject: &str, after: impl FnOnce(&Repository, &Path, git2::Oid)) -> Upstream {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("upstream");
        let repo = Repository::init(&path).expect("init");
        let cmake =
            "cmake_minimum_required(VERSION 3.14)\nproject(up C)\nadd_library(up SHARED x.c)\n";
        let v1 = commit_files(
            &repo,
            &[("x.c", &source(1, 0, 0)), ("CMakeLists.txt", cmake)],
            "v1",
        );
        tag(&repo, "v1", v1);
        let fix = commit_files(&repo, &[("x.c", &source(2, 0, 0))], fix_subject);
        after(&repo, &path, fix);
        let tip = repo
            .head()
            .expect("head")
            .peel_to_commit()
            .expect("tip")
            .id();
        tag(&repo, "v2", tip);

        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
        std::fs::write(
            ws.join("patches/0001-x.patch"),
            patch(&fix.to_string()[..12]),
        )
        .expect("patch");
        std::fs::write(ws.join("patches/series"), "0001-x.patch\n").expect("series");
        let recipe = ws.join("recipes/up.toml");
        std::fs::write(
            &recipe,
            format!(
                "name = \"up\"\ndefault-variant = \"patched\"\n[pin]\nkind = \"git\"\nurl = \"{}\"\ntag = \"v1\"\ncommit = \"{v1}\"\n\n[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\ncmake-version = \">=3.24\"\n[base]\ntoolchain = \"cpu\"\ntargets = [\"up\"]\n[variants.patched]\n",
                path.display()
            ),
        )
        .expect("recipe");
        Upstream {
            _dir: dir,
            ws,
            path,
            recipe,
            fix,
        }
    }

    fn onto(&self) -> String {
        format!("git:{}@v2", self.path.display())
    }

    /// `audit --json` onto `v2`: exit code and the one patch's report.
    fn audit(&self) -> (i32, serde_json::Value) {
        let o = pinforge(
            &self.ws,
            &[
                "audit",
                self.recipe.to_str().expect("utf8"),
                "--onto",
                &self.onto(),
                "--json",
            ],
        );
        let c = code(&o);
        assert!(c == 0 || c == 1, "audit failed ({c}): {}", stderr(&o));
        let j = json(&o);
        crate::schemas::validate(&j);
        (c, j["patches"][0].clone())
    }
}

fn tag(repo: &Repository, name: &str, at: git2::Oid) {
    repo.tag_lightweight(name, &repo.find_object(at, None).expect("obj"), false)
        .expect("tag");
}

fn evidence(p: &serde_json::Value) -> Vec<(String, String, String)> {
    p["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().expect("kind").to_string(),
                e["strength"].as_str().expect("strength").to_string(),
                e["detail"].as_str().expect("detail").to_string(),
            )
        })
        .collect()
}

fn has(ev: &[(String, String, String)], kind: &str, needle: &str) -> bool {
    ev.iter().any(|e| e.0 == kind && e.2.contains(needle))
}

/// ggml-style: `fix (llama/123)` merged; reverted by `Revert "fix (#123)" (llama/456)` whose
/// body names a llama.cpp id; then upstream moves on beside the patch's line (a three-way
/// merge conflicts). Returns the revert.
fn synced_revert(repo: &Repository) -> git2::Oid {
    let rev = commit_files(
        repo,
        &[("x.c", &source(1, 0, 0))],
        &format!(
            "Revert \"ggml : fix foo (#123)\" (llama/456)\n\nThis reverts commit {FOREIGN}.\n"
        ),
    );
    commit_files(
        repo,
        &[("x.c", &source(1, 7, 0))],
        "ggml : w starts at 7 (llama/457)",
    );
    rev
}

// issue #26 §1: the revert names a foreign commit id; only its subject ties it to the merged
// commit. Before, the ancestry made this `merged` (and a rebase would have dropped the fix).
#[test]
fn a_synced_revert_naming_a_foreign_commit_makes_the_merged_patch_reverted_not_merged() {
    let mut revert = None;
    let up = Upstream::new("ggml : fix foo (llama/123)", |repo, _, _| {
        revert = Some(synced_revert(repo));
    });
    let revert = revert.expect("revert");
    let (c, p) = up.audit();
    assert_eq!(c, 1, "{p:#}");
    assert_eq!(p["verdict"], "reverted", "{p:#}");
    let ev = evidence(&p);
    let rev = ev
        .iter()
        .find(|e| e.0 == "reverted")
        .expect("reverted evidence");
    assert_eq!(rev.1, "strong");
    for needle in [
        &up.fix.to_string()[..9],
        &revert.to_string()[..9],
        "Revert \"ggml : fix foo (#123)\" (llama/456)",
        "subject",
        &format!(
            "the commit its message names, {}, is not in this history",
            &FOREIGN[..9]
        ),
    ] {
        assert!(rev.2.contains(needle), "{needle}: {rev:?}");
    }
    // Both commits shown, as data too.
    let pair = &p["reverts"][0];
    assert_eq!(pair["commit"], up.fix.to_string(), "{p:#}");
    assert_eq!(pair["reverted_by"], revert.to_string(), "{p:#}");
    assert_eq!(pair["signal"], "subject");
    assert_eq!(pair["subject"], "ggml : fix foo (llama/123)");
    // The content agrees: the change is gone and the merge conflicts.
    assert!(has(&ev, "conflict", "int w = 7;"), "{ev:?}");
    assert!(!ev
        .iter()
        .any(|e| e.0 == "upstream-commit-ancestor" && e.1 == "strong"));

    // The human report shows the verdict and both commits; a rebase never drops it.
    let o = pinforge(
        &up.ws,
        &[
            "audit",
            up.recipe.to_str().expect("utf8"),
            "--onto",
            &up.onto(),
        ],
    );
    let text = stdout(&o);
    assert!(text.contains("0001-x.patch: reverted"), "{text}");
    assert!(
        text.contains(&format!("reverted: {} ", &up.fix.to_string()[..9]))
            && text.contains(&format!("by {} ", &revert.to_string()[..9])),
        "{text}"
    );
    let state = |ws: &Path| [listing(&ws.join("patches")), listing(&ws.join("recipes"))];
    let before = state(&up.ws);
    let o = pinforge(
        &up.ws,
        &[
            "rebase",
            up.recipe.to_str().expect("utf8"),
            "--onto",
            &up.onto(),
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0001-x.patch: reverted"),
        "{}",
        stderr(&o)
    );
    assert_eq!(state(&up.ws), before, "a stopped rebase writes nothing");
    // Only the operator's `--drop` takes it out, and the ledger says it was reverted.
    let o = pinforge(
        &up.ws,
        &[
            "rebase",
            up.recipe.to_str().expect("utf8"),
            "--onto",
            &up.onto(),
            "--drop",
            "0001-x.patch",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let ledger = std::fs::read_to_string(up.ws.join("patches/ledger.toml")).expect("ledger");
    assert!(
        ledger.contains("verdict = \"reverted\"")
            && ledger.contains("dropped by the operator: reverted"),
        "{ledger}"
    );
}

// issue #26 §1: a revert of that revert restores the change: `merged` again, the chain shown.
#[test]
fn a_revert_of_the_synced_revert_makes_it_merged_again() {
    let mut chain = Vec::new();
    let up = Upstream::new("ggml : fix foo (llama/123)", |repo, _, _| {
        chain.push(synced_revert(repo));
        chain.push(commit_files(
            repo,
            &[("x.c", &source(2, 7, 0))],
            &format!(
                "Revert \"Revert \"ggml : fix foo (#123)\"\" (llama/458)\n\nThis reverts commit {FOREIGN_2}.\n"
            ),
        ));
    });
    let (_, p) = up.audit();
    assert_eq!(p["verdict"], "merged", "{p:#}");
    let ev = evidence(&p);
    let anc = ev
        .iter()
        .find(|e| e.0 == "upstream-commit-ancestor")
        .expect("ancestor");
    assert_eq!(anc.1, "strong", "{ev:?}");
    for needle in [
        &chain[0].to_string()[..9],
        &chain[1].to_string()[..9],
        "restored it",
        "its change stands",
    ] {
        assert!(anc.2.contains(needle), "{needle}: {anc:?}");
    }
    assert!(p.get("reverts").is_none(), "{p:#}");
    assert!(!ev.iter().any(|e| e.0 == "reverted"), "{ev:?}");
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "upstream")
        .env("GIT_AUTHOR_EMAIL", "up@example.invalid")
        .env("GIT_COMMITTER_NAME", "upstream")
        .env("GIT_COMMITTER_EMAIL", "up@example.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

// issue #26 §1: `git revert` itself (`This reverts commit <id>.` naming a commit of this
// history), then a change beside the line: reverted, found by the message.
#[test]
fn a_plain_git_revert_in_the_history_makes_the_patch_reverted() {
    if crate::which("git").is_none() {
        return crate::skip("no git executable");
    }
    let up = Upstream::new("x: value 2 (#123)", |repo, path, fix| {
        git(path, &["revert", "--no-edit", &fix.to_string()]);
        commit_files(repo, &[("x.c", &source(1, 7, 0))], "x: w starts at 7");
    });
    let log = git(&up.path, &["log", "-1", "--format=%B", "HEAD~1"]);
    assert!(
        log.contains(&format!("This reverts commit {}", up.fix)),
        "{log}"
    );
    let (c, p) = up.audit();
    assert_eq!(c, 1);
    assert_eq!(p["verdict"], "reverted", "{p:#}");
    assert_eq!(p["reverts"][0]["signal"], "message-id", "{p:#}");
    assert!(has(&evidence(&p), "reverted", "message says"), "{p:#}");
}

// issue #26 §1: a revert whose subject and body say nothing, made after upstream moved the
// lines: its diff is the exact reverse of the fix's. The patch applies again, so the rebase
// carries it only when told to (`--keep`), and never drops it.
#[test]
fn a_content_only_revert_is_recognized_and_the_rebase_keeps_the_patch_only_when_told() {
    let mut revert = None;
    let up = Upstream::new("x: value 2 (#123)", |repo, _, _| {
        commit_files(repo, &[("x.c", &source(2, 0, 4))], "x: a license header");
        revert = Some(commit_files(
            repo,
            &[("x.c", &source(1, 0, 4))],
            "x: tidy the start values",
        ));
    });
    let (c, p) = up.audit();
    assert_eq!(c, 1);
    assert_eq!(p["verdict"], "reverted", "{p:#}");
    assert_eq!(p["reverts"][0]["signal"], "content", "{p:#}");
    assert_eq!(
        p["reverts"][0]["reverted_by"],
        revert.expect("revert").to_string()
    );
    let ev = evidence(&p);
    assert!(has(&ev, "reverted", "exact reverse"), "{ev:?}");
    assert!(has(&ev, "moved", "x.c#1 +4"), "{ev:?}");

    let r = up.recipe.to_str().expect("utf8");
    let before = std::fs::read(up.ws.join("patches/0001-x.patch")).expect("patch");
    let o = pinforge(&up.ws, &["rebase", r, "--onto", &up.onto()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let o = pinforge(
        &up.ws,
        &["rebase", r, "--onto", &up.onto(), "--keep", "0001-x.patch"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let series = std::fs::read_to_string(up.ws.join("patches/series")).expect("series");
    assert_eq!(series, "0001-x.patch\n");
    let after = std::fs::read(up.ws.join("patches/0001-x.patch")).expect("patch");
    assert_ne!(after, before, "refreshed: the hunk moved");
    assert!(String::from_utf8_lossy(&after).contains("@@ -8,6 +8,6 @@"));
    assert!(
        !up.ws.join("patches/ledger.toml").exists(),
        "nothing dropped"
    );
}

// issue #26 §1, the rule over the whole verdict: a later commit undoes the change among other
// edits, so no signal calls it a revert. The ancestry says merged, the content says the change
// is absent and the merge conflicts: `conflicts` (before: `merged`, and a rebase dropped it),
// with the disagreement named.
#[test]
fn ancestry_against_content_that_says_absent_is_not_merged_and_names_the_disagreement() {
    let up = Upstream::new("x: value 2 (#123)", |repo, _, _| {
        commit_files(
            repo,
            &[("x.c", &source(1, 7, 0))],
            "x: rework the start values",
        );
    });
    let (c, p) = up.audit();
    assert_eq!(c, 1);
    assert_eq!(p["verdict"], "conflicts", "{p:#}");
    let ev = evidence(&p);
    let said = ev
        .iter()
        .find(|e| e.0 == "contradicted")
        .expect("contradicted evidence");
    assert_eq!(said.1, "strong");
    for needle in [
        "the history says upstream merged it (Upstream-Commit",
        &up.fix.to_string()[..9],
        "keeps the lines the patch removes and lacks the lines it adds",
        "not merged",
    ] {
        assert!(said.2.contains(needle), "{needle}: {said:?}");
    }
    assert!(
        has(&ev, "upstream-commit-ancestor", "is an ancestor"),
        "{ev:?}"
    );
    assert!(has(&ev, "conflict", "int w = 7;"), "{ev:?}");
    assert!(p.get("reverts").is_none(), "{p:#}");
}
