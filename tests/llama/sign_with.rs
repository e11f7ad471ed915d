//! `--sign KEY` on build, flip, ablate, validate and install, its environment variable and
//! config file (issue #24): each record is checked by `ssh-keygen -Y verify` (no pinforge code
//! in the verifying path); `sign FILE` killed at each step and refusing what is not a regular
//! file; `verify --installed --allowed-signers` requiring a signed receipt for the layer.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/sign_with.rs`.

use crate::common::sign_with::{key, need_ssh_keygen, s, ssh_verified};
use crate::{code, llama_build, llama_ws, pinforge, stderr, stdout};
use std::path::PathBuf;

#[test]
fn validate_signs_its_evidence() {
    if !need_ssh_keygen() {
        return;
    }
    llama_build("unpatched");
    let m = llama_ws().join("build/mrope-cpu/unpatched/manifest.json");
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let (k, signers) = key(ws, "k");
    let o = pinforge(
        ws,
        &[
            "validate",
            s(&m),
            s(&m),
            "--rows",
            "2",
            "--arch",
            "qwen2",
            "--sign",
            s(&k),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{} {}", stdout(&o), stderr(&o));
    let evidence: Vec<PathBuf> = std::fs::read_dir(ws.join("validate"))
        .expect("validate/")
        .flatten()
        .map(|e| e.path().join("evidence.json"))
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(evidence.len(), 1, "{evidence:?}");
    assert!(ssh_verified(&evidence[0], &signers, "k"), "evidence");
    let o = pinforge(
        ws,
        &["verify", s(&evidence[0]), "--allowed-signers", s(&signers)],
    );
    assert_eq!(code(&o), 0, "{} {}", stdout(&o), stderr(&o));
}
