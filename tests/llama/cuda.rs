//! Issue #12: CUDA toolkits provisioned from pinned wheels, and system toolkits checked. These
//! fast tests use a small stand-in toolkit (real zip wheels, a real stub `libcuda.so` compiled
//! from a real header, a shell `nvcc` that answers `--version` like the real one) so that every
//! path runs on every machine; the real CUDA 13.1.1 wheels are provisioned by hand and in the
//! opt-in `PINFORGE_TEST_CUDA=1` test below.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/cuda.rs`.

use crate::common::cuda::build_path;
use crate::{code, json, pinforge_cmd, stderr, stdout};
use std::path::PathBuf;

/// Opt-in, the CUDA path for real on any machine (`PINFORGE_TEST_CUDA=1 cargo test --test cli
/// cuda::real`): provision CUDA 13.1.1 from its wheels, build `cuda-patched` of
/// recipes/mrope-cuda.toml (sm_90) in the run's shared llama.cpp workspace, verify it, smoke it
/// (on the CPU without a driver, on the GPU with one), then build `cuda-unpatched`, which
/// differs only in libllama's patches: every CUDA unit must come from the compile cache and
/// libggml-cuda must be byte-identical. A cold build compiles 126 CUDA units (about 20 minutes
/// on 2 cores); `PINFORGE_TEST_CUDA_CACHE=DIR` reuses a warm compile cache folder.
#[test]
fn real_cuda_13_1_variant_builds_verifies_smokes_and_reuses_ggml_cuda() {
    if !crate::opted_in("PINFORGE_TEST_CUDA", "build the real CUDA variant") {
        return;
    }
    let ws = crate::llama_ws();
    let recipe = crate::repo_root().join("recipes/mrope-cuda.toml");
    let run = |args: &[&str]| {
        let mut c = pinforge_cmd(ws);
        c.env(
            "PINFORGE_TOOLKIT_CACHE",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-cache"),
        );
        if let Some(dir) = std::env::var_os("PINFORGE_TEST_CUDA_CACHE") {
            c.env("PINFORGE_CACHE_DIR", dir);
        }
        c.args(args).output().expect("run pinforge")
    };
    let build = |variant: &str| {
        let o = run(&[
            "build",
            recipe.to_str().expect("utf-8"),
            "--variant",
            variant,
            "--json",
        ]);
        assert_eq!(code(&o), 0, "{variant}: {}", stderr(&o));
        json(&o)
    };
    let patched = build("cuda-patched");
    let manifest = patched["manifest"].as_str().expect("manifest").to_string();
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("read")).expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let kit = deps
        .iter()
        .find(|d| d["name"] == "toolkit:cuda-13.1.1")
        .expect("toolkit dependency");
    assert_eq!(
        kit["annotations"]["wheels"]
            .as_array()
            .expect("wheels")
            .len(),
        6
    );
    let subject = |name: &str| {
        m["subject"]
            .as_array()
            .expect("subjects")
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no subject {name}"))
            .clone()
    };
    for lib in ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"] {
        assert_eq!(
            subject(&format!("lib/{lib}"))["annotations"]["shipped_from"],
            "toolkit:cuda-13.1.1"
        );
    }
    let cuda_lib = subject("lib/libggml-cuda.so.0.9.5");
    assert_eq!(
        cuda_lib["annotations"]["normalized"]["rule"],
        "nvcc-tmpxft/v1"
    );
    let masked = cuda_lib["annotations"]["normalized"]["masked_names"].as_u64();
    assert!(masked.expect("masked_names") > 100, "{cuda_lib}");
    // nvcc's `_INTERNAL_` names hash the source's real path: at the fixed build path that is
    // the same in every workspace; at the real folder the library is marked, so that a
    // difference between two trees is explained rather than called noise.
    assert_eq!(
        cuda_lib["annotations"]["nvcc_path_hashed_names"], true,
        "{cuda_lib}"
    );
    let fixed = build_path(&m)["annotations"]["fixed"] == true;
    assert_eq!(
        cuda_lib["annotations"]["embeds_machine_path"].as_bool(),
        (!fixed).then_some(true),
        "{cuda_lib}"
    );
    // No hard driver dependency: the engine loads where no driver is.
    let root = PathBuf::from(patched["artifact_root"].as_str().expect("root"));
    let bytes = std::fs::read(root.join("lib/libggml-cuda.so.0.9.5")).expect("read");
    let needed = pinforge_base::elf::needed(&bytes).expect("ELF");
    assert!(needed.iter().any(|n| n == "libcudart.so.13"), "{needed:?}");
    assert!(
        !needed.iter().any(|n| n.starts_with("libcuda.so")),
        "{needed:?}"
    );

    let v = run(&["verify", &manifest]);
    assert_eq!(code(&v), 0, "{}", stdout(&v));
    let s = run(&["smoke", &manifest, "--json"]);
    assert_eq!(code(&s), 0, "{}{}", stdout(&s), stderr(&s));
    let s = json(&s);
    assert_eq!(s["verdict"], "ok", "{s}");
    if s["cuda"]["devices"]
        .as_array()
        .is_some_and(|d| d.is_empty())
    {
        assert_eq!(s["device"], "cpu", "{s}");
        assert!(s["device_reason"].as_str().is_some(), "{s}");
    } else {
        assert!(
            s["device"].as_str().is_some_and(|d| d.starts_with("cuda:")),
            "{s}"
        );
    }

    let unpatched = build("cuda-unpatched");
    let cache = &unpatched["compile_cache"];
    if !unpatched["cached"].as_bool().unwrap_or(false) {
        assert!(cache["misses"].as_u64().expect("misses") <= 2, "{cache}");
        assert!(cache["hits"].as_u64().expect("hits") > 250, "{cache}");
    }
    let d = run(&[
        "diff",
        &manifest,
        unpatched["manifest"].as_str().expect("manifest"),
        "--json",
    ]);
    let rows = json(&d)["artifacts"].as_array().expect("rows").clone();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no row {name}"))["change"]
            .clone()
    };
    assert_eq!(row("lib/libggml-cuda.so.0.9.5"), "same");
    assert_eq!(row("lib/libllama.so.0.0.0"), "different");

    // PINFORGE_TEST_CUDA=repro: the same variant compiled again in another workspace with the
    // cache off (about 20 minutes on 2 cores) compares equal, byte for byte or under the
    // stated rule, never `different`.
    if std::env::var("PINFORGE_TEST_CUDA").as_deref() != Ok("repro") || !fixed {
        return;
    }
    let other = tempfile::tempdir().expect("tempdir");
    let o = pinforge_cmd(other.path())
        .env(
            "PINFORGE_TOOLKIT_CACHE",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-cache"),
        )
        .args([
            "build",
            recipe.to_str().expect("utf-8"),
            "--variant",
            "cuda-patched",
        ])
        .args(["--no-cache", "--json"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let again = json(&o);
    let d = run(&[
        "diff",
        &manifest,
        again["manifest"].as_str().expect("manifest"),
        "--json",
    ]);
    assert_eq!(code(&d), 0, "{}", stdout(&d));
    for r in json(&d)["artifacts"].as_array().expect("rows") {
        assert!(r["change"] == "same" || r["change"] == "equivalent", "{r}");
    }
}
