//! The install root against a hostile or careless world: paths from data, damaged entries and state, special files, modes, races, and the corruption campaign.
//!
//! Every test here runs the real `pinforge` binary on real temp folders with synthetic builds
//! (files written by the test, manifests naming them), so no CMake build is needed.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// A command that runs longer than this is a hang.
const HANG: Duration = Duration::from_secs(20);

pub(crate) fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One artifact of a synthetic build.
pub(crate) struct Art<'a> {
    pub(crate) name: &'a str,
    pub(crate) bytes: Vec<u8>,
    pub(crate) mode: u32,
}

pub(crate) fn art(name: &str, size: usize, mode: u32) -> Art<'_> {
    let seed = name
        .bytes()
        .fold(7u32, |a, b| a.wrapping_mul(31).wrapping_add(b as u32));
    Art {
        name,
        bytes: (0..size)
            .map(|i| ((i as u32).wrapping_mul(seed) % 251) as u8)
            .collect(),
        mode,
    }
}

/// A temp workspace with an install root and a folder of victims outside it.
pub(crate) struct Fx {
    dir: tempfile::TempDir,
    pub(crate) ws: PathBuf,
    pub(crate) root: PathBuf,
}

impl Fx {
    pub(crate) fn new() -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        let root = ws.join("rollback");
        Fx { dir, ws, root }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write the artifacts and a manifest for them under `builds/<name>/`; `edit` may change
    /// the manifest (a hostile one) before it is written.
    pub(crate) fn build_with(
        &self,
        name: &str,
        arts: &[Art],
        links: &[(&str, &str)],
        edit: impl FnOnce(&mut Value),
    ) -> PathBuf {
        let base = self.path().join("builds").join(name);
        let out = base.join("out");
        let mut subjects = Vec::new();
        for a in arts {
            let p = out.join(a.name);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, &a.bytes).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(a.mode)).expect("chmod");
            subjects.push(
                json!({"name": a.name, "digest": {"sha256": sha_hex(&a.bytes)},
                "annotations": {"size": a.bytes.len()}}),
            );
        }
        std::fs::create_dir_all(&out).expect("mkdir");
        let mut byproducts: Vec<Value> = links
            .iter()
            .map(|(n, t)| json!({"name": n, "annotations": {"link_target": t}}))
            .collect();
        for (n, t) in links {
            let p = out.join(n);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            let _ = std::os::unix::fs::symlink(t, &p);
        }
        byproducts.push(json!({"name": "build.log", "digest": {"sha256": sha_hex(b"")}}));
        let mut m = json!({
            "_type": "https://in-toto.io/Statement/v1",
            "predicateType": "https://slsa.dev/provenance/v1",
            "subject": subjects,
            "predicate": {
                "buildDefinition": {
                    "buildType": "https://pinforge.invalid/cmake-variant/v1",
                    "externalParameters": {"recipe": "synthetic", "variant": name,
                        "build_type": "Release", "targets": [], "cmake_args": [], "patches": []},
                    "internalParameters": {"artifact_root": "out", "inputs": {},
                        "input_digest": "0000000000000000000000000000000000000000000000000000000000000000"},
                    "resolvedDependencies": []
                },
                "runDetails": {"builder": {"id": "test"}, "metadata": {"invocationId": "x",
                    "startedOn": "", "finishedOn": ""}, "byproducts": byproducts}
            }
        });
        edit(&mut m);
        let path = base.join("manifest.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
        path
    }

    /// The usual shape: a shared library (0755), its soname link, a header (0644).
    pub(crate) fn build(&self, name: &str) -> PathBuf {
        let lib = format!("lib/lib{name}.so");
        let h = format!("include/{name}.h");
        self.build_with(
            name,
            &[art(&lib, 3000, 0o755), art(&h, 200, 0o644)],
            &[("lib/libx.so.1", &format!("lib{name}.so"))],
            |_| {},
        )
    }

    pub(crate) fn run_in(&self, root: &Path, args: &[&str]) -> Output {
        let mut c = crate::pinforge_cmd(&self.ws);
        c.args(args).arg("--root").arg(root);
        run_timeout(c, HANG).unwrap_or_else(|| panic!("pinforge {args:?} hung (> {HANG:?})"))
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.run_in(&self.root, args)
    }

    pub(crate) fn install(&self, manifest: &Path, layer: &str) -> Output {
        self.run(&[
            "install",
            manifest.to_str().expect("utf8"),
            "--layer",
            layer,
            "--json",
        ])
    }

    pub(crate) fn ok(&self, o: Output) -> Output {
        assert_eq!(
            crate::code(&o),
            0,
            "{}{}",
            crate::stdout(&o),
            crate::stderr(&o)
        );
        o
    }

    pub(crate) fn status(&self) -> Value {
        crate::json(&self.ok(self.run(&["status", "--json"])))
    }

    pub(crate) fn digest(&self, layer: &str) -> String {
        self.status()["layers"][layer]["digest"]
            .as_str()
            .expect("digest")
            .to_string()
    }

    /// The store entry a layer shows, through the link chain consumers follow (control and
    /// original entries are `store/<digest>.own`).
    pub(crate) fn entry(&self, layer: &str) -> PathBuf {
        let e = std::fs::canonicalize(self.root.join(layer)).expect("the layer's entry");
        assert!(
            e.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&self.digest(layer))),
            "{layer} shows {}",
            e.display()
        );
        e
    }
}

/// Run with a deadline; `None` means it had to be killed (a hang).
fn run_timeout(mut c: std::process::Command, limit: Duration) -> Option<Output> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return Some(child.wait_with_output().expect("output"));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn code(o: &Output) -> i32 {
    crate::code(o)
}

fn err(o: &Output) -> String {
    crate::stderr(o)
}

/// Make a path's parent writable so the test can change what is inside a sealed entry even
/// when it does not run as root.
fn unseal(p: &Path) {
    if let Some(parent) = p.parent() {
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
    }
    if std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink()) {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    }
}

fn mkfifo(p: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .expect("mkfifo");
    assert!(ok.success());
}

/// Remove a tree whose folders may be sealed 0555 (links are removed, never followed).
fn remove_all(p: &Path) {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return;
    };
    if m.is_dir() {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
        for e in std::fs::read_dir(p).expect("ls").flatten() {
            remove_all(&e.path());
        }
        std::fs::remove_dir(p).expect("rmdir");
    } else {
        std::fs::remove_file(p).expect("rm");
    }
}

/// Every path under `dir` (links not followed) with its kind, mode, link count and content
/// (or link target): what "left as it was" means for victims.
fn snapshot(dir: &Path, skip: &[&Path]) -> BTreeMap<PathBuf, String> {
    fn walk(p: &Path, skip: &[&Path], out: &mut BTreeMap<PathBuf, String>) {
        if skip.contains(&p) {
            return;
        }
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return;
        };
        let t = m.file_type();
        let what = if t.is_symlink() {
            format!("link {:?}", std::fs::read_link(p).ok())
        } else if t.is_dir() {
            "dir".to_string()
        } else if t.is_file() {
            format!("file {}", sha_hex(&std::fs::read(p).unwrap_or_default()))
        } else {
            "special".to_string()
        };
        out.insert(
            p.to_path_buf(),
            format!("{what} mode {:o} nlink {}", m.mode() & 0o7777, m.nlink()),
        );
        if t.is_dir() {
            for e in std::fs::read_dir(p).expect("ls").flatten() {
                walk(&e.path(), skip, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, skip, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Class 1: paths from data.

/// issue #7 class 1: a journal's `staging` is a path from data; absolute or `../` values must
/// not delete anything outside the root, and a journal whose generations equal the committed
/// one must not delete the committed generation.
#[test]
fn issue_7_class_1_journal_paths_and_generations_never_reach_outside_or_the_committed_state() {
    let fx = Fx::new();
    let a = fx.build("a");
    let b = fx.build("b");
    fx.ok(fx.install(&a, "live"));
    let victim = fx.path().join("victim");
    std::fs::create_dir_all(victim.join("sub")).expect("mkdir");
    std::fs::write(victim.join("sub/keep"), "keep").expect("write");
    let committed = fx.status()["gen"].as_u64().expect("gen");
    let journal = |staging: Value, from: u64, to: u64| {
        json!({"txid": 99, "op": "install", "from_gen": from, "to_gen": to,
            "staging": staging, "entry": null, "entry_preexisted": false,
            "phase": "staging", "layer": "live"})
    };
    let rel = format!("../{}", "../".repeat(fx.root.components().count()));
    let cases = [
        journal(
            json!(victim.display().to_string()),
            committed,
            committed + 1,
        ),
        journal(
            json!(format!("{rel}{}", victim.display())),
            committed,
            committed + 1,
        ),
        journal(json!("../victim"), committed, committed + 1),
        journal(json!(null), committed, committed),
        journal(json!(null), committed - 1, committed),
    ];
    for j in cases {
        std::fs::write(fx.root.join("journal.json"), j.to_string()).expect("journal");
        for args in [
            vec!["install", b.to_str().expect("utf8"), "--layer", "control"],
            vec!["gc"],
            vec!["rollback", "--to", "live"],
        ] {
            let o = fx.run(&args);
            assert_eq!(code(&o), 2, "{j} {args:?}: {}", err(&o));
            assert!(err(&o).contains("journal"), "{}", err(&o));
        }
        assert_eq!(
            std::fs::read_to_string(victim.join("sub/keep")).expect("victim"),
            "keep"
        );
        assert!(fx.root.join("gens").join(committed.to_string()).is_dir());
        assert!(fx
            .root
            .join(format!("gens/{committed}/state.json"))
            .is_file());
        assert_eq!(
            std::fs::read_link(fx.root.join("state")).expect("state"),
            PathBuf::from(format!("gens/{committed}")),
            "{j}"
        );
    }
    std::fs::remove_file(fx.root.join("journal.json")).expect("rm");
    fx.ok(fx.run(&["verify", "--installed"]));
}

/// issue #7 class 1: a manifest's `artifact_root` (absolute, `../..`, through a link) and its
/// subject paths are refused before anything is linked, copied or chmod-ed.
#[test]
fn issue_7_class_1_manifest_roots_outside_the_build_are_refused_and_host_files_keep_their_modes() {
    let fx = Fx::new();
    let host = fx.path().join("host");
    std::fs::create_dir_all(&host).expect("mkdir");
    let victim = host.join("passwd");
    std::fs::write(&victim, "root:x:0:0\n").expect("write");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let sha = sha_hex(b"root:x:0:0\n");
    let before = snapshot(&host, &[]);
    let base = fx.path().join("builds/evil");
    std::fs::create_dir_all(&base).expect("mkdir");
    std::os::unix::fs::symlink(&host, base.join("linked")).expect("link");
    let up = "../".repeat(base.components().count());
    for root in [
        host.display().to_string(),
        format!("{up}{}", host.display().to_string().trim_start_matches('/')),
        "../../host".to_string(),
        "linked".to_string(),
        ".".to_string(),
    ] {
        let m = fx.build_with("evil", &[], &[], |m| {
            m["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"] = json!(root);
            m["subject"] =
                json!([{"name": "passwd", "digest": {"sha256": sha}, "annotations": {"size": 11}}]);
        });
        let o = fx.install(&m, "live");
        assert_eq!(code(&o), 2, "artifact_root {root}: {}", err(&o));
    }
    for name in ["../../host/passwd", "/etc/passwd", "a/../passwd"] {
        let m = fx.build_with("evil2", &[], &[], |m| {
            m["subject"] =
                json!([{"name": name, "digest": {"sha256": sha}, "annotations": {"size": 11}}]);
        });
        let o = fx.install(&m, "live");
        assert_eq!(code(&o), 2, "subject {name}: {}", err(&o));
    }
    assert_eq!(
        snapshot(&host, &[]),
        before,
        "host files untouched (content, mode, links)"
    );
    let entries: Vec<_> = std::fs::read_dir(fx.root.join("store"))
        .map(|rd| rd.flatten().collect())
        .unwrap_or_default();
    assert!(entries.is_empty(), "nothing entered the store");
}

/// issue #7 class 1: link artifacts with absolute or escaping targets (directly, or through
/// earlier links), and a path through a link (`zz -> ../outside`, then `zz/file`), are refused;
/// nothing is created outside the root.
#[test]
fn issue_7_class_1_escaping_links_and_paths_through_links_are_refused() {
    let fx = Fx::new();
    let outside = fx.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    type Case<'a> = (Vec<Art<'a>>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (vec![art("a", 10, 0o644)], vec![("l", "/etc/passwd")]),
        (vec![art("a", 10, 0o644)], vec![("lib/l", "../../outside")]),
        (
            vec![art("a", 10, 0o644)],
            vec![("d", "."), ("e", "d/d/d/../../..")],
        ),
        (vec![art("zz/file", 10, 0o644)], vec![("zz", "../outside")]),
        (
            vec![art("a", 10, 0o644)],
            vec![("zz", "../outside"), ("zz/file", "x")],
        ),
        (vec![art("a", 10, 0o644)], vec![("a", "b")]),
    ];
    let before = snapshot(&outside, &[]);
    for (i, (arts, links)) in cases.iter().enumerate() {
        // The build folder holds real files only; the manifest lists the hostile links.
        let m = fx.build_with(&format!("l{i}"), arts, &[], |m| {
            let mut b: Vec<Value> = links
                .iter()
                .map(|(n, t)| json!({"name": n, "annotations": {"link_target": t}}))
                .collect();
            b.push(json!({"name": "build.log"}));
            m["predicate"]["runDetails"]["byproducts"] = json!(b);
        });
        let o = fx.install(&m, "live");
        assert_eq!(code(&o), 2, "case {i} {links:?}: {}", err(&o));
    }
    assert_eq!(
        snapshot(&outside, &[]),
        before,
        "nothing created outside the root"
    );
    // A link that stays inside installs and verifies.
    let ok = fx.build_with(
        "inside",
        &[art("lib/libx.so.1.0", 100, 0o755)],
        &[("lib/libx.so", "libx.so.1.0"), ("l", "lib/../lib")],
        |_| {},
    );
    fx.ok(fx.install(&ok, "live"));
    fx.ok(fx.run(&["verify", "--installed"]));
}

/// issue #7 class 1 and class 9: a hard-link install must never chmod the build's files
/// through the shared inode: only files already at the sealed mode are linked, the others
/// are copied, and every build file keeps its mode and link count.
#[test]
fn issue_7_class_1_build_files_keep_their_modes_and_only_sealed_modes_are_hard_linked() {
    let fx = Fx::new();
    let m = fx.build_with(
        "modes",
        &[
            art("bin/tool", 100, 0o755),
            art("include/x.h", 100, 0o644),
            art("share/ro.txt", 100, 0o444),
            art("bin/ro-tool", 100, 0o555),
        ],
        &[],
        |_| {},
    );
    let out = m.parent().expect("dir").join("out");
    let before = snapshot(&out, &[]);
    let o = fx.ok(fx.install(&m, "live"));
    let j = crate::json(&o);
    assert_eq!(j["stage_mode"], "copy", "0644/0755 files are copied");
    let after = snapshot(&out, &[]);
    for (p, s) in &before {
        let now = &after[p];
        let name = p.strip_prefix(&out).expect("prefix").display().to_string();
        if name == "share/ro.txt" || name == "bin/ro-tool" {
            // Linked: same mode, two more links (the store's object and the entry's, one
            // inode: issue #22).
            assert_eq!(now.replace("nlink 3", "nlink 1"), *s, "{name}");
        } else {
            assert_eq!(now, s, "{name} keeps mode and link count");
        }
    }
    fx.ok(fx.run(&["verify", "--installed"]));
}

// ---------------------------------------------------------------------------------------------
// Class 2: store entries are not trusted by their own entry.json.

/// issue #7 class 2: a file and entry.json edited to agree, an entry folder replaced by a
/// link to another entry, a file replaced by a link to an identical copy outside, and a
/// chmod all fail verification; re-installing repairs the damage.
#[test]
fn issue_7_class_2_entry_identity_is_recomputed_and_reinstall_repairs() {
    type Damage = fn(&Fx, &Path, &Path);
    let cases: [(&str, Damage); 5] = [
        ("file and entry.json edited to agree", |_, e, _| {
            let f = e.join("include/a.h");
            unseal(&f);
            std::fs::write(&f, "evil").expect("write");
            let rec = e.join("entry.json");
            unseal(&rec);
            let mut v: Value =
                serde_json::from_slice(&std::fs::read(&rec).expect("read")).expect("json");
            v["files"]["include/a.h"]["sha256"] = json!(sha_hex(b"evil"));
            v["files"]["include/a.h"]["size"] = json!(4);
            std::fs::write(&rec, v.to_string()).expect("write");
        }),
        (
            "entry folder replaced by a link to another entry",
            |fx, e, _| {
                let other = fx.entry("control");
                unseal(e);
                remove_all(e);
                std::os::unix::fs::symlink(&other, e).expect("link");
            },
        ),
        (
            "file replaced by a link to an identical copy outside",
            |fx, e, _| {
                let f = e.join("lib/liba.so");
                let copy = fx.path().join("copy.so");
                std::fs::copy(&f, &copy).expect("copy");
                unseal(&f);
                std::fs::remove_file(&f).expect("rm");
                std::os::unix::fs::symlink(&copy, &f).expect("link");
            },
        ),
        ("chmod of a file", |_, e, _| {
            std::fs::set_permissions(
                e.join("include/a.h"),
                std::fs::Permissions::from_mode(0o666),
            )
            .expect("chmod");
        }),
        ("an extra file", |_, e, _| {
            unseal(&e.join("lib/extra"));
            std::fs::write(e.join("lib/extra"), "x").expect("write");
        }),
    ];
    for (what, damage) in cases {
        let fx = Fx::new();
        let a = fx.build("a");
        fx.ok(fx.install(&a, "live"));
        fx.ok(fx.install(&fx.build("b"), "control"));
        let e = fx.entry("live");
        damage(&fx, &e, &a);
        let o = fx.run(&["verify", "--installed"]);
        assert_eq!(
            code(&o),
            1,
            "{what}: verify must fail: {}",
            crate::stdout(&o)
        );
        let o = fx.run(&["status", "--verify", "--json"]);
        assert_eq!(code(&o), 1, "{what}: status --verify must fail");
        assert_eq!(
            crate::json(&o)["layers"]["live"]["verification"],
            "mismatch"
        );
        // Re-installing the same build into the same layer repairs (never exit 0 with the
        // damage still there).
        let o = fx.ok(fx.install(&a, "live"));
        assert_eq!(crate::json(&o)["repaired"], true, "{what}");
        fx.ok(fx.run(&["verify", "--installed"]));
        fx.ok(fx.run(&["verify", "--installed", "control"]));
    }
}

// ---------------------------------------------------------------------------------------------
// Class 3: damaged state never reads as empty.

/// issue #7 class 3: with the `state` link deleted, status says damaged (not "nothing
/// installed") and gc deletes nothing; with garbage in the committed (or an older)
/// generation's state.json, gc refuses with exit 2 and a hint.
#[test]
fn issue_7_class_3_damaged_state_is_refused_and_gc_deletes_nothing() {
    let fx = Fx::new();
    fx.ok(fx.install(&fx.build("a"), "live"));
    fx.ok(fx.install(&fx.build("b"), "live"));
    fx.ok(fx.install(&fx.build("c"), "control"));
    let gen = fx.status()["gen"].as_u64().expect("gen");
    let pristine = fx.path().join("pristine");
    cp_a(&fx.root, &pristine);
    let store_before = snapshot(&fx.root.join("store"), &[]);
    let state_json = format!("gens/{gen}/state.json");
    let old_json = format!("gens/{}/state.json", gen - 1);
    type Damage = Box<dyn Fn(&Path)>;
    let damages: [(&str, Damage); 5] = [
        (
            "state link deleted",
            Box::new(|r| std::fs::remove_file(r.join("state")).expect("rm")),
        ),
        (
            "garbage committed state.json",
            Box::new(move |r| std::fs::write(r.join(&state_json), b"\x00garbage{").expect("write")),
        ),
        (
            "garbage older state.json",
            Box::new(move |r| std::fs::write(r.join(&old_json), b"{\"gen\": 1").expect("write")),
        ),
        (
            "state points at another generation's number",
            Box::new(move |r| {
                std::fs::write(
                    r.join(format!("gens/{gen}/state.json")),
                    json!({"gen": 1, "layers": {}, "current": null, "live_history": []})
                        .to_string(),
                )
                .expect("write")
            }),
        ),
        (
            "state link points outside",
            Box::new(|r| {
                std::fs::remove_file(r.join("state")).expect("rm");
                std::os::unix::fs::symlink("/tmp", r.join("state")).expect("link");
            }),
        ),
    ];
    for (what, damage) in damages {
        remove_all(&fx.root);
        cp_a(&pristine, &fx.root);
        damage(&fx.root);
        for args in [vec!["gc"], vec!["gc", "--dry-run"]] {
            let o = fx.run(&args);
            assert_eq!(
                code(&o),
                2,
                "{what}: {args:?} must refuse: {}",
                crate::stdout(&o)
            );
            assert!(err(&o).contains("hint:"), "{what}: {}", err(&o));
        }
        assert_eq!(
            snapshot(&fx.root.join("store"), &[]),
            store_before,
            "{what}"
        );
        if what != "garbage older state.json" {
            let o = fx.run(&["status"]);
            assert_eq!(code(&o), 2, "{what}: status: {}", crate::stdout(&o));
            assert!(!crate::stdout(&o).contains("nothing installed"), "{what}");
            assert!(err(&o).contains("damaged"), "{what}: {}", err(&o));
        }
    }
}

fn cp_a(from: &Path, to: &Path) {
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(ok.success());
}

/// issue #7 class 3: `gc --dry-run` reports what would go (entries, bytes) and removes
/// nothing; `gc` then removes exactly that and reports the bytes freed.
#[test]
fn issue_7_class_3_gc_dry_run_reports_entries_and_bytes_and_removes_nothing() {
    let fx = Fx::new();
    fx.ok(fx.install(&fx.build("a"), "control"));
    let gone = fx
        .entry("control")
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        gone.ends_with(".own"),
        "control holds files of its own: {gone}"
    );
    fx.ok(fx.install(&fx.build("b"), "control"));
    let before = snapshot(&fx.root, &[]);
    let dry = crate::json(&fx.ok(fx.run(&["gc", "--dry-run", "--json"])));
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["removed_entries"], json!([gone]));
    assert_eq!(
        dry["bytes_freed"].as_u64().map(|b| b > 3000),
        Some(true),
        "{dry}"
    );
    assert_eq!(snapshot(&fx.root, &[]), before, "a dry run changes nothing");
    let real = crate::json(&fx.ok(fx.run(&["gc", "--json"])));
    assert_eq!(real["removed_entries"], dry["removed_entries"]);
    assert_eq!(real["bytes_freed"], dry["bytes_freed"]);
    assert!(!fx.root.join("store").join(&gone).exists());
    fx.ok(fx.run(&["verify", "--installed"]));
}

// ---------------------------------------------------------------------------------------------
// Class 4: special files never hang a command.

/// issue #7 class 4: a FIFO (or a socket) in a store entry, as the journal, the lock, a
/// generation's state or the manifest is refused with exit 2, within the hang limit.
#[test]
fn issue_7_class_4_fifos_and_sockets_in_the_root_are_refused_without_hanging() {
    let fx = Fx::new();
    let a = fx.build("a");
    fx.ok(fx.install(&a, "live"));
    fx.ok(fx.install(&fx.build("b"), "control"));
    let pristine = fx.path().join("pristine");
    cp_a(&fx.root, &pristine);
    let live = fx.digest("live");
    let gen = fx.status()["gen"].as_u64().expect("gen");
    // Expected exit codes of verify --installed, rollback --to live (the damaged layer's
    // pre-check), status --verify, gc
    // (`None`: that command does not read the path, any non-panic answer will do). A special
    // file inside a store entry is a failed check (exit 1, issue #19 class 8: the entry is not
    // what was recorded), one among the root's own records an input error (exit 2).
    let targets: [(String, [Option<i32>; 4]); 5] = [
        (
            format!("store/{live}/include/a.h"),
            [Some(1), None, Some(1), None],
        ),
        (
            format!("store/{live}/entry.json"),
            [Some(1), None, Some(1), None],
        ),
        (
            "journal.json".to_string(),
            [None, Some(2), Some(2), Some(2)],
        ),
        ("lock".to_string(), [None, Some(2), None, Some(2)]),
        (
            format!("gens/{gen}/state.json"),
            [Some(2), Some(2), Some(2), Some(2)],
        ),
    ];
    let mut runs = 0;
    for (t, expect) in &targets {
        for socket in [false, true] {
            remove_all(&fx.root);
            cp_a(&pristine, &fx.root);
            let p = fx.root.join(t);
            unseal(&p);
            let _ = std::fs::remove_file(&p);
            let _listener = if socket {
                // Socket paths are short (SUN_LEN): bind nearby, then move it into place.
                let short = std::env::temp_dir().join(format!("pf-{}.sock", std::process::id()));
                let _ = std::fs::remove_file(&short);
                let l = std::os::unix::net::UnixListener::bind(&short).expect("socket");
                std::fs::rename(&short, &p).expect("move socket");
                Some(l)
            } else {
                mkfifo(&p);
                None
            };
            let kind = if socket { "socket" } else { "FIFO" };
            for (args, want) in [
                vec!["verify", "--installed"],
                vec!["rollback", "--to", "live"],
                vec!["status", "--verify"],
                vec!["gc"],
            ]
            .iter()
            .zip(expect)
            {
                let o = fx.run(args); // panics on a hang
                runs += 1;
                let rc = code(&o);
                assert!(
                    (0..=2).contains(&rc),
                    "{t} ({kind}) {args:?}: exit {rc} {}",
                    err(&o)
                );
                if let Some(w) = want {
                    assert_eq!(rc, *w, "{t} ({kind}) {args:?}: {}", err(&o));
                }
            }
            if t.starts_with("store/") {
                // issue #7 class 2: re-installing replaces the damaged entry.
                let o = fx.ok(fx.install(&a, "live"));
                assert_eq!(crate::json(&o)["repaired"], true, "{t} ({kind})");
                fx.ok(fx.run(&["verify", "--installed"]));
            }
        }
    }
    // A manifest that is a FIFO is refused before it is opened.
    let fifo = fx.path().join("fifo-manifest.json");
    mkfifo(&fifo);
    remove_all(&fx.root);
    cp_a(&pristine, &fx.root);
    let o = fx.run(&["install", fifo.to_str().expect("utf8"), "--layer", "live"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    eprintln!("class 4: {runs} command runs on special files, none hung");
}

// ---------------------------------------------------------------------------------------------
// Class 9: modes.

/// issue #7 class 9: installed trees are readable by everyone and writable by none (0444
/// files, 0555 executables and folders); state and receipts are 0644.
#[test]
fn issue_7_class_9_installed_trees_are_world_readable_and_read_only() {
    let fx = Fx::new();
    fx.ok(fx.install(&fx.build("a"), "live"));
    let e = fx.entry("live");
    let modes = snapshot(&e, &[]);
    let mut seen = 0;
    for (p, s) in &modes {
        let rel = p.strip_prefix(&e).expect("prefix").display().to_string();
        let want = if s.starts_with("dir") || rel == "lib/liba.so" {
            Some("mode 555")
        } else if s.starts_with("file") {
            Some("mode 444")
        } else {
            None
        };
        if let Some(w) = want {
            assert!(s.contains(w), "{rel}: {s}, want {w}");
            seen += 1;
        }
    }
    assert!(seen >= 6, "{modes:?}");
    let gen = fx.status()["gen"].as_u64().expect("gen");
    let state = std::fs::metadata(fx.root.join(format!("gens/{gen}/state.json"))).expect("stat");
    assert_eq!(state.mode() & 0o777, 0o644);
    for r in std::fs::read_dir(fx.root.join("receipts"))
        .expect("ls")
        .flatten()
    {
        assert_eq!(
            r.metadata().expect("stat").mode() & 0o777,
            0o644,
            "{:?}",
            r.path()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Class 10: races and loose ends.

/// issue #7 class 10: duplicate subjects (or links) in a manifest are refused at install.
#[test]
fn issue_7_class_10_duplicate_subjects_and_links_are_refused() {
    let fx = Fx::new();
    let dup_subject = fx.build_with("d1", &[art("a", 10, 0o644)], &[], |m| {
        let s = m["subject"][0].clone();
        m["subject"].as_array_mut().expect("array").push(s);
    });
    let dup_link = fx.build_with("d2", &[art("a", 10, 0o644)], &[], |m| {
        m["predicate"]["runDetails"]["byproducts"] = json!([
            {"name": "l", "annotations": {"link_target": "a"}},
            {"name": "l", "annotations": {"link_target": "a"}}
        ]);
    });
    for m in [dup_subject, dup_link] {
        let o = fx.install(&m, "live");
        assert_eq!(code(&o), 2, "{}", err(&o));
        assert!(err(&o).contains("twice"), "{}", err(&o));
    }
}

/// issue #7 class 10: stray receipt names neither wrap the sequence nor make receipts
/// overwrite each other; temp files of killed runs are cleaned at the next locked command.
#[test]
fn issue_7_class_10_stray_receipts_and_temp_files_are_handled() {
    let fx = Fx::new();
    let a = fx.build("a");
    let b = fx.build("b");
    fx.ok(fx.install(&a, "live"));
    let receipts = fx.root.join("receipts");
    for stray in [
        "99999999999999999999-install.json",
        "7-install.json",
        "x-y.json",
    ] {
        std::fs::write(receipts.join(stray), "{}").expect("write");
    }
    fx.ok(fx.install(&b, "live"));
    fx.ok(fx.install(&a, "live"));
    let mut names: Vec<String> = std::fs::read_dir(&receipts)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names.contains(&"000001-install.json".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"000002-install.json".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"000003-install.json".to_string()),
        "{names:?}"
    );
    // The last possible number is refused rather than wrapped to 0.
    std::fs::write(receipts.join("18446744073709551615-install.json"), "{}").expect("write");
    let o = fx.install(&b, "live");
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(err(&o).contains("exhausted"), "{}", err(&o));
    std::fs::remove_file(receipts.join("18446744073709551615-install.json")).expect("rm");
    // Leftover temp files of a killed run go at the next locked command.
    let gen = fx.status()["gen"].as_u64().expect("gen");
    let temps = [
        fx.root.join(".pinforge-tmp-AbC123"),
        receipts.join(".pinforge-tmp-x"),
        fx.root.join(format!("gens/{gen}/.pinforge-tmp-y")),
    ];
    for t in &temps {
        std::fs::write(t, "partial").expect("write");
    }
    fx.ok(fx.run(&["gc"]));
    for t in &temps {
        assert!(!t.exists(), "{} left behind", t.display());
    }
}

/// issue #7 class 10: `status`, `gc`, `verify --installed` and `rollback` on a mistyped
/// path exit 2 and create nothing.
#[test]
fn issue_7_class_10_read_only_commands_never_create_a_root() {
    let fx = Fx::new();
    let typo = fx.path().join("rollbak");
    for args in [
        vec!["status"],
        vec!["status", "--verify"],
        vec!["gc"],
        vec!["gc", "--dry-run"],
        vec!["verify", "--installed"],
        vec!["rollback", "--to", "live"],
    ] {
        let o = fx.run_in(&typo, &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", err(&o));
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }
}

/// issue #7 class 10: `status` says when the verification it shows ran (recorded at
/// install), `status --verify` re-hashes now and sees damage the record cannot.
#[test]
fn issue_7_class_10_status_shows_when_verified_and_verify_rehashes() {
    let fx = Fx::new();
    fx.ok(fx.install(&fx.build("a"), "live"));
    let st = fx.status();
    assert_eq!(st["layers"]["live"]["verification"], "ok");
    assert!(st["layers"]["live"]["verified_at"].is_string(), "{st}");
    assert_eq!(st["verified_now"], false);
    let text = crate::stdout(&fx.ok(fx.run(&["status"])));
    assert!(text.contains("recorded"), "{text}");
    let f = fx.entry("live").join("include/a.h");
    unseal(&f);
    std::fs::write(&f, "tampered").expect("write");
    assert_eq!(
        fx.status()["layers"]["live"]["verification"],
        "ok",
        "the record is old"
    );
    let o = fx.run(&["status", "--verify", "--json"]);
    assert_eq!(code(&o), 1);
    let v = crate::json(&o);
    assert_eq!(v["verified_now"], true);
    assert_eq!(v["layers"]["live"]["verification"], "mismatch");
}

/// issue #7 class 10: `verify --installed` during continuous swaps resolves `current` once
/// and verifies that one entry: never a false mismatch.
#[test]
fn issue_7_class_10_verify_during_continuous_swaps_never_reports_a_false_mismatch() {
    let fx = Fx::new();
    fx.ok(fx.install(&fx.build("a"), "live"));
    fx.ok(fx.install(&fx.build("b"), "control"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let ws = fx.ws.clone();
        let root = fx.root.clone();
        std::thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let to = if swaps % 2 == 0 { "control" } else { "live" };
                let o = crate::pinforge_cmd(&ws)
                    .args(["rollback", "--to", to, "--root"])
                    .arg(&root)
                    .output()
                    .expect("run");
                assert_eq!(crate::code(&o), 0, "{}", crate::stderr(&o));
                swaps += 1;
            }
            swaps
        })
    };
    let mut runs = 0;
    let start = Instant::now();
    while runs < 60 || start.elapsed() < Duration::from_secs(3) {
        let o = fx.run(&["verify", "--installed", "--json"]);
        assert_eq!(code(&o), 0, "run {runs}: {}{}", crate::stdout(&o), err(&o));
        runs += 1;
        if runs >= 200 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    eprintln!("class 10: {runs} verifies during {swaps} swaps, no false mismatch");
    assert!(swaps >= 5, "too few swaps overlapped ({swaps})");
}

// ---------------------------------------------------------------------------------------------
// The corruption campaign.

#[derive(Clone, Copy, Debug)]
enum Mutation {
    Truncate,
    Garbage,
    Delete,
    LinkInside,
    LinkOutside,
    Fifo,
}

const MUTATIONS: [Mutation; 6] = [
    Mutation::Truncate,
    Mutation::Garbage,
    Mutation::Delete,
    Mutation::LinkInside,
    Mutation::LinkOutside,
    Mutation::Fifo,
];

fn mutate(root: &Path, rel: &Path, m: Mutation, victims: &Path) {
    let p = root.join(rel);
    unseal(&p);
    let meta = std::fs::symlink_metadata(&p).expect("stat");
    let is_dir = meta.is_dir();
    let is_link = meta.file_type().is_symlink();
    match m {
        Mutation::Truncate => {
            if is_dir {
                for e in std::fs::read_dir(&p).expect("ls").flatten() {
                    remove_all(&e.path());
                }
            } else if is_link {
                std::fs::remove_file(&p).expect("rm");
                std::fs::write(&p, "").expect("write");
            } else {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .and_then(|f| f.set_len(0))
                    .expect("truncate");
            }
        }
        Mutation::Garbage => {
            let junk: Vec<u8> = (0..97u32).map(|i| (i * 113 % 256) as u8).collect();
            if is_dir {
                std::fs::write(p.join("zz-garbage"), &junk).expect("write");
            } else if is_link {
                std::fs::remove_file(&p).expect("rm");
                std::os::unix::fs::symlink("\u{1}garbage/../../..", &p).expect("link");
            } else {
                std::fs::write(&p, &junk).expect("write");
            }
        }
        Mutation::Delete => remove_all(&p),
        Mutation::LinkInside => {
            // A sibling of the same kind if there is one, else the root's receipts folder.
            let parent = p.parent().expect("parent");
            let sibling = std::fs::read_dir(parent)
                .expect("ls")
                .flatten()
                .map(|e| e.path())
                .filter(|s| *s != p)
                .filter(|s| {
                    std::fs::symlink_metadata(s).is_ok_and(|sm| {
                        sm.is_dir() == is_dir && sm.file_type().is_symlink() == is_link
                    })
                })
                .min();
            let target = match sibling {
                Some(s) => PathBuf::from(s.file_name().expect("name")),
                None => {
                    let depth = rel.components().count() - 1;
                    PathBuf::from("../".repeat(depth)).join("receipts")
                }
            };
            remove_all(&p);
            std::os::unix::fs::symlink(target, &p).expect("link");
        }
        Mutation::LinkOutside => {
            let target = if is_dir {
                victims.join("dir")
            } else {
                victims.join("file")
            };
            remove_all(&p);
            std::os::unix::fs::symlink(target, &p).expect("link");
        }
        Mutation::Fifo => {
            remove_all(&p);
            mkfifo(&p);
        }
    }
}

/// DESIGN §5 and issue #7: for every file and folder under the install root, each of
/// truncate, garbage, delete, a link inside, a link outside, a FIFO; then every command
/// under a hang limit. Nothing outside the root changes (checked by content, mode and link
/// count), no command hangs or panics, and no store entry the committed generation
/// references disappears unless the mutation itself removed it.
#[test]
fn issue_7_corruption_campaign_over_the_install_root() {
    let started = Instant::now();
    let fx = Fx::new();
    let builds: Vec<PathBuf> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| fx.build(n))
        .collect();
    fx.ok(fx.install(&builds[0], "live"));
    fx.ok(fx.install(&builds[1], "control"));
    fx.ok(fx.install(&builds[2], "original"));
    fx.ok(fx.install(&builds[3], "live"));
    fx.ok(fx.run(&["rollback", "--to", "control"]));
    let st = fx.status();
    // Entry folder names (control and original hold `<digest>.own`, issue #36).
    let mut referenced: Vec<String> = ["live", "control", "original"]
        .iter()
        .map(|l| {
            let own = if l == &"live" { "" } else { ".own" };
            let d = st["layers"][l]["digest"].as_str().expect("digest");
            format!("{d}{own}")
        })
        .collect();
    for h in st["live_history"].as_array().expect("history") {
        referenced.push(h["digest"].as_str().expect("digest").to_string());
    }
    assert_eq!(referenced.len(), 4, "{st}");

    let victims = fx.path().join("victims");
    std::fs::create_dir_all(victims.join("dir/sub")).expect("mkdir");
    std::fs::write(victims.join("file"), "victim file\n").expect("write");
    std::fs::set_permissions(victims.join("file"), std::fs::Permissions::from_mode(0o640))
        .expect("chmod");
    std::fs::write(victims.join("dir/sub/inner"), "inner\n").expect("write");
    std::fs::hard_link(victims.join("file"), victims.join("dir/hardlink")).expect("link");
    let pristine = fx.path().join("pristine");
    cp_a(&fx.root, &pristine);
    let outside = |fx: &Fx| snapshot(fx.path(), &[fx.root.as_path(), pristine.as_path()]);
    let outside_before = outside(&fx);
    // The checks themselves can fail: a changed mode or link count outside is seen, and a
    // command that does not finish is reported as a hang.
    std::fs::set_permissions(victims.join("file"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    assert_ne!(
        outside(&fx),
        outside_before,
        "a changed victim mode is detected"
    );
    std::fs::set_permissions(victims.join("file"), std::fs::Permissions::from_mode(0o640))
        .expect("chmod");
    std::fs::hard_link(victims.join("file"), fx.path().join("extra-link")).expect("link");
    assert_ne!(
        outside(&fx),
        outside_before,
        "a changed link count is detected"
    );
    std::fs::remove_file(fx.path().join("extra-link")).expect("rm");
    assert_eq!(outside(&fx), outside_before);
    let mut sleeper = std::process::Command::new("sleep");
    sleeper.arg("30");
    assert!(
        run_timeout(sleeper, Duration::from_millis(300)).is_none(),
        "hangs are detected"
    );

    let mut targets: Vec<PathBuf> = snapshot(&pristine, &[])
        .into_keys()
        .filter(|p| *p != pristine)
        .map(|p| p.strip_prefix(&pristine).expect("prefix").to_path_buf())
        .collect();
    targets.sort();
    let e = builds[4].to_str().expect("utf8").to_string();
    let a = builds[0].to_str().expect("utf8").to_string();
    // Installs alternate between a new entry (staging, rename into the store) and an entry
    // already in the store (reuse after verification, or repair by exchange when damaged).
    let commands = |n: usize| -> [Vec<&str>; 5] {
        [
            vec!["status", "--json"],
            vec!["verify", "--installed"],
            if n % 2 == 0 {
                vec!["install", &e, "--layer", "live"]
            } else {
                // Into live: the replaced live entry goes on the rollback stack, so every
                // entry the pristine root references stays referenced.
                vec!["install", &a, "--layer", "live"]
            },
            vec!["rollback", "--to", "control"],
            vec!["gc"],
        ]
    };
    let mut outcomes: BTreeMap<String, BTreeMap<i32, usize>> = BTreeMap::new();
    let (mut mutations, mut runs) = (0usize, 0usize);

    let mut failures = Vec::new();
    for rel in &targets {
        for m in MUTATIONS {
            remove_all(&fx.root);
            cp_a(&pristine, &fx.root);
            mutate(&fx.root, rel, m, &victims);
            mutations += 1;
            let what = format!("{m:?} {}", rel.display());
            for args in &commands(mutations) {
                let mut c = crate::pinforge_cmd(&fx.ws);
                c.args(args).arg("--root").arg(&fx.root);
                runs += 1;
                let Some(o) = run_timeout(c, HANG) else {
                    failures.push(format!("{what}: {args:?} hung"));
                    continue;
                };
                let rc = code(&o);
                *outcomes
                    .entry(args[0].to_string())
                    .or_default()
                    .entry(rc)
                    .or_default() += 1;
                if rc == 101 || rc == -1 || err(&o).contains("panicked") {
                    failures.push(format!("{what}: {args:?} exit {rc}: {}", err(&o)));
                }
            }
            if outside(&fx) != outside_before {
                failures.push(format!("{what}: something outside the root changed"));
                let now = outside(&fx);
                for (p, s) in &outside_before {
                    if now.get(p) != Some(s) {
                        failures.push(format!("  {}: {s} -> {:?}", p.display(), now.get(p)));
                    }
                }
            }
            // What the committed generation references after the commands (when it still
            // reads) is in the store too, unless the mutation itself removed it.
            let mut now_referenced = referenced.clone();
            let mut c = crate::pinforge_cmd(&fx.ws);
            c.args(["status", "--json", "--root"]).arg(&fx.root);
            runs += 1;
            match run_timeout(c, HANG) {
                None => failures.push(format!("{what}: final status hung")),
                Some(o) if code(&o) == 0 => {
                    let st = crate::json(&o);
                    // Entry folder names: `<digest>`, `<digest>.own` for control and original.
                    let layers = ["live", "control", "original"].iter().filter_map(|l| {
                        let s = &st["layers"][l];
                        let own = if s["sharing"] == "own" { ".own" } else { "" };
                        s["digest"].as_str().map(|d| format!("{d}{own}"))
                    });
                    let history = st["live_history"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|h| h["digest"].as_str().map(str::to_string));
                    now_referenced.extend(layers.chain(history));
                }
                Some(_) => {}
            }
            now_referenced.sort();
            now_referenced.dedup();
            for d in &now_referenced {
                let hit = rel == Path::new("store") || *rel == Path::new("store").join(d);
                let entry = fx.root.join("store").join(d);
                if !hit && std::fs::symlink_metadata(&entry).is_err() {
                    failures.push(format!("{what}: referenced entry {d} disappeared"));
                }
            }
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "corruption campaign: {} paths, {mutations} mutations, {runs} command runs in {:.1}s",
        targets.len(),
        elapsed.as_secs_f64()
    );
    for (cmd, by_code) in &outcomes {
        eprintln!("  {cmd:<8} exit codes {by_code:?}");
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        targets.len() >= 60,
        "campaign too small: {} paths",
        targets.len()
    );
}

/// `smoke --installed` reads the entry a layer shows: it must get there through the root's own
/// record and a re-hash, never by canonicalizing a link someone edited (issue #7 class 1/2).
#[test]
fn issue_7_smoke_of_an_installed_layer_refuses_a_damaged_or_redirected_entry() {
    let fx = Fx::new();
    let a = fx.build("a");
    fx.ok(fx.install(&a, "live"));
    // Intact: the entry is handed to smoke, which then finds no libllama in this synthetic
    // build (exit 2 naming that), proving it got past the entry check.
    let o = fx.run(&["smoke", "--installed"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(err(&o).contains("no libllama"), "{}", err(&o));
    // Damaged: a file changed in place → the entry does not re-hash, smoke refuses before
    // reading anything from it.
    let e = fx.entry("live");
    let f = e.join("include/a.h");
    unseal(&f);
    std::fs::write(&f, "evil").expect("write");
    let o = fx.run(&["smoke", "--installed", "live"]);
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(err(&o).contains("does not re-hash"), "{}", err(&o));
    // Redirected: `current` re-pointed at a folder outside the root → damaged root, exit 2.
    let outside = fx.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let current = fx.root.join("current");
    std::fs::remove_file(&current).expect("rm");
    std::os::unix::fs::symlink(&outside, &current).expect("link");
    let o = fx.run(&["smoke", "--installed"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(err(&o).contains("damaged install root"), "{}", err(&o));
    // A mistyped root is not created by a read-only command.
    let nowhere = fx.path().join("no-root-here");
    let o = fx.run_in(&nowhere, &["smoke", "--installed"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(!nowhere.exists());
}
