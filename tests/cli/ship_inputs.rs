//! A manifest's recorded inputs are data from whoever wrote it. A pulled manifest names another
//! machine's files: `pull` and `verify` of it read none of them (`/etc/passwd`, `../../x`, a
//! FIFO, `/dev/zero`), say so ("not on disk (pulled)", `pulled: true`), and still re-hash every
//! output. A local manifest's relative inputs are read where its build recorded them, inside
//! the workspace or not (a recipe kept elsewhere), but a FIFO, a link into `/proc` or to a
//! device, an absolute path that is not a tool and a tool that is not executable are refused as
//! mismatches (exit 1) without being opened.

use crate::inputs::{mkfifo, pinforge_within};
use crate::ship::{push, Registry};
use crate::{code, json, stderr, stdout, synthetic_build};
use std::path::{Path, PathBuf};

const ZEROS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A synthetic build at `dir` whose manifest names hostile inputs, each with a sha256 digest:
/// `(dependency name, recorded path)`. Returns the manifest and the outputs' total size.
fn hostile_build(dir: &Path, inputs: &[(&str, String)]) -> (PathBuf, u64) {
    let files = [("lib/libsyn.so.1", 5_000), ("include/syn.h", 300)];
    let m = synthetic_build(dir, &files);
    let mut j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&m).expect("manifest")).expect("json");
    let def = &mut j["predicate"]["buildDefinition"];
    for (name, path) in inputs {
        def["internalParameters"]["inputs"][*name] = serde_json::json!(path);
        def["resolvedDependencies"]
            .as_array_mut()
            .expect("deps")
            .push(serde_json::json!({"name": name, "digest": {"sha256": ZEROS}}));
    }
    std::fs::write(&m, serde_json::to_vec_pretty(&j).expect("json")).expect("write");
    (m, files.iter().map(|(_, n)| *n as u64).sum())
}

fn names(v: &serde_json::Value) -> Vec<String> {
    let mut n: Vec<String> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_str().expect("name").to_string())
        .collect();
    n.sort();
    n
}

#[test]
fn a_pulled_manifest_naming_local_files_and_a_fifo_verifies_its_outputs_only_and_never_hangs() {
    let Some(reg) = Registry::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (ws1, ws2) = (dir.path().join("ws1"), dir.path().join("ws2"));
    std::fs::create_dir_all(&ws2).expect("ws2");
    // What the paths would reach in the pulling workspace (`pulled/<hex>/../../x` is ws2/x).
    std::fs::write(ws2.join("x"), "a local file the registry must not choose\n").expect("x");
    mkfifo(&ws2.join("fifo"));
    let abs_fifo = ws2.join("abs-fifo");
    mkfifo(&abs_fifo);
    let inputs = [
        ("recipe", "/etc/passwd".to_string()),
        ("patch:0001", "../../x".to_string()),
        ("patch:0002", "../../fifo".to_string()),
        ("patch:0003", abs_fifo.display().to_string()),
        ("tool:cc", "/dev/zero".to_string()),
    ];
    let (m, out_bytes) = hostile_build(&ws1.join("b"), &inputs);
    let d = push(&ws1, &m, &format!("{}/t/hostile:v1", reg.host()));
    let by_digest = format!("{}/t/hostile@sha256:{d}", reg.host());

    let o = pinforge_within(&ws2, &["pull", &by_digest, "--json"], 60);
    assert_eq!(code(&o), 0, "pull: {}", stderr(&o));
    let pulled = ws2.join("pulled").join(&d).join("manifest.json");
    assert!(pulled.is_file(), "{}", pulled.display());
    assert!(
        ws2.join("pulled").join(&d).join("pulled.json").is_file(),
        "the pull's marker"
    );

    let o = pinforge_within(
        &ws2,
        &["verify", pulled.to_str().expect("utf-8"), "--json"],
        60,
    );
    assert_eq!(code(&o), 0, "verify --json: {}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.verify/v1");
    assert_eq!(j["pulled"], true, "{j}");
    assert_eq!(j["inputs_checked"], 0, "{j}");
    assert_eq!(j["outputs_checked"], 2, "{j}");
    // Only the outputs were read: not one byte of /etc/passwd, ws2/x or /dev/zero.
    assert_eq!(j["bytes_hashed"], out_bytes, "{j}");
    let mut want: Vec<String> = inputs.iter().map(|(n, _)| n.to_string()).collect();
    want.sort();
    assert_eq!(names(&j["inputs_absent"]), want, "{j}");

    let o = pinforge_within(&ws2, &["verify", pulled.to_str().expect("utf-8")], 60);
    assert_eq!(code(&o), 0, "verify: {}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("0 inputs match") && text.contains("not on disk (pulled): "),
        "{text}"
    );
    for (n, _) in &inputs {
        assert!(text.contains(n), "{n} is named: {text}");
    }

    // The same folder copied out of `pulled/` keeps its marker, and with it the rule.
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(copy.join("out")).expect("copy");
    let src = ws2.join("pulled").join(&d);
    for f in [
        "manifest.json",
        "pulled.json",
        "out/lib/libsyn.so.1",
        "out/include/syn.h",
    ] {
        let to = copy.join(f);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(src.join(f), &to).expect("copy");
    }
    let o = pinforge_within(
        &ws2,
        &[
            "verify",
            copy.join("manifest.json").to_str().expect("utf-8"),
            "--json",
        ],
        60,
    );
    assert_eq!(code(&o), 0, "verify copy: {}{}", stdout(&o), stderr(&o));
    assert_eq!(json(&o)["pulled"], true);
}

#[test]
fn a_local_manifest_reads_its_recorded_inputs_and_refuses_fifos_kernel_files_and_non_tools_unopened(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("patches")).expect("patches");
    std::fs::write(ws.join("patches/ok.patch"), "ok\n").expect("patch");
    std::fs::write(dir.path().join("outside"), "outside the workspace\n").expect("outside");
    mkfifo(&ws.join("patches/fifo.patch"));
    std::os::unix::fs::symlink("/proc/self", ws.join("patches/proc")).expect("link");
    let inputs = [
        ("patch:ok", "../../../patches/ok.patch".to_string()),
        ("patch:outside", "../../../../outside".to_string()),
        ("patch:fifo", "../../../patches/fifo.patch".to_string()),
        ("patch:link", "../../../patches/proc/environ".to_string()),
        ("recipe", "/etc/passwd".to_string()),
        ("tool:cc", "/dev/zero".to_string()),
        ("tool:ld", "/etc/passwd".to_string()),
        ("patch:gone", "../../../patches/gone.patch".to_string()),
    ];
    let (m, out_bytes) = hostile_build(&ws.join("build/r/v"), &inputs);
    let o = pinforge_within(&ws, &["verify", m.to_str().expect("utf-8"), "--json"], 60);
    assert_eq!(code(&o), 1, "verify: {}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.verify/v1");
    assert_eq!(j["pulled"], false);
    assert_eq!(
        j["inputs_checked"], 2,
        "ok.patch and the file outside the workspace are read: {j}"
    );
    let outside_len = "outside the workspace\n".len() as u64;
    assert_eq!(j["bytes_hashed"], out_bytes + 3 + outside_len, "{j}");
    assert_eq!(names(&j["inputs_absent"]), ["patch:gone"], "{j}");
    let actual = |path: &str| -> String {
        j["mismatches"]
            .as_array()
            .expect("mismatches")
            .iter()
            .find(|m| {
                m["path"]
                    .as_str()
                    .is_some_and(|p| p == path || p.ends_with(&format!("/{path}")))
            })
            .and_then(|m| m["actual"].as_str())
            .unwrap_or_else(|| panic!("no mismatch for {path}: {j}"))
            .to_string()
    };
    // ok.patch is read and differs from the zero digest: an ordinary mismatch.
    assert!(
        actual("ok.patch").chars().all(|c| c.is_ascii_hexdigit()),
        "{j}"
    );
    assert!(
        actual("outside").chars().all(|c| c.is_ascii_hexdigit()),
        "{j}"
    );
    assert!(
        actual("../../../patches/fifo.patch").contains("a FIFO"),
        "{j}"
    );
    assert!(
        actual("../../../patches/proc/environ").contains("; not read"),
        "{j}"
    );
    let refused: Vec<&str> = j["mismatches"]
        .as_array()
        .expect("mismatches")
        .iter()
        .filter(|m| m["path"] == "/etc/passwd" || m["path"] == "/dev/zero")
        .filter_map(|m| m["actual"].as_str())
        .collect();
    assert_eq!(refused.len(), 3, "{j}");
    assert!(
        refused.iter().any(|a| a.contains("not a tool")),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|a| a.contains("not executable")),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|a| a.contains("resolves to /dev/zero")),
        "{refused:?}"
    );
}
