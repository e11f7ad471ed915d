//! Issue #12: CUDA toolkits provisioned from pinned wheels, and system toolkits checked. These
//! fast tests use a small stand-in toolkit (real zip wheels, a real stub `libcuda.so` compiled
//! from a real header, a shell `nvcc` that answers `--version` like the real one) so that every
//! path runs on every machine; the real CUDA 13.1.1 wheels are provisioned by hand and in the
//! opt-in `PINFORGE_TEST_CUDA=1` test below.

pub(crate) use crate::common::cuda::build_path;
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
    // The runtime is sealed read-only and recorded beside the toolkit (builds link it).
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let rt = std::fs::metadata(root.join("lib/libcudart.so.13.1.80")).expect("cudart");
    assert_eq!(rt.permissions().mode() & 0o777, 0o444);
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.with_file_name("runtime.json")).expect("runtime.json"),
    )
    .expect("json");
    assert_eq!(rec["schema"], "pinforge.toolkit-runtime/v1");
    assert_eq!(rec["files"][0]["path"], "lib/libcudart.so.13.1.80");
    assert_eq!(rec["files"][0]["ino"], rt.ino());
    assert_eq!(rec["files"][0]["size"], 10);

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
    // At the real folder first (the fixed build path turned off): the case ignore_options
    // exists for.
    let o = pinforge_cmd(&t.ws)
        .env("PINFORGE_TOOLKIT_CACHE", &cache)
        .env("PINFORGE_FIXED_PATH", "0")
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
    // nvcc's prefix maps name the variant folder inside `-Xcompiler=`, where ccache cannot see
    // them: the compile cache leaves exactly those two arguments out of its key, so another
    // variant or workspace reuses every CUDA unit.
    let vdir = t.ws.join("build/tinycuda/cuda");
    let conf = std::fs::read_to_string(vdir.join("ccache.conf")).expect("ccache.conf");
    let want = format!(
        "ignore_options = -Xcompiler=-ffile-prefix-map={src}=/pinforge/src \
         -Xcompiler=-ffile-prefix-map={build}=/pinforge/build",
        src = vdir.join("src").display(),
        build = vdir.join("cmake").display()
    );
    assert!(conf.lines().any(|l| l == want), "{conf}");
    assert!(conf.lines().any(|l| l.starts_with("base_dir = ")), "{conf}");
    assert!(!params.contains(&cache.display().to_string()), "{params}");
    let v = pinforge(
        &t.ws,
        &["verify", b["manifest"].as_str().expect("manifest")],
    );
    assert_eq!(code(&v), 0, "{}", stdout(&v));
    assert_eq!(build_path(&m)["annotations"]["fixed"], false);
    assert_eq!(
        build_path(&m)["annotations"]["unfixed_because"],
        "PINFORGE_FIXED_PATH=0"
    );

    // At the fixed build path every workspace names the same folders: base_dir is the fixed
    // folder and nvcc's prefix maps need no ignore_options.
    let o = pinforge_cmd(&t.ws)
        .env("PINFORGE_TOOLKIT_CACHE", &cache)
        .args(["build", "recipes/tinycuda.toml", "--json"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(json(&o)["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("manifest json");
    let bp = &build_path(&m)["annotations"];
    if bp["fixed"] == true {
        let conf = std::fs::read_to_string(vdir.join("ccache.conf")).expect("ccache.conf");
        let root = Path::new(bp["source"].as_str().expect("source"))
            .parent()
            .expect("fixed folder")
            .display()
            .to_string();
        assert!(!conf.contains("ignore_options"), "{conf}");
        assert!(
            conf.lines().any(|l| l == format!("base_dir = {root}")),
            "{conf}"
        );
        // nvcc hashes the fixed folder into its objects: it is part of the key.
        assert!(
            conf.lines()
                .any(|l| l.starts_with("namespace = gcc-") && l.matches('-').count() == 2),
            "{conf}"
        );
        // The build files name the fixed folders, never the vendor tree or the variant folder.
        let ninja = std::fs::read_to_string(vdir.join("cmake/build.ninja")).expect("build.ninja");
        let src = bp["source"].as_str().expect("source");
        assert!(ninja.contains(&format!("{src}/tiny.c")), "{ninja}");
        assert!(!ninja.contains(&t.ws.join("vendor").display().to_string()));
        assert!(!ninja.contains(&vdir.display().to_string()));
    } else {
        eprintln!("no fixed build path here: {}", bp["unfixed_because"]);
    }
}

// issue #38: nvcc's deterministic-launch settings do not reach a build server, so a
// distributed CUDA build is refused before anything is touched, naming the toolchain.
#[test]
fn a_distributed_cuda_build_is_refused_before_vendor_is_touched() {
    let t = Tiny::new();
    let cache = fake_toolkit(&t.ws);
    cuda_recipe(&t, "cuda-toolkit = \"fake-13.1.1\"");
    let o = pinforge_cmd(&t.ws)
        .env("PINFORGE_TOOLKIT_CACHE", &cache)
        .env("PINFORGE_DIST_TOKEN", "t")
        .args([
            "build",
            "recipes/tinycuda.toml",
            "--dist",
            "http://127.0.0.1:1",
        ])
        .output()
        .expect("run");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("distributed CUDA build is not supported yet"),
        "{e}"
    );
    assert!(e.contains("hint:"), "{e}");
    assert!(!t.ws.join("build/tinycuda").exists(), "nothing built");
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

/// A tiny build's manifest, read back as JSON, with its path.
fn tiny_manifest(t: &Tiny) -> (PathBuf, serde_json::Value) {
    let o = t.build("unpatched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let path = PathBuf::from(json(&o)["manifest"].as_str().expect("manifest"));
    let m = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    (path, m)
}

fn libtiny(m: &mut serde_json::Value) -> &mut serde_json::Value {
    m["subject"]
        .as_array_mut()
        .expect("subjects")
        .iter_mut()
        .find(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("lib/libtiny.so."))
        })
        .expect("libtiny subject")
}

// issue #12 "two builds of one CUDA variant compare equal under the stated rule": `diff` calls
// artifacts whose bytes differ but whose normalized digests agree under the same rule
// `equivalent` (exit 0, the rule named), `--exact` still calls them different (exit 1), and a
// normalized digest that differs, or a rule stated on one side only, is a real difference.
#[test]
fn diff_calls_pid_noise_equivalent_under_the_stated_rule_and_nothing_else() {
    let t = Tiny::new();
    let (_, m) = tiny_manifest(&t);
    let dir = t.ws.join("manifests");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let write = |name: &str, v: &serde_json::Value| {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(v).expect("json")).expect("write");
        p.display().to_string()
    };
    let with = |sha: &str, normalized: Option<&str>| {
        let mut v = m.clone();
        let s = libtiny(&mut v);
        s["digest"]["sha256"] = sha.into();
        if let Some(n) = normalized {
            s["annotations"]["normalized"] = serde_json::json!({
                "rule": "nvcc-tmpxft/v1", "sha256": n, "masked_names": 1, "build_id_masked": true,
            });
        }
        v
    };
    let (x, y, z) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
    let a = write("a.json", &with(&x, Some(&z)));
    let b = write("b.json", &with(&y, Some(&z)));
    let o = pinforge(&t.ws, &["diff", &a, &b]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("equal under nvcc-tmpxft/v1"), "{out}");
    assert!(
        out.contains("equivalent: identical but for nvcc-tmpxft/v1"),
        "{out}"
    );
    let j = json(&pinforge(&t.ws, &["diff", &a, &b, "--json"]));
    let row = j["artifacts"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["change"] == "equivalent")
        .expect("an equivalent row");
    assert_eq!(row["rule"], "nvcc-tmpxft/v1");
    assert_eq!(code(&pinforge(&t.ws, &["diff", &a, &b, "--exact"])), 1);

    let c = write("c.json", &with(&y, Some(&x)));
    let o = pinforge(&t.ws, &["diff", &a, &c]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("the builds differ"), "{}", stdout(&o));
    let d = write("d.json", &with(&y, None));
    assert_eq!(code(&pinforge(&t.ws, &["diff", &a, &d])), 1);
}

// A manifest that claims a normalized digest its artifact's bytes do not give (or names a rule
// this pinforge does not know) would let `diff` call a real difference noise: `verify` recomputes
// it and fails.
#[test]
fn verify_recomputes_a_claimed_normalized_digest() {
    let t = Tiny::new();
    let (path, mut m) = tiny_manifest(&t);
    libtiny(&mut m)["annotations"]["normalized"] =
        serde_json::json!({"rule": "nvcc-tmpxft/v1", "sha256": "d".repeat(64)});
    std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    let manifest = path.display().to_string();
    let o = pinforge(&t.ws, &["verify", &manifest]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("the rule does not apply to this file"),
        "{}",
        stdout(&o)
    );
    libtiny(&mut m)["annotations"]["normalized"]["rule"] = "made-up/v9".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    let o = pinforge(&t.ws, &["verify", &manifest]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("unknown normalization rule `made-up/v9`"),
        "{}",
        stdout(&o)
    );
}

/// Opt-in (downloads ~0.5 GB): provision the real CUDA 13.1.1 toolkit from its pinned wheels
/// and check that its nvcc runs. `PINFORGE_TEST_CUDA=1 cargo test --test cli cuda::real`.
#[test]
fn real_cuda_13_1_toolkit_provisions_from_its_lock() {
    if !crate::opted_in(
        "PINFORGE_TEST_CUDA",
        "provision the real CUDA 13.1.1 toolkit",
    ) {
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
