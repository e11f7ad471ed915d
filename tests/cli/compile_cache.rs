//! The compile cache (issue #10, "Compile cache"): hits across vendor trees and workspaces,
//! byte-identical artifacts with and without the cache, per-build counts in the build record,
//! toolchains that never share an entry, and a real Redis server as the shared backend.

use crate::{code, commit_files, json, pinforge_cmd, stderr};
use git2::Repository;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DUO_A: &str =
    "const char *duo_a_where(void) { return __FILE__; }\nint duo_a(void) {\n    return 1;\n}\n";
const DUO_B: &str = "#include \"duo.h\"\nconst char *duo_b_where(void) { return __FILE__; }\nconst char *duo_h_where(void) { return duo_h_file(); }\nint duo_b(void) { return DUO_B; }\n";
// The header records its own __FILE__, reached through an include folder spelled with `..`
// (as ggml-cuda's is): a launcher that rewrote the command in one mode and not in the other
// would spell it two ways.
const DUO_H: &str = "#define DUO_B 7\nstatic const char *duo_h_file(void) { return __FILE__; }\n";
const DUO_CMAKE: &str = "cmake_minimum_required(VERSION 3.14)\nproject(duo C)\nadd_library(duo SHARED a.c b.c)\ntarget_include_directories(duo PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include/../include)\nset_target_properties(duo PROPERTIES VERSION 1.0.0 SOVERSION 1)\ninstall(TARGETS duo)\n";
const DUO_PATCH: &str = "From: Bundle <bundle@example.invalid>\nDate: Mon, 30 Nov 2026 00:00:00 +0000\nSubject: [PATCH] duo: a returns 2\nDescription: duo_a() must return 2.\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/duo/issues/1\nReported-by: someone\nLast-Update: 2026-11-30\n\n---\ndiff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1,4 +1,4 @@\n const char *duo_a_where(void) { return __FILE__; }\n int duo_a(void) {\n-    return 1;\n+    return 2;\n }\n";

/// A two-unit C project (the patch touches `a.c` only), built with debug info so that the
/// prefix maps and `hash_dir = false` are exercised, with a gcc and a clang toolchain.
struct Duo {
    dir: tempfile::TempDir,
    upstream: PathBuf,
    commit: String,
}

impl Duo {
    fn new() -> Duo {
        let dir = tempfile::tempdir().expect("tempdir");
        let upstream = dir.path().join("upstream");
        let repo = Repository::init(&upstream).expect("init");
        let oid = commit_files(
            &repo,
            &[
                ("a.c", DUO_A),
                ("b.c", DUO_B),
                ("include/duo.h", DUO_H),
                ("CMakeLists.txt", DUO_CMAKE),
            ],
            "v1",
        );
        Duo {
            dir,
            upstream,
            commit: oid.to_string(),
        }
    }

    /// A fresh workspace folder `name` holding the recipe and the patch.
    fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.dir.path().join(name);
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
        std::fs::write(ws.join("patches/0001-duo-a.patch"), DUO_PATCH).expect("patch");
        std::fs::write(ws.join("patches/series"), "0001-duo-a.patch\n").expect("series");
        let recipe = format!(
            r#"name = "duo"
default-variant = "patched"
[pin]
kind = "git"
url = "{url}"
commit = "{commit}"
[toolchain.gcc]
cc = "gcc"
cxx = "g++"
[toolchain.clang]
cc = "clang"
cxx = "clang++"
[base]
toolchain = "gcc"
build-type = "RelWithDebInfo"
targets = ["duo"]
cmake = {{ BUILD_SHARED_LIBS = true }}
[variants.patched]
[variants.unpatched]
patches = []
[variants.patched-clang]
toolchain = "clang"
"#,
            url = self.upstream.display(),
            commit = &self.commit
        );
        std::fs::write(ws.join("recipes/duo.toml"), recipe).expect("recipe");
        ws
    }

    fn cache_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn build(ws: &Path, variant: &str, extra: &[&str]) -> Output {
    build_at(ws, variant, extra, true)
}

/// A build, at the fixed build path or (`fixed` false) at the real folder.
fn build_at(ws: &Path, variant: &str, extra: &[&str], fixed: bool) -> Output {
    let mut cmd = pinforge_cmd(ws);
    if !fixed {
        cmd.env("PINFORGE_FIXED_PATH", "0");
    }
    cmd.args(["build", "recipes/duo.toml", "--variant", variant, "--json"])
        .args(extra)
        .output()
        .expect("run pinforge")
}

fn ok_json(o: &Output, what: &str) -> Value {
    assert_eq!(code(o), 0, "{what}: {}", stderr(o));
    json(o)
}

fn counts(j: &Value) -> (u64, u64) {
    let c = &j["compile_cache"];
    (
        c["hits"].as_u64().expect("hits"),
        c["misses"].as_u64().expect("misses"),
    )
}

/// Every artifact's path and digest, and the links: what "byte-identical" compares.
fn artifacts(j: &Value) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = j["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .map(|a| {
            (
                a["path"].as_str().expect("path").to_string(),
                a["sha256"].as_str().expect("sha").to_string(),
            )
        })
        .collect();
    for l in j["links"].as_array().expect("links") {
        m.insert(
            l[0].as_str().expect("link").into(),
            format!("-> {}", l[1].as_str().expect("target")),
        );
    }
    m
}

fn manifest_cache_record(j: &Value) -> Value {
    let m: Value = serde_json::from_slice(
        &std::fs::read(j["manifest"].as_str().expect("manifest")).expect("read manifest"),
    )
    .expect("manifest json");
    m["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts")
        .iter()
        .find(|b| b["name"] == "compile-cache")
        .cloned()
        .unwrap_or_else(|| panic!("no compile-cache record in {m}"))
}

// issue #10 "Compile cache": a second workspace (another folder, same cache) is served from
// the cache, the patched unit misses while the unchanged one hits across vendor trees, and
// cached, uncached and cold builds are byte-identical with one input digest.
#[test]
fn cached_and_uncached_builds_are_byte_identical_and_unchanged_units_hit_across_trees() {
    across_trees(true);
}

// The same at the real folder (no mount namespace, or PINFORGE_FIXED_PATH=0): base_dir makes
// the hits, and --no-cache still hands the compiler the rewritten command.
#[test]
fn at_the_real_folder_too_cached_and_uncached_builds_are_byte_identical() {
    across_trees(false);
}

fn across_trees(fixed: bool) {
    let build = |ws: &Path, variant: &str, extra: &[&str]| build_at(ws, variant, extra, fixed);
    let d = Duo::new();
    let cache = d.cache_dir("cache");
    let cache_arg = ["--cache-dir", cache.to_str().expect("utf-8")];
    let a = d.workspace("ws-a");
    let cold = ok_json(&build(&a, "patched", &cache_arg), "cold");
    assert_eq!(counts(&cold), (0, 2), "a cold cache compiles both units");
    assert_eq!(cold["compile_cache"]["tool"], "ccache");
    assert_eq!(cold["compile_cache"]["enabled"], true);

    // Another vendor tree (unpatched) in the same workspace: b.c hits, a.c (patched) misses.
    let other = ok_json(&build(&a, "unpatched", &cache_arg), "unpatched");
    assert_eq!(
        counts(&other),
        (1, 1),
        "only the unit the patch touches recompiles"
    );

    // Another workspace in another folder: every unit is a hit, the bytes are the same.
    let b = d.workspace("elsewhere/ws-b");
    let warm = ok_json(&build(&b, "patched", &cache_arg), "warm");
    assert_eq!(counts(&warm), (2, 0), "{warm}");
    assert_eq!(artifacts(&warm), artifacts(&cold));
    assert_eq!(
        warm["input_digest"], cold["input_digest"],
        "a hit is no input"
    );

    // Uncached: compiled again, nothing read or stored, the same bytes and identity.
    let c = d.workspace("ws-c");
    let before = dir_listing(&cache);
    let plain = ok_json(
        &build(&c, "patched", &[&cache_arg[..], &["--no-cache"]].concat()),
        "no-cache",
    );
    assert_eq!(counts(&plain), (0, 2));
    assert_eq!(plain["compile_cache"]["enabled"], false);
    assert_eq!(artifacts(&plain), artifacts(&cold));
    assert_eq!(plain["input_digest"], cold["input_digest"]);
    assert_eq!(dir_listing(&cache), before, "--no-cache stores nothing");

    // The manifest's run details carry the counts; the inputs name the launcher.
    let rec = manifest_cache_record(&warm);
    assert_eq!(rec["annotations"]["hits"], 2);
    assert_eq!(rec["annotations"]["misses"], 0);
    assert!(
        !rec.to_string().contains(cache.to_str().expect("utf-8")),
        "the manifest names no cache folder: {rec}"
    );
    let m: Value = serde_json::from_slice(
        &std::fs::read(warm["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let tool = deps
        .iter()
        .find(|d| d["name"] == "tool:ccache")
        .expect("tool:ccache is an input");
    assert_eq!(tool["annotations"]["version"], "4.14.2");

    // What the cache holds names neither workspace: results and manifests, decoded.
    let text = inspect_cache(&cache);
    for ws in [&a, &b] {
        assert!(
            !text.contains(ws.to_str().expect("utf-8")),
            "the cache holds a workspace path {}",
            ws.display()
        );
    }
}

// issue #12 "reproducible CUDA artifacts": at the fixed build path, two workspaces building at
// the same moment each see their own tree there (one namespace each), build the same bytes,
// and leave the host's folder empty.
#[test]
fn two_workspaces_building_at_once_at_the_fixed_path_build_the_same_bytes() {
    let d = Duo::new();
    let cache = d.cache_dir("cache");
    let spawn = |ws: &Path, variant: &str| {
        pinforge_cmd(ws)
            .args(["build", "recipes/duo.toml", "--variant", variant, "--json"])
            .args(["--no-cache", "--cache-dir", cache.to_str().expect("utf-8")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let (a, b, c) = (d.workspace("a"), d.workspace("far/b"), d.workspace("c"));
    let runs = [
        spawn(&a, "patched"),
        spawn(&b, "patched"),
        spawn(&c, "unpatched"),
    ];
    let outs: Vec<Value> = runs
        .into_iter()
        .map(|r| ok_json(&r.wait_with_output().expect("wait"), "concurrent"))
        .collect();
    assert_eq!(artifacts(&outs[0]), artifacts(&outs[1]));
    assert_ne!(
        artifacts(&outs[0]),
        artifacts(&outs[2]),
        "another tree, other bytes"
    );
    let m: Value = serde_json::from_slice(
        &std::fs::read(outs[0]["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    let bp = &crate::cuda::build_path(&m)["annotations"];
    if bp["fixed"] != true {
        crate::skip(&format!(
            "no fixed build path here: {}",
            bp["unfixed_because"]
        ));
        return;
    }
    // The mount points live in each build's own tmpfs: on the host the folder stays empty.
    let root = Path::new(bp["source"].as_str().expect("path"))
        .parent()
        .expect("fixed folder");
    assert!(
        std::fs::read_dir(root)
            .expect("fixed folder")
            .next()
            .is_none(),
        "{} is empty outside the builds",
        root.display()
    );
    let lib = std::fs::read(a.join("build/duo/patched/stage/lib/libduo.so.1.0.0")).expect("lib");
    let text = String::from_utf8_lossy(&lib);
    assert!(
        !text.contains(a.to_str().expect("utf-8")),
        "no workspace path"
    );
}

// issue #10 "keyed so that different toolchains never share an object": a clang build of the
// same tree after the gcc one hits nothing and lands in another namespace of the cache.
#[test]
fn gcc_and_clang_builds_never_share_a_cache_entry() {
    let d = Duo::new();
    let cache = d.cache_dir("cache");
    let cache_arg = ["--cache-dir", cache.to_str().expect("utf-8")];
    let ws = d.workspace("ws");
    let gcc = ok_json(&build(&ws, "patched", &cache_arg), "gcc");
    assert_eq!(counts(&gcc), (0, 2));
    let clang = ok_json(&build(&ws, "patched-clang", &cache_arg), "clang");
    assert_eq!(
        counts(&clang),
        (0, 2),
        "clang must not be served gcc's objects"
    );
    assert_ne!(gcc["compile_cache"]["dir"], clang["compile_cache"]["dir"]);
    let names: Vec<String> = std::fs::read_dir(&cache)
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("gcc-"))
            && names.iter().any(|n| n.starts_with("clang-")),
        "{names:?}"
    );
    // And each still hits itself.
    let again = ok_json(
        &build(&d.workspace("ws2"), "patched-clang", &cache_arg),
        "clang again",
    );
    assert_eq!(counts(&again), (2, 0));
    assert_eq!(artifacts(&again), artifacts(&clang));
}

// issue #10 "a crafted value": a remote with a second backend or a line break, and a cache
// folder whose name would add lines to ccache's configuration, are refused before anything
// is built.
#[test]
fn a_crafted_cache_remote_or_folder_is_refused_before_the_build() {
    let d = Duo::new();
    let ws = d.workspace("ws");
    for args in [
        vec!["--cache-remote", "redis://127.0.0.1:1 file:/tmp/elsewhere"],
        vec!["--cache-remote", "redis://127.0.0.1:1|read-only=false"],
        vec!["--cache-remote", "ftp://example.invalid"],
        vec!["--cache-dir", "/tmp/x\nsloppiness = time_macros"],
    ] {
        let o = build(&ws, "patched", &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
        assert!(
            !ws.join("vendor").exists(),
            "refused before vendor/ is touched"
        );
        assert!(!ws.join("build").exists());
    }
}

/// A local Redis server on a free loopback port, in its own folder, killed when dropped.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        let server = which("redis-server").unwrap_or_else(|| {
            panic!("redis-server not found: tools/bootstrap.sh installs it (apt-get install redis-server)")
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr")
            .port();
        let child = Command::new(server)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--maxmemory", "256mb"])
            .args(["--protected-mode", "yes", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let r = Redis {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// issue #10 "The shared cache for real": two workspaces in different folders, each with its
// own local cache, share a Redis server; the second is served from it, byte-identical.
#[test]
fn a_second_workspace_is_served_from_a_shared_redis_cache() {
    let redis = Redis::start();
    let d = Duo::new();
    let url = redis.url();
    let first_cache = d.cache_dir("cache-1");
    let second_cache = d.cache_dir("cache-2");
    let t0 = Instant::now();
    let first = ok_json(
        &build(
            &d.workspace("one/ws"),
            "patched",
            &[
                "--cache-dir",
                first_cache.to_str().expect("utf-8"),
                "--cache-remote",
                &url,
            ],
        ),
        "first",
    );
    let first_s = t0.elapsed().as_secs_f64();
    assert_eq!(counts(&first), (0, 2));
    let t1 = Instant::now();
    let second = ok_json(
        &build(
            &d.workspace("two/deeper/ws"),
            "patched",
            &[
                "--cache-dir",
                second_cache.to_str().expect("utf-8"),
                "--cache-remote",
                &url,
            ],
        ),
        "second",
    );
    let second_s = t1.elapsed().as_secs_f64();
    assert_eq!(counts(&second), (2, 0), "{second}");
    assert_eq!(second["compile_cache"]["remote_hits"], 2);
    assert_eq!(second["compile_cache"]["remote"], url.as_str());
    assert_eq!(artifacts(&second), artifacts(&first));
    eprintln!(
        "redis: first {first_s:.2}s ({:?}), second {second_s:.2}s ({:?}), hit rate 100%",
        counts(&first),
        counts(&second)
    );
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The cache's entries (relative paths), without ccache's bookkeeping files.
fn dir_listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(dir)
                .expect("inside")
                .to_string_lossy()
                .into_owned();
            let name = rel.rsplit('/').next().unwrap_or("").to_string();
            if p.is_dir() {
                stack.push(p);
            } else if !rel.split('/').any(|c| c == "tmp")
                && !["stats", "CACHEDIR.TAG"].contains(&name.as_str())
                && !name.ends_with(".lock")
            {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// Every cache entry, decoded with ccache itself: manifests and result metadata
/// (`--inspect`) and the stored files (`--extract-result`), as one text.
fn inspect_cache(dir: &Path) -> String {
    let ccache = crate::tool_path().join("ccache");
    let out_dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    let entries = dir_listing(dir);
    assert!(entries.len() >= 2, "{entries:?}");
    for rel in entries {
        let f = dir.join(rel);
        let o = Command::new(&ccache)
            .arg("--inspect")
            .arg(&f)
            .output()
            .expect("ccache --inspect");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let shown = String::from_utf8_lossy(&o.stdout).into_owned();
        text.push_str(&shown);
        if shown.contains("(result)") {
            let o = Command::new(&ccache)
                .current_dir(out_dir.path())
                .arg("--extract-result")
                .arg(&f)
                .output()
                .expect("ccache --extract-result");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            for e in std::fs::read_dir(out_dir.path()).expect("read").flatten() {
                let bytes = std::fs::read(e.path()).expect("extracted");
                text.push_str(&String::from_utf8_lossy(&bytes));
                std::fs::remove_file(e.path()).expect("rm");
            }
        }
    }
    assert!(!text.is_empty(), "nothing decoded from {}", dir.display());
    text
}
