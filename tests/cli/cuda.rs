//! Issue #12: CUDA toolkits provisioned from pinned wheels, and system toolkits checked. These
//! fast tests use a small stand-in toolkit (real zip wheels, a real stub `libcuda.so` compiled
//! from a real header, a shell `nvcc` that answers `--version` like the real one) so that every
//! path runs on every machine; the real CUDA 13.1.1 wheels are provisioned by hand and in the
//! opt-in `PINFORGE_TEST_CUDA=1` test below.

use crate::{code, json, pinforge, pinforge_cmd, stderr, stdout, Tiny};
use std::io::Write;
use std::path::{Path, PathBuf};

const NVCC: &str = "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release 13.1, V13.1.115'\n";
const CUDA_H: &str = "typedef int CUresult;\n#define cuCtxCreate cuCtxCreate_v4\nCUresult cuInit(unsigned int Flags);\nCUresult cuCtxCreate(void **ctx, unsigned int flags, int dev);\n";

fn wheel(dir: &Path, file: &str, entries: &[(&str, &[u8], u32)]) -> String {
    let path = dir.join(file);
    let f = std::fs::File::create(&path).expect("create wheel");
    let mut z = zip::ZipWriter::new(f);
    for (name, bytes, mode) in entries {
        let o = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
        z.start_file(*name, o).expect("entry");
        z.write_all(bytes).expect("write");
    }
    z.finish().expect("finish");
    let bytes = std::fs::read(&path).expect("read wheel");
    crate::sha2_like::digest_hex(&bytes)
}

/// A two-wheel stand-in toolkit: its lock in `recipes/toolkits/fake-13.1.1.toml` under `ws`, the
/// wheels already in the cache's wheel folder (so no pip runs). Returns the cache folder.
pub(crate) fn fake_toolkit(ws: &Path) -> PathBuf {
    let cache = ws.join("cache");
    let wheels = cache.join("toolkits/wheels");
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let nvcc_file = "nvidia_cuda_nvcc-13.1.115-py3-none-any.whl";
    let rt_file = "nvidia_cuda_runtime-13.1.80-py3-none-any.whl";
    let nvcc = wheel(
        &wheels,
        nvcc_file,
        &[
            ("nvidia/cu13/bin/nvcc", NVCC.as_bytes(), 0o755),
            ("nvidia_cuda_nvcc-13.1.115.dist-info/RECORD", b"", 0o644),
        ],
    );
    let rt = wheel(
        &wheels,
        rt_file,
        &[
            ("nvidia/cu13/include/cuda.h", CUDA_H.as_bytes(), 0o644),
            ("nvidia/cu13/lib/libcudart.so.13.1.80", b"not really", 0o644),
        ],
    );
    std::fs::create_dir_all(ws.join("recipes/toolkits")).expect("mkdir");
    std::fs::write(
        ws.join("recipes/toolkits/fake-13.1.1.toml"),
        format!(
            "name = \"fake-13.1.1\"\nnvcc-version = \"13.1.115\"\nprefix = \"nvidia/cu13\"\n\
             [[wheel]]\nname = \"nvidia-cuda-nvcc\"\nversion = \"13.1.115\"\nfile = \"{nvcc_file}\"\nsha256 = \"{nvcc}\"\n\
             [[wheel]]\nname = \"nvidia-cuda-runtime\"\nversion = \"13.1.80\"\nfile = \"{rt_file}\"\nsha256 = \"{rt}\"\n"
        ),
    )
    .expect("lock");
    cache
}

fn toolkit(ws: &Path, cache: &Path, json_out: bool) -> std::process::Output {
    let mut c = pinforge_cmd(ws);
    c.args([
        "toolkit",
        "recipes/toolkits/fake-13.1.1.toml",
        "--cache-dir",
    ])
    .arg(cache);
    if json_out {
        c.arg("--json");
    }
    c.output().expect("run pinforge")
}

#[test]
fn a_toolkit_is_assembled_from_verified_wheels_reused_and_refused_when_changed() {
    let d = tempfile::tempdir().expect("tempdir");
    let ws = d.path();
    let cache = fake_toolkit(ws);

    let o = toolkit(ws, &cache, true);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["schema"], "pinforge.toolkit/v1");
    assert_eq!(j["assembled"], true);
    assert_eq!(j["stub_symbols"], 2);
    assert_eq!(
        j["nvcc_version_line"],
        "Cuda compilation tools, release 13.1, V13.1.115"
    );
    let root = PathBuf::from(j["root"].as_str().expect("root"));
    // The layout FindCUDAToolkit expects, and a link-time driver stub with the real SONAME.
    assert_eq!(
        std::fs::read_link(root.join("lib64")).expect("lib64"),
        Path::new("lib")
    );
    assert!(root.join("lib/libcudart.so").exists());
    let elf = std::process::Command::new("readelf")
        .args(["-d", "--dyn-syms"])
        .arg(root.join("lib/stubs/libcuda.so"))
        .output()
        .expect("readelf");
    let elf = String::from_utf8_lossy(&elf.stdout);
    assert!(
        elf.contains("[libcuda.so.1]") && elf.contains("cuCtxCreate_v4"),
        "{elf}"
    );
    assert!(!root.join("nvidia_cuda_nvcc-13.1.115.dist-info").exists());

    let o = toolkit(ws, &cache, false);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("verified fake-13.1.1"),
        "{}",
        stdout(&o)
    );

    // A changed file in the toolkit is found before any use, and the fix is named.
    let h = root.join("include/cuda.h");
    std::fs::write(&h, format!("{CUDA_H}/* edited */\n")).expect("tamper");
    let o = toolkit(ws, &cache, false);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("changed since it was assembled"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("hint: remove"), "{}", stderr(&o));
}

#[test]
fn a_wheel_with_other_bytes_is_refused_even_when_pip_accepts_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let ws = d.path();
    let cache = fake_toolkit(ws);
    let wheels = cache.join("toolkits/wheels");
    // The cached wheel is damaged, and a `pip` that "downloads" the damaged bytes again stands
    // in for a registry or mirror that serves something else: pinforge hashes it itself.
    let f = wheels.join("nvidia_cuda_runtime-13.1.80-py3-none-any.whl");
    let mut bytes = std::fs::read(&f).expect("wheel");
    bytes.extend_from_slice(b"tail");
    std::fs::write(&f, &bytes).expect("damage");
    let bin = ws.join("fakebin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let pip = bin.join("pip");
    std::fs::write(
        &pip,
        format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -d ] && d=$2; shift; done\ncp {} \"$d/\"\n",
            f.display()
        ),
    )
    .expect("pip");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pip, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = pinforge_cmd(ws)
        .env("PINFORGE_TOOL_PATH", &bin)
        .args([
            "toolkit",
            "recipes/toolkits/fake-13.1.1.toml",
            "--cache-dir",
        ])
        .arg(&cache)
        .output()
        .expect("run");
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("the lock says"), "{}", stderr(&o));
    // Nothing was assembled.
    let left: Vec<String> = std::fs::read_dir(cache.join("toolkits"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fake-") || n.starts_with(".assemble"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn cuda_recipe(t: &Tiny, toolchain: &str) {
    let text = format!(
        r#"name = "tinycuda"
default-variant = "cuda"
[pin]
kind = "git"
url = "{url}"
tag = "v1"
commit = "{commit}"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
{toolchain}
[base]
toolchain = "cpu"
targets = ["tiny"]
cmake = {{ BUILD_SHARED_LIBS = true }}
[variants.cuda]
patches = []
"#,
        url = t.upstream.display(),
        commit = &t.v1.to_string()[..9],
    );
    std::fs::write(t.ws.join("recipes/tinycuda.toml"), text).expect("recipe");
}

#[test]
fn a_build_with_a_provisioned_toolkit_records_it_and_never_its_cache_path() {
    let t = Tiny::new();
    let cache = fake_toolkit(&t.ws);
    cuda_recipe(&t, "cuda-toolkit = \"fake-13.1.1\"");
    let o = pinforge_cmd(&t.ws)
        .env("PINFORGE_TOOLKIT_CACHE", &cache)
        .args(["build", "recipes/tinycuda.toml", "--json"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let b = json(&o);
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(b["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let kit = deps
        .iter()
        .find(|d| d["name"] == "toolkit:fake-13.1.1")
        .expect("toolkit dependency");
    assert_eq!(
        kit["annotations"]["wheels"]
            .as_array()
            .expect("wheels")
            .len(),
        2
    );
    assert!(kit["digest"]["sha256"].is_string());
    let nvcc = deps
        .iter()
        .find(|d| d["name"] == "tool:nvcc")
        .expect("nvcc");
    assert_eq!(nvcc["annotations"]["version"], "13.1.115");
    let params = m["predicate"]["buildDefinition"]["externalParameters"].to_string();
    assert!(params.contains("CUDAToolkit_ROOT=${TOOLKIT}"), "{params}");
    assert!(!params.contains(&cache.display().to_string()), "{params}");
    let v = pinforge(
        &t.ws,
        &["verify", b["manifest"].as_str().expect("manifest")],
    );
    assert_eq!(code(&v), 0, "{}", stdout(&v));
}

#[test]
fn a_missing_system_toolkit_is_an_input_error_that_says_where_pinforge_looked() {
    let t = Tiny::new();
    cuda_recipe(
        &t,
        "nvcc = \"/nonexistent/cuda-12.8/bin/nvcc\"\nnvcc-version = \"=12.8.93\"\ncuda-root = \"/nonexistent/cuda-12.8\"",
    );
    let o = pinforge(&t.ws, &["build", "recipes/tinycuda.toml"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("/nonexistent/cuda-12.8/bin/nvcc"), "{e}");
    assert!(e.contains("only ptxas"), "{e}");
    assert!(
        !t.ws.join("vendor").exists(),
        "refused before vendor/ was touched"
    );
}

/// Opt-in (downloads ~0.5 GB): provision the real CUDA 13.1.1 toolkit from its pinned wheels
/// and check that its nvcc runs. `PINFORGE_TEST_CUDA=1 cargo test --test cli cuda::real`.
#[test]
fn real_cuda_13_1_toolkit_provisions_from_its_lock() {
    if std::env::var_os("PINFORGE_TEST_CUDA").is_none() {
        eprintln!("skipped: set PINFORGE_TEST_CUDA=1 to provision the real toolkit");
        return;
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
    let j = json(&o);
    assert_eq!(
        j["nvcc_version_line"],
        "Cuda compilation tools, release 13.1, V13.1.115"
    );
    assert!(j["stub_symbols"].as_u64().expect("n") > 400, "{j}");
}
