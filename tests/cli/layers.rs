//! Layers that survive damage to each other (issue #36): the control and original layers
//! hold files of their own (no inode shared with live or its rollback stack), a damaged live
//! file leaves control `ok`, rollback refuses a damaged target, and `repair` re-materializes
//! a damaged entry from a verified source, in steps a kill cannot leave half done.
//!
//! Synthetic builds through the real `pinforge` binary, as in `store_objects`: the shapes of
//! the issue's patched and unpatched builds (the same header and ggml, another libllama).

use crate::trust_install::{Art, Fx};
use crate::{code, json, stderr, stdout};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A build shaped like the issue's: `include/llama.h` and `lib/libggml.so` the same in every
/// build, `lib/libllama.so` with bytes of its own per `seed`.
fn build(fx: &Fx, name: &str, seed: u8) -> PathBuf {
    let bytes = |n: u32, s: u8| (0..n).map(|i| (i.wrapping_mul(13) as u8) ^ s).collect();
    fx.build_with(
        name,
        &[
            Art {
                name: "include/llama.h",
                bytes: b"// llama.h\nint llama_decode(void);\n".repeat(40),
                mode: 0o644,
            },
            Art {
                name: "lib/libggml.so",
                bytes: bytes(6000, 0xa5),
                mode: 0o755,
            },
            Art {
                name: "lib/libllama.so",
                bytes: bytes(8000, seed),
                mode: 0o755,
            },
        ],
        &[("lib/libllama.so.0", "libllama.so")],
        |_| {},
    )
}

/// Live `patched`, control `unpatched`, as in the issue.
fn two_layers(fx: &Fx) -> (PathBuf, PathBuf) {
    let patched = build(fx, "patched", 1);
    let unpatched = build(fx, "unpatched", 2);
    fx.ok(fx.install(&patched, "live"));
    fx.ok(fx.install(&unpatched, "control"));
    (patched, unpatched)
}

/// Append to a sealed entry file in place, as any process with write access to it can (root
/// ignores the mode); the file's mode is put back, the folders are not touched.
fn damage(p: &Path) {
    let mode = std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(p)
        .expect("open for append");
    std::io::Write::write_all(&mut f, b"// damaged\n").expect("append");
    drop(f);
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod back");
}

fn ino(p: &Path) -> (u64, u64) {
    let m = std::fs::symlink_metadata(p).expect("stat");
    (m.dev(), m.ino())
}

/// Every regular file below `dir`, relative.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("ls").flatten() {
            let m = std::fs::symlink_metadata(e.path()).expect("stat");
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.push(e.path().strip_prefix(dir).expect("below").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn status_verify(fx: &Fx) -> (i32, Value) {
    let o = fx.run(&["status", "--verify", "--json"]);
    (code(&o), json(&o))
}

#[test]
fn issue_36_control_shares_no_inode_with_live_and_survives_damage_to_it() {
    let fx = Fx::new();
    two_layers(&fx);
    let live = fx.entry("live");
    let control = fx.entry("control");
    assert!(
        control.to_string_lossy().ends_with(".own"),
        "{}",
        control.display()
    );
    // No file of control has a second name anywhere: not live's, not an object's.
    for f in files(&control) {
        let m = std::fs::symlink_metadata(control.join(&f)).expect("stat");
        assert_eq!(m.nlink(), 1, "{}", f.display());
    }
    assert_ne!(
        ino(&live.join("include/llama.h")),
        ino(&control.join("include/llama.h"))
    );
    let st = fx.status();
    assert_eq!(st["layers"]["live"]["sharing"], "linked", "{st}");
    assert_eq!(st["layers"]["control"]["sharing"], "own", "{st}");

    damage(&live.join("include/llama.h"));
    let o = fx.run(&["verify", "--installed"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("llama.h"), "{}", stdout(&o));
    fx.ok(fx.run(&["verify", "--installed", "control"]));
    let (rc, st) = status_verify(&fx);
    assert_ne!(rc, 0, "a mismatch is a non-zero status: {st}");
    assert_eq!(st["layers"]["live"]["verification"], "mismatch", "{st}");
    assert_eq!(st["layers"]["control"]["verification"], "ok", "{st}");
    // The layer an operator falls back to is intact, and rolling back to it works.
    fx.ok(fx.run(&["rollback", "--to", "control"]));
    fx.ok(fx.run(&["verify", "--installed"]));
}

#[test]
fn issue_36_repair_restores_a_damaged_live_entry_from_a_verified_copy() {
    let fx = Fx::new();
    two_layers(&fx);
    let live = fx.entry("live");
    damage(&live.join("include/llama.h"));
    // The dry run names the damage, what shares the damaged inode, and the source.
    let o = fx.ok(fx.run(&["repair", "--dry-run", "--json"]));
    let plan = json(&o);
    crate::schemas::validate(&plan);
    let r = &plan["repaired"];
    assert_eq!(r.as_array().map(Vec::len), Some(1), "{plan}");
    assert_eq!(r[0]["referenced_by"], serde_json::json!(["live"]), "{plan}");
    let src = r[0]["sources"]["include/llama.h"]
        .as_str()
        .expect("a source");
    assert!(
        src.contains(".own/include/llama.h"),
        "the control entry's own copy: {src}"
    );
    let sharers = r[0]["shared_with"]["include/llama.h"].to_string();
    assert!(
        sharers.contains("objects/"),
        "the object is the same inode: {plan}"
    );
    assert_eq!(plan["report"], Value::Null, "{plan}");
    assert_eq!(
        code(&fx.run(&["verify", "--installed"])),
        1,
        "a dry run writes nothing"
    );

    let o = fx.ok(fx.run(&["repair"]));
    assert!(stdout(&o).contains("include/llama.h <- "), "{}", stdout(&o));
    assert!(stdout(&o).contains("report "), "{}", stdout(&o));
    fx.ok(fx.run(&["verify", "--installed"]));
    let (rc, st) = status_verify(&fx);
    assert_eq!(rc, 0, "{st}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(fx.root.join("repairs/1.json")).expect("the report"))
            .expect("json");
    assert_eq!(report["schema"], "pinforge.repair/v1", "{report}");
    crate::schemas::validate(&report);
    assert!(
        report["report"]
            .as_str()
            .expect("report")
            .ends_with("repairs/1.json"),
        "{report}"
    );
    assert_eq!(report["repaired"][0]["entry"], r[0]["entry"], "{report}");
    // Nothing left to repair; the stage is gone.
    let o = fx.ok(fx.run(&["repair", "--json"]));
    assert_eq!(json(&o)["repaired"], serde_json::json!([]));
    let stages: Vec<_> = std::fs::read_dir(fx.root.join("store"))
        .expect("ls")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".stage-"))
        .collect();
    assert!(stages.is_empty(), "{stages:?}");
}

#[test]
fn issue_36_a_file_no_copy_holds_needs_the_build_and_without_it_nothing_is_written() {
    let fx = Fx::new();
    let (patched, _) = two_layers(&fx);
    let live = fx.entry("live");
    // libllama is live's alone (and its object is the same inode): no verified copy.
    damage(&live.join("lib/libllama.so"));
    let before = std::fs::read(live.join("lib/libllama.so")).expect("read");
    let o = fx.run(&["repair"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("no verified source"), "{}", stderr(&o));
    assert!(stderr(&o).contains("lib/libllama.so"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--from"),
        "the hint names the way out: {}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(live.join("lib/libllama.so")).expect("read"),
        before
    );
    assert!(!fx.root.join("repairs").exists());
    // A build output that does not hash to the record is no source either.
    let out = patched.parent().expect("dir").join("out/lib/libllama.so");
    let good = std::fs::read(&out).expect("read");
    std::fs::write(&out, vec![0u8; good.len()]).expect("write");
    let m = patched.to_str().expect("utf8");
    let o = fx.run(&["repair", "--from", m]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    // The build's own output, checked against the record, repairs it.
    std::fs::write(&out, &good).expect("write");
    let o = fx.ok(fx.run(&["repair", "--from", m, "--json"]));
    let j = json(&o);
    let src = j["repaired"][0]["sources"]["lib/libllama.so"].to_string();
    assert!(src.contains("manifest.json: lib/libllama.so"), "{j}");
    fx.ok(fx.run(&["verify", "--installed"]));
}

#[test]
fn issue_36_rollback_refuses_a_damaged_target_and_the_rollback_stack_is_repaired_too() {
    let fx = Fx::new();
    let (patched, _) = two_layers(&fx);
    let control = fx.entry("control");
    damage(&control.join("lib/libggml.so"));
    let o = fx.run(&["rollback", "--to", "control"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("damaged"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("hint: `pinforge repair --root "),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(" --dry-run` shows where"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        fx.status()["current"]["layer"],
        "live",
        "current did not move"
    );
    fx.ok(fx.run(&["verify", "--installed"]));
    // Control is repaired from live's (linked) copy of the same bytes.
    fx.ok(fx.run(&["repair"]));
    fx.ok(fx.run(&["verify", "--installed", "control"]));
    // A second live build: the first is on the stack and shares live's objects; damage
    // through the stack's entry reaches both live entries, and repair mends both.
    let next = build(&fx, "patched2", 3);
    fx.ok(fx.install(&next, "live"));
    let stack = fx.root.join("store").join(
        fx.status()["live_history"][0]["digest"]
            .as_str()
            .expect("stack entry"),
    );
    damage(&stack.join("lib/libggml.so"));
    assert_eq!(code(&fx.run(&["verify", "--installed"])), 1);
    let o = fx.ok(fx.run(&["repair", "--json"]));
    let j = json(&o);
    assert_eq!(j["repaired"].as_array().map(Vec::len), Some(2), "{j}");
    fx.ok(fx.run(&["verify", "--installed"]));
    fx.ok(fx.run(&["rollback"]));
    fx.ok(fx.run(&["verify", "--installed"]));
    let _ = patched;
}

#[test]
fn issue_36_a_kill_at_every_repair_step_leaves_the_root_consistent() {
    use pinforge::RepairStep;
    use pinforge_base::txn::Step;
    assert_eq!(RepairStep::ALL.len(), 5);
    for step in RepairStep::ALL {
        let fx = Fx::new();
        two_layers(&fx);
        let live = fx.entry("live");
        damage(&live.join("include/llama.h"));
        let mut c = crate::pinforge_cmd(&fx.ws);
        c.args(["repair", "--root"])
            .arg(&fx.root)
            .env("PINFORGE_CRASH_AT", step.crash_at());
        let o = c.output().expect("run");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(9), "{step:?}: {}", stderr(&o));
        // Control was never touched; live is either still damaged or repaired, whole.
        fx.ok(fx.run(&["verify", "--installed", "control"]));
        let v = code(&fx.run(&["verify", "--installed"]));
        let repaired = matches!(step, RepairStep::Swapped | RepairStep::Reported);
        assert_eq!(v, if repaired { 0 } else { 1 }, "{step:?}");
        // The next repair finishes the job and leaves no stage behind.
        fx.ok(fx.run(&["repair"]));
        fx.ok(fx.run(&["verify", "--installed"]));
        let left: Vec<String> = std::fs::read_dir(fx.root.join("store"))
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{step:?}: {left:?}");
        let tmp: Vec<String> = std::fs::read_dir(fx.root.join("objects"))
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(tmp.is_empty(), "{step:?}: {tmp:?}");
    }
}

#[test]
fn issue_36_hostile_repair_inputs_are_refused_with_exit_2_and_write_nothing() {
    let fx = Fx::new();
    two_layers(&fx);
    damage(&fx.entry("live").join("include/llama.h"));
    // A FIFO as the --from manifest is refused before it is opened (no hang).
    let fifo = fx.path().join("manifest.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let o = fx.run(&["repair", "--from", fifo.to_str().expect("utf8")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    // `repairs` made a link to elsewhere: refused, nothing written through it.
    let elsewhere = fx.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, fx.root.join("repairs")).expect("link");
    let o = fx.run(&["repair"]);
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&elsewhere).expect("ls").count(), 0);
    // No install root at all: a clear refusal that names the folder.
    let empty = fx.path().join("empty-root");
    let o = fx.run_in(&empty, &["repair"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no install root here"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("empty-root"), "{}", stderr(&o));
    assert!(!empty.exists(), "a refused repair creates no root");
}
