// The fixtures both integration tiers share (the fast `tests/cli` and the slow `tests/llama`):
// the pinforge runner in an empty environment, the loud skip, the tiny upstream, the shared
// llama.cpp workspace, install fixtures, and per-module helpers both tiers' halves of a module
// use. Each binary uses a part of them.
#![allow(dead_code)]

pub(crate) mod audit_check;
pub(crate) mod cuda;
pub(crate) mod dist;
pub(crate) mod flip;
pub(crate) mod report;
pub(crate) mod schemas;
pub(crate) mod shard;
pub(crate) mod ship;
pub(crate) mod sign_with;
pub(crate) mod smoke_trust;

use git2::{Repository, Signature};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// CMake and Ninja come from tools/bootstrap.sh; without them the build tests cannot run.
pub(crate) fn tool_path() -> PathBuf {
    let p = repo_root().join(".tools/bin");
    assert!(
        p.join("cmake").exists() && p.join("ninja").exists(),
        "run tools/bootstrap.sh first (the README's test command does)"
    );
    p
}

/// Variables of the outer environment that a pinforge run may see, each for a reason that is
/// about reaching the machine, never about what pinforge does: everything else is cleared (as
/// jj's `TestEnvironment` does with `env_clear()`), so a developer's `PINFORGE_*`, `CFLAGS`,
/// `SOURCE_DATE_EPOCH` or `NO_COLOR` can never change what a test checks, and a new variable
/// read by pinforge cannot leak in by being missing from a list.
pub(crate) const PASSED_THROUGH: &[&str] = &[
    // Set by cargo for the test run: the cargo that runs `cargo fetch` for crate pins, and the
    // toolchain rustup selected for it.
    "CARGO",
    "RUSTUP_TOOLCHAIN",
    // The dynamic loader's search path: where containers put the GPU driver's libraries.
    "LD_LIBRARY_PATH",
    // Which GPU the machine lends to this run.
    "CUDA_VISIBLE_DEVICES",
    // How downloads (pip's wheels, cargo's crates) reach the network on this machine.
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    // The certificate bundles the clients pinforge runs read (pip through requests, git2 and
    // curl): a machine behind a TLS-inspecting proxy names its CA here.
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
];

/// Prefixes of variables passed through for the same reason: pip's index, mirror and
/// certificate settings (`PIP_INDEX_URL`, `PIP_CERT`, …) and cargo's network and registry
/// settings (`CARGO_NET_OFFLINE`, `CARGO_HTTP_CAINFO`, `CARGO_REGISTRIES_*`, source
/// replacement), which the run's own `HOME` would otherwise hide from the toolkit and crate
/// downloads.
pub(crate) const PASSED_THROUGH_PREFIXES: &[&str] = &[
    "PIP_",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
    "CARGO_SOURCE_",
];

/// Whether the outer variable `name` is passed through to pinforge runs.
pub(crate) fn passed_through(name: &str) -> bool {
    PASSED_THROUGH.contains(&name) || PASSED_THROUGH_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A folder under cargo's per-target temp folder, made once per test run.
pub(crate) fn run_dir(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}

/// The outer `HOME` (or the given variable), for the cargo and rustup folders that live there.
pub(crate) fn outer_home_dir(var: &str, below_home: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(below_home)))
}

/// A `pinforge` command in `ws` that starts from an empty environment: only what is set here,
/// the [`PASSED_THROUGH`] variables, and what each test adds.
pub(crate) fn pinforge_cmd(ws: &Path) -> Command {
    in_test_env(pinforge_exe(), ws)
}

/// The binary under test, named in one place (a test that must wrap it, as `sh -c 'ulimit …;
/// exec "$0"'` does, takes the path from here).
pub(crate) fn pinforge_exe() -> &'static str {
    env!("CARGO_BIN_EXE_pinforge")
}

/// `program` in `ws` with the environment of [`pinforge_cmd`] (apart from it, only the test of
/// that environment runs a program this way).
pub(crate) fn in_test_env(program: &str, ws: &Path) -> Command {
    let mut c = Command::new(program);
    c.current_dir(ws).env_clear();
    for (name, value) in std::env::vars_os() {
        if name.to_str().is_some_and(passed_through) {
            c.env(name, value);
        }
    }
    // The machine's compilers, git, python3 and clang (tests that need another PATH set it).
    c.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    // A home of the test run: no developer's dotfiles (pip, ccache or git configuration), and
    // no default cache folder in the developer's home. Cargo's and rustup's folders stay the
    // real ones, named explicitly, so crate pins find the registry cache offline.
    c.env("HOME", run_dir("home"));
    if let Some(cargo_home) = outer_home_dir("CARGO_HOME", ".cargo") {
        c.env("CARGO_HOME", cargo_home);
    }
    if let Some(rustup_home) = outer_home_dir("RUSTUP_HOME", ".rustup") {
        c.env("RUSTUP_HOME", rustup_home);
    }
    // The temp folder the tests themselves use (snapshots redact paths under `/tmp`).
    c.env("TMPDIR", std::env::temp_dir());
    c.env("PINFORGE_TOOL_PATH", tool_path());
    // Provisioned CUDA toolkits go to the run's temp folder, never to the developer's cache.
    c.env("PINFORGE_TOOLKIT_CACHE", run_dir("toolkit-cache"));
    // The compile cache of the test run: never the developer's own cache folder.
    c.env("PINFORGE_CACHE_DIR", run_dir("compile-cache"));
    c
}

/// The variable that turns a test skipped for a missing tool or permission into a failure:
/// `.ci/run` sets it, so CI proves that every such test ran there.
pub(crate) const REQUIRE_TOOLS: &str = "PINFORGE_REQUIRE_TOOLS";

/// A test that cannot run here, for a missing tool or permission (cargo's
/// `#[cargo_test(requires = "…")]`): said on the terminal as `ignored at run time: WHY` (written
/// past libtest's capture, so a passing run shows it too), and a failure when
/// `PINFORGE_REQUIRE_TOOLS=1`. The caller returns right after. Stable Rust cannot mark a
/// test ignored once it runs, and `#[ignore]` would stop these tests from running where the
/// tool is there, so the skip is loud instead of silent, and required in CI.
pub(crate) fn skip(why: &str) {
    let name = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    if std::env::var_os(REQUIRE_TOOLS).is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{name} cannot run here and {REQUIRE_TOOLS} is set: {why}");
    }
    say_ignored(&name, why);
}

/// An opt-in test (a long download or build that only its variable asks for): true when
/// `var` is set; otherwise says `ignored at run time: set VAR=1 to WHAT` and returns false,
/// also under `PINFORGE_REQUIRE_TOOLS` (not opting in is a choice, not a missing tool).
pub(crate) fn opted_in(var: &str, what: &str) -> bool {
    if std::env::var_os(var).is_some() {
        return true;
    }
    let name = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    say_ignored(&name, &format!("set {var}=1 to {what}"));
    false
}

pub(crate) fn say_ignored(name: &str, why: &str) {
    use std::io::Write;
    // `writeln!` on the handle, not `eprintln!`: libtest captures only the print macros.
    let _ = writeln!(
        std::io::stderr().lock(),
        "test {name} ... ignored at run time: {why}"
    );
}

/// The one llama.cpp workspace of a test run, shared by every test that needs real llama.cpp
/// builds (the brief: real builds are shared between tests, not dropped). It lives under
/// cargo's per-target temp folder, so a clean clone (CI) starts cold and a developer's rerun
/// reuses what pinforge itself considers current. Rules for its users: build through
/// [`llama_build`] or pinforge commands only (pinforge's workspace lock serializes concurrent
/// builds); never tamper with its files (copy first); never install into its default
/// `rollback/` (pass `--root` in a temp dir of the test's own).
pub(crate) fn llama_ws() -> &'static Path {
    static WS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    WS.get_or_init(|| {
        let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-ws");
        std::fs::create_dir_all(&p).expect("shared llama workspace");
        p
    })
}

/// `pinforge build --variant VARIANT --json` of the default recipe in [`llama_ws`], once per
/// test run and variant; later calls return the first result. Panics with pinforge's stderr
/// when the build fails.
pub(crate) fn llama_build(variant: &str) -> serde_json::Value {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static DONE: Mutex<BTreeMap<String, serde_json::Value>> = Mutex::new(BTreeMap::new());
    // Held across the build: two tests asking for the same variant wait for one build.
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(j) = done.get(variant) {
        return j.clone();
    }
    let o = pinforge(llama_ws(), &["build", "--variant", variant, "--json"]);
    assert_eq!(code(&o), 0, "shared build {variant}: {}", stderr(&o));
    let j = json(&o);
    done.insert(variant.to_string(), j.clone());
    j
}

/// The server recipe (issue #20): llama.cpp b7698 with `tools/server`, from the npm package
/// node-llama-cpp 3.15.0.
pub(crate) fn server_recipe() -> PathBuf {
    repo_root().join("recipes/mrope-server.toml")
}

/// `pinforge build RECIPE --variant VARIANT --json` of [`server_recipe`] in [`llama_ws`], once
/// per test run and variant, as [`llama_build`] does for the default recipe (the serving tests
/// reuse these builds; the compile cache keeps the second of patched/unpatched cheap). None,
/// said as a skip, when the pin's tarball is neither cached in the workspace nor fetchable
/// (no npm on this machine).
pub(crate) fn server_build(variant: &str) -> Option<serde_json::Value> {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static DONE: Mutex<BTreeMap<String, serde_json::Value>> = Mutex::new(BTreeMap::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(j) = done.get(variant) {
        return Some(j.clone());
    }
    let cached = llama_ws().join("vendor/cache/npm/node-llama-cpp-3.15.0.tgz");
    if !cached.is_file() && which("npm").is_none() {
        skip("npm is not installed and the server recipe's tarball is not cached");
        return None;
    }
    let recipe = server_recipe();
    let o = pinforge(
        llama_ws(),
        &[
            "build",
            recipe.to_str().expect("utf8"),
            "--variant",
            variant,
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "shared server build {variant}: {}", stderr(&o));
    let j = json(&o);
    done.insert(variant.to_string(), j.clone());
    Some(j)
}

/// The port of `url`.
pub(crate) fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Whether `port` is in LISTEN state on this machine (IPv4 loopback).
pub(crate) fn listening(port: u16) -> bool {
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    tcp.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3
            && f[3] == "0A"
            && f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

/// The port of `url` is not in LISTEN state on this machine (IPv4 loopback).
pub(crate) fn assert_not_listening(url: &str) {
    let port = port_of(url);
    assert!(!listening(port), "port {port} ({url}) is still listening");
}

/// [`assert_not_listening`] once the port closed, within `secs`: a process killed by its
/// parent's death drops its address space (and its `/proc/PID/exe`) before its sockets, and
/// an ASan build's huge shadow mappings make that gap long.
pub(crate) fn wait_not_listening(url: &str, secs: u64) {
    let port = port_of(url);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while listening(port) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        !listening(port),
        "port {port} ({url}) is still listening after {secs} s"
    );
}

/// Live processes that run a binary from under `dir`, or run in a folder under it (servers
/// pinforge starts in a temp folder of its own), as `pid exe (cwd)` lines.
pub(crate) fn running_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).expect("dir");
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let exe = std::fs::read_link(e.path().join("exe"));
        let cwd = std::fs::read_link(e.path().join("cwd"));
        let inside = |p: &std::io::Result<PathBuf>| p.as_ref().is_ok_and(|p| p.starts_with(&dir));
        if inside(&exe) || inside(&cwd) {
            left.push(format!(
                "{} {:?} ({:?})",
                e.file_name().to_string_lossy(),
                exe.ok(),
                cwd.ok()
            ));
        }
    }
    left
}

/// No live process runs a binary from under `root` or in a folder under it (the routers and
/// their children, a gate's server).
pub(crate) fn assert_no_server_of(root: &Path) {
    let left = running_under(root);
    assert!(left.is_empty(), "left running: {left:?}");
}

pub(crate) fn pinforge(ws: &Path, args: &[&str]) -> Output {
    pinforge_cmd(ws).args(args).output().expect("run pinforge")
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
pub(crate) fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub(crate) fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// Every file under `dir` with its size and modification time: "left as it was" means this
/// listing is unchanged.
pub(crate) fn listing(dir: &Path) -> Vec<String> {
    pub(crate) fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).expect("stat");
            let rel = p.strip_prefix(root).expect("prefix").display().to_string();
            if m.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &p, out);
            } else {
                out.push(format!("{rel} {} {:?}", m.len(), m.modified().ok()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// A tiny upstream: a real CMake project in a real git repository.

pub(crate) const TINY_C: &str =
    "const char *tiny_where(void) { return __FILE__; }\nint tiny_value(void) {\n    return 1;\n}\n";
pub(crate) const TINY_CMAKE: &str = "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\nadd_library(tiny SHARED tiny.c)\nset_target_properties(tiny PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin VERSION 1.0.0 SOVERSION 1)\n";

pub(crate) fn commit_files(repo: &Repository, files: &[(&str, &str)], msg: &str) -> git2::Oid {
    let root = repo.workdir().expect("workdir").to_path_buf();
    for (p, c) in files {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, c).expect("write");
    }
    let mut index = repo.index().expect("index");
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .expect("add");
    index.write().expect("write index");
    let tree = repo
        .find_tree(index.write_tree().expect("tree"))
        .expect("tree");
    let sig = Signature::new(
        "upstream",
        "up@example.invalid",
        &git2::Time::new(1_700_000_000, 0),
    )
    .expect("sig");
    let parents: Vec<git2::Commit> = repo
        .head()
        .ok()
        .and_then(|h| h.peel_to_commit().ok())
        .into_iter()
        .collect();
    let parent_refs: Vec<&git2::Commit> = parents.iter().collect();
    repo.commit(Some("HEAD"), &sig, &sig, msg, &tree, &parent_refs)
        .expect("commit")
}

pub(crate) struct Tiny {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) ws: PathBuf,
    pub(crate) upstream: PathBuf,
    pub(crate) v1: git2::Oid,
    pub(crate) v2: git2::Oid,
}

pub(crate) const TINY_PATCH: &str = "From: Bundle <bundle@example.invalid>\nDate: Mon, 30 Nov 2026 00:00:00 +0000\nSubject: [PATCH] tiny: return 2\nDescription: tiny_value() must return 2.\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/tiny/issues/7\nReported-by: someone\nOrigin: https://example.invalid/o/tiny/issues/7\nLast-Update: 2026-11-30\n\n---\ndiff --git a/tiny.c b/tiny.c\n--- a/tiny.c\n+++ b/tiny.c\n@@ -1,4 +1,4 @@\n const char *tiny_where(void) { return __FILE__; }\n int tiny_value(void) {\n-    return 1;\n+    return 2;\n }\n";

impl Tiny {
    pub(crate) fn new() -> Tiny {
        let dir = tempfile::tempdir().expect("tempdir");
        let upstream = dir.path().join("upstream");
        let repo = Repository::init(&upstream).expect("init");
        let v1 = commit_files(
            &repo,
            &[("tiny.c", TINY_C), ("CMakeLists.txt", TINY_CMAKE)],
            "v1",
        );
        repo.tag_lightweight("v1", &repo.find_object(v1, None).expect("obj"), false)
            .expect("tag");
        let v2 = commit_files(&repo, &[("README", "later\n")], "v2");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
        std::fs::write(ws.join("patches/0001-tiny-return-2.patch"), TINY_PATCH).expect("write");
        std::fs::write(ws.join("patches/series"), "0001-tiny-return-2.patch\n").expect("write");
        let t = Tiny {
            _dir: dir,
            ws,
            upstream,
            v1,
            v2,
        };
        t.recipe(&t.v1.to_string()[..9]);
        t
    }

    pub(crate) fn recipe(&self, commit: &str) {
        let text = format!(
            r#"name = "tiny"
default-variant = "patched"
[pin]
kind = "git"
url = "{url}"
tag = "v1"
commit = "{commit}"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
cmake-version = ">=3.24"
[base]
toolchain = "cpu"
targets = ["tiny"]
cmake = {{ BUILD_SHARED_LIBS = true }}
[variants.patched]
[variants.unpatched]
patches = []
"#,
            url = self.upstream.display()
        );
        std::fs::write(self.ws.join("recipes/tiny.toml"), text).expect("write recipe");
    }

    pub(crate) fn build(&self, variant: &str) -> Output {
        pinforge(
            &self.ws,
            &["build", "recipes/tiny.toml", "--variant", variant, "--json"],
        )
    }
}

pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------------------------------------
// Patch lint and list on the real bundle, with snapshots.

// ---------------------------------------------------------------------------------------------
// The real thing: llama.cpp from llama-cpp-sys-2 0.1.135, built with the embedded recipe.

pub(crate) fn artifacts(j: &serde_json::Value) -> Vec<(String, String)> {
    j["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .map(|a| {
            (
                a["path"].as_str().expect("path").to_string(),
                a["sha256"].as_str().expect("sha").to_string(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The install root: atomic three-layer rollback.

/// Two real tiny builds (patched, unpatched) in one workspace, and an install root beside it.
pub(crate) struct Installed {
    pub(crate) t: Tiny,
    pub(crate) root: PathBuf,
    pub(crate) patched: PathBuf,
    pub(crate) unpatched: PathBuf,
}

impl Installed {
    pub(crate) fn new() -> Installed {
        let t = Tiny::new();
        let p = json(&t.build("patched"));
        let u = json(&t.build("unpatched"));
        let root = t.ws.join("rollback");
        Installed {
            patched: PathBuf::from(p["manifest"].as_str().expect("manifest")),
            unpatched: PathBuf::from(u["manifest"].as_str().expect("manifest")),
            root,
            t,
        }
    }
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        let root = self.root.display().to_string();
        all.extend(["--root", &root]);
        pinforge(&self.t.ws, &all)
    }
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut c = pinforge_cmd(&self.t.ws);
        c.args(args).arg("--root").arg(&self.root);
        c
    }
    pub(crate) fn install(&self, manifest: &Path, layer: &str) -> Output {
        self.run(&[
            "install",
            manifest.to_str().expect("utf8"),
            "--layer",
            layer,
            "--json",
        ])
    }
    pub(crate) fn status(&self) -> serde_json::Value {
        let o = self.run(&["status", "--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        json(&o)
    }
    pub(crate) fn current_variant(&self) -> Option<String> {
        self.status()["current"]["variant"]
            .as_str()
            .map(str::to_string)
    }
    pub(crate) fn verify_ok(&self) -> bool {
        code(&self.run(&["verify", "--installed"])) == 0
    }
    pub(crate) fn receipts(&self) -> Vec<serde_json::Value> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(self.root.join("receipts"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        paths.sort();
        paths
            .iter()
            .map(|p| serde_json::from_slice(&std::fs::read(p).expect("receipt")).expect("json"))
            .collect()
    }
}

pub(crate) trait SpawnOutput {
    fn output_spawn(&mut self) -> std::process::Child;
}
impl SpawnOutput for Command {
    fn output_spawn(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    }
}

/// A manifest for synthetic outputs (sizes the tests need without building).
pub(crate) fn synthetic_build(dir: &Path, files: &[(&str, usize)]) -> PathBuf {
    let out = dir.join("out");
    let mut subjects = Vec::new();
    for (name, size) in files {
        let p = out.join(name);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let bytes: Vec<u8> = (0..*size).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&p, &bytes).expect("write");
        use sha2_like::digest_hex;
        subjects.push(serde_json::json!({
            "name": name, "digest": {"sha256": digest_hex(&bytes)}, "annotations": {"size": size}
        }));
    }
    let m = serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "predicateType": "https://slsa.dev/provenance/v1",
        "subject": subjects,
        "predicate": {
            "buildDefinition": {
                "buildType": "https://pinforge.invalid/cmake-variant/v1",
                "externalParameters": {"recipe": "synthetic", "variant": dir.file_name().expect("name").to_string_lossy(),
                    "build_type": "Release", "targets": [], "cmake_args": [], "patches": []},
                "internalParameters": {"artifact_root": "out", "inputs": {},
                    "input_digest": "0000000000000000000000000000000000000000000000000000000000000000"},
                "resolvedDependencies": []
            },
            "runDetails": {"builder": {"id": "test"}, "metadata": {"invocationId": "x", "startedOn": "", "finishedOn": ""}, "byproducts": []}
        }
    });
    let path = dir.join("manifest.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    path
}

/// SHA-256 through the system's sha256sum keeps the test independent of pinforge's hashing.
pub(crate) mod sha2_like {
    pub(crate) fn digest_hex(bytes: &[u8]) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sha256sum");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(bytes)
            .expect("write");
        let out = child.wait_with_output().expect("wait");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .expect("digest")
            .to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Smoke decodes.

pub(crate) fn smoke(ws: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["smoke", "--json"];
    all.extend_from_slice(args);
    let o = pinforge(ws, &all);
    let c = code(&o);
    let j = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "smoke {args:?}: not JSON ({e}): {}\n{}",
            stdout(&o),
            stderr(&o)
        )
    });
    (c, j)
}

/// Issue 4 on the real builds: the M-RoPE restore bug under AddressSanitizer, the fix, the
/// control, the silent Release over-read, crash containment, the install gate, installed smoke.
pub(crate) fn smoke_checks(ws: &Path, patched: &Path, unpatched: &Path) {
    for variant in ["unpatched-asan", "patched-asan"] {
        llama_build(variant);
    }
    let m = |v: &str| {
        ws.join(format!("build/mrope-cpu/{v}/manifest.json"))
            .display()
            .to_string()
    };

    // llama.cpp issue #20093: restoring a qwen2vl sequence state overflows `pos`.
    let (c, r) = smoke(ws, &[&m("unpatched-asan"), "--arch", "qwen2vl"]);
    assert_eq!(c, 1, "{r}");
    assert_eq!(r["verdict"], "crash", "{r}");
    let sig = r["signature"].as_str().expect("signature");
    assert!(sig.contains("heap-buffer-overflow"), "{sig}");
    assert!(sig.contains("apply_ubatch"), "{sig}");
    for key in [
        "verdict",
        "arch",
        "tokens_generated",
        "tokens_per_second",
        "signature",
        "device",
    ] {
        assert!(r.get(key).is_some(), "smoke --json lacks {key}");
    }
    assert_eq!(r["arch"], "qwen2vl");
    assert_eq!(r["device"], "cpu");

    // The fix makes it clean; the classical-RoPE control is clean on both.
    let (c, r) = smoke(ws, &[&m("patched-asan"), "--arch", "qwen2vl"]);
    assert_eq!((c, r["verdict"].as_str()), (0, Some("ok")), "{r}");
    assert!(r["signature"].is_null());
    assert_eq!(r["tokens_generated"], 16);
    for v in ["unpatched-asan", "patched-asan"] {
        let (c, r) = smoke(ws, &[&m(v), "--arch", "qwen2"]);
        assert_eq!(
            (c, r["verdict"].as_str()),
            (0, Some("ok")),
            "{v} control: {r}"
        );
    }
    // Release builds: the over-read is silent (same tokens) without the sanitizer.
    for manifest in [patched, unpatched] {
        let (c, r) = smoke(ws, &[manifest.to_str().expect("utf8"), "--arch", "qwen2vl"]);
        assert_eq!(
            (c, r["verdict"].as_str()),
            (0, Some("ok")),
            "{}: {r}",
            manifest.display()
        );
    }

    // A deliberately crashing engine call: the parent reports the signal and survives.
    let (c, r) = smoke(ws, &[patched.to_str().expect("utf8"), "--crash-test"]);
    assert_eq!(c, 1, "{r}");
    assert_eq!(r["verdict"], "crash");
    assert_eq!(r["signal"], 11, "{r}");
    assert!(
        r["signature"].as_str().expect("sig").contains("SIGSEGV"),
        "{r}"
    );

    // The install gate refuses a build whose smoke is not ok, and the swap never happens. The
    // root is this test's own (the workspace is shared).
    let root_dir = tempfile::tempdir().expect("tempdir");
    let root = root_dir.path().join("rollback");
    let o = pinforge(
        ws,
        &[
            "install",
            &m("unpatched-asan"),
            "--layer",
            "live",
            "--smoke",
            "--root",
            root.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("smoke gate"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("heap-buffer-overflow"),
        "{}",
        stdout(&o)
    );
    // The gate refused before the install root was even opened: nothing was created, and a
    // read-only `status` says there is no root rather than making one.
    assert!(!root.exists(), "the refused gate created nothing");
    let st = pinforge(
        ws,
        &["status", "--json", "--root", root.to_str().expect("utf8")],
    );
    assert_eq!(code(&st), 2, "{}", stderr(&st));
    assert!(
        stderr(&st).contains("no install root here"),
        "{}",
        stderr(&st)
    );
    let o = pinforge(
        ws,
        &[
            "install",
            &m("patched-asan"),
            "--layer",
            "live",
            "--smoke",
            "--root",
            root.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // Installed layers are smoked through the install root.
    let (c, r) = smoke(
        ws,
        &[
            "--installed",
            "--arch",
            "qwen2vl",
            "--root",
            root.to_str().expect("utf8"),
        ],
    );
    assert_eq!((c, r["verdict"].as_str()), (0, Some("ok")), "{r}");
    assert_eq!(r["target"], "mrope-cpu/patched-asan");
}
