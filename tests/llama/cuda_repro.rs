//! Issue #25, for real and opt-in (`PINFORGE_TEST_CUDA=1 cargo test --test cli
//! cuda_repro::real`): the fattn-tile units whose device code varied from one cold compile to
//! the next, each compiled five times with CUDA 13.1.1's nvcc under the CUDA compiler launcher
//! a build uses (`setarch -R`, `MALLOC_CONF` with jemalloc's purging off: see
//! `src/artifact/build/configure.rs`, `cuda_launcher`), must give byte-identical `sm_90` code.
//! Cold: no compile cache, each compile in its own folder, its own nvcc process.

use crate::{code, json, pinforge_cmd, stderr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The units measured varying (README, Reproducible CUDA artifacts).
const VARYING: [&str; 2] = ["dkq96-dv96", "dkq112-dv112"];
/// How many cold compiles of each.
const COMPILES: usize = 5;
/// The launcher's allocator setting (`configure::CUDA_MALLOC_CONF`, unit-tested there).
const MALLOC_CONF: &str = "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1";

/// The llama.cpp tree of the shared workspace (vendored by its CPU build, which is made when
/// no tree is there yet).
fn vendor_tree() -> PathBuf {
    let find = || {
        std::fs::read_dir(crate::llama_ws().join("vendor"))
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.join("ggml/src/ggml-cuda/template-instances").is_dir())
    };
    find().unwrap_or_else(|| {
        crate::llama_build("patched");
        find().expect("a vendored llama.cpp tree with ggml-cuda")
    })
}

/// CMake's nvcc command for one ggml-cuda unit (from a configured build's
/// `compile_commands.json`, recipes/mrope-cuda.toml), device code only.
fn compile(root: &Path, tree: &Path, unit: &str, out: &Path) -> Vec<u8> {
    let src = tree.join(format!(
        "ggml/src/ggml-cuda/template-instances/fattn-tile-instance-{unit}.cu"
    ));
    let cubin = out.join("unit.cubin");
    let o = Command::new("setarch")
        .args(["-R", "env", MALLOC_CONF])
        .arg(root.join("bin/nvcc"))
        .args([
            "-DGGML_BACKEND_BUILD",
            "-DGGML_BACKEND_SHARED",
            "-DGGML_CUDA_NO_VMM",
            "-DGGML_CUDA_PEER_MAX_BATCH_SIZE=128",
            "-DGGML_CUDA_USE_GRAPHS",
            "-DGGML_SCHED_MAX_COPIES=4",
            "-DGGML_SHARED",
            "-D_GNU_SOURCE",
            "-D_XOPEN_SOURCE=600",
            "-Dggml_cuda_EXPORTS",
        ])
        .arg(format!("-I{}", tree.join("ggml/src").display()))
        .arg(format!("-I{}", tree.join("ggml/include").display()))
        .args(["-O3", "-DNDEBUG", "-std=c++17"])
        .arg("--generate-code=arch=compute_90,code=[sm_90]")
        .args(["-use_fast_math", "-extended-lambda", "-x", "cu", "-cubin"])
        .arg(&src)
        .arg("-o")
        .arg(&cubin)
        .current_dir(out)
        .env("TMPDIR", out)
        .output()
        .expect("run nvcc");
    assert!(o.status.success(), "{unit}: {}", stderr(&o));
    std::fs::read(&cubin).expect("read cubin")
}

#[test]
fn real_fattn_tile_units_compile_to_the_same_device_code_five_times_cold() {
    if !crate::opted_in(
        "PINFORGE_TEST_CUDA",
        "compile the fattn-tile units five times with the real nvcc",
    ) {
        return;
    }
    if crate::which("setarch").is_none() {
        return crate::skip("setarch (util-linux) is not installed");
    }
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-cache");
    let o = pinforge_cmd(&crate::repo_root())
        .args([
            "toolkit",
            "recipes/toolkits/cuda-13.1.1.toml",
            "--json",
            "--cache-dir",
        ])
        .arg(&cache)
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let root = PathBuf::from(json(&o)["root"].as_str().expect("toolkit root"));
    let tree = vendor_tree();
    for unit in VARYING {
        let mut digests = Vec::new();
        for i in 0..COMPILES {
            let dir = tempfile::tempdir().expect("tempdir");
            let t = Instant::now();
            let bytes = compile(&root, &tree, unit, dir.path());
            let d = crate::sha2_like::digest_hex(&bytes);
            eprintln!(
                "{unit} #{i}: {} ({} bytes, {:.0?})",
                &d[..16],
                bytes.len(),
                t.elapsed()
            );
            digests.push(d);
        }
        assert!(
            digests.iter().all(|d| *d == digests[0]),
            "{unit}: {COMPILES} cold compiles gave different sm_90 code: {digests:?}"
        );
    }
}
