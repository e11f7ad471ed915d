//! Rebase under kills, races and hostile input (issue #19 classes 1-4 and the rebase part of
//! 2): a real upstream git history (v1, v2 where one patch is merged and the other's context
//! moved, v3 one commit later), a real workspace, real SIGKILLs at every step of the commit
//! protocol and at random moments, and two rebases racing onto different pins. After the next
//! command the recipe, its lock and the bundle are always all old or all new, byte for byte.

use crate::audit::{patch, put, src};
use crate::{code, pinforge, pinforge_cmd, stderr};
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

struct Up {
    _dir: tempfile::TempDir,
    upstream: PathBuf,
    template: PathBuf,
}

impl Up {
    fn new() -> Up {
        let dir = tempfile::tempdir().expect("tempdir");
        let upstream = dir.path().join("upstream");
        let repo = Repository::init(&upstream).expect("init");
        let cmake =
            "cmake_minimum_required(VERSION 3.14)\nproject(up C)\nadd_library(up SHARED a.c b.c)\n";
        let v1 = put(
            &repo,
            &[
                ("a.c".into(), src("a", 0, 1, 0, 0, 9)),
                ("b.c".into(), src("b", 0, 1, 0, 0, 9)),
                ("CMakeLists.txt".into(), cmake.into()),
            ],
            "v1",
        );
        let tag = |name: &str, oid: git2::Oid| {
            repo.tag_lightweight(name, &repo.find_object(oid, None).expect("obj"), false)
                .expect("tag");
        };
        tag("v1", v1);
        // a: the patch's own upstream commit (a backport of it: merged, dropped by itself).
        let fix_a = put(
            &repo,
            &[("a.c".into(), src("a", 0, 2, 0, 0, 9))],
            "a: value 2 (#101)",
        );
        // b: lines inserted above the patch: only its position moves (refreshed).
        let v2 = put(
            &repo,
            &[("b.c".into(), src("b", 5, 1, 0, 0, 9))],
            "b: a license header",
        );
        tag("v2", v2);
        let v3 = put(&repo, &[("README".into(), "later\n".into())], "v3");
        tag("v3", v3);

        let ws = dir.path().join("template");
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
        let short = &fix_a.to_string()[..9];
        let a = patch(
            "a",
            101,
            &format!("Upstream-Status: Backport [{short}]\nUpstream-Commit: {short}\n"),
        );
        let b = patch(
            "b",
            102,
            "Upstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/up/issues/102\n",
        );
        std::fs::write(ws.join("patches/0001-a.patch"), a).expect("write");
        std::fs::write(ws.join("patches/0002-b.patch"), b).expect("write");
        std::fs::write(
            ws.join("patches/series"),
            "# the bundle\n0001-a.patch\n0002-b.patch\n",
        )
        .expect("series");
        // A header with a comment and comments elsewhere (issue #19 class 3): all kept.
        std::fs::write(
            ws.join(RECIPE),
            format!(
                "# up, pinned for the rebase tests\nname = \"up\"\ndefault-variant = \"patched\"\n\n[pin]  # the upstream tree\nkind = \"git\"\nurl = \"{}\"\ntag = \"v1\"\ncommit = \"{v1}\"\n\n# the CPU toolchain\n[toolchain.cpu]\ncc = \"gcc\"  # the system compiler\ncxx = \"g++\"\ncmake-version = \">=3.24\"\n[base]\ntoolchain = \"cpu\"\ntargets = [\"up\"]\n[variants.patched]\n",
                upstream.display()
            ),
        )
        .expect("recipe");
        // Materialize both trees once (vendor/ is copied with the template).
        let o = pinforge(&ws, &["audit", RECIPE, "--onto", &onto(&upstream, "v3")]);
        assert!(code(&o) <= 1, "{}", stderr(&o));
        Up {
            _dir: dir,
            upstream,
            template: ws,
        }
    }

    fn onto(&self, tag: &str) -> String {
        onto(&self.upstream, tag)
    }

    /// A fresh workspace: a copy of the template.
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

    /// The state after `rebases` run one after the other in a fresh copy.
    fn after(&self, rebases: &[&str]) -> State {
        let d = self.copy();
        for tag in rebases {
            let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &self.onto(tag)]);
            assert_eq!(code(&o), 0, "{}", stderr(&o));
        }
        State::of(d.path())
    }
}

fn onto(upstream: &Path, tag: &str) -> String {
    format!("git:{}@{tag}", upstream.display())
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
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
            for e in std::fs::read_dir(dir).expect("read") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    walk(root, &p, out);
                } else {
                    let rel = p.strip_prefix(root).expect("rel").display().to_string();
                    out.insert(rel, std::fs::read_to_string(&p).expect("read"));
                }
            }
        }
        let mut bundle = BTreeMap::new();
        walk(&ws.join("patches"), &ws.join("patches"), &mut bundle);
        State {
            recipe: std::fs::read_to_string(ws.join(RECIPE)).expect("recipe"),
            lock: std::fs::read_to_string(ws.join("recipes/up.lock")).ok(),
            bundle,
        }
    }

    /// The commit the recipe pins.
    fn commit(&self) -> String {
        let v: toml::Value = toml::from_str(&self.recipe).expect("recipe toml");
        v["pin"]["commit"].as_str().expect("commit").to_string()
    }
}

/// Nothing of a rebase is left: no journal, no stage.
fn no_leftovers(ws: &Path) {
    let left: Vec<String> = std::fs::read_dir(ws)
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".rebase-") || n == ".pinforge-rebase.json")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The next command after a kill: each of these settles a leftover rebase first.
fn next_command(up: &Up, ws: &Path, i: u32) -> std::process::Output {
    let v2 = up.onto("v2");
    let args: Vec<&str> = match i % 3 {
        0 => vec!["patch", "lint"],
        1 => vec!["audit", RECIPE, "--onto", &v2],
        _ => vec!["build", RECIPE, "--variant", "nope"],
    };
    pinforge(ws, &args)
}

// issue #19 class 1: a SIGKILL after every step of the protocol; the next command (patch,
// audit, build, or a rebase) leaves all old before the commit point and all new after it, and
// repairs the stage folder.
#[test]
fn a_rebase_killed_at_every_step_is_all_old_or_all_new_after_the_next_command() {
    let up = Up::new();
    let old = State::of(&up.template);
    let new = up.after(&["v2"]);
    assert_ne!(old.commit(), new.commit());
    assert!(
        new.recipe
            .contains("[pin]  # the upstream tree\n# Moved from"),
        "{}",
        new.recipe
    );
    for kept in [
        "# up, pinned",
        "# the CPU toolchain",
        "cc = \"gcc\"  # the system compiler",
    ] {
        assert!(new.recipe.contains(kept), "{kept}: {}", new.recipe);
    }
    assert!(
        new.bundle.contains_key("dropped/0001-a.patch"),
        "{:?}",
        new.bundle.keys()
    );
    for n in 1..=STEPS {
        let d = up.copy();
        let o = pinforge_cmd(d.path())
            .args(["rebase", RECIPE, "--onto", &up.onto("v2")])
            .env("PINFORGE_CRASH_AT", format!("rebase:{n}"))
            .output()
            .expect("run");
        assert_eq!(o.status.signal(), Some(9), "step {n}: {}", stderr(&o));
        assert!(
            d.path().join(".pinforge-rebase.json").exists() || n == STEPS,
            "step {n}"
        );
        assert_eq!(
            d.path().join(".rebase-patches").exists(),
            (2..=6).contains(&n),
            "step {n}"
        );
        let o = next_command(&up, d.path(), n);
        assert!(code(&o) <= 2, "step {n}: {}", stderr(&o));
        if (1..STEPS).contains(&n) {
            assert!(
                stderr(&o).contains("interrupted rebase"),
                "step {n}: {}",
                stderr(&o)
            );
        }
        let expected = if n >= 6 { &new } else { &old };
        assert_eq!(&State::of(d.path()), expected, "step {n}");
        no_leftovers(d.path());
        // And a rebase right after the kill settles it, then rebases: all new.
        let d = up.copy();
        let o = pinforge_cmd(d.path())
            .args(["rebase", RECIPE, "--onto", &up.onto("v2")])
            .env("PINFORGE_CRASH_AT", format!("rebase:{n}"))
            .output()
            .expect("run");
        assert_eq!(o.status.signal(), Some(9), "step {n}");
        let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &up.onto("v2")]);
        assert_eq!(code(&o), 0, "step {n}: {}", stderr(&o));
        let mut got = State::of(d.path());
        if n >= 6 {
            // The second rebase moved the recipe again (onto the same pin): only its note changed.
            got.recipe = new.recipe.clone();
        }
        assert_eq!(got, new, "step {n}");
        no_leftovers(d.path());
    }
}

/// A small deterministic generator (the seed is printed, so a failure can be replayed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below.max(1)
    }
}

// issue #19 class 1: kills at random moments of a real rebase.
#[test]
fn random_kills_of_a_rebase_leave_all_old_or_all_new() {
    let up = Up::new();
    let old = State::of(&up.template);
    let new = up.after(&["v2"]);
    let d = up.copy();
    let t = std::time::Instant::now();
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &up.onto("v2")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let full = t.elapsed().as_millis() as u64;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_nanos() as u64;
    eprintln!("random kills: seed {seed}, a whole rebase takes {full} ms");
    let mut rng = Lcg(seed);
    let (mut saw_old, mut saw_new) = (0, 0);
    for i in 0..12 {
        let d = up.copy();
        let mut child = pinforge_cmd(d.path())
            .args(["rebase", RECIPE, "--onto", &up.onto("v2")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let delay = rng.next(full + full / 4);
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let o = next_command(&up, d.path(), i);
        assert!(code(&o) <= 2, "kill {i} at {delay} ms: {}", stderr(&o));
        let got = State::of(d.path());
        if got == old {
            saw_old += 1;
        } else if got == new {
            saw_new += 1;
        } else {
            panic!("kill {i} at {delay} ms (seed {seed}): neither all old nor all new: {got:#?}");
        }
        no_leftovers(d.path());
    }
    eprintln!("random kills: {saw_old} all old, {saw_new} all new");
}

// issue #19 class 1: two rebases onto different pins at once: the lock is held from the
// first read to the last write, so the result is one rebase after the other, never a recipe on
// one pin with the bundle of the other.
#[test]
fn concurrent_rebases_onto_two_pins_leave_one_pin_whole() {
    let up = Up::new();
    let outcomes = [
        (vec!["v2"], up.after(&["v2"])),
        (vec!["v3"], up.after(&["v3"])),
        (vec!["v2", "v3"], up.after(&["v2", "v3"])),
        (vec!["v3", "v2"], up.after(&["v3", "v2"])),
    ];
    assert_ne!(
        outcomes[1].1.bundle, outcomes[2].1.bundle,
        "the ledgers tell them apart"
    );
    for round in 0..3 {
        let d = up.copy();
        let spawn = |tag: &str| {
            pinforge_cmd(d.path())
                .args(["rebase", RECIPE, "--onto", &up.onto(tag)])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        };
        let (a, b) = (spawn("v2"), spawn("v3"));
        let (a, b) = (
            a.wait_with_output().expect("a"),
            b.wait_with_output().expect("b"),
        );
        let got = State::of(d.path());
        let (ca, cb) = (code(&a), code(&b));
        let allowed: Vec<&Vec<&str>> = outcomes
            .iter()
            .filter(|(seq, _)| match (ca, cb) {
                (0, 0) => seq.len() == 2,
                (0, _) => *seq == ["v2"],
                (_, 0) => *seq == ["v3"],
                _ => false,
            })
            .map(|(seq, _)| seq)
            .collect();
        let matched = outcomes.iter().find(|(_, s)| *s == got).map(|(seq, _)| seq);
        assert!(
            matched.is_some_and(|m| allowed.contains(&m)),
            "round {round}: exits {ca} {cb} ({} / {}), state matches {matched:?}: {got:#?}",
            stderr(&a),
            stderr(&b)
        );
        no_leftovers(d.path());
    }
}

// issue #19 class 2: `--onto`, `--drop` and `--keep` values become recipe values and header
// lines: a control character is refused with exit 2 naming the flag, before anything is read.
#[test]
fn control_characters_in_onto_drop_and_keep_are_refused_naming_the_flag() {
    let up = Up::new();
    let d = up.copy();
    let before = State::of(d.path());
    // The example, with a real folder of that name so that only the rule refuses it.
    let dir = d.path().join("x/up\nbuild-commit = \"injected\" #");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("a.c"), "int a;\n").expect("write");
    let spec = format!("dir:{}", dir.display());
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &spec]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: --onto: "), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("\nbuild-commit"),
        "shown escaped: {}",
        stderr(&o)
    );
    let o = pinforge(
        d.path(),
        &[
            "rebase",
            RECIPE,
            "--onto",
            &up.onto("v2"),
            "--drop",
            "0002-b.patch\nApplied-Upstream: forged",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: --drop: "), "{}", stderr(&o));
    // The class: every C0 control, DEL, a C1 control and the Trojan Source set, anywhere in
    // the value.
    let mut chars: Vec<char> = (1u32..0x20)
        .chain([0x7f, 0x85, 0x9b])
        .filter_map(char::from_u32)
        .collect();
    chars.extend([
        '\u{200b}', '\u{200f}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{feff}',
    ]);
    for c in chars {
        let v2 = up.onto("v2");
        for (flag, value) in [
            ("--onto", format!("{v2}{c}")),
            ("--onto", v2.replacen("git:", &format!("git:{c}"), 1)),
            ("--drop", format!("0002{c}-b.patch")),
            ("--keep", format!("{c}0002-b.patch")),
        ] {
            let mut args = vec!["rebase", RECIPE];
            if flag != "--onto" {
                args.extend(["--onto", v2.as_str()]);
            }
            args.extend([flag, value.as_str()]);
            let o = pinforge(d.path(), &args);
            assert_eq!(code(&o), 2, "{flag} U+{:04X}: {}", c as u32, stderr(&o));
            assert!(
                stderr(&o).starts_with(&format!("error: {flag}: ")),
                "{flag} U+{:04X}: {}",
                c as u32,
                stderr(&o)
            );
        }
    }
    assert_eq!(State::of(d.path()), before, "nothing written");
    no_leftovers(d.path());
}

// issue #19 class 4: a hand-edited ledger that is not a ledger is refused (exit 2, its line
// named) before anything is appended; nothing is written.
#[test]
fn a_broken_hand_edited_ledger_is_refused_naming_its_line_and_nothing_is_written() {
    let up = Up::new();
    let d = up.copy();
    let ledger = "# pinforge ledger\n\n[[dropped]]\nfile = \"0000-z.patch\"\nsha256 = 7\n";
    std::fs::write(d.path().join("patches/ledger.toml"), ledger).expect("write");
    let before = State::of(d.path());
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &up.onto("v2")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("ledger.toml:5:"), "{}", stderr(&o));
    assert_eq!(State::of(d.path()), before);
    no_leftovers(d.path());
    std::fs::write(d.path().join("patches/ledger.toml"), "[[dropped]\n").expect("write");
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &up.onto("v2")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("ledger.toml:1:"), "{}", stderr(&o));
    no_leftovers(d.path());
}

// issue #19 class 4: an earlier `dropped/FILE` keeps its bytes; the new drop of a patch with
// that name is kept under a name of its own digest, which its ledger entry names.
#[test]
fn an_older_dropped_copy_is_never_overwritten_and_the_new_one_is_named_by_its_digest() {
    let up = Up::new();
    let d = up.copy();
    let p = d.path().join("patches");
    std::fs::create_dir_all(p.join("dropped")).expect("mkdir");
    let older = "an older patch of the same name\n";
    std::fs::write(p.join("dropped/0001-a.patch"), older).expect("write");
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &up.onto("v2")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(p.join("dropped/0001-a.patch")).expect("read"),
        older
    );
    let ledger: toml::Value =
        toml::from_str(&std::fs::read_to_string(p.join("ledger.toml")).expect("ledger"))
            .expect("toml");
    let kept = ledger["dropped"][0]["kept-as"]
        .as_str()
        .expect("kept-as")
        .to_string();
    assert!(
        kept.starts_with("dropped/0001-a.")
            && kept.ends_with(".patch")
            && kept != "dropped/0001-a.patch",
        "{kept}"
    );
    let bytes = std::fs::read_to_string(p.join(&kept)).expect("kept copy");
    assert!(bytes.contains("Applied-Upstream: "), "{bytes}");
}

// issue #19 class 1: a stage folder no journal names (a pinforge from before the journal left
// it) may hold the only copy of a bundle: refused, named, and kept.
#[test]
fn an_unjournaled_stage_folder_is_refused_and_kept() {
    let up = Up::new();
    let d = up.copy();
    let stale = d.path().join(".rebase-Xy12ab");
    std::fs::create_dir_all(stale.join("bundle")).expect("mkdir");
    std::fs::write(stale.join("bundle/series"), "0001-a.patch\n").expect("write");
    let before = State::of(d.path());
    let o = pinforge(d.path(), &["rebase", RECIPE, "--onto", &up.onto("v2")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains(".rebase-Xy12ab"), "{}", stderr(&o));
    assert!(stale.join("bundle/series").exists());
    assert_eq!(State::of(d.path()), before);
}

// issue #19 class 1: a journal that names paths its recipe does not derive is refused.
#[test]
fn a_forged_journal_is_refused_and_nothing_it_names_is_touched() {
    let up = Up::new();
    let d = up.copy();
    let victim = d.path().join("elsewhere");
    std::fs::create_dir_all(&victim).expect("mkdir");
    std::fs::write(victim.join("keep"), "mine\n").expect("write");
    let digest = "0".repeat(64);
    let journal = serde_json::json!({
        "phase": "staging",
        "recipe": d.path().join(RECIPE),
        "lock": null,
        "bundle": victim.join("b"),
        "stage": victim.join(".rebase-b"),
        "old-recipe": digest, "new-recipe": null, "old-lock": null, "new-lock": null,
        "old-bundle": digest, "new-bundle": null,
    });
    std::fs::create_dir_all(victim.join(".rebase-b")).expect("mkdir");
    std::fs::write(d.path().join(".pinforge-rebase.json"), journal.to_string()).expect("write");
    let o = pinforge(d.path(), &["patch", "lint"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("journal is refused"), "{}", stderr(&o));
    assert!(
        victim.join(".rebase-b").exists(),
        "a path the recipe does not name is never removed"
    );
}
