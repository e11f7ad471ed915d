//! The install store's content-addressed objects (issue #22): entries share file objects by
//! hard link, an install that differs in one file writes that one file, executables and
//! non-executables are separate objects, a damaged object is a damaged entry that reinstall
//! repairs, `gc` removes objects no entry uses, the copy fallback says so, object writes are
//! crash points, and a store from before the objects still reads, verifies and collects.
//!
//! Synthetic builds (files written by the test, manifests naming them) through the real
//! `pinforge` binary, as in `trust_install`.

use crate::trust_install::{art, Art, Fx};
use crate::{code, json, stderr, stdout};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A build of three files: `lib/libbase.so` (0755), `lib/libllama.so` (0755, its bytes
/// vary with `llama_seed`) and `include/base.h` (0644).
fn build3(fx: &Fx, name: &str, llama_seed: u8) -> PathBuf {
    let llama = Art {
        name: "lib/libllama.so",
        bytes: (0..5000u32)
            .map(|i| (i.wrapping_mul(7) as u8) ^ llama_seed)
            .collect(),
        mode: 0o755,
    };
    fx.build_with(
        name,
        &[
            art("lib/libbase.so", 4000, 0o755),
            llama,
            art("include/base.h", 300, 0o644),
        ],
        &[("lib/libbase.so.0", "libbase.so")],
        |_| {},
    )
}

fn install_json(fx: &Fx, manifest: &Path, layer: &str) -> Value {
    let o = fx.ok(fx.install(manifest, layer));
    let j = json(&o);
    crate::schemas::validate(&j);
    j
}

/// The names in `objects/`.
fn objects(fx: &Fx) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fx.root.join("objects"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The newest receipt.
fn last_receipt(fx: &Fx) -> Value {
    let mut names: Vec<PathBuf> = std::fs::read_dir(fx.root.join("receipts"))
        .expect("receipts")
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    let p = names.pop().expect("a receipt");
    serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("json")
}

/// Bytes of an entry's own records (entry.json, manifest.json): freed with the entry.
fn record_bytes(entry: &Path) -> u64 {
    ["entry.json", "manifest.json"]
        .iter()
        .map(|n| std::fs::metadata(entry.join(n)).expect("stat").len())
        .sum()
}

fn ino(p: &Path) -> (u64, u64) {
    let m = std::fs::symlink_metadata(p).expect("stat");
    (m.dev(), m.ino())
}

fn unseal(p: &Path) {
    let mut q = p.to_path_buf();
    while q.pop() {
        let _ = std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o755));
        if q.ends_with("rollback") {
            break;
        }
    }
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

/// Overwrite a sealed file in place with other bytes of the same size, mode restored: only
/// a re-hash can tell.
fn garble_in_place(p: &Path) {
    let mode = std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777;
    unseal(p);
    let len = std::fs::metadata(p).expect("stat").len() as usize;
    std::fs::write(p, vec![0x5a; len]).expect("write");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn issue_22_entries_share_objects_and_one_changed_file_is_the_only_write() {
    let fx = Fx::new();
    let a = build3(&fx, "a", 1);
    let b = build3(&fx, "b", 2);
    let ja = install_json(&fx, &a, "live");
    let sa = &ja["store"];
    assert_eq!(sa["objects_written"], 3, "{ja}");
    assert_eq!(sa["objects_reused"], 0, "{ja}");
    assert_eq!(sa["bytes_written"], 4000 + 5000 + 300, "{ja}");
    let entry_a = fx.entry("live");
    let jb = install_json(&fx, &b, "live");
    let sb = &jb["store"];
    assert_eq!(sb["objects_written"], 1, "only libllama differs: {jb}");
    assert_eq!(sb["objects_reused"], 2, "{jb}");
    assert_eq!(
        sb["bytes_written"], 5000,
        "new bytes are the changed file's: {jb}"
    );
    assert_eq!(sb["copied_not_linked"], serde_json::json!([]), "{jb}");
    let entry_b = fx.entry("live");
    assert_ne!(entry_a, entry_b);
    // The unchanged files are one inode in both entries and in objects/.
    for f in ["lib/libbase.so", "include/base.h"] {
        assert_eq!(ino(&entry_a.join(f)), ino(&entry_b.join(f)), "{f}");
        assert_eq!(
            std::fs::symlink_metadata(entry_b.join(f))
                .expect("stat")
                .nlink(),
            3,
            "{f}: entry a, entry b, the object"
        );
    }
    assert_ne!(
        ino(&entry_a.join("lib/libllama.so")),
        ino(&entry_b.join("lib/libllama.so"))
    );
    let objs = objects(&fx);
    assert_eq!(objs.len(), 4, "{objs:?}");
    assert_eq!(
        objs.iter().filter(|n| n.ends_with(".x")).count(),
        3,
        "{objs:?}"
    );
    // Sealed as entries are: 0555 executables, 0444 the rest.
    for n in &objs {
        let mode = std::fs::symlink_metadata(fx.root.join("objects").join(n))
            .expect("stat")
            .mode()
            & 0o7777;
        assert_eq!(mode, if n.ends_with(".x") { 0o555 } else { 0o444 }, "{n}");
    }
    // The text output says what the object store did.
    let c = build3(&fx, "c", 3);
    let o = fx.ok(fx.run(&["install", c.to_str().expect("utf8"), "--layer", "live"]));
    assert!(
        stdout(&o).contains("objects: 1 written (5000 bytes), 2 reused, 0 replaced as damaged"),
        "{}",
        stdout(&o)
    );
    // The control layer takes no object (issue #36): files of its own, and it says so.
    let o = fx.ok(fx.run(&["install", a.to_str().expect("utf8"), "--layer", "control"]));
    assert!(
        stdout(&o).contains("own files: 3 (9300 bytes)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        objects(&fx).len(),
        5,
        "control wrote no object: {:?}",
        objects(&fx)
    );
    fx.ok(fx.run(&["verify", "--installed"]));
    fx.ok(fx.run(&["verify", "--installed", "control"]));
}

#[test]
fn issue_22_the_same_bytes_as_executable_and_as_data_are_two_objects() {
    let fx = Fx::new();
    let same: Vec<u8> = (0..1000u32).map(|i| (i % 253) as u8).collect();
    let m = fx.build_with(
        "modes",
        &[
            Art {
                name: "bin/tool",
                bytes: same.clone(),
                mode: 0o755,
            },
            Art {
                name: "share/tool.txt",
                bytes: same,
                mode: 0o644,
            },
        ],
        &[],
        |_| {},
    );
    let j = install_json(&fx, &m, "live");
    assert_eq!(j["store"]["objects_written"], 2, "{j}");
    let objs = objects(&fx);
    assert_eq!(objs.len(), 2, "{objs:?}");
    assert_eq!(format!("{}.x", objs[0]), objs[1], "one digest, two modes");
    let e = fx.entry("live");
    let mode = |p: &str| std::fs::symlink_metadata(e.join(p)).expect("stat").mode() & 0o7777;
    assert_eq!((mode("bin/tool"), mode("share/tool.txt")), (0o555, 0o444));
}

#[test]
fn issue_22_a_damaged_object_is_a_damaged_entry_and_reinstall_repairs_it() {
    let fx = Fx::new();
    let a = build3(&fx, "a", 1);
    let b = build3(&fx, "b", 2);
    install_json(&fx, &a, "live");
    let old_live = fx.entry("live");
    install_json(&fx, &b, "live");
    let base = fx.entry("live").join("lib/libbase.so");
    let obj = fx.root.join("objects").join(format!(
        "{}.x",
        crate::trust_install::sha_hex(&art("lib/libbase.so", 4000, 0o755).bytes)
    ));
    assert_eq!(ino(&base), ino(&obj), "the entry file is the object");
    assert_eq!(
        ino(&old_live.join("lib/libbase.so")),
        ino(&obj),
        "and the stack's"
    );
    // Same size, same mode, other bytes: only the re-hash sees it, in both live entries.
    garble_in_place(&obj);
    let o = fx.run(&["verify", "--installed", "live"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("libbase.so"), "{}", stdout(&o));
    let o = fx.run(&["rollback"]);
    assert_eq!(
        code(&o),
        1,
        "the stack's entry is damaged too: {}",
        stderr(&o)
    );
    // Reinstalling the live build repairs it: a fresh object under the same name.
    let j = install_json(&fx, &b, "live");
    assert_eq!(j["repaired"], true, "{j}");
    assert!(j["store"]["objects_replaced"].as_u64() >= Some(1), "{j}");
    fx.ok(fx.run(&["verify", "--installed", "live"]));
    assert_ne!(ino(&obj), ino(&old_live.join("lib/libbase.so")));
    // A wrong mode on an object (seen without reading it) is replaced on the next staging.
    std::fs::set_permissions(&obj, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    assert_eq!(code(&fx.run(&["verify", "--installed"])), 1);
    let j = install_json(&fx, &b, "live");
    assert_eq!(j["store"]["objects_replaced"], 1, "{j}");
    assert_eq!(j["store"]["objects_written"], 1, "{j}");
    fx.ok(fx.run(&["verify", "--installed"]));
}

#[test]
fn issue_22_gc_removes_the_objects_no_entry_uses() {
    let fx = Fx::new();
    let a = build3(&fx, "a", 1);
    let b = build3(&fx, "b", 2);
    // Generations of one layer share objects; a rollback to generation 1 leaves b's entry
    // and b's libllama object to nothing once the later generations are collected.
    install_json(&fx, &a, "live");
    install_json(&fx, &b, "live");
    let gone = fx.digest("live");
    let records = record_bytes(&fx.entry("live"));
    fx.ok(fx.run(&["rollback", "--to-generation", "1"]));
    assert_eq!(objects(&fx).len(), 4);
    let dry = json(&fx.ok(fx.run(&["gc", "--dry-run", "--json"])));
    crate::schemas::validate(&dry);
    assert_eq!(dry["removed_entries"], serde_json::json!([gone]), "{dry}");
    assert_eq!(dry["removed_objects"], 1, "b's libllama only: {dry}");
    assert_eq!(dry["bytes_freed"], 5000 + records, "{dry}");
    assert_eq!(objects(&fx).len(), 4, "a dry run removes nothing");
    let real = json(&fx.ok(fx.run(&["gc", "--json"])));
    assert_eq!(real["removed_objects"], dry["removed_objects"]);
    assert_eq!(real["bytes_freed"], dry["bytes_freed"]);
    assert_eq!(objects(&fx).len(), 3);
    fx.ok(fx.run(&["verify", "--installed", "live"]));
    // An own (control) entry that nothing references any more is freed whole: its files are
    // its own.
    install_json(&fx, &a, "control");
    let own = fx.entry("control");
    let own_records = record_bytes(&own);
    install_json(&fx, &b, "control");
    let g = json(&fx.ok(fx.run(&["gc", "--json"])));
    assert_eq!(
        g["removed_entries"],
        serde_json::json!([own.file_name().expect("name").to_string_lossy()]),
        "{g}"
    );
    assert_eq!(g["bytes_freed"], 4000 + 5000 + 300 + own_records, "{g}");
    assert_eq!(g["removed_objects"], 0, "{g}");
    fx.ok(fx.run(&["verify", "--installed", "control"]));
    // Nothing more to collect; a stray name in objects/ is left alone.
    std::fs::write(fx.root.join("objects").join("notes.txt"), "mine").expect("write");
    let again = json(&fx.ok(fx.run(&["gc", "--json"])));
    assert_eq!(again["removed_objects"], 0, "{again}");
    assert!(fx.root.join("objects/notes.txt").exists());
    // `objects` replaced by a link: gc refuses and removes nothing through it.
    let elsewhere = fx.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::rename(fx.root.join("objects"), fx.path().join("objects.moved")).expect("mv");
    std::os::unix::fs::symlink(&elsewhere, fx.root.join("objects")).expect("link");
    let o = fx.run(&["gc"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let o = fx.run(&["install", b.to_str().expect("utf8"), "--layer", "live"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("objects"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&elsewhere).expect("ls").count(), 0);
}

#[test]
fn issue_22_an_entry_that_cannot_link_its_object_is_a_copy_and_says_so() {
    let fx = Fx::new();
    let a = build3(&fx, "a", 1);
    let mut c = crate::pinforge_cmd(&fx.ws);
    c.args([
        "install",
        a.to_str().expect("utf8"),
        "--layer",
        "live",
        "--root",
    ])
    .arg(&fx.root)
    .env("PINFORGE_OBJECT_LINK", "emlink");
    let o = c.output().expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let warned = stdout(&o)
        .lines()
        .filter(|l| l.contains("warning: copied, not linked to its object"))
        .count();
    assert_eq!(warned, 3, "{}", stdout(&o));
    let e = fx.entry("live");
    assert_eq!(
        std::fs::symlink_metadata(e.join("lib/libbase.so"))
            .expect("stat")
            .nlink(),
        1
    );
    fx.ok(fx.run(&["verify", "--installed"]));
    let r = last_receipt(&fx);
    assert_eq!(
        r["store"]["copied_not_linked"].as_array().map(Vec::len),
        Some(3),
        "the receipt says so too: {r}"
    );
}

#[test]
fn issue_22_a_kill_at_each_object_write_leaves_a_consistent_store() {
    for (at, written_on_rerun) in [("install-object:written", 1), ("install-object:named", 0)] {
        let fx = Fx::new();
        let a = build3(&fx, "a", 1);
        let b = build3(&fx, "b", 2);
        install_json(&fx, &a, "live");
        let before = fx.digest("live");
        let mut c = crate::pinforge_cmd(&fx.ws);
        c.args([
            "install",
            b.to_str().expect("utf8"),
            "--layer",
            "live",
            "--root",
        ])
        .arg(&fx.root)
        .env("PINFORGE_CRASH_AT", at);
        let o = c.output().expect("run");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(9), "{at}: {}", stderr(&o));
        assert_eq!(fx.digest("live"), before, "{at}: nothing committed");
        fx.ok(fx.run(&["verify", "--installed"]));
        let j = install_json(&fx, &b, "live");
        assert_eq!(j["store"]["objects_written"], written_on_rerun, "{at}: {j}");
        assert_ne!(fx.digest("live"), before, "{at}");
        let strays: Vec<String> = objects(&fx)
            .into_iter()
            .filter(|n| n.starts_with(".pinforge-tmp-"))
            .collect();
        assert!(strays.is_empty(), "{at}: temp files left: {strays:?}");
        assert_eq!(objects(&fx).len(), 4, "{at}");
        fx.ok(fx.run(&["verify", "--installed"]));
    }
}

/// A store from before the objects (entries holding their own copies, no `objects/`) reads,
/// verifies and collects as before; nothing is migrated, new installs write objects.
#[test]
fn issue_22_a_store_without_objects_still_reads_verifies_and_collects() {
    let fx = Fx::new();
    let a = build3(&fx, "a", 1);
    let b = build3(&fx, "b", 2);
    install_json(&fx, &a, "live");
    let old = fx.entry("live");
    std::fs::remove_dir_all(fx.root.join("objects")).expect("rm");
    assert_eq!(
        std::fs::symlink_metadata(old.join("lib/libbase.so"))
            .expect("stat")
            .nlink(),
        1,
        "an entry with its own copies, as before #22"
    );
    fx.ok(fx.run(&["verify", "--installed", "live"]));
    fx.ok(fx.run(&["status"]));
    let j = install_json(&fx, &b, "live");
    assert_eq!(j["store"]["objects_written"], 3, "{j}");
    // Back to generation 1: b is referenced by no kept generation, and gc frees its records
    // and the one object only b used (a's record names the other two, which a, holding
    // copies, does not even link).
    let records_b = record_bytes(&fx.entry("live"));
    fx.ok(fx.run(&["rollback", "--to-generation", "1"]));
    fx.ok(fx.run(&["verify", "--installed", "live"]));
    let g = json(&fx.ok(fx.run(&["gc", "--json"])));
    assert_eq!(
        g["removed_entries"].as_array().map(Vec::len),
        Some(1),
        "{g}"
    );
    assert_eq!(g["bytes_freed"], 5000 + records_b, "{g}");
    assert_eq!(g["removed_objects"], 1, "{g}");
    fx.ok(fx.run(&["verify", "--installed", "live"]));
}

/// A repair replaces an object's name only with the bytes the name says: a build output that
/// changed since its manifest (same size) is refused (exit 1) and takes over no object.
#[test]
fn issue_22_a_repair_from_a_changed_build_output_replaces_no_object() {
    let fx = Fx::new();
    let a = build3(&fx, "a", 1);
    install_json(&fx, &a, "live");
    let obj = fx.root.join("objects").join(format!(
        "{}.x",
        crate::trust_install::sha_hex(&art("lib/libbase.so", 4000, 0o755).bytes)
    ));
    garble_in_place(&obj);
    let before = ino(&obj);
    let out = a.parent().expect("dir").join("out/lib/libbase.so");
    std::fs::write(&out, vec![0x11; 4000]).expect("write");
    let o = fx.run(&["install", a.to_str().expect("utf8"), "--layer", "live"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("libbase.so"), "{}", stderr(&o));
    assert_eq!(ino(&obj), before, "the object's name was not taken over");
    assert!(objects(&fx)
        .iter()
        .all(|n| !n.starts_with(".pinforge-tmp-")));
}
