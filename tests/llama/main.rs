//! The slow integration tier (`cargo test --features slow-tests --test llama`): every test that
//! builds the real llama.cpp of the default recipe, the server recipe's `llama-server`, or a
//! CUDA variant. Each variant is built once per run in the one shared workspace (`llama_ws`,
//! under cargo's per-target temp folder, behind pinforge's own workspace lock) and reused by
//! every test that needs it; the compile cache makes the second build of the same sources
//! cheap. `.ci/run` runs this tier after the fast one.

// The tests read the files they made with plain std::fs: clippy.toml's fs entries are about
// files data names.
#![allow(clippy::disallowed_methods)]

#[path = "../common/mod.rs"]
mod common;
pub(crate) use common::*;
// Shared helpers that the slow modules name by their fast modules' paths.
pub(crate) use common::{schemas, smoke_trust};

use std::path::PathBuf;
use std::process::Command;

mod ablate_soak;
mod audit_check;
mod bisect;
mod cuda;
mod cuda_repro;
mod current_28902;
mod dist;
mod flip;
mod flip_soak;
mod install_server;
mod report;
mod serve_soak;
mod serve_tree;
mod shard;
mod ship;
mod sign_with;
mod trust_trial;
mod validate;

/// Builds `patched` and `unpatched` in workspace A and `patched` again in workspace B (three
/// real llama.cpp builds, about 90 s each on 2 cores) and checks everything the foundation
/// issue asks to be shown on the real tree.
#[test]
fn llama_cpp_end_to_end() {
    // Workspace A is the run's shared one (its builds serve the flip, ablation and validation
    // tests too); B is this test's own, and only B's files are tampered with below.
    let a = llama_ws();
    let b = tempfile::tempdir().expect("tempdir");

    let pa = llama_build("patched");
    assert_eq!(pa["variant"], "patched");
    let names: Vec<String> = artifacts(&pa).into_iter().map(|(p, _)| p).collect();
    assert!(
        names.iter().any(|n| n.starts_with("lib/libllama.so")),
        "{names:?}"
    );

    // The manifest lists the crate's SHA-256 and the three patches, in order.
    let mpath = PathBuf::from(pa["manifest"].as_str().expect("manifest"));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mpath).expect("manifest")).expect("json");
    assert_eq!(m["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(m["predicateType"], "https://slsa.dev/provenance/v1");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let upstream = deps
        .iter()
        .find(|d| d["name"] == "upstream")
        .expect("upstream");
    assert_eq!(
        upstream["digest"]["sha256"],
        "95cf8be1ff000b531ac0523c66a9ffce3cef6d09a5d95b21cad745bedb115468"
    );
    assert_eq!(upstream["uri"], "crate:llama-cpp-sys-2@0.1.135");
    let patch_deps: Vec<&serde_json::Value> = deps
        .iter()
        .filter(|d| d["name"].as_str().is_some_and(|n| n.starts_with("patch:")))
        .collect();
    assert_eq!(patch_deps.len(), 3);
    for (i, d) in patch_deps.iter().enumerate() {
        assert_eq!(d["annotations"]["order"], i + 1);
        assert!(d["digest"]["sha256"].is_string());
    }
    for tool in ["tool:cc", "tool:cxx", "tool:cmake", "tool:ninja"] {
        let t = deps.iter().find(|d| d["name"] == tool).expect(tool);
        assert!(t["annotations"]["version"].is_string(), "{tool}");
    }
    // The CPU backend keeps its instruction sets (regression: SOURCE_DATE_EPOCH in the
    // environment used to drop them; the test environment may well have it set).
    // Read from the build graph, not the log: in the shared workspace the last build may have
    // been a cached one, whose log has no configure output.
    let ninja = std::fs::read_to_string(a.join("build/mrope-cpu/patched/cmake/build.ninja"))
        .expect("build.ninja");
    assert!(ninja.contains("-mavx2"), "ggml-cpu built without AVX2");

    let v = pinforge(a, &["verify", mpath.to_str().expect("utf8")]);
    assert_eq!(code(&v), 0, "{}", stdout(&v));

    // No-op rebuild.
    let o = pinforge(a, &["build", "--json"]);
    let again = json(&o);
    assert_eq!(again["cached"], true, "{again}");
    assert_eq!(again["steps_run"], 0);

    // Unpatched differs in the patch list and in libllama only.
    let ua = llama_build("unpatched");
    let (pa_art, ua_art) = (artifacts(&pa), artifacts(&ua));
    assert_eq!(
        pa_art.iter().map(|(p, _)| p).collect::<Vec<_>>(),
        ua_art.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let differing: Vec<&String> = pa_art
        .iter()
        .zip(&ua_art)
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, _)| &x.0)
        .collect();
    assert_eq!(differing.len(), 1, "{differing:?}");
    assert!(differing[0].starts_with("lib/libllama.so"), "{differing:?}");

    // The standard tools accept the shipped patches on the pristine tree.
    let pristine = std::fs::read_dir(a.join("vendor"))
        .expect("vendor")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.starts_with("llama-cpp-sys-2-0.1.135-") && !n.contains('+')
        })
        .expect("pristine tree");
    for name in std::fs::read_to_string(repo_root().join("patches/series"))
        .expect("series")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let st = Command::new("git")
            .current_dir(&pristine)
            .args(["apply", "--check"])
            .arg(repo_root().join("patches").join(name))
            .status()
            .expect("git apply");
        assert!(st.success(), "git apply --check {name}");
    }

    // Reproducible: workspace B gives byte-identical artifacts and the same input digest.
    let o = pinforge(b.path(), &["build", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let pb = json(&o);
    assert_eq!(
        artifacts(&pa),
        artifacts(&pb),
        "artifacts differ between workspaces"
    );
    assert_eq!(pa["input_digest"], pb["input_digest"]);
    // issue #10 compile cache: B (another folder, the run's compile cache) is served from
    // A's objects, compiles nothing, and its artifacts are A's bytes (checked above).
    let cc = &pb["compile_cache"];
    assert!(cc["hits"].as_u64().unwrap_or(0) > 0, "B hit nothing: {cc}");
    assert_eq!(cc["misses"], 0, "B recompiled units A had compiled: {cc}");
    for (path, _) in artifacts(&pb) {
        let root = PathBuf::from(pb["artifact_root"].as_str().expect("artifact_root"));
        let bytes = std::fs::read(root.join(&path)).expect("artifact");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&b.path().display().to_string()),
            "{path} leaks the workspace path"
        );
    }

    smoke_checks(
        a,
        &mpath,
        &a.join("build/mrope-cpu/unpatched/manifest.json"),
    );

    // Tamper with libllama (in B: A is shared): verify exits 1 naming it.
    let mpath_b = PathBuf::from(pb["manifest"].as_str().expect("manifest"));
    let lib = PathBuf::from(pb["artifact_root"].as_str().expect("artifact_root")).join(
        names
            .iter()
            .find(|n| n.starts_with("lib/libllama.so"))
            .expect("libllama"),
    );
    let mut bytes = std::fs::read(&lib).expect("lib");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&lib, bytes).expect("tamper");
    let v = pinforge(b.path(), &["verify", mpath_b.to_str().expect("utf8")]);
    assert_eq!(code(&v), 1);
    assert!(stdout(&v).contains("libllama.so"), "{}", stdout(&v));
}
