//! Applying patches as `git apply` does: moved hunks, differential tests against git, encoded headers, non-UTF-8 bytes.
//!
//! Every differential case builds the same target tree twice with the real `git` CLI, applies
//! the diff with `git apply --index` in one and with `pinforge patch apply` in the other, and
//! compares tree ids (or that both refuse, pinforge leaving its checkout untouched).

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Attribution that lints clean: the differential cases are about the diff.
const HEADER: &str = "From: Tester <tester@example.invalid>\nDate: Mon, 30 Nov 2026 00:00:00 +0000\nSubject: [PATCH] test change\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/r/issues/1\nReported-by: tester\nOrigin: https://example.invalid/o/r/issues/1\n\n---\n";

/// The real git CLI with no user or system configuration and fixed identities and dates.
fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "upstream")
        .env("GIT_AUTHOR_EMAIL", "up@example.invalid")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_NAME", "upstream")
        .env("GIT_COMMITTER_EMAIL", "up@example.invalid")
        .env("GIT_COMMITTER_DATE", "1700000000 +0000");
    c
}

fn git_out(dir: &Path, args: &[&str]) -> Output {
    git_cmd(dir).args(args).output().expect("run git")
}

fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let o = git_out(dir, args);
    assert!(
        o.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_string()
}

type Files<'a> = [(&'a str, Vec<u8>)];

fn write_files(root: &Path, files: &Files) {
    for (p, c) in files {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, c).expect("write");
    }
}

/// A git repository at `dir` holding `files` in one commit.
fn repo_at(dir: &Path, files: &Files) {
    std::fs::create_dir_all(dir).expect("mkdir");
    git(dir, &["init", "-q", "-b", "main"]);
    write_files(dir, files);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "base"]);
}

/// `git diff` of `edit` applied to `base` (renames detected, binary-safe).
fn make_diff(base: &Files, edit: impl FnOnce(&Path)) -> Vec<u8> {
    let d = tempfile::tempdir().expect("tempdir");
    repo_at(d.path(), base);
    edit(d.path());
    git(d.path(), &["add", "-A"]);
    git(d.path(), &["diff", "--cached", "-M", "--binary"])
}

/// What `git apply --index` makes of `diff` on `target`: the tree id, or None when it refuses.
fn git_apply_tree(target: &Files, diff: &[u8]) -> Option<String> {
    let d = tempfile::tempdir().expect("tempdir");
    let repo = d.path().join("repo");
    repo_at(&repo, target);
    let file = d.path().join("change.diff");
    std::fs::write(&file, diff).expect("write");
    let o = git_out(&repo, &["apply", "--index", file.to_str().expect("utf8")]);
    o.status
        .success()
        .then(|| text(&git(&repo, &["write-tree"])))
}

/// A bundle folder with one patch (`HEADER` + `diff`, or `patch` as given) and its series.
fn bundle(dir: &Path, name: &str, patch: &[u8]) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir_all(&b).expect("mkdir");
    std::fs::write(b.join(name), patch).expect("write");
    std::fs::write(b.join("series"), format!("{name}\n")).expect("write");
    b
}

/// Run `pinforge patch apply` on a checkout of `target`.
struct PinforgeRun {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    out: Output,
    /// Tree id after the patch; None when pinforge refused (and left the checkout untouched).
    tree: Option<String>,
}

fn pinforge_apply(target: &Files, patch: &[u8]) -> PinforgeRun {
    let d = tempfile::tempdir().expect("tempdir");
    let repo = d.path().join("repo");
    repo_at(&repo, target);
    let head = text(&git(&repo, &["rev-parse", "HEAD"]));
    let b = bundle(d.path(), "0001-t.patch", patch);
    let out = crate::pinforge(
        d.path(),
        &[
            "patch",
            "apply",
            repo.to_str().expect("utf8"),
            "--dir",
            b.to_str().expect("utf8"),
        ],
    );
    let tree = if out.status.success() {
        Some(text(&git(&repo, &["rev-parse", "HEAD^{tree}"])))
    } else {
        assert_eq!(
            text(&git(&repo, &["rev-parse", "HEAD"])),
            head,
            "a refused patch commits nothing"
        );
        assert_eq!(
            text(&git(
                &repo,
                &["status", "--porcelain", "--untracked-files=all"]
            )),
            "",
            "a refused patch leaves index and work tree untouched: {}",
            crate::stderr(&out)
        );
        None
    };
    PinforgeRun {
        _dir: d,
        repo,
        out,
        tree,
    }
}

fn with_header(diff: &[u8]) -> Vec<u8> {
    [HEADER.as_bytes(), diff].concat()
}

/// pinforge and `git apply` agree on `diff` over `target`; returns pinforge's run.
fn differential(target: &Files, diff: &[u8]) -> PinforgeRun {
    let want = git_apply_tree(target, diff);
    let run = pinforge_apply(target, &with_header(diff));
    assert_eq!(
        run.tree,
        want,
        "pinforge (left) and git apply (right) disagree\n--- diff\n{}\n--- pinforge stderr\n{}",
        String::from_utf8_lossy(diff),
        crate::stderr(&run.out)
    );
    run
}

fn numbered(prefix: &str, n: usize) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("{prefix} line {i}\n"))
        .collect::<String>()
        .into_bytes()
}

fn replace_line(content: &[u8], line: usize, with: &str) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = content
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    lines[line - 1] = format!("{with}\n").into_bytes();
    lines.concat()
}

fn notes(run: &PinforgeRun) -> Vec<String> {
    crate::stderr(&run.out)
        .lines()
        .filter(|l| l.starts_with("note: "))
        .map(str::to_string)
        .collect()
}

fn head_message(repo: &Path) -> String {
    String::from_utf8_lossy(&git(repo, &["log", "-1", "--format=%B"])).into_owned()
}

// issue #13 item 1
#[test]
fn lines_inserted_above_a_hunk_move_it_as_git_apply_does_with_a_note_and_a_trailer() {
    let base = numbered("a", 30);
    let diff = make_diff(&[("a.txt", base.clone())], |d| {
        std::fs::write(d.join("a.txt"), replace_line(&base, 20, "changed")).expect("write");
    });
    let target = [numbered("new", 5), base].concat();
    let run = differential(&[("a.txt", target)], &diff);
    assert!(run.tree.is_some());
    assert_eq!(
        notes(&run),
        vec![
            "note: patch 0001-t.patch hunk 1 of a.txt applied at offset +5: the patch is due a refresh"
        ]
    );
    assert!(
        head_message(&run.repo).contains("\nPinforge-Hunk-Offset: a.txt#1 +5\n"),
        "{}",
        head_message(&run.repo)
    );
}

// issue #13 item 1: the "offset -9 lines" of the report
#[test]
fn lines_removed_above_a_hunk_move_it_back_as_git_apply_does() {
    let base = numbered("a", 40);
    let diff = make_diff(&[("a.txt", base.clone())], |d| {
        std::fs::write(d.join("a.txt"), replace_line(&base, 30, "changed")).expect("write");
    });
    let lines: Vec<&[u8]> = base.split_inclusive(|&b| b == b'\n').collect();
    let target = lines[9..].concat();
    let run = differential(&[("a.txt", target)], &diff);
    assert!(run.tree.is_some());
    assert!(head_message(&run.repo).contains("Pinforge-Hunk-Offset: a.txt#1 -9\n"));
}

// issue #13 item 1
#[test]
fn two_hunks_of_one_file_with_different_offsets_both_move() {
    let base = numbered("a", 60);
    let diff = make_diff(&[("a.txt", base.clone())], |d| {
        let e = replace_line(&replace_line(&base, 10, "first"), 50, "second");
        std::fs::write(d.join("a.txt"), e).expect("write");
    });
    let lines: Vec<&[u8]> = base.split_inclusive(|&b| b == b'\n').collect();
    // 3 lines more above the first hunk, 5 fewer between the hunks.
    let target = [
        numbered("top", 3),
        lines[..25].concat(),
        lines[30..].concat(),
    ]
    .concat();
    let run = differential(&[("a.txt", target)], &diff);
    let msg = head_message(&run.repo);
    assert!(msg.contains("Pinforge-Hunk-Offset: a.txt#1 +3\n"), "{msg}");
    assert!(msg.contains("Pinforge-Hunk-Offset: a.txt#2 -2\n"), "{msg}");
}

// issue #13 item 1
#[test]
fn two_moved_files_apply_together() {
    let (a, b) = (numbered("a", 30), numbered("b", 30));
    let diff = make_diff(&[("a.txt", a.clone()), ("sub/b.txt", b.clone())], |d| {
        std::fs::write(d.join("a.txt"), replace_line(&a, 15, "A")).expect("write");
        std::fs::write(d.join("sub/b.txt"), replace_line(&b, 25, "B")).expect("write");
    });
    let la: Vec<&[u8]> = a.split_inclusive(|&b| b == b'\n').collect();
    let target = [
        ("a.txt", la[4..].concat()),
        ("sub/b.txt", [numbered("x", 7), b].concat()),
    ];
    let run = differential(&target, &diff);
    assert_eq!(notes(&run).len(), 2, "{:?}", notes(&run));
}

// issue #13 item 1: git's find_pos tries +1 before -1, +2 before -2, ...: the nearest wins.
#[test]
fn a_context_that_occurs_twice_applies_at_the_nearest_as_git_does() {
    let block: Vec<u8> = (1..=7)
        .map(|i| format!("block {i}\n"))
        .collect::<String>()
        .into_bytes();
    let base = [numbered("f", 20), block.clone(), numbered("g", 20)].concat();
    let diff = make_diff(&[("a.txt", base.clone())], |d| {
        // Line 24 is the block's middle: the hunk's context is the block alone.
        std::fs::write(d.join("a.txt"), replace_line(&base, 24, "changed")).expect("write");
    });
    let lines: Vec<&[u8]> = base.split_inclusive(|&b| b == b'\n').collect();
    // 10 lines above the original (now at +10) and a copy of the block 6 lines before it.
    let near = [
        lines[..14].concat(),
        block.clone(),
        numbered("pad", 3),
        lines[14..].concat(),
    ]
    .concat();
    let run = differential(&[("a.txt", near)], &diff);
    assert!(
        head_message(&run.repo).contains("a.txt#1 -6\n"),
        "{}",
        head_message(&run.repo)
    );
    // The copy 14 lines before the stated line is farther than the original at +10.
    let far = [
        lines[..6].concat(),
        block,
        numbered("pad", 3),
        lines[6..].concat(),
    ]
    .concat();
    let run = differential(&[("a.txt", far)], &diff);
    assert!(head_message(&run.repo).contains("a.txt#1 +10\n"));
}

// issue #13 item 1: a hunk that matches nowhere is refused by both, with the closest region.
#[test]
fn a_hunk_that_matches_nowhere_is_refused_with_the_closest_region_and_its_line() {
    let base = numbered("a", 30);
    let diff = make_diff(&[("a.txt", base.clone())], |d| {
        std::fs::write(d.join("a.txt"), replace_line(&base, 20, "changed")).expect("write");
    });
    let target = [numbered("new", 4), replace_line(&base, 21, "upstream edit")].concat();
    let run = differential(&[("a.txt", target)], &diff);
    assert_eq!(crate::code(&run.out), 2);
    let err = crate::stderr(&run.out);
    assert!(err.contains("0001-t.patch"), "{err}");
    assert!(err.contains("a.txt, hunk 1 (@@ -17,7 +17,7 @@"), "{err}");
    assert!(err.contains("closest region starts at line 21"), "{err}");
    assert!(err.contains("found (tree, line 21)"), "{err}");
    assert!(err.contains("-a line 21"), "{err}");
    assert!(err.contains("+upstream edit"), "{err}");
}

// issue #13 item 1: creation, deletion, rename (with a moved hunk) and a mode change beside a
// moved hunk.
#[test]
fn creation_deletion_rename_and_mode_change_beside_moved_hunks() {
    let a = numbered("a", 40);
    let r = numbered("r", 30);
    let base = [
        ("a.txt", a.clone()),
        ("old.txt", numbered("old", 5)),
        ("ren-src.txt", r.clone()),
        ("run.sh", b"#!/bin/sh\n".to_vec()),
    ];
    let diff = make_diff(&base, |d| {
        std::fs::write(d.join("a.txt"), replace_line(&a, 30, "changed")).expect("write");
        std::fs::create_dir_all(d.join("new")).expect("mkdir");
        std::fs::write(d.join("new/n.txt"), "created\n").expect("write");
        std::fs::remove_file(d.join("old.txt")).expect("rm");
        std::fs::remove_file(d.join("ren-src.txt")).expect("rm");
        std::fs::write(
            d.join("ren-dst.txt"),
            replace_line(&r, 25, "renamed+changed"),
        )
        .expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    });
    let s = String::from_utf8_lossy(&diff);
    assert!(
        s.contains("rename from ren-src.txt") && s.contains("new mode 100755"),
        "{s}"
    );
    let target = [
        ("a.txt", [numbered("up", 6), a].concat()),
        ("old.txt", numbered("old", 5)),
        ("ren-src.txt", [numbered("up", 2), r].concat()),
        ("run.sh", b"#!/bin/sh\n".to_vec()),
    ];
    let run = differential(&target, &diff);
    assert!(run.tree.is_some(), "{}", crate::stderr(&run.out));
    let msg = head_message(&run.repo);
    assert!(msg.contains("Pinforge-Hunk-Offset: a.txt#1 +6\n"), "{msg}");
    assert!(
        msg.contains("Pinforge-Hunk-Offset: ren-dst.txt#1 +2\n"),
        "{msg}"
    );
}

// issue #7 class 6: changed lines may hold any bytes; they apply byte-exactly.
#[test]
fn non_utf8_content_lines_apply_byte_exactly_at_an_offset() {
    let mut base = numbered("a", 20);
    base.extend_from_slice(b"caf\xe9 \xff\xfe latin-1\n");
    base.extend_from_slice(&numbered("b", 10));
    let diff = make_diff(&[("l1.txt", base.clone())], |d| {
        let e = replace_line(&base, 21, "caf\u{e9} now utf-8 but still \u{fffd}");
        let e = [e, b"\x80\x81 raw tail\n".to_vec()].concat();
        std::fs::write(d.join("l1.txt"), e).expect("write");
    });
    let target = [numbered("x", 3), base].concat();
    let run = differential(&[("l1.txt", target)], &diff);
    assert!(run.tree.is_some(), "{}", crate::stderr(&run.out));
}

// issue #7 class 6: a patch applies whole or not at all.
#[test]
fn a_two_file_patch_whose_second_file_fails_applies_nothing() {
    let (a, b) = (numbered("a", 20), numbered("b", 20));
    let diff = make_diff(&[("a.txt", a.clone()), ("b.txt", b.clone())], |d| {
        std::fs::write(d.join("a.txt"), replace_line(&a, 10, "A")).expect("write");
        std::fs::write(d.join("b.txt"), replace_line(&b, 10, "B")).expect("write");
    });
    let target = [("a.txt", a), ("b.txt", replace_line(&b, 11, "drifted"))];
    let run = differential(&target, &diff);
    assert_eq!(run.tree, None);
    assert_ne!(crate::code(&run.out), 0);
    assert!(crate::stderr(&run.out).contains("b.txt, hunk 1"));
    // pinforge_apply checked HEAD and status; the first file's bytes are the target's too.
    assert_eq!(
        std::fs::read(run.repo.join("a.txt")).expect("read"),
        numbered("a", 20)
    );
}

// issue #7 class 6: a raw Latin-1 byte in a header field is an error at file:line, never a
// panic, and nothing is applied.
#[test]
fn a_latin1_byte_in_description_exits_2_with_file_and_line() {
    let a = numbered("a", 10);
    let diff = make_diff(&[("a.txt", a.clone())], |d| {
        std::fs::write(d.join("a.txt"), replace_line(&a, 5, "A")).expect("write");
    });
    let patch = [
        HEADER
            .replace("Subject: [PATCH] test change\n", "")
            .as_bytes(),
        &diff,
    ]
    .concat();
    let patch = [b"Description: Gr\xfc\xdfe aus K\xf6ln\n".as_slice(), &patch].concat();
    let run = pinforge_apply(&[("a.txt", a)], &patch);
    assert_eq!(crate::code(&run.out), 2, "{}", crate::stderr(&run.out));
    let err = crate::stderr(&run.out);
    assert!(err.contains("0001-t.patch:1:"), "{err}");
    assert!(err.contains("not UTF-8"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // lint says the same, at the same line
    let b = run.repo.parent().expect("parent").join("bundle");
    let lint = crate::pinforge(&b, &["patch", "lint", "0001-t.patch"]);
    assert_eq!(crate::code(&lint), 2);
    assert!(
        crate::stdout(&lint).contains("0001-t.patch:1:"),
        "{}",
        crate::stdout(&lint)
    );
}

/// A commit by `name` with `subject` and `body` on `base`, as `git format-patch` writes it,
/// with an attribution added at the end of the mail header (before its blank line).
fn format_patch_mail(dir: &Path, base: &Files, name: &str, subject: &str, body: &str) -> String {
    let up = dir.join("up");
    repo_at(&up, base);
    let (path, content) = &base[0];
    std::fs::write(up.join(path), replace_line(content, 12, "fixed")).expect("write");
    git(&up, &["add", "-A"]);
    let mut commit = git_cmd(&up);
    commit
        .env("GIT_AUTHOR_NAME", name)
        .env("GIT_AUTHOR_EMAIL", "author@example.invalid")
        .env("GIT_AUTHOR_DATE", "1771000000 +0100")
        .args(["commit", "-q", "-m", subject]);
    if !body.is_empty() {
        commit.args(["-m", body]);
    }
    assert!(commit.status().expect("commit").success());
    let mail = git(&up, &["format-patch", "-1", "--stdout"]);
    let mail_text = String::from_utf8(mail).expect("format-patch writes UTF-8");
    let end = mail_text.find("\n\n").expect("header end");
    format!(
        "{}\nUpstream-Status: Backport [https://example.invalid/o/r/commit/abcdef1]\nUpstream-Commit: abcdef1\nOrigin: https://example.invalid/o/r/commit/abcdef1{}",
        &mail_text[..end],
        &mail_text[end..]
    )
}

/// `git am` of `patch` in one checkout of `base`, `pinforge patch apply` in another: the same
/// author name, e-mail and date, the same tree, and pinforge's message is git am's plus one
/// last paragraph of trailers. Returns pinforge's author name.
fn am_and_pinforge_agree(dir: &Path, base: &Files, patch: &str) -> Result<String, String> {
    let am = dir.join("am");
    repo_at(&am, base);
    let mbox = dir.join("mail.patch");
    std::fs::write(&mbox, patch).expect("write");
    git(&am, &["am", "-q", mbox.to_str().expect("utf8")]);
    // The message exactly as stored in the commit object (`%B` adds a newline of its own).
    let raw_message = |repo: &Path| {
        let c = String::from_utf8(git(repo, &["cat-file", "commit", "HEAD"])).expect("utf8");
        c.split_once("\n\n").expect("message").1.to_string()
    };
    let show = |repo: &Path, fmt: &str| {
        String::from_utf8(git(repo, &["log", "-1", &format!("--format={fmt}")])).expect("utf8")
    };
    let run = pinforge_apply(base, patch.as_bytes());
    if crate::code(&run.out) != 0 {
        return Err(format!("pinforge refused: {}", crate::stderr(&run.out)));
    }
    for fmt in ["%an", "%ae", "%ad", "%T"] {
        let (ours, theirs) = (show(&run.repo, fmt), show(&am, fmt));
        if ours != theirs {
            return Err(format!("{fmt}: pinforge {ours:?}, git am {theirs:?}"));
        }
    }
    let ours = raw_message(&run.repo);
    let theirs = raw_message(&am);
    let cut = ours
        .trim_end()
        .rfind("\n\n")
        .ok_or("no trailer paragraph")?;
    if format!("{}\n", &ours[..cut]) != theirs {
        return Err(format!("message: pinforge {ours:?}, git am {theirs:?}"));
    }
    if !ours[cut..].contains("\nPinforge-Patch: 0001-t.patch\n")
        || !ours[cut..].contains("\nUpstream-Commit: abcdef1\n")
    {
        return Err(format!("trailers missing: {ours:?}"));
    }
    Ok(show(&run.repo, "%an"))
}

// issue #13 item 2: a `git format-patch` file with a non-ASCII author and subject gives the
// commit `git am` gives: same author name, e-mail, date and message.
#[test]
fn format_patch_with_encoded_author_and_subject_commits_what_git_am_commits() {
    let d = tempfile::tempdir().expect("tempdir");
    let base = [("src/gäß.c", numbered("c", 30))];
    let patch = format_patch_mail(
        d.path(),
        &base,
        "Johannes Gäßler",
        "ggml: größere Puffer für M-RoPE-Positionen, damit die Wiederherstellung nicht überläuft",
        "Der Körper der Nachricht, mit Umlauten: äöü.\n\nZweiter Absatz.",
    );
    assert!(
        patch.contains("From: =?UTF-8?q?Johannes=20G=C3=A4=C3=9Fler?="),
        "{patch}"
    );
    assert!(patch.contains("Subject: [PATCH] =?UTF-8?q?"), "{patch}");
    // The long encoded subject is folded over several lines.
    let subject_at = patch.find("\nSubject: ").expect("subject");
    assert!(
        patch[subject_at + 1..]
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(' ')),
        "{patch}"
    );
    let name = am_and_pinforge_agree(d.path(), &base, &patch).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "Johannes Gäßler\n");
}

// issue #13 item 2: random names and subjects (non-ASCII, quotes, commas, brackets, long enough
// to fold) decode to what `git am` decodes.
#[test]
fn random_authors_and_subjects_decode_as_git_am_decodes() {
    const NAMES: &[&str] = &[
        "Johannes",
        "Gäßler",
        "Ørsted",
        "José",
        "O'Brien",
        "Zoë",
        "Dvořák",
        "李四",
        "van",
        "Müller-Lüdenscheidt",
        "Jr.",
        "Doe,",
        "\"Q\"",
        "Ann",
    ];
    const WORDS: &[&str] = &[
        "ggml:",
        "größere",
        "Puffer",
        "für",
        "M-RoPE",
        "naïve",
        "fix",
        "crash",
        "in",
        "kv-cache",
        "über",
        "€uro",
        "(b7992)",
        "a=b",
        "?=",
        "=?",
        "_x_",
        "\"q\"",
    ];
    let cases: u32 = std::env::var("PINFORGE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(|n: u32| n / 8)
        .unwrap_or(32)
        .max(1);
    let words = |v: &'static [&'static str], r: std::ops::Range<usize>| {
        prop::collection::vec(prop::sample::select(v), r).prop_map(|w| w.join(" "))
    };
    let strategy = (
        words(NAMES, 1..4),
        prop::option::of(prop::sample::select(
            &["[wip] ", "Re: ", "[RFC PATCH 2/3] "][..],
        )),
        words(WORDS, 1..16),
        prop::collection::vec(words(WORDS, 1..12), 0..3),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let started = std::time::Instant::now();
    let result = runner.run(&strategy, |(name, prefix, subject, paragraphs)| {
        let d = tempfile::tempdir().expect("tempdir");
        let base = [("a.c", numbered("c", 30))];
        let subject = format!("{}{subject}", prefix.unwrap_or(""));
        let patch = format_patch_mail(d.path(), &base, &name, &subject, &paragraphs.join("\n\n"));
        let agreed = am_and_pinforge_agree(d.path(), &base, &patch);
        prop_assert!(
            agreed.is_ok(),
            "{}\n{patch}",
            agreed.err().unwrap_or_default()
        );
        Ok(())
    });
    eprintln!(
        "git am property: {cases} cases in {:.1?}",
        started.elapsed()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

// issue #13: the shipped bundle, written against llama-cpp-sys-2 0.1.135, applies there with
// zero offsets, as `git apply` applies it (the llama.cpp/ folder of the cached crate).
#[test]
fn shipped_bundle_applies_to_llama_cpp_sys_2_0_1_135_with_zero_offsets() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let cache = home.join("registry/cache");
    let krate = std::fs::read_dir(&cache)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("llama-cpp-sys-2-0.1.135.crate"))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "llama-cpp-sys-2 0.1.135 is not in {}; hint: `cargo fetch` a throwaway \
                 project that depends on `llama-cpp-sys-2 = \"=0.1.135\"`",
                cache.display()
            )
        });
    let d = tempfile::tempdir().expect("tempdir");
    let tree = d.path().join("llama.cpp");
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&krate).expect("open crate"));
    let mut ar = tar::Archive::new(gz);
    for entry in ar.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let path = entry.path().expect("path").into_owned();
        let Ok(rel) = path.strip_prefix("llama-cpp-sys-2-0.1.135/llama.cpp") else {
            continue;
        };
        if entry.header().entry_type().is_file() && !rel.as_os_str().is_empty() {
            let dest = tree.join(rel);
            std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            entry.unpack(&dest).expect("unpack");
        }
    }
    repo_at(&tree, &[]);
    let reference = d.path().join("reference");
    git(d.path(), &["clone", "-q", "llama.cpp", "reference"]);

    let patches = crate::repo_root().join("patches");
    let o = crate::pinforge(
        d.path(),
        &[
            "patch",
            "apply",
            tree.to_str().expect("utf8"),
            "--dir",
            patches.to_str().expect("utf8"),
        ],
    );
    assert_eq!(crate::code(&o), 0, "{}", crate::stderr(&o));
    assert!(
        !crate::stderr(&o).contains("note:"),
        "{}",
        crate::stderr(&o)
    );
    let log = String::from_utf8(git(&tree, &["log", "--format=%B", "-3"])).expect("utf8");
    assert_eq!(log.matches("Pinforge-Patch: ").count(), 3, "{log}");
    assert!(!log.contains("Pinforge-Hunk-Offset"), "{log}");
    // git apply of the same three files, in series order, gives the same tree.
    let series = std::fs::read_to_string(patches.join("series")).expect("series");
    for name in series
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let p = patches.join(name.split_whitespace().next().expect("name"));
        git(&reference, &["apply", "--index", p.to_str().expect("utf8")]);
    }
    assert_eq!(
        text(&git(&reference, &["write-tree"])),
        text(&git(&tree, &["rev-parse", "HEAD^{tree}"]))
    );
}

// ---------------------------------------------------------------------------------------------
// Property: random files, random edits made into a patch by real `git diff`, random lines
// inserted or removed above, between and inside hunks of the target: pinforge and `git apply`
// agree on every case (same tree, or both refuse and pinforge leaves the checkout untouched).

/// Lines from a small alphabet so that contexts repeat (the nearest-first rule matters).
fn line_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u8..6).prop_map(|i| format!("common {i}")),
        3 => (0u32..1000).prop_map(|i| format!("unique {i}")),
        1 => Just(String::new()),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// Replace the line at this fraction of the file.
    Replace(f64, String),
    /// Insert lines before this fraction.
    Insert(f64, Vec<String>),
    /// Remove this many lines from this fraction.
    Remove(f64, usize),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0.0..1.0f64, line_strategy()).prop_map(|(f, l)| Op::Replace(f, l)),
        (0.0..1.0f64, prop::collection::vec(line_strategy(), 1..4))
            .prop_map(|(f, l)| Op::Insert(f, l)),
        (0.0..1.0f64, 1usize..4).prop_map(|(f, n)| Op::Remove(f, n)),
    ]
}

/// Upstream drift: mostly lines inserted or removed (hunks move), sometimes a line edited.
fn drift_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0.0..1.0f64, line_strategy()).prop_map(|(f, l)| Op::Replace(f, l)),
        4 => (0.0..1.0f64, prop::collection::vec(line_strategy(), 1..12))
            .prop_map(|(f, l)| Op::Insert(f, l)),
        3 => (0.0..1.0f64, 1usize..8).prop_map(|(f, n)| Op::Remove(f, n)),
    ]
}

fn apply_ops(lines: &[String], ops: &[Op]) -> Vec<String> {
    let mut out = lines.to_vec();
    for op in ops {
        let at = |f: f64, len: usize| ((f * len as f64) as usize).min(len);
        match op {
            Op::Replace(f, l) => {
                if !out.is_empty() {
                    let i = at(*f, out.len()).min(out.len() - 1);
                    out[i] = l.clone();
                }
            }
            Op::Insert(f, ls) => {
                let i = at(*f, out.len());
                out.splice(i..i, ls.iter().cloned());
            }
            Op::Remove(f, n) => {
                let i = at(*f, out.len());
                let j = (i + n).min(out.len());
                out.drain(i..j);
            }
        }
    }
    out
}

fn join(lines: &[String], final_newline: bool) -> Vec<u8> {
    let mut s = lines.join("\n");
    if final_newline && !lines.is_empty() {
        s.push('\n');
    }
    s.into_bytes()
}

/// One random case: base file, edits that make the patch, drift of the target, and whether
/// each side ends in a newline.
fn case_strategy() -> impl Strategy<Value = (Vec<String>, Vec<Op>, Vec<Op>, bool, bool)> {
    (
        prop::collection::vec(line_strategy(), 1..120),
        prop::collection::vec(op_strategy(), 1..4),
        prop::collection::vec(drift_strategy(), 0..5),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
    )
}

// issue #13 item 1, issue #7 class 6
#[test]
fn pinforge_and_git_apply_agree_on_random_edits_over_drifted_targets() {
    let cases: u32 = std::env::var("PINFORGE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let stats = std::cell::RefCell::new([0usize; 4]); // same tree, moved, both refuse, run
    let started = std::time::Instant::now();
    let result = runner.run(
        &case_strategy(),
        |(base, edits, drift, base_nl, edit_nl)| {
            let edited = apply_ops(&base, &edits);
            let base_bytes = join(&base, base_nl);
            let edited_bytes = join(&edited, edit_nl);
            prop_assume!(edited_bytes != base_bytes);
            let diff = make_diff(&[("f.txt", base_bytes.clone())], |d| {
                std::fs::write(d.join("f.txt"), &edited_bytes).expect("write");
            });
            let target = join(&apply_ops(&base, &drift), base_nl);
            let want = git_apply_tree(&[("f.txt", target.clone())], &diff);
            let run = pinforge_apply(&[("f.txt", target)], &with_header(&diff));
            prop_assert_eq!(
                &run.tree,
                &want,
                "diff:\n{}\npinforge: {}",
                String::from_utf8_lossy(&diff),
                crate::stderr(&run.out)
            );
            prop_assert!(!crate::stderr(&run.out).contains("panicked"));
            let mut s = stats.borrow_mut();
            s[3] += 1;
            match (&run.tree, notes(&run).is_empty()) {
                (Some(_), true) => s[0] += 1,
                (Some(_), false) => s[1] += 1,
                (None, _) => s[2] += 1,
            }
            Ok(())
        },
    );
    let s = *stats.borrow();
    eprintln!(
        "differential property: {} cases in {:.1?}: {} same tree at the stated lines, {} same tree with moved hunks, {} refused by both",
        s[3],
        started.elapsed(),
        s[0],
        s[1],
        s[2]
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator must reach every outcome, or the property proves little.
    assert!(s[0] > 0 && s[1] > 0 && s[2] > 0, "{s:?}");
}

// issue #13 item 1: `build` applies a moved hunk too, and the manifest's record of the patch
// keeps the offset next to the vendor commit whose trailer says the same.
#[test]
fn build_applies_a_moved_hunk_and_the_manifest_records_its_offset() {
    let t = crate::Tiny::new();
    // The hunk claims line 3; its context is at line 1 of tiny.c (git apply: offset -2).
    let moved = crate::TINY_PATCH.replace("@@ -1,4 +1,4 @@", "@@ -3,4 +3,4 @@");
    std::fs::write(t.ws.join("patches/0001-tiny-return-2.patch"), moved).expect("write");
    let o = t.build("patched");
    assert_eq!(crate::code(&o), 0, "{}", crate::stderr(&o));
    assert!(
        crate::stderr(&o).contains(
            "note patch 0001-tiny-return-2.patch hunk 1 of tiny.c applied at offset -2: the patch is due a refresh"
        ),
        "{}",
        crate::stderr(&o)
    );
    let j = crate::json(&o);
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(j["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let patch = deps
        .iter()
        .find(|d| d["name"] == "patch:0001-tiny-return-2.patch")
        .expect("patch resource");
    assert_eq!(
        patch["annotations"]["hunk_offsets"],
        serde_json::json!(["tiny.c#1 -2"]),
        "{patch}"
    );
    let tree = j["source_tree"].as_str().expect("source_tree");
    assert!(head_message(Path::new(tree)).contains("\nPinforge-Hunk-Offset: tiny.c#1 -2\n"));
}
