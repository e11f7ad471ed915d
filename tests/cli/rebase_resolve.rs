//! A rebase that stops at a conflict and resumes (issue #26 §4): a real upstream git history
//! where one patch of three conflicts, resolved through `rebase --resolve`, an edit, `git add`,
//! `git commit` and `rebase --continue`; `--abort`; a `--continue` refused after the bundle,
//! the recipe or the checkout moved; and real SIGKILLs at every step of the `--continue`'s
//! commit protocol: the bundle, the recipe and its lock are all old or all new.

use crate::audit::{patch, put, src};
use crate::{code, listing, pinforge, pinforge_cmd, stderr, stdout};
use git2::Repository;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const RECIPE: &str = "recipes/up.toml";
/// The crash points of the rebase protocol, as the library declares them
/// (`pinforge_source::rebase::RebaseStep`): a new step is a new kill here.
const STEPS: u32 =
    <pinforge_source::rebase::RebaseStep as pinforge_base::txn::Step>::ALL.len() as u32;
/// What the operator writes where 0002 conflicts: the patch's `v`, upstream's new `w`.
const RESOLVED_LINE: &str = "    int v = 2;\n    int w = 5;\n";

struct Up {
    _dir: tempfile::TempDir,
    upstream: PathBuf,
    template: PathBuf,
}

/// v1; v2: b.c gets a license header above the patch (0001 moves), a.c changes the lines
/// 0002 keeps as context (`w`, beside the line it changes: a conflict), c.c is untouched (0003
/// carries as it is).
fn up() -> Up {
    up_with(false)
}

/// [`up`]; with `two`, v2 also changes c.c beside 0003's line: a second conflict.
fn up_with(two: bool) -> Up {
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = dir.path().join("upstream");
    let repo = Repository::init(&upstream).expect("init");
    let cmake =
        "cmake_minimum_required(VERSION 3.14)\nproject(up C)\nadd_library(up SHARED a.c b.c c.c)\n";
    let v1 = put(
        &repo,
        &[
            ("a.c".into(), src("a", 0, 1, 0, 0, 9)),
            ("b.c".into(), src("b", 0, 1, 0, 0, 9)),
            ("c.c".into(), src("c", 0, 1, 0, 0, 9)),
            ("CMakeLists.txt".into(), cmake.into()),
        ],
        "v1",
    );
    let tag = |name: &str, oid: git2::Oid| {
        repo.tag_lightweight(name, &repo.find_object(oid, None).expect("obj"), false)
            .expect("tag");
    };
    tag("v1", v1);
    put(
        &repo,
        &[("b.c".into(), src("b", 5, 1, 0, 0, 9))],
        "b: a license header",
    );
    let mut changed = vec![("a.c".to_string(), src("a", 0, 1, 5, 0, 9))];
    if two {
        changed.push(("c.c".to_string(), src("c", 0, 1, 5, 0, 9)));
    }
    let v2 = put(&repo, &changed, "a, c: w at 5");
    tag("v2", v2);

    let ws = dir.path().join("template");
    std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
    std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
    let pending = |n: usize| {
        format!(
            "Upstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/up/issues/{n}\n"
        )
    };
    std::fs::write(
        ws.join("patches/0001-b.patch"),
        patch("b", 101, &pending(101)),
    )
    .expect("w");
    std::fs::write(
        ws.join("patches/0002-a.patch"),
        patch("a", 102, &pending(102)),
    )
    .expect("w");
    std::fs::write(
        ws.join("patches/0003-c.patch"),
        patch("c", 103, &pending(103)),
    )
    .expect("w");
    std::fs::write(
        ws.join("patches/series"),
        "0001-b.patch\n0002-a.patch\n0003-c.patch\n",
    )
    .expect("series");
    std::fs::write(
        ws.join(RECIPE),
        format!(
            "name = \"up\"\ndefault-variant = \"patched\"\n\n[pin]\nkind = \"git\"\nurl = \"{}\"\ntag = \"v1\"\ncommit = \"{v1}\"\n\n[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\ncmake-version = \">=3.24\"\n[base]\ntoolchain = \"cpu\"\ntargets = [\"up\"]\n[variants.patched]\n",
            upstream.display()
        ),
    )
    .expect("recipe");
    // Materialize both trees once (vendor/ is copied with the template).
    let o = pinforge(&ws, &["audit", RECIPE, "--onto", &onto(&upstream)]);
    assert_eq!(code(&o), 1, "0002 conflicts: {}", stderr(&o));
    Up {
        _dir: dir,
        upstream,
        template: ws,
    }
}

fn onto(upstream: &Path) -> String {
    format!("git:{}@v2", upstream.display())
}

impl Up {
    fn copy(&self) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        let st = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", self.template.display()))
            .arg(d.path())
            .status()
            .expect("cp");
        assert!(st.success());
        d
    }

    /// `rebase --resolve`: stops at 0002 with its conflict in the checkout.
    fn resolve(&self, ws: &Path) -> PathBuf {
        let o = pinforge(
            ws,
            &[
                "rebase",
                RECIPE,
                "--onto",
                &onto(&self.upstream),
                "--resolve",
            ],
        );
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        let co = ws.join("rebase-resolve/up");
        assert!(
            stderr(&o).contains(&co.display().to_string()) && stderr(&o).contains("--continue"),
            "{}",
            stderr(&o)
        );
        co
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Op")
        .env("GIT_AUTHOR_EMAIL", "op@example.invalid")
        .env("GIT_COMMITTER_NAME", "Op")
        .env("GIT_COMMITTER_EMAIL", "op@example.invalid")
        .env("GIT_EDITOR", "true")
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn no_git() -> bool {
    if Command::new("git").arg("--version").output().is_err() {
        crate::skip("git is not installed");
        return true;
    }
    false
}

/// The operator's resolution: the markers edited away, added, committed.
fn commit_resolution(co: &Path) {
    commit_resolution_of(co, "a");
}

/// [`commit_resolution`] in X.c.
fn commit_resolution_of(co: &Path, x: &str) {
    let file = format!("{x}.c");
    let text = std::fs::read_to_string(co.join(&file)).expect("conflicted file");
    let start = text.find("<<<<<<<").expect("conflict start");
    let end = text.find(">>>>>>>").expect("conflict end");
    let end = end + text[end..].find('\n').expect("eol") + 1;
    let fixed = format!("{}{RESOLVED_LINE}{}", &text[..start], &text[end..]);
    std::fs::write(co.join(&file), fixed).expect("write");
    git(co, &["add", &file]);
    git(co, &["commit", "--no-edit"]);
}

/// What a rebase replaces: the recipe, its lock and every file of the bundle folder.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    recipe: String,
    lock: Option<String>,
    bundle: BTreeMap<String, String>,
}

impl State {
    fn of(ws: &Path) -> State {
        let mut bundle = BTreeMap::new();
        for l in listing(&ws.join("patches")) {
            let rel = l.split(' ').next().expect("name").to_string();
            if !rel.ends_with('/') {
                let text = std::fs::read_to_string(ws.join("patches").join(&rel)).expect("read");
                bundle.insert(rel, text);
            }
        }
        State {
            recipe: std::fs::read_to_string(ws.join(RECIPE)).expect("recipe"),
            lock: std::fs::read_to_string(ws.join("recipes/up.lock")).ok(),
            bundle,
        }
    }
}

fn header_and_diff(text: &str) -> (&str, &str) {
    let at = text.find("diff --git").expect("diff");
    text.split_at(at)
}

// issue #26 §4: --resolve leaves the checkout with 0001 committed (with its note) and 0002's
// conflict as diff3 markers, writes nothing of the bundle or the recipe; --continue after the
// operator's commit ends as a plain rebase ends: the recipe and lock as a plain rebase writes
// them, 0001 refreshed and 0003 carried byte for byte as a plain rebase writes them, 0002 with
// its header kept but Last-Update and the hunks regenerated; the bundle applies with git apply.
#[test]
fn a_conflict_resolved_through_resolve_commit_continue_ends_as_a_plain_rebase() {
    if no_git() {
        return;
    }
    let up = up();
    let old = State::of(&up.template);
    let d = up.copy();
    let co = up.resolve(d.path());
    assert_eq!(
        State::of(d.path()),
        old,
        "nothing of the bundle was written"
    );
    let a = std::fs::read_to_string(co.join("a.c")).expect("a.c");
    for mark in ["<<<<<<<", "|||||||", "=======", ">>>>>>>"] {
        assert!(a.contains(mark), "{mark}: {a}");
    }
    let log = git(&co, &["log", "--format=%s"]);
    assert!(log.lines().any(|l| l.contains("b: value 2")), "{log}");
    let note = git(&co, &["notes", "--ref=pinforge-patch", "show", "HEAD"]);
    assert!(note.contains("Subject: [PATCH] b: value 2"), "{note}");
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("rebase-resolve/up.json")).expect("state"),
    )
    .expect("json");
    assert_eq!(state["in_progress"], "0002-a.patch");
    assert_eq!(state["onto"], onto(&up.upstream));
    assert!(state["bundle_sha256"]
        .as_str()
        .is_some_and(|s| s.len() == 64));
    assert!(state["recipe"]
        .as_str()
        .is_some_and(|s| s.ends_with(RECIPE)));

    // Not committed yet: refused, nothing moves.
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("not committed"), "{}", stderr(&o));
    // A plain rebase meanwhile is refused too (it would make the resolution stale).
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &onto(&up.upstream)]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(State::of(d.path()), old);

    commit_resolution(&co);
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(crate::schemas::validate(&j), "pinforge.rebase/v1");
    assert_eq!(j["completed"], true);
    let actions: Vec<&str> = j["patches"]
        .as_array()
        .expect("patches")
        .iter()
        .map(|p| p["action"].as_str().expect("action"))
        .collect();
    assert_eq!(actions, ["refreshed", "refreshed", "carried"]);
    let resolved: Vec<bool> = j["patches"]
        .as_array()
        .expect("patches")
        .iter()
        .map(|p| p["resolved"] == true)
        .collect();
    assert_eq!(resolved, [false, true, false]);
    assert!(
        !d.path().join("rebase-resolve").exists(),
        "resolution removed"
    );
    assert!(!d.path().join(".pinforge-rebase.json").exists());
    let new = State::of(d.path());

    // A plain rebase of the same bundle with 0002 dropped: the same recipe, lock, 0001, 0003.
    let p = up.copy();
    let o = pinforge(
        p.path(),
        &[
            "rebase",
            RECIPE,
            "--onto",
            &onto(&up.upstream),
            "--drop",
            "0002-a.patch",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let plain = State::of(p.path());
    assert_eq!(new.recipe, plain.recipe);
    assert!(new.lock.is_some());
    assert_eq!(new.lock, plain.lock);
    for f in ["0001-b.patch", "0003-c.patch"] {
        assert_eq!(new.bundle.get(f), plain.bundle.get(f), "{f}");
    }
    assert_ne!(
        new.bundle["0001-b.patch"], old.bundle["0001-b.patch"],
        "refreshed"
    );
    assert_eq!(new.bundle["series"], old.bundle["series"]);
    assert_eq!(new.bundle["0003-c.patch"], old.bundle["0003-c.patch"]);
    assert!(!new.bundle.contains_key("ledger.toml"), "nothing dropped");

    // 0002: the header byte for byte but Last-Update; the hunks from the operator's commit.
    let (h_old, _) = header_and_diff(&old.bundle["0002-a.patch"]);
    let (h_new, diff) = header_and_diff(&new.bundle["0002-a.patch"]);
    let strip = |h: &str| {
        h.lines()
            .filter(|l| !l.starts_with("Last-Update:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(h_old), strip(h_new));
    assert!(h_new.contains(&format!(
        "Last-Update: {}",
        std::str::from_utf8(
            &Command::new("date")
                .args(["-u", "+%Y-%m-%d"])
                .output()
                .expect("date")
                .stdout
        )
        .expect("utf8")
        .trim()
    )));
    assert!(
        diff.contains("-    int v = 1;\n")
            && diff.contains("+    int v = 2;\n")
            && diff.contains("\n     int w = 5;\n"),
        "{diff}"
    );

    // The rebased bundle applies with real `git apply` onto the new pin, in series order.
    let t = tempfile::tempdir().expect("tempdir");
    let clone = t.path().join("v2");
    git(
        t.path(),
        &["clone", "-q", &up.upstream.display().to_string(), "v2"],
    );
    git(&clone, &["checkout", "-q", "v2"]);
    for f in ["0001-b.patch", "0002-a.patch", "0003-c.patch"] {
        git(
            &clone,
            &[
                "apply",
                &d.path().join("patches").join(f).display().to_string(),
            ],
        );
    }
    let a = std::fs::read_to_string(clone.join("a.c")).expect("a.c");
    assert!(a.contains(RESOLVED_LINE), "{a}");
}

// issue #26 §4: --abort removes the checkout and the state and leaves the workspace as it was
// before --resolve (the listing, sizes and times, is unchanged).
#[test]
fn abort_leaves_everything_as_before_the_resolve() {
    if no_git() {
        return;
    }
    let up = up();
    let d = up.copy();
    let before = listing(d.path());
    let co = up.resolve(d.path());
    assert!(co.join(".git").is_dir());
    let o = pinforge(d.path(), &["rebase", RECIPE, "--abort"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    same_listing(&listing(d.path()), &before);
    // Nothing left to abort or continue.
    let o = pinforge(d.path(), &["rebase", RECIPE, "--abort"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    same_listing(&listing(d.path()), &before);
}

/// The two listings are one, or the difference is shown. Two things the audit that a rebase
/// rests on does to the shared caches are left out: the git pin's `FETCH_HEAD` (every audit of
/// a git pin fetches it again), and the times of the vendor trees' git objects (content
/// addressed: libgit2 freshens an existing object's time when a repository borrowing it writes
/// the same object); their names and sizes still count.
fn same_listing(got: &[String], want: &[String]) {
    let norm = |l: &String| -> Option<String> {
        if l.starts_with("vendor/cache/git/") && l.contains("/FETCH_HEAD ") {
            return None;
        }
        if l.starts_with("vendor/") && l.contains("/.git/objects/") {
            return Some(l.splitn(3, ' ').take(2).collect::<Vec<_>>().join(" "));
        }
        Some(l.clone())
    };
    let got: Vec<String> = got.iter().filter_map(norm).collect();
    let want: Vec<String> = want.iter().filter_map(norm).collect();
    let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "extra: {extra:#?}\nmissing: {missing:#?}"
    );
}

// issue #26 §4: a --continue after the bundle or the recipe changed is refused (exit 2, the
// state named), as is one with uncommitted changes in the checkout (exit 1); none writes.
#[test]
fn continue_after_the_bundle_or_recipe_changed_or_with_a_dirty_checkout_is_refused() {
    if no_git() {
        return;
    }
    let up = up();
    let d = up.copy();
    let co = up.resolve(d.path());
    commit_resolution(&co);
    let series = d.path().join("patches/series");
    let original = std::fs::read_to_string(&series).expect("series");
    std::fs::write(&series, format!("# edited meanwhile\n{original}")).expect("write");
    let changed = State::of(d.path());
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bundle") && stderr(&o).contains("changed since"),
        "{}",
        stderr(&o)
    );
    assert_eq!(State::of(d.path()), changed);
    std::fs::write(&series, &original).expect("write");

    let recipe = d.path().join(RECIPE);
    let text = std::fs::read_to_string(&recipe).expect("recipe");
    std::fs::write(&recipe, format!("# edited\n{text}")).expect("write");
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("changed since"), "{}", stderr(&o));
    std::fs::write(&recipe, &text).expect("write");

    std::fs::write(co.join("c.c"), "dirty\n").expect("write");
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("uncommitted"), "{}", stderr(&o));
    git(&co, &["checkout", "--", "c.c"]);
    assert_eq!(State::of(d.path()), State::of(&up.template));
    // Everything back as it was: it continues.
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

// issue #26 §4: a --continue killed after every step of the commit protocol: after the next
// command the bundle, recipe and lock are all old (before the commit point; a second
// --continue then ends all new) or all new (after it); and one killed before the protocol,
// with its replay committed in the checkout.
#[test]
fn a_continue_killed_at_every_step_is_all_old_or_all_new() {
    if no_git() {
        return;
    }
    let up = up();
    let old = State::of(&up.template);
    let reference = up.copy();
    let co = up.resolve(reference.path());
    commit_resolution(&co);
    let o = pinforge(reference.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let new = State::of(reference.path());
    assert_ne!(old, new);
    for n in 1..=STEPS {
        let d = up.copy();
        let co = up.resolve(d.path());
        commit_resolution(&co);
        let o = pinforge_cmd(d.path())
            .args(["rebase", RECIPE, "--continue"])
            .env("PINFORGE_CRASH_AT", format!("rebase:{n}"))
            .output()
            .expect("run");
        assert_eq!(o.status.signal(), Some(9), "step {n}: {}", stderr(&o));
        let o = pinforge(d.path(), &["patch", "lint"]);
        assert!(code(&o) <= 2, "step {n}: {}", stderr(&o));
        let got = State::of(d.path());
        if n >= 6 {
            assert_eq!(got, new, "step {n}");
            // The resolution is stale now: --abort removes it.
            let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
            assert_ne!(code(&o), 0, "step {n}");
            let o = pinforge(d.path(), &["rebase", RECIPE, "--abort"]);
            assert_eq!(code(&o), 0, "step {n}: {}", stderr(&o));
        } else {
            assert_eq!(got, old, "step {n}");
            let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
            assert_eq!(code(&o), 0, "step {n}: {}", stderr(&o));
            assert_eq!(State::of(d.path()), new, "step {n}");
        }
        assert!(!d.path().join(".pinforge-rebase.json").exists(), "step {n}");
        assert!(!d.path().join(".rebase-patches").exists(), "step {n}");
    }
    // Killed after it committed 0003 onto the operator's commit in the checkout, before the
    // protocol: nothing written; the next --continue undoes that commit and ends all new.
    let d = up.copy();
    let co = up.resolve(d.path());
    commit_resolution(&co);
    let operator = git(&co, &["rev-parse", "HEAD"]);
    let o = pinforge_cmd(d.path())
        .args(["rebase", RECIPE, "--continue"])
        .env("PINFORGE_CRASH_AT", "rebase-resolve:replayed")
        .output()
        .expect("run");
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    assert_ne!(
        git(&co, &["rev-parse", "HEAD"]),
        operator,
        "0003 was committed"
    );
    assert_eq!(State::of(d.path()), old);
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(State::of(d.path()), new);
}

// issue #26 §4: where a second patch conflicts too, --continue stops again as --resolve does
// (exit 1, the checkout holding the operator's first resolution and the second conflict, the
// state naming both); the second --continue ends with both patches regenerated.
#[test]
fn a_second_conflict_stops_the_continue_again_and_the_next_continue_ends_it() {
    if no_git() {
        return;
    }
    let up = up_with(true);
    let old = State::of(&up.template);
    let d = up.copy();
    let co = up.resolve(d.path());
    commit_resolution_of(&co, "a");
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue", "--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(crate::schemas::validate(&j), "pinforge.rebase/v1");
    assert_eq!(j["completed"], false);
    assert_eq!(j["patch"], "0003-c.patch");
    assert_eq!(j["conflicts"], serde_json::json!(["c.c"]));
    assert_eq!(j["resolved"], serde_json::json!(["0002-a.patch"]));
    assert_eq!(State::of(d.path()), old, "nothing written yet");
    let c = std::fs::read_to_string(co.join("c.c")).expect("c.c");
    assert!(c.contains("|||||||"), "{c}");
    commit_resolution_of(&co, "c");
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let new = State::of(d.path());
    for f in ["0002-a.patch", "0003-c.patch"] {
        let (_, diff) = header_and_diff(&new.bundle[f]);
        assert!(
            diff.contains("+    int v = 2;\n") && diff.contains("\n     int w = 5;\n"),
            "{f}: {diff}"
        );
    }
    assert!(!d.path().join("rebase-resolve").exists());
}

// issue #26 §4: a --continue that fails after it took the operator's commit (here the
// recipe's lock became a FIFO, refused when the audit reads it) leaves the state as it found
// it and the checkout at that commit: the operator amends the resolution, and the next
// --continue takes the amended commit, not the first one.
#[test]
fn a_failed_continue_leaves_the_resolution_to_amend_and_the_next_takes_the_amended_commit() {
    if no_git() {
        return;
    }
    let up = up();
    let d = up.copy();
    let co = up.resolve(d.path());
    commit_resolution(&co);
    let first = git(&co, &["rev-parse", "HEAD"]);
    let lock = d.path().join("recipes/up.lock");
    let saved = std::fs::read(&lock).expect("lock");
    std::fs::remove_file(&lock).expect("rm");
    if !Command::new("mkfifo")
        .arg(&lock)
        .status()
        .is_ok_and(|s| s.success())
    {
        crate::skip("mkfifo (coreutils) is needed to make a FIFO");
        return;
    }
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(
        git(&co, &["rev-parse", "HEAD"]),
        first,
        "0003 was not left committed"
    );
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("rebase-resolve/up.json")).expect("state"),
    )
    .expect("json");
    assert!(state["resumed_from"].is_null(), "{state:#}");
    assert_eq!(state["done"], serde_json::json!([]));
    std::fs::remove_file(&lock).expect("rm fifo");
    std::fs::write(&lock, saved).expect("lock back");

    // The operator changes their mind: v = 4.
    let a = std::fs::read_to_string(co.join("a.c")).expect("a.c");
    std::fs::write(co.join("a.c"), a.replace("int v = 2;", "int v = 4;")).expect("write");
    git(&co, &["commit", "-qa", "--amend", "--no-edit"]);
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let new = State::of(d.path());
    let (_, diff) = header_and_diff(&new.bundle["0002-a.patch"]);
    assert!(diff.contains("+    int v = 4;\n"), "{diff}");
}

/// Review finding: `--continue` resolves `--onto` again; when it now names another tree (here
/// the tag moved), the resolution was made on a tree the recipe would not be pinned to, so it
/// is refused and nothing is written.
#[test]
fn continue_after_the_onto_pin_moved_is_refused() {
    if no_git() {
        return;
    }
    let up = up();
    let d = up.copy();
    let co = up.resolve(d.path());
    commit_resolution(&co);
    let before = State::of(d.path());
    let work = tempfile::tempdir().expect("tmp");
    let clone = work.path().join("c");
    git(
        work.path(),
        &["clone", "-q", &up.upstream.display().to_string(), "c"],
    );
    std::fs::write(clone.join("extra.txt"), "moved\n").expect("write");
    git(&clone, &["add", "extra.txt"]);
    git(&clone, &["commit", "-qm", "after v2"]);
    let moved = git(&clone, &["rev-parse", "HEAD"]);
    git(
        &clone,
        &["push", "-q", "origin", &format!("{moved}:refs/heads/moved")],
    );
    git(&up.upstream, &["tag", "-f", "v2", &moved]);
    let o = pinforge(d.path(), &["rebase", RECIPE, "--continue"]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    // Refused by whichever check meets it first: the vendor tree's source, or the resolution's
    // recorded base (the one a re-hashed `dir:` pin meets).
    assert!(
        stderr(&o).contains("another tree") || stderr(&o).contains("different source"),
        "{}",
        stderr(&o)
    );
    assert_eq!(State::of(d.path()), before, "nothing was written");
}
