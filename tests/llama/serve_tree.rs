//! Issue #20, the server tree: the `npm` pin (a package tarball carrying the upstream as a git
//! bundle), requested programs staged into `bin/` with a run path that reaches `lib/`, and the
//! shipped `recipes/mrope-server.toml` built for real (llama-server of llama.cpp b7698 from
//! node-llama-cpp 3.15.0), verified, run from the stage and from a fresh install root, smoked.
//!
//! The npm-pin tests build a tiny real CMake project (a library and a program that links it)
//! packed the way `npm pack` packs (`package/…`, gzip), with its tree as a real `git bundle`.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/serve_tree.rs`.

use crate::{code, json, pinforge, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

fn artifact_paths(j: &serde_json::Value) -> Vec<String> {
    crate::artifacts(j).into_iter().map(|(p, _)| p).collect()
}

/// `llama-server --version` of `exe` with an empty environment (no `LD_LIBRARY_PATH`: the run
/// path alone must find the libraries); returns what it printed.
fn server_version(exe: &Path) -> String {
    let o = Command::new(exe)
        .arg("--version")
        .env_clear()
        // The ASan runtime's leak check at exit is not what this asks.
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .output()
        .expect("run llama-server");
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "{}: {text}", exe.display());
    text
}

#[test]
fn the_server_recipe_builds_llama_server_that_runs_staged_and_installed() {
    let Some(ua) = crate::server_build("unpatched-asan") else {
        return;
    };
    crate::schemas::validate(&ua);
    let names = artifact_paths(&ua);
    assert!(names.iter().any(|n| n == "bin/llama-server"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("lib/libllama.so")),
        "{names:?}"
    );
    let mpath = ua["manifest"].as_str().expect("manifest").to_string();
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mpath).expect("read")).expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let up = deps
        .iter()
        .find(|d| d["name"] == "upstream")
        .expect("upstream");
    assert_eq!(up["uri"], "npm:node-llama-cpp@3.15.0");
    assert_eq!(
        up["digest"]["sha256"],
        "062e46ec0ae86b3c505fa13d3eb16d0a74a986241aa4859744575c3180ee39a4"
    );
    assert_eq!(
        up["digest"]["gitCommit"],
        "79efbb1339648f11c6135af95703a6eeb2ed06cf"
    );
    assert_eq!(
        up["annotations"]["bundle_sha256"],
        "0ebab4aa47eaf52b11b090be18c17e46db6d150792578fa712bfe7e6a369e4ab"
    );
    let v = pinforge(crate::llama_ws(), &["verify", &mpath]);
    assert_eq!(code(&v), 0, "{}", stdout(&v));

    // From the stage: the build info is the pin's (tag b7698, the bundle's commit).
    let root = PathBuf::from(ua["artifact_root"].as_str().expect("root"));
    let text = server_version(&root.join("bin/llama-server"));
    assert!(text.contains("version: 7698 (79efbb133)"), "{text}");

    // Installed into a fresh root, through the stable `current/` path.
    let dir = tempfile::tempdir().expect("tempdir");
    let iroot = dir.path().join("root");
    let o = pinforge(
        crate::llama_ws(),
        &[
            "install",
            &mpath,
            "--layer",
            "live",
            "--root",
            iroot.to_str().expect("utf8"),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = server_version(&iroot.join("current/bin/llama-server"));
    assert!(text.contains("version: 7698"), "{text}");

    // A second build changes nothing.
    let recipe = crate::server_recipe();
    let o = pinforge(
        crate::llama_ws(),
        &[
            "build",
            recipe.to_str().expect("utf8"),
            "--variant",
            "unpatched-asan",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["cached"], true);
}

#[test]
fn the_server_recipe_takes_the_shipped_patches_and_smokes_as_the_default_recipe_does() {
    let (Some(ua), Some(pa)) = (
        crate::server_build("unpatched-asan"),
        crate::server_build("patched-asan"),
    ) else {
        return;
    };
    // The same files; the patches change libllama.
    assert_eq!(artifact_paths(&ua), artifact_paths(&pa));
    let differing: Vec<String> = crate::artifacts(&ua)
        .into_iter()
        .zip(crate::artifacts(&pa))
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, _)| x.0)
        .collect();
    assert!(
        differing.iter().any(|n| n.starts_with("lib/libllama.so")),
        "{differing:?}"
    );
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(pa["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    assert_eq!(
        m["predicate"]["buildDefinition"]["externalParameters"]["patches"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    let ws = crate::llama_ws();
    let (c, r) = crate::smoke(
        ws,
        &[ua["manifest"].as_str().expect("m"), "--arch", "qwen2vl"],
    );
    assert_eq!((c, r["verdict"].as_str()), (1, Some("crash")), "{r}");
    let sig = r["signature"].as_str().expect("signature");
    assert!(sig.contains("heap-buffer-overflow"), "{sig}");
    let (c, r) = crate::smoke(
        ws,
        &[pa["manifest"].as_str().expect("m"), "--arch", "qwen2vl"],
    );
    assert_eq!((c, r["verdict"].as_str()), (0, Some("ok")), "{r}");
    let root = PathBuf::from(pa["artifact_root"].as_str().expect("root"));
    assert!(server_version(&root.join("bin/llama-server")).contains("version: 7698"));
}
