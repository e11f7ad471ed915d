//! Issue #19 class 5: `patch export` and `patch bundle` under hostile and careless input.
//! Trailer names that are not patch files of a series, a stale note after `git commit
//! --amend`, binary changes, the pristine tree, a write failing midway, a DEP-3 patch that is
//! no mail, and an mbox written over the bundle it is made from. Real git repositories, the
//! real `git apply` and `git am`, real failing writes (a file-size limit, a FIFO).

use crate::{code, in_test_env, json, pinforge, stderr, stdout, Tiny, TINY_PATCH};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Op")
        .env("GIT_AUTHOR_EMAIL", "op@example.invalid")
        .env("GIT_COMMITTER_NAME", "Op")
        .env("GIT_COMMITTER_EMAIL", "op@example.invalid")
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The attribution trailers that make a hand-made commit export lint-clean.
const ATTRIBUTION: &str =
    "Upstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/r/issues/1\nReported-by: someone";

/// Every file under `dir` with its bytes: "left as it was" means this is unchanged.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).expect("prefix").to_path_buf();
            if p.is_dir() {
                out.push((rel, Vec::new()));
                walk(root, &p, out);
            } else {
                out.push((rel, std::fs::read(&p).expect("read")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Hidden staging folders left beside `dir` (a failed export must leave none).
fn stages_beside(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.parent().expect("parent"))
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // The writer stages beside the bundle as `.pinforge-bundle-<pid>-<name>`.
        .filter(|n| n.starts_with(".pinforge-bundle-"))
        .collect()
}

/// A checkout with a base commit (returned) and a bundle folder beside it holding one
/// exported-looking patch, a series with a comment, a ledger and a dropped patch.
struct Checkout {
    _dir: tempfile::TempDir,
    root: PathBuf,
    co: PathBuf,
    bundle: PathBuf,
    base: String,
}

impl Checkout {
    fn new() -> Checkout {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let co = root.join("co");
        std::fs::create_dir(&co).expect("mkdir");
        git(&co, &["init", "-q"]);
        std::fs::write(co.join("x.c"), "int x;\n").expect("write");
        git(&co, &["add", "x.c"]);
        git(&co, &["commit", "-qm", "base"]);
        let base = git(&co, &["rev-parse", "HEAD"]);
        let bundle = root.join("patches");
        std::fs::create_dir_all(bundle.join("dropped")).expect("mkdir");
        std::fs::write(bundle.join("series"), "# kept comment\nold.patch\n").expect("write");
        std::fs::write(bundle.join("old.patch"), TINY_PATCH).expect("write");
        std::fs::write(
            bundle.join("ledger.toml"),
            "[[dropped]]\nfile = \"gone.patch\"\n",
        )
        .expect("write");
        std::fs::write(bundle.join("dropped/gone.patch"), TINY_PATCH).expect("write");
        Checkout {
            _dir: dir,
            root,
            co,
            bundle,
            base,
        }
    }

    /// Commit `content` as `file` with `message`.
    fn commit(&self, file: &str, content: &[u8], message: &str) {
        let path = self.co.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, content).expect("write");
        git(&self.co, &["add", "-A"]);
        git(&self.co, &["commit", "-qm", message]);
    }

    fn export_args(&self) -> Vec<String> {
        vec![
            "patch".into(),
            "export".into(),
            self.co.display().to_string(),
            "--base".into(),
            self.base.clone(),
            "--dir".into(),
            self.bundle.display().to_string(),
        ]
    }

    fn export(&self, extra: &[&str]) -> Output {
        let mut args = self.export_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pinforge(&self.root, &args)
    }
}

// Item 1, the examples: a trailer naming the ledger, the series, or a name the series
// reader splits is refused with exit 2 naming the commit, and the bundle is untouched.
#[test]
fn export_refuses_trailer_names_that_are_not_patch_files_of_the_series() {
    for name in [
        "ledger.toml",
        "series",
        "0001 fix b.patch",
        "dropped",
        "0001-x.patch # c",
    ] {
        let c = Checkout::new();
        c.commit(
            "x.c",
            b"int x = 1;\n",
            &format!("x: one\n\n{ATTRIBUTION}\nPinforge-Patch: {name}"),
        );
        let before = snapshot(&c.bundle);
        let o = c.export(&[]);
        assert_eq!(code(&o), 2, "{name}: {}", stderr(&o));
        let err = stderr(&o);
        let head = git(&c.co, &["rev-parse", "HEAD"]);
        assert!(
            err.contains(&head) && err.contains("Pinforge-Patch") && err.contains("hint:"),
            "{name}: {err}"
        );
        assert_eq!(
            snapshot(&c.bundle),
            before,
            "{name}: the bundle is untouched"
        );
    }
}

// Item 1, as a class through the real command: random trailer names either export into a
// bundle that `patch list` loads with exactly that file in its series, or are refused with
// exit 2 leaving the bundle as it was.
#[test]
fn random_trailer_names_export_loadable_bundles_or_are_refused() {
    // Split at runtime so that rustfmt keeps the list on a few lines.
    let pieces: Vec<&str> = "series|ledger.toml|dropped|.patch|.diff| |\t|#|/|..|\u{1b}[1m|\u{202e}|-p1|0001-fix|b|_|.|\u{e9}"
        .split('|')
        .collect();
    // A fixed LCG: the same names on every run, different ones per case.
    let mut seed: u64 = 0x5eed_1900_0005;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let c = Checkout::new();
    c.commit("x.c", b"int x = 1;\n", "x: placeholder");
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..40 {
        let mut name: String = (0..1 + next(4))
            .map(|_| pieces[next(pieces.len())])
            .collect();
        if next(2) == 0 {
            name.push_str(".patch");
        }
        git(
            &c.co,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "--amend",
                "-m",
                &format!("x: case {case}\n\n{ATTRIBUTION}\nPinforge-Patch: {name}"),
            ],
        );
        let trailer = git(&c.co, &["log", "-1", "--format=%B"]);
        let Some(written) = trailer
            .lines()
            .find_map(|l| l.strip_prefix("Pinforge-Patch: "))
            .map(str::trim)
        else {
            continue; // git itself folded the name away (a newline): nothing to test
        };
        let before = snapshot(&c.bundle);
        let o = c.export(&[]);
        match code(&o) {
            0 => {
                accepted += 1;
                assert!(written.ends_with(".patch"), "{written:?}");
                let l = pinforge(
                    &c.root,
                    &[
                        "patch",
                        "list",
                        "--dir",
                        c.bundle.to_str().expect("utf8"),
                        "--json",
                    ],
                );
                assert_eq!(code(&l), 0, "{written:?}: {}", stderr(&l));
                let files: Vec<String> = json(&l)["patches"]
                    .as_array()
                    .expect("rows")
                    .iter()
                    .map(|r| r["file"].as_str().expect("file").to_string())
                    .collect();
                assert_eq!(files, vec![written.to_string()], "{written:?}");
                assert!(c.bundle.join("ledger.toml").is_file(), "{written:?}");
            }
            2 => {
                refused += 1;
                assert_eq!(snapshot(&c.bundle), before, "{written:?}: untouched");
            }
            other => panic!("{written:?}: exit {other}: {}", stderr(&o)),
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

// Item 2: after `git commit --amend` with the note copied on rewrite, the trailer and the note
// still agree with each other, but the note no longer makes the commit: the edit is exported.
#[test]
fn an_amended_commit_exports_its_edit_not_the_stale_note() {
    let t = Tiny::new();
    let co = t.ws.join("co");
    git(
        &t.ws,
        &["clone", "-q", t.upstream.to_str().expect("utf8"), "co"],
    );
    git(&co, &["checkout", "-q", &t.v1.to_string()]);
    let o = pinforge(&t.ws, &["patch", "apply", co.to_str().expect("utf8")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = t.ws.join("exported");
    let export = || {
        pinforge(
            &t.ws,
            &[
                "patch",
                "export",
                co.to_str().expect("utf8"),
                "--base",
                &t.v1.to_string(),
                "--dir",
                out.to_str().expect("utf8"),
                "--json",
            ],
        )
    };
    // Untouched: the note makes the commit, so the file comes back byte for byte.
    let o = export();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["patches"][0]["from"], "note");
    let name = "0001-tiny-return-2.patch";
    assert_eq!(
        std::fs::read_to_string(out.join(name)).expect("exported"),
        TINY_PATCH
    );

    git(
        &co,
        &["config", "notes.rewriteRef", "refs/notes/pinforge-patch"],
    );
    // A message-only amend (a credit edited in the trailers) is an edit too.
    let msg = git(&co, &["log", "-1", "--format=%B"]);
    assert!(msg.contains("Reported-by: someone\n"), "{msg}");
    let msg_file = t.ws.join("msg");
    std::fs::write(
        &msg_file,
        msg.replace("Reported-by: someone\n", "Reported-by: someone-else\n"),
    )
    .expect("write");
    git(
        &co,
        &[
            "commit",
            "-q",
            "--amend",
            "-F",
            msg_file.to_str().expect("utf8"),
        ],
    );
    let o = export();
    let j = json(&o);
    assert_eq!(j["patches"][0]["from"], "commit", "{j}");
    let text = std::fs::read_to_string(out.join(name)).expect("exported");
    assert!(text.contains("Reported-by: someone-else"), "{text}");
    let c = std::fs::read_to_string(co.join("tiny.c")).expect("read");
    std::fs::write(co.join("tiny.c"), c.replace("return 2;", "return 3;")).expect("write");
    git(&co, &["commit", "-q", "-a", "--amend", "--no-edit"]);
    // The premise: git copied the note, and the trailers still name its digest.
    let note = git(&co, &["notes", "--ref", "pinforge-patch", "show", "HEAD"]);
    assert!(note.contains("+    return 2;"), "{note}");
    let o = export();
    let j = json(&o);
    assert_eq!(j["patches"][0]["from"], "commit", "{j}");
    assert_eq!(j["patches"][0]["file"], name, "the trailer keeps the name");
    let text = std::fs::read_to_string(out.join(name)).expect("exported");
    assert!(
        text.contains("+    return 3;") && !text.contains("+    return 2;"),
        "{text}"
    );
    assert!(text.contains("Upstream-Status: Pending"), "{text}");
    // And it is a patch git applies onto the base.
    let fresh = t.ws.join("fresh");
    git(
        &t.ws,
        &["clone", "-q", t.upstream.to_str().expect("utf8"), "fresh"],
    );
    git(&fresh, &["checkout", "-q", &t.v1.to_string()]);
    git(&fresh, &["apply", out.join(name).to_str().expect("utf8")]);
    assert!(std::fs::read_to_string(fresh.join("tiny.c"))
        .expect("read")
        .contains("return 3;"));
}

// Item 3: a binary change (a new binary file and a changed one) is exported as a git binary
// diff; the real `git apply` recreates both files byte for byte, and nothing reads
// `Binary files … differ`.
#[test]
fn a_binary_change_exports_as_a_git_binary_diff_that_git_apply_applies() {
    let c = Checkout::new();
    let blob = |seed: u8| -> Vec<u8> {
        (0..600u32)
            .map(|i| (i as u8).wrapping_mul(seed) ^ (i >> 3) as u8)
            .collect()
    };
    // The changed file exists in the base already.
    std::fs::write(c.co.join("model.bin"), blob(7)).expect("write");
    git(&c.co, &["add", "model.bin"]);
    git(&c.co, &["commit", "-qm", "base 2"]);
    let base = git(&c.co, &["rev-parse", "HEAD"]);
    std::fs::write(c.co.join("model.bin"), blob(13)).expect("write");
    c.commit(
        "data/new.bin",
        &[0u8, 1, 2, 255, 0, 10, 13, 0],
        &format!("data: binary fixtures\n\n{ATTRIBUTION}"),
    );
    let mut args = c.export_args();
    args[4] = base.clone();
    args.push("--json".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = pinforge(&c.root, &args);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let j = json(&o);
    assert_eq!(j["errors"], 0, "{j}");
    let file = c
        .bundle
        .join(j["patches"][0]["file"].as_str().expect("file"));
    let bytes = std::fs::read(&file).expect("exported");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("GIT binary patch"), "{text}");
    assert!(!text.contains("Binary files "), "{text}");

    let fresh = c.root.join("fresh");
    git(
        &c.root,
        &["clone", "-q", c.co.to_str().expect("utf8"), "fresh"],
    );
    git(&fresh, &["checkout", "-q", &base]);
    git(&fresh, &["apply", file.to_str().expect("utf8")]);
    assert_eq!(
        std::fs::read(fresh.join("model.bin")).expect("read"),
        blob(13)
    );
    assert_eq!(
        std::fs::read(fresh.join("data/new.bin")).expect("read"),
        [0u8, 1, 2, 255, 0, 10, 13, 0]
    );
}

// Item 4: the pristine vendor tree (HEAD on its pristine tag, its patched twin beside it) is
// refused with exit 2 and a hint naming the twin; the bundle is untouched. `--allow-empty`
// writes the empty series on request; a checkout with no commit above `--base` is refused too.
#[test]
fn export_of_the_pristine_tree_is_refused_unless_asked() {
    let c = Checkout::new();
    let vendor = c.root.join("vendor");
    std::fs::create_dir(&vendor).expect("mkdir");
    let pristine = vendor.join("tree-0123abcd");
    git(
        &c.root,
        &[
            "clone",
            "-q",
            c.co.to_str().expect("utf8"),
            pristine.to_str().expect("utf8"),
        ],
    );
    git(&pristine, &["tag", "pinforge/pristine"]);
    let twin = vendor.join("tree-0123abcd+4567");
    git(
        &c.root,
        &[
            "clone",
            "-q",
            pristine.to_str().expect("utf8"),
            twin.to_str().expect("utf8"),
        ],
    );
    let before = snapshot(&c.bundle);
    let dir = c.bundle.to_str().expect("utf8");
    let o = pinforge(
        &c.root,
        &[
            "patch",
            "export",
            pristine.to_str().expect("utf8"),
            "--dir",
            dir,
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no commit above") && err.contains("tree-0123abcd+4567"),
        "{err}"
    );
    assert!(err.contains("--allow-empty"), "{err}");
    assert_eq!(snapshot(&c.bundle), before, "the series is not wiped");

    // A plain checkout with nothing above --base.
    let o = c.export(&[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("commit the changes"), "{}", stderr(&o));
    assert_eq!(snapshot(&c.bundle), before);

    // Asked for: the series keeps its comments and lists nothing; the rest of the bundle stays.
    let o = pinforge(
        &c.root,
        &[
            "patch",
            "export",
            pristine.to_str().expect("utf8"),
            "--dir",
            dir,
            "--allow-empty",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(c.bundle.join("series")).expect("series"),
        "# kept comment\n"
    );
    assert!(
        c.bundle.join("ledger.toml").is_file() && c.bundle.join("dropped/gone.patch").is_file()
    );
}

/// `pinforge ARGS` in `ws` under a file-size limit of `kib` KiB with SIGXFSZ ignored, so a
/// write past the limit fails with EFBIG, the way a full disk fails it.
fn pinforge_with_file_limit(ws: &Path, kib: u64, args: &[String]) -> Output {
    let script = format!("trap '' XFSZ; ulimit -f {}; exec \"$0\" \"$@\"", kib * 2);
    in_test_env("sh", ws)
        .arg("-c")
        .arg(script)
        .arg(crate::pinforge_exe())
        .args(args)
        .output()
        .expect("run sh")
}

// Item 5: the bundle is staged whole and swapped once. A write that fails midway (the third of
// four patches is larger than the file-size limit) and a FIFO among the bundle's files (met
// midway through the copy) both leave the old bundle byte for byte, and no stage behind.
#[test]
fn a_failed_write_midway_leaves_the_old_bundle_intact() {
    let c = Checkout::new();
    c.commit("a.c", b"int a;\n", &format!("a: one\n\n{ATTRIBUTION}"));
    let o = c.export(&[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let before = snapshot(&c.bundle);
    assert!(before.iter().any(|(p, _)| p.ends_with("0001-a-one.patch")));

    c.commit("b.c", b"int b;\n", &format!("b: two\n\n{ATTRIBUTION}"));
    let big: String = (0..6000).map(|i| format!("int v{i} = {i};\n")).collect();
    c.commit(
        "big.c",
        big.as_bytes(),
        &format!("big: three\n\n{ATTRIBUTION}"),
    );
    c.commit("d.c", b"int d;\n", &format!("d: four\n\n{ATTRIBUTION}"));
    let o = pinforge_with_file_limit(&c.root, 32, &c.export_args());
    assert_ne!(code(&o), 0, "the big write must fail: {}", stdout(&o));
    assert!(
        stderr(&o).contains("0003-big-three.patch"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot(&c.bundle), before, "the old bundle, byte for byte");
    assert!(
        stages_beside(&c.bundle).is_empty(),
        "{:?}",
        stages_beside(&c.bundle)
    );

    // Without the limit the same export goes through whole.
    let fifo = c.bundle.join("zz-queue");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.map(|s| s.success()).unwrap_or(false) {
        let before = snapshot_without(&c.bundle, &fifo);
        let o = c.export(&[]);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains("zz-queue"), "{}", stderr(&o));
        assert_eq!(snapshot_without(&c.bundle, &fifo), before);
        assert!(stages_beside(&c.bundle).is_empty());
        std::fs::remove_file(&fifo).expect("rm fifo");
    } else {
        crate::skip("mkfifo is not available");
    }
    // The swap keeps the folders' modes (a private bundle stays private).
    chmod(&c.bundle, 0o700);
    chmod(&c.bundle.join("dropped"), 0o750);
    let o = c.export(&[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(mode(&c.bundle), 0o700);
    assert_eq!(mode(&c.bundle.join("dropped")), 0o750);
    let series = std::fs::read_to_string(c.bundle.join("series")).expect("series");
    assert_eq!(
        series,
        "# kept comment\n0001-a-one.patch\n0002-b-two.patch\n0003-big-three.patch\n0004-d-four.patch\n"
    );
    assert!(
        c.bundle.join("ledger.toml").is_file() && c.bundle.join("dropped/gone.patch").is_file()
    );
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

fn chmod(p: &Path, m: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
}

/// [`snapshot`] of a folder holding a FIFO, which is listed but never read.
fn snapshot_without(dir: &Path, skip: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p == skip {
            out.push((p, b"fifo".to_vec()));
        } else if p.is_file() {
            out.push((p.clone(), std::fs::read(&p).expect("read")));
        }
    }
    out.sort();
    out
}

/// TINY_PATCH as plain DEP-3: no `From:`, `Date:` or `Subject:`, so not a mail.
fn dep3_only(extra: &str) -> String {
    let mut text = String::new();
    for l in TINY_PATCH.lines() {
        if !(l.starts_with("From: ") || l.starts_with("Date: ") || l.starts_with("Subject: ")) {
            text.push_str(l);
            text.push('\n');
        }
        if l.starts_with("Description: ") {
            text.push_str(" It is the value the tests expect.\n");
            text.push_str(extra);
        }
    }
    text
}

/// `git am` of `mbox` onto a fresh clone of the tiny upstream at v1; the clone.
fn git_am(t: &Tiny, name: &str, mbox: &Path) -> PathBuf {
    let clone = t.ws.join(name);
    git(
        &t.ws,
        &["clone", "-q", t.upstream.to_str().expect("utf8"), name],
    );
    git(&clone, &["checkout", "-q", &t.v1.to_string()]);
    git(&clone, &["am", "-q", mbox.to_str().expect("utf8")]);
    clone
}

// Item 6: a lint-clean DEP-3 patch without mail headers bundles into an mbox that the real
// `git am` applies, with the author, date and subject `patch apply` gives the commit (its
// pinforge ident when the patch names only handles, its `Author:` when it has one).
#[test]
fn a_dep3_patch_without_mail_headers_bundles_into_an_mbox_git_am_applies() {
    for (case, extra, who) in [
        ("handles", "", "pinforge <pinforge@pinforge.invalid>"),
        (
            "author",
            "Author: Dep Three <dep3@example.invalid>\n",
            "Dep Three <dep3@example.invalid>",
        ),
    ] {
        let t = Tiny::new();
        let patch = t.ws.join("patches/0001-tiny-return-2.patch");
        std::fs::write(&patch, dep3_only(extra)).expect("write");
        let o = pinforge(&t.ws, &["patch", "lint"]);
        assert_eq!(code(&o), 0, "{case}: lint-clean: {}", stdout(&o));
        let mbox = t.ws.join("tiny.mbox");
        let o = pinforge(
            &t.ws,
            &["patch", "bundle", "-o", mbox.to_str().expect("utf8")],
        );
        assert_eq!(code(&o), 0, "{case}: {}", stderr(&o));
        let am = git_am(&t, "am", &mbox);

        let applied = t.ws.join("applied");
        git(
            &t.ws,
            &["clone", "-q", t.upstream.to_str().expect("utf8"), "applied"],
        );
        git(&applied, &["checkout", "-q", &t.v1.to_string()]);
        let o = pinforge(&t.ws, &["patch", "apply", applied.to_str().expect("utf8")]);
        assert_eq!(code(&o), 0, "{case}: {}", stderr(&o));
        let facts = |repo: &Path| git(repo, &["log", "-1", "--format=%an <%ae>%n%aD%n%s%n%T"]);
        let (a, b) = (facts(&am), facts(&applied));
        assert_eq!(a, b, "{case}: git am and patch apply agree");
        assert!(a.starts_with(who), "{case}: {a}");
        assert!(a.contains("tiny_value() must return 2."), "{case}: {a}");
    }
}

// Item 7: `patch bundle -o` onto a file of the bundle it reads is refused whatever the
// spelling (`./`, `..`, a symlink, a hard link, a file the bundle reader would own), and the
// bundle is untouched; an output outside it is written and `git am` applies it.
#[test]
fn bundle_refuses_an_output_that_is_a_file_of_the_bundle() {
    let t = Tiny::new();
    let p = t.ws.join("patches");
    std::fs::write(p.join("ledger.toml"), "").expect("write");
    std::fs::create_dir(p.join("dropped")).expect("mkdir");
    std::fs::write(p.join("dropped/old.patch"), TINY_PATCH).expect("write");
    std::os::unix::fs::symlink(p.join("series"), t.ws.join("link.mbox")).expect("symlink");
    std::fs::hard_link(p.join("0001-tiny-return-2.patch"), t.ws.join("hard.mbox")).expect("link");
    let before = snapshot(&p);
    for out in [
        "patches/series",
        "patches/./series",
        "recipes/../patches/0001-tiny-return-2.patch",
        "patches/ledger.toml",
        "patches/dropped/old.patch",
        "patches/dropped/new.mbox",
        "patches/0002-new.patch",
        "patches",
        "link.mbox",
        "hard.mbox",
    ] {
        let o = pinforge(&t.ws, &["patch", "bundle", "-o", out]);
        assert_eq!(code(&o), 2, "{out}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("bundle being read"),
            "{out}: {}",
            stderr(&o)
        );
        assert_eq!(snapshot(&p), before, "{out}: the bundle is untouched");
    }
    let o = pinforge(&t.ws, &["patch", "bundle", "-o", "fixes.mbox"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let clone = git_am(&t, "am", &t.ws.join("fixes.mbox"));
    assert!(std::fs::read_to_string(clone.join("tiny.c"))
        .expect("read")
        .contains("return 2;"));
}
