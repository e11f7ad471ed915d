//! Shipping builds through a real OCI registry (issue #24): `push` to Debian's
//! `docker-registry` (distribution 2.8, no referrers API: the tag-schema fallback) on a free
//! loopback port, `pull` into a second workspace, `install oci://…@sha256:…` into a fresh root,
//! read back independently with `skopeo` and raw HTTP; and the refusals (a tampered blob, a
//! key not in allowed_signers, an unsigned artifact under a policy, a moved tag, an escaping
//! layer path), each exit 1 with the install root unchanged.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/ship.rs`.

use crate::common::ship::{push, Registry};
use crate::{code, pinforge_cmd, stderr};
use std::path::{Path, PathBuf};

#[test]
fn a_real_llama_build_ships_byte_identical() {
    let Some(reg) = Registry::start() else { return };
    let pa = crate::llama_build("patched");
    let m = PathBuf::from(pa["manifest"].as_str().expect("manifest"));
    let dir = tempfile::tempdir().expect("tempdir");
    let d = push(
        dir.path(),
        &m,
        &format!("{}/llama/mrope-cpu:patched", reg.host()),
    );
    let ws2 = dir.path().join("ws2");
    std::fs::create_dir_all(&ws2).expect("ws2");
    let root = dir.path().join("root");
    let o = pinforge_cmd(&ws2)
        .args([
            "install",
            &format!("oci://{}/llama/mrope-cpu@sha256:{d}", reg.host()),
            "--layer",
            "live",
            "--root",
        ])
        .arg(&root)
        .output()
        .expect("install");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pinforge_cmd(&ws2)
        .args(["verify", "--installed", "live", "--root"])
        .arg(&root)
        .output()
        .expect("verify");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let art = fsx_root(&m);
    for (path, _) in crate::artifacts(&pa) {
        let a = std::fs::read(art.join(&path)).expect("original");
        let b = std::fs::read(root.join("live").join(&path)).expect("installed");
        assert!(a == b, "{path} differs after shipping");
    }
}

/// The build's artifact root (`stage` beside the manifest, as the manifest says).
fn fsx_root(m: &Path) -> PathBuf {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m).expect("manifest")).expect("json");
    let ar = v["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"]
        .as_str()
        .expect("artifact_root");
    m.parent().expect("parent").join(ar)
}
