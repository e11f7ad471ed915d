//! The one integration-test binary: the `pinforge` executable run as a user runs it, on real
//! temp directories, real git repositories (made with libgit2), real CMake and Ninja (from
//! `tools/bootstrap.sh`), and the real llama.cpp tree of the default recipe. A tiny C project
//! pinned from a local git repository gives fast tests of every path; the llama.cpp tests are
//! the real ones the issue asks for.

// The tests read the files they made with plain std::fs: clippy.toml's fs entries are about
// files data names. The rules this also lifts (set_var, remove_var, exit) are kept for the
// tests by `trust_toolkit::test_code_keeps_the_rules_the_allow_lifts`.
#![allow(clippy::disallowed_methods)]

// One module per workstream; the shared fixtures (pinforge runner, tiny upstream, install
// fixture) live in this file and are reachable from every module as `crate::…`.
mod ablate_soak;
mod ablate_txn;
mod artifacts;
mod attribution;
mod audit;
mod audit_check;
mod audit_revert;
mod bundle;
mod compile_cache;
mod cuda;
mod cuda_repro;
mod diff;
mod flip;
mod flip_soak;
mod flip_txn;
mod history;
mod inputs;
mod install_server;
mod noop;
mod output;
mod patch_apply;
mod rebase_resolve;
mod report;
mod schemas;
mod serve_fake;
mod serve_soak;
mod serve_tree;
mod shard;
mod ship;
mod ship_inputs;
mod sign;
mod sign_p256;
mod sign_prompt;
mod sign_txn;
mod sign_with;
mod smoke_trust;
mod snapshots_cli;
mod store_objects;
mod trust_export;
mod trust_install;
mod trust_output;
mod trust_rebase;
mod trust_toolkit;
mod trust_trial;
mod ux;
mod validate;

use git2::{Repository, Signature};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// CMake and Ninja come from tools/bootstrap.sh; without them the build tests cannot run.
fn tool_path() -> PathBuf {
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
const PASSED_THROUGH: &[&str] = &[
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
const PASSED_THROUGH_PREFIXES: &[&str] = &[
    "PIP_",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
    "CARGO_SOURCE_",
];

/// Whether the outer variable `name` is passed through to pinforge runs.
fn passed_through(name: &str) -> bool {
    PASSED_THROUGH.contains(&name) || PASSED_THROUGH_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A folder under cargo's per-target temp folder, made once per test run.
fn run_dir(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}

/// The outer `HOME` (or the given variable), for the cargo and rustup folders that live there.
fn outer_home_dir(var: &str, below_home: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(below_home)))
}

/// A `pinforge` command in `ws` that starts from an empty environment: only what is set here,
/// the [`PASSED_THROUGH`] variables, and what each test adds.
fn pinforge_cmd(ws: &Path) -> Command {
    in_test_env(pinforge_exe(), ws)
}

/// The binary under test, named in one place (a test that must wrap it, as `sh -c 'ulimit …;
/// exec "$0"'` does, takes the path from here).
fn pinforge_exe() -> &'static str {
    env!("CARGO_BIN_EXE_pinforge")
}

/// `program` in `ws` with the environment of [`pinforge_cmd`] (apart from it, only the test of
/// that environment runs a program this way).
fn in_test_env(program: &str, ws: &Path) -> Command {
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
const REQUIRE_TOOLS: &str = "PINFORGE_REQUIRE_TOOLS";

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

fn say_ignored(name: &str, why: &str) {
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
fn llama_ws() -> &'static Path {
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
fn llama_build(variant: &str) -> serde_json::Value {
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
fn server_recipe() -> PathBuf {
    repo_root().join("recipes/mrope-server.toml")
}

/// `pinforge build RECIPE --variant VARIANT --json` of [`server_recipe`] in [`llama_ws`], once
/// per test run and variant, as [`llama_build`] does for the default recipe (the serving tests
/// reuse these builds; the compile cache keeps the second of patched/unpatched cheap). None,
/// said as a skip, when the pin's tarball is neither cached in the workspace nor fetchable
/// (no npm on this machine).
fn server_build(variant: &str) -> Option<serde_json::Value> {
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
fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Whether `port` is in LISTEN state on this machine (IPv4 loopback).
fn listening(port: u16) -> bool {
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

fn pinforge(ws: &Path, args: &[&str]) -> Output {
    pinforge_cmd(ws).args(args).output().expect("run pinforge")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// Every file under `dir` with its size and modification time: "left as it was" means this
/// listing is unchanged.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
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

const TINY_C: &str =
    "const char *tiny_where(void) { return __FILE__; }\nint tiny_value(void) {\n    return 1;\n}\n";
const TINY_CMAKE: &str = "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\nadd_library(tiny SHARED tiny.c)\nset_target_properties(tiny PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin VERSION 1.0.0 SOVERSION 1)\n";

fn commit_files(repo: &Repository, files: &[(&str, &str)], msg: &str) -> git2::Oid {
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

struct Tiny {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    upstream: PathBuf,
    v1: git2::Oid,
    v2: git2::Oid,
}

const TINY_PATCH: &str = "From: Bundle <bundle@example.invalid>\nDate: Mon, 30 Nov 2026 00:00:00 +0000\nSubject: [PATCH] tiny: return 2\nDescription: tiny_value() must return 2.\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/tiny/issues/7\nReported-by: someone\nOrigin: https://example.invalid/o/tiny/issues/7\nLast-Update: 2026-11-30\n\n---\ndiff --git a/tiny.c b/tiny.c\n--- a/tiny.c\n+++ b/tiny.c\n@@ -1,4 +1,4 @@\n const char *tiny_where(void) { return __FILE__; }\n int tiny_value(void) {\n-    return 1;\n+    return 2;\n }\n";

impl Tiny {
    fn new() -> Tiny {
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

    fn recipe(&self, commit: &str) {
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

    fn build(&self, variant: &str) -> Output {
        pinforge(
            &self.ws,
            &["build", "recipes/tiny.toml", "--variant", variant, "--json"],
        )
    }
}

// jj's `test_no_forgotten_test_files`: a file in tests/cli/ that is no `mod` of this file is
// never compiled, so its tests would silently never run.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    use std::collections::BTreeSet;
    let dir = repo_root().join("tests/cli");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("tests/cli/main.rs");
    let declared: BTreeSet<String> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    let mut files = BTreeSet::new();
    for e in std::fs::read_dir(&dir).expect("tests/cli").flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".rs") {
            if stem != "main" {
                files.insert(stem.to_string());
            }
        } else if p.join("mod.rs").is_file() {
            files.insert(name);
        }
    }
    let forgotten: Vec<&String> = files.difference(&declared).collect();
    assert!(
        forgotten.is_empty(),
        "tests/cli/ files that are no `mod` of main.rs (never compiled, never run): {forgotten:?}"
    );
    // And one test binary (DESIGN §4.7): cargo would build any other tests/*.rs or
    // tests/*/main.rs as a binary of its own.
    let others: Vec<String> = std::fs::read_dir(repo_root().join("tests"))
        .expect("tests")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "rs")
                || (p.join("main.rs").is_file() && !p.ends_with("cli"))
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(others.is_empty(), "a second test binary: {others:?}");
}

// The environment pinforge sees is what the harness sets and nothing else: cargo's own run-time
// variables (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, …), which the test process always has, and
// whatever the developer exported (PINFORGE_FIXED_PATH, CFLAGS, …) never reach it.
#[test]
fn pinforge_runs_in_an_empty_environment_plus_what_the_harness_sets() {
    use std::collections::BTreeSet;
    let dir = tempfile::tempdir().expect("tempdir");
    let o = in_test_env("env", dir.path()).output().expect("run env");
    assert!(o.status.success(), "{}", stderr(&o));
    let seen: BTreeSet<String> = stdout(&o)
        .lines()
        .filter_map(|l| Some(l.split_once('=')?.0.to_string()))
        .collect();
    let set_here = [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "TMPDIR",
        "PINFORGE_TOOL_PATH",
        "PINFORGE_TOOLKIT_CACHE",
        "PINFORGE_CACHE_DIR",
    ];
    let allowed: BTreeSet<String> = set_here
        .iter()
        .chain(PASSED_THROUGH)
        .map(|v| v.to_string())
        .collect();
    let leaked: Vec<&String> = seen
        .difference(&allowed)
        .filter(|v| !passed_through(v))
        .collect();
    assert!(
        leaked.is_empty(),
        "leaked into the test environment: {leaked:?}"
    );
    for v in ["PATH", "HOME", "TMPDIR", "PINFORGE_TOOL_PATH"] {
        assert!(seen.contains(v), "{v} is set: {seen:?}");
    }
    // The home is the run's own, never the developer's.
    let home = stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("HOME=").map(PathBuf::from))
        .expect("HOME");
    assert!(
        home.starts_with(env!("CARGO_TARGET_TMPDIR")),
        "{}",
        home.display()
    );
    // And every test reaches the binary through this environment: one place names it.
    let exe = concat!("CARGO_BIN_", "EXE_pinforge");
    for e in std::fs::read_dir(repo_root().join("tests/cli"))
        .expect("tests/cli")
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let uses = text.matches(exe).count();
        let want = usize::from(e.file_name() == "main.rs");
        assert_eq!(
            uses,
            want,
            "{}: run pinforge through pinforge_cmd",
            e.path().display()
        );
    }
}

#[test]
fn tiny_build_verify_noop_and_tamper() {
    let t = Tiny::new();
    let o = t.build("patched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    for key in ["variant", "manifest", "input_digest", "cached", "artifacts"] {
        assert!(j.get(key).is_some(), "build --json lacks {key}: {j}");
    }
    assert_eq!(j["cached"], false);
    let artifacts = j["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), 1, "{j}");
    assert_eq!(artifacts[0]["path"], "lib/libtiny.so.1.0.0");
    let manifest = PathBuf::from(j["manifest"].as_str().expect("manifest"));

    // The toolchain recorded is the binaries that ran, not wrapper scripts (pip's console
    // script for cmake once stood in for it, with this checkout's path in its shebang).
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("manifest")).expect("json");
    for tool in ["tool:cmake", "tool:ninja", "tool:cc"] {
        let p = m["predicate"]["buildDefinition"]["internalParameters"]["inputs"][tool]
            .as_str()
            .unwrap_or_else(|| panic!("{tool} recorded"));
        let head = std::fs::read(p).expect("tool binary");
        assert!(
            head.starts_with(b"\x7fELF"),
            "{tool} recorded as {p}, not an ELF binary"
        );
    }

    // The lock file records the full commit the tag resolved to.
    let lock = std::fs::read_to_string(t.ws.join("recipes/tiny.lock")).expect("lock written");
    assert!(lock.contains(&t.v1.to_string()), "{lock}");

    // The patch is one commit on top of the pristine base, with attribution trailers.
    let tree = j["source_tree"].as_str().expect("source_tree");
    let repo = Repository::open(tree).expect("vendor repo");
    let head = repo.head().expect("head").peel_to_commit().expect("commit");
    let msg = head.message().expect("message");
    assert!(msg.starts_with("tiny: return 2\n"), "{msg}");
    assert!(msg.contains("Upstream-Status: Pending\n"), "{msg}");
    assert!(msg.contains("Reported-by: someone\n"), "{msg}");
    assert!(
        msg.contains("Pinforge-Patch: 0001-tiny-return-2.patch\n"),
        "{msg}"
    );
    let base = head.parent(0).expect("base");
    assert_eq!(base.parent_count(), 0, "the base is the first commit");
    assert_eq!(
        repo.find_reference("refs/tags/pinforge/pristine")
            .expect("tag")
            .peel_to_commit()
            .expect("commit")
            .id(),
        base.id()
    );

    // verify: ok, then a no-op rebuild recompiles nothing and reports cached.
    let v = pinforge(
        &t.ws,
        &["verify", manifest.to_str().expect("utf8"), "--json"],
    );
    assert_eq!(code(&v), 0, "{}", stdout(&v));
    assert_eq!(json(&v)["ok"], true);
    let before = std::fs::read(&manifest).expect("manifest");
    let again = t.build("patched");
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    let j2 = json(&again);
    assert_eq!(j2["cached"], true, "{j2}");
    assert_eq!(j2["steps_run"], 0);
    assert_eq!(j2["input_digest"], j["input_digest"]);
    assert_eq!(
        std::fs::read(&manifest).expect("manifest"),
        before,
        "cached keeps the manifest"
    );

    // One changed byte in an output: exit 1, naming that file.
    let lib = t.ws.join("build/tiny/patched/stage/lib/libtiny.so.1.0.0");
    let mut bytes = std::fs::read(&lib).expect("lib");
    bytes[100] ^= 0xff;
    std::fs::write(&lib, bytes).expect("tamper");
    let v = pinforge(
        &t.ws,
        &["verify", manifest.to_str().expect("utf8"), "--json"],
    );
    assert_eq!(code(&v), 1);
    let report = json(&v);
    assert_eq!(report["ok"], false);
    let mismatches = report["mismatches"].as_array().expect("mismatches");
    assert_eq!(mismatches.len(), 1, "{report}");
    assert!(mismatches[0]["path"]
        .as_str()
        .expect("path")
        .ends_with("lib/libtiny.so.1.0.0"));
    for key in ["path", "expected", "actual"] {
        assert!(mismatches[0].get(key).is_some());
    }
    // A modified input (the patch file) is caught too.
    let patch = t.ws.join("patches/0001-tiny-return-2.patch");
    std::fs::write(&patch, TINY_PATCH.replace("return 2.", "return two.")).expect("edit");
    let v = pinforge(&t.ws, &["verify", manifest.to_str().expect("utf8")]);
    assert_eq!(code(&v), 1);
    assert!(stdout(&v).contains("MISMATCH input"), "{}", stdout(&v));
    assert!(
        stdout(&v).contains("0001-tiny-return-2.patch"),
        "{}",
        stdout(&v)
    );
}

#[test]
fn tiny_patched_and_unpatched_differ_in_patches_and_the_library_only() {
    let t = Tiny::new();
    let p = json(&t.build("patched"));
    let u = json(&t.build("unpatched"));
    let manifest = |j: &serde_json::Value| -> serde_json::Value {
        let path = j["manifest"].as_str().expect("manifest");
        serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
    };
    let (mp, mu) = (manifest(&p), manifest(&u));
    let patches = |m: &serde_json::Value| {
        m["predicate"]["buildDefinition"]["externalParameters"]["patches"].clone()
    };
    assert_eq!(
        patches(&mp),
        serde_json::json!(["0001-tiny-return-2.patch"])
    );
    assert_eq!(patches(&mu), serde_json::json!([]));
    assert_ne!(p["artifacts"][0]["sha256"], u["artifacts"][0]["sha256"]);
}

/// Reproducibility: the same variant built in two different workspace directories gives
/// byte-identical artifacts, though the source includes `__FILE__` (prefix maps at work).
#[test]
fn tiny_is_reproducible_across_workspaces() {
    let a = Tiny::new();
    let b = Tiny::new();
    let ja = json(&a.build("patched"));
    let jb = json(&b.build("patched"));
    assert_eq!(
        ja["artifacts"], jb["artifacts"],
        "artifacts differ across workspaces"
    );
    // (The input digests differ here, rightly: each recipe names its upstream by an absolute
    // temp path. The llama.cpp test checks input-digest equality with the embedded recipe.)
    let lib = a.ws.join("build/tiny/patched/stage/lib/libtiny.so.1.0.0");
    let bytes = std::fs::read(lib).expect("lib");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("/pinforge/src/tiny.c"),
        "__FILE__ is prefix-mapped"
    );
    assert!(
        !text.contains(&a.ws.display().to_string()),
        "no workspace path in the binary"
    );
}

#[test]
fn tag_that_resolves_to_another_commit_is_refused() {
    let t = Tiny::new();
    t.recipe(&t.v2.to_string()[..9]);
    let vendor_before = listing(&t.ws.join("vendor"));
    let o = t.build("patched");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("tag `v1`"), "{}", stderr(&o));
    assert!(stderr(&o).contains("resolves to"), "{}", stderr(&o));
    assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
    // Only the fetch cache may have appeared; no tree was materialized.
    let after: Vec<String> = listing(&t.ws.join("vendor"))
        .into_iter()
        .filter(|l| !l.starts_with("cache/"))
        .collect();
    assert_eq!(after, vendor_before);
}

#[test]
fn a_moved_tag_is_refused_after_the_lock_recorded_it() {
    let t = Tiny::new();
    assert_eq!(code(&t.build("unpatched")), 0);
    // Upstream moves the tag: the lock says v1 is the old commit.
    let repo = Repository::open(&t.upstream).expect("open");
    repo.tag_lightweight("v1", &repo.find_object(t.v2, None).expect("obj"), true)
        .expect("move tag");
    // A no-op build is answered from its stamp and the lock, like cargo's: it does not ask
    // upstream again (the commit it builds is the locked one, unchanged).
    let o = t.build("unpatched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["cached"], true);
    // The next build that resolves the pin (here: the recipe was rewritten) refuses the drift.
    let recipe = t.ws.join("recipes/tiny.toml");
    let text = std::fs::read(&recipe).expect("recipe");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&recipe, text).expect("rewrite recipe");
    let o = t.build("unpatched");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("refuses drift"), "{}", stderr(&o));
}

#[test]
fn patch_that_does_not_apply_names_patch_file_hunk_and_shows_lines() {
    let t = Tiny::new();
    let broken = TINY_PATCH.replace(" int tiny_value(void) {\n", " int tiny_value(int x) {\n");
    std::fs::write(t.ws.join("patches/0001-tiny-return-2.patch"), broken).expect("write");
    assert_eq!(code(&t.build("unpatched")), 0);
    let vendor_before = listing(&t.ws.join("vendor"));
    let o = t.build("patched");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("0001-tiny-return-2.patch"), "{err}");
    assert!(err.contains("tiny.c, hunk 1 (@@ -1,4 +1,4 @@)"), "{err}");
    assert!(err.contains("-int tiny_value(int x) {"), "{err}");
    assert!(err.contains("+int tiny_value(void) {"), "{err}");
    // The git fetch cache is refreshed on every run by design (a moved tag must be seen);
    // everything else in vendor/ is untouched.
    let no_cache = |v: Vec<String>| -> Vec<String> {
        v.into_iter().filter(|l| !l.starts_with("cache/")).collect()
    };
    assert_eq!(
        no_cache(listing(&t.ws.join("vendor"))),
        no_cache(vendor_before),
        "vendor/ left as it was"
    );
}

#[test]
fn path_traversal_and_dot_git_patches_are_refused() {
    for (target, why) in [
        ("../../evil.c", "escapes the tree"),
        (".git/hooks/post-checkout", "touches the repository's .git"),
    ] {
        let t = Tiny::new();
        let evil = format!(
            "From: X <x@example.invalid>\nSubject: evil\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/r/issues/1\nReported-by: x\n\n---\ndiff --git a/{target} b/{target}\nnew file mode 100644\n--- /dev/null\n+++ b/{target}\n@@ -0,0 +1 @@\n+boom\n"
        );
        std::fs::write(t.ws.join("patches/0001-tiny-return-2.patch"), evil).expect("write");
        let o = t.build("patched");
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{target}: {}", stderr(&o));
        assert!(
            !t.ws.join("vendor").exists(),
            "nothing materialized for {target}"
        );
        assert!(!t.ws.parent().expect("parent").join("evil.c").exists());
    }
}

#[test]
fn missing_patch_file_is_an_input_error_with_series_line() {
    let t = Tiny::new();
    std::fs::write(
        t.ws.join("patches/series"),
        "0001-tiny-return-2.patch\n0002-gone.patch\n",
    )
    .expect("write");
    let o = t.build("patched");
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("series:2"), "{}", stderr(&o));
    assert!(stderr(&o).contains("0002-gone.patch"), "{}", stderr(&o));
    assert!(!t.ws.join("vendor").exists());
}

#[test]
fn recipe_errors_exit_2_with_position_and_touch_nothing() {
    let t = Tiny::new();
    let path = t.ws.join("recipes/tiny.toml");
    let good = std::fs::read_to_string(&path).expect("recipe");
    let cases = [
        (
            good.replace("[variants.unpatched]", "[variants.unpatched\n"),
            "tiny.toml:17:20: invalid table header",
        ),
        (
            good.replace("patches = []", "patches = []\ncmake-optons = 1"),
            "tiny.toml:19:1: unknown field `cmake-optons`",
        ),
        (
            good.replace("cc = \"gcc\"", "cc = \"pinforge-no-such-gcc\""),
            "cc `pinforge-no-such-gcc` not found",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&path, &text).expect("write");
        let o = t.build("patched");
        assert_eq!(code(&o), 2, "{want}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "want {want}: {}", stderr(&o));
        assert!(!t.ws.join("vendor").exists(), "{want}: vendor/ untouched");
        assert!(!t.ws.join("build").exists(), "{want}: build/ untouched");
    }
}

#[test]
fn missing_cmake_is_an_input_error_with_the_bootstrap_hint() {
    let t = Tiny::new();
    // A PATH with the compilers but without CMake or Ninja.
    let bin = t.ws.join("onlycc");
    std::fs::create_dir_all(&bin).expect("mkdir");
    for tool in ["gcc", "g++"] {
        let real = which(tool).expect("gcc on the machine");
        std::os::unix::fs::symlink(real, bin.join(tool)).expect("link");
    }
    let o = pinforge_cmd(&t.ws)
        .env("PATH", &bin)
        .env_remove("PINFORGE_TOOL_PATH")
        .args(["build", "recipes/tiny.toml"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cmake `cmake` not found"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("hint: run tools/bootstrap.sh"),
        "{}",
        stderr(&o)
    );
    assert!(!t.ws.join("vendor").exists());
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

#[test]
fn wrong_crate_sha256_is_refused_before_extraction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
    let text = std::fs::read_to_string(repo_root().join("recipes/mrope-cpu.toml"))
        .expect("recipe")
        .replace(
            "95cf8be1ff000b531ac0523c66a9ffce3cef6d09a5d95b21cad745bedb115468",
            "0000000000000000000000000000000000000000000000000000000000000000",
        );
    std::fs::write(ws.join("recipes/mrope-cpu.toml"), text).expect("write");
    std::os::unix::fs::symlink(repo_root().join("patches"), ws.join("patches")).expect("link");
    let o = pinforge(ws, &["build", "recipes/mrope-cpu.toml"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("SHA-256 mismatch"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("95cf8be1ff000b53"),
        "names the actual digest: {}",
        stderr(&o)
    );
    assert!(!ws.join("vendor").exists(), "vendor/ left as it was");
}

// ---------------------------------------------------------------------------------------------
// Patch lint and list on the real bundle, with snapshots.

#[test]
fn lint_of_the_shipped_bundle_is_clean() {
    let o = pinforge(&repo_root(), &["patch", "lint"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    insta::assert_snapshot!("lint_clean", stdout(&o));
}

#[test]
fn lint_reports_file_line_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("0001-x.patch");
    std::fs::write(
        &p,
        TINY_PATCH
            .replace("Upstream-Status: Pending", "Upstream-Status: Backport")
            .replace("Reported-by: someone\n", "Reported-by: some one\n"),
    )
    .expect("write");
    let o = pinforge(dir.path(), &["patch", "lint", "0001-x.patch"]);
    assert_eq!(code(&o), 2);
    insta::assert_snapshot!("lint_errors", stdout(&o));
}

#[test]
fn patch_list_is_the_bibliography_in_series_order() {
    let o = pinforge(&repo_root(), &["patch", "list", "--json"]);
    assert_eq!(code(&o), 0);
    let doc = json(&o);
    assert_eq!(doc["schema"], "pinforge.patch-list/v1");
    let rows = doc["patches"].as_array().expect("list");
    assert_eq!(rows.len(), 3);
    for r in rows {
        for key in ["file", "status", "issue", "pr", "commit", "handles", "url"] {
            assert!(r.get(key).is_some(), "row lacks {key}: {r}");
        }
    }
    assert_eq!(
        rows[0]["issue"],
        "https://github.com/ggml-org/llama.cpp/issues/20093"
    );
    assert_eq!(rows[0]["handles"], serde_json::json!(["cmp-nct"]));
    assert_eq!(
        rows[2]["status"],
        "Backport [https://github.com/ggml-org/llama.cpp/commit/99bd67c9b]"
    );
    assert_eq!(
        rows[2]["pr"],
        "https://github.com/ggml-org/llama.cpp/pull/19928"
    );
    assert_eq!(rows[2]["commit"], "99bd67c9b");
    assert_eq!(
        rows[2]["handles"],
        serde_json::json!(["ggerganov", "KernelFreeze"])
    );
    let human = pinforge(&repo_root(), &["patch", "list"]);
    insta::assert_snapshot!("patch_list", stdout(&human));
}

#[test]
fn shipped_patches_stay_valid_for_git_apply_and_patch() {
    // The shape that keeps the header invisible to git apply, git am and patch: fields, a
    // blank line, the `---` separator, then the diff. (The tools themselves are run on the
    // real tree in the llama.cpp end-to-end test.)
    for name in [
        "0001-batch-size-ubatch-reserve-pos-for-mrope.patch",
        "0002-kv-cache-broadcast-restored-mrope-positions.patch",
        "0003-kv-cache-can-shift-mrope.patch",
    ] {
        let text = std::fs::read_to_string(repo_root().join("patches").join(name)).expect("read");
        let diff_at = text.find("\ndiff --git ").expect("diff present");
        assert!(
            text[..diff_at].ends_with("\n\n---"),
            "{name}: header, blank line, --- separator, diff"
        );
    }
}

#[test]
fn the_help_and_the_readme_list_the_same_exit_codes_as_the_enum() {
    // issue #8: one exit-code enum generates the help's table; the README must say the same.
    let o = pinforge(&repo_root(), &["--help"]);
    let help = stdout(&o);
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README");
    for c in pinforge_base::error::ExitCode::ALL {
        let line = format!("  {}  {}", c.code(), c.meaning());
        assert!(help.contains(&line), "--help lacks `{line}`:\n{help}");
        let row = format!("| {} | {} |", c.code(), c.meaning());
        assert!(readme.contains(&row), "README lacks `{row}`");
    }
}

// ---------------------------------------------------------------------------------------------
// The real thing: llama.cpp from llama-cpp-sys-2 0.1.135, built with the embedded recipe.

fn artifacts(j: &serde_json::Value) -> Vec<(String, String)> {
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

// ---------------------------------------------------------------------------------------------
// The install root: atomic three-layer rollback.

/// Two real tiny builds (patched, unpatched) in one workspace, and an install root beside it.
struct Installed {
    t: Tiny,
    root: PathBuf,
    patched: PathBuf,
    unpatched: PathBuf,
}

impl Installed {
    fn new() -> Installed {
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
    fn run(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        let root = self.root.display().to_string();
        all.extend(["--root", &root]);
        pinforge(&self.t.ws, &all)
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = pinforge_cmd(&self.t.ws);
        c.args(args).arg("--root").arg(&self.root);
        c
    }
    fn install(&self, manifest: &Path, layer: &str) -> Output {
        self.run(&[
            "install",
            manifest.to_str().expect("utf8"),
            "--layer",
            layer,
            "--json",
        ])
    }
    fn status(&self) -> serde_json::Value {
        let o = self.run(&["status", "--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        json(&o)
    }
    fn current_variant(&self) -> Option<String> {
        self.status()["current"]["variant"]
            .as_str()
            .map(str::to_string)
    }
    fn verify_ok(&self) -> bool {
        code(&self.run(&["verify", "--installed"])) == 0
    }
    fn receipts(&self) -> Vec<serde_json::Value> {
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

#[test]
fn install_layers_rollback_status_and_gc() {
    let i = Installed::new();
    let o = i.install(&i.patched, "live");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = json(&o);
    // issue #7 class 1/9: build outputs are 0644/0755, not the sealed 0444/0555, so they are
    // copied (linking them would let sealing chmod the build's own files).
    assert_eq!(
        out["stage_mode"], "copy",
        "build files at unsealed modes are copied, never chmod-ed through a hard link"
    );
    assert!(Path::new(out["receipt"].as_str().expect("receipt")).exists());
    assert_eq!(code(&i.install(&i.unpatched, "control")), 0);

    let st = i.status();
    assert_eq!(st["current"]["layer"], "live");
    assert_eq!(st["current"]["variant"], "patched");
    assert_eq!(st["current"]["recipe"], "tiny");
    assert_eq!(st["layers"]["control"]["variant"], "unpatched");
    assert!(st["layers"]["original"].is_null());
    assert!(st["transaction"].is_null());
    assert_eq!(st["layers"]["live"]["verification"], "ok");
    // Consumers run through one stable path.
    assert!(i.root.join("current/lib/libtiny.so.1.0.0").is_file());
    assert!(i.root.join("current/lib/libtiny.so").is_symlink());

    // Switch current to the control layer and back.
    let o = i.run(&["rollback", "--to", "control", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(i.current_variant().as_deref(), Some("unpatched"));
    assert!(i.verify_ok());
    assert_eq!(code(&i.run(&["rollback", "--to", "live"])), 0);

    // Installing to live pushes the old live on the rollback stack; rollback pops it.
    assert_eq!(code(&i.install(&i.unpatched, "live")), 0);
    assert_eq!(i.current_variant().as_deref(), Some("unpatched"));
    let o = i.run(&["rollback", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(i.current_variant().as_deref(), Some("patched"));
    let receipt = i.receipts().pop().expect("receipt");
    assert_eq!(receipt["op"], "rollback");
    assert_eq!(receipt["restoration_matches_recorded"], true);
    assert_eq!(receipt["from"]["variant"], "unpatched");
    assert_eq!(receipt["to"]["variant"], "patched");
    // Nothing left to roll back to: a clear input error.
    let o = i.run(&["rollback"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no earlier live build"));

    // gc keeps every referenced entry; once control is replaced by the live entry, the
    // unpatched entry is no longer referenced and goes.
    let o = i.run(&["gc"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("removed 0 entr(ies)"), "{}", stdout(&o));
    assert_eq!(code(&i.install(&i.patched, "control")), 0);
    let o = i.run(&["gc"]);
    assert!(stdout(&o).contains("removed 1 entr(ies)"), "{}", stdout(&o));
    assert!(i.verify_ok());
    assert_eq!(i.status()["layers"]["control"]["variant"], "patched");
}

#[test]
fn tampered_install_is_named_and_rollback_restores_a_verified_state() {
    let i = Installed::new();
    assert_eq!(code(&i.install(&i.patched, "live")), 0);
    assert_eq!(code(&i.install(&i.unpatched, "control")), 0);
    let lib = i.root.join("current/lib/libtiny.so.1.0.0");
    let mut bytes = std::fs::read(&lib).expect("read");
    bytes[200] ^= 0x5a;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(&lib, bytes).expect("tamper");
    let o = i.run(&["verify", "--installed", "--json"]);
    assert_eq!(code(&o), 1);
    let v = json(&o);
    assert_eq!(v["ok"], false);
    assert!(v["mismatches"][0]["path"]
        .as_str()
        .expect("path")
        .ends_with("lib/libtiny.so.1.0.0"));
    assert_eq!(
        code(&i.run(&["verify", "--installed", "control"])),
        0,
        "control is intact"
    );
    let o = i.run(&["rollback", "--to", "control"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(i.verify_ok());
    // Switching back to the damaged live entry is refused.
    let o = i.run(&["rollback", "--to", "live"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("damaged"), "{}", stderr(&o));
    assert_eq!(i.current_variant().as_deref(), Some("unpatched"));
}

#[test]
fn failed_post_swap_verification_reverts_the_swap() {
    let i = Installed::new();
    assert_eq!(code(&i.install(&i.patched, "live")), 0);
    assert_eq!(code(&i.install(&i.unpatched, "control")), 0);
    // Someone re-pointed the consumers' path at the live layer by hand: after switching
    // current to control, what consumers see is not the control entry.
    let current = i.root.join("current");
    std::fs::remove_file(&current).expect("rm");
    std::os::unix::fs::symlink("state/live", &current).expect("link");
    let gen_before = i.status()["gen"].clone();
    let o = i.run(&["rollback", "--to", "control"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("reverted"), "{}", stderr(&o));
    let st = i.status();
    assert_eq!(st["gen"], gen_before, "the swap was undone");
    assert_eq!(st["current"]["layer"], "live");
    let r = i.receipts().pop().expect("receipt");
    assert_eq!(r["reverted"], true);
    assert_eq!(r["verification"]["ok"], false);
}

/// Kill the process right after every step of install and of rollback; after each, status
/// shows current at the old or the new entry, verify passes, and re-running converges.
#[test]
fn crash_at_every_step_leaves_a_consistent_state() {
    let base = Installed::new();
    let mut states_checked = 0;
    // The step counts come from the library's step enums, so a new step is a new crash
    // point checked here without editing this test.
    use pinforge::{InstallStep, RollbackStep};
    let ops = [
        ("install", InstallStep::COUNT),
        ("rollback", RollbackStep::COUNT),
    ];
    for (op, steps) in ops {
        for n in 1..=steps {
            let _ = std::fs::remove_dir_all(&base.root);
            assert_eq!(code(&base.install(&base.patched, "live")), 0);
            assert_eq!(code(&base.install(&base.unpatched, "control")), 0);
            let args: Vec<String> = match op {
                "install" => vec![
                    "install".into(),
                    base.unpatched.display().to_string(),
                    "--layer".into(),
                    "live".into(),
                ],
                _ => vec!["rollback".into(), "--to".into(), "control".into()],
            };
            let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = base
                .cmd(&arg_refs)
                .env("PINFORGE_CRASH_AT", format!("{op}:{n}"))
                .output()
                .expect("run");
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                o.status.signal(),
                Some(9),
                "{op}:{n} must die by SIGKILL: {}",
                stderr(&o)
            );
            let v = base.current_variant();
            assert!(
                v.as_deref() == Some("patched") || v.as_deref() == Some("unpatched"),
                "{op}:{n}: current is {v:?}"
            );
            assert!(
                base.verify_ok(),
                "{op}:{n}: verify --installed fails after the crash"
            );
            let again = base.run(&arg_refs);
            assert_eq!(code(&again), 0, "{op}:{n}: re-run: {}", stderr(&again));
            assert_eq!(
                base.current_variant().as_deref(),
                Some("unpatched"),
                "{op}:{n} converges"
            );
            assert!(base.status()["transaction"].is_null());
            assert!(base.verify_ok());
            let leftovers: Vec<String> = std::fs::read_dir(base.root.join("store"))
                .expect("store")
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".stage-"))
                .collect();
            assert!(
                leftovers.is_empty(),
                "{op}:{n}: staging left behind: {leftovers:?}"
            );
            states_checked += 1;
        }
    }
    eprintln!("crash points checked: {states_checked}");
    assert_eq!(states_checked, InstallStep::COUNT + RollbackStep::COUNT);
    // Pinned as well: a step removed (or merged into another) renumbers the crash points, and
    // the numbers are a contract of the hook; change these with the protocol, deliberately.
    assert_eq!((InstallStep::COUNT, RollbackStep::COUNT), (10, 7));
}

/// At least 100 SIGKILLs at random moments of installs and rollbacks.
#[test]
fn random_kills_never_leave_an_inconsistent_state() {
    let i = Installed::new();
    assert_eq!(code(&i.install(&i.patched, "live")), 0);
    assert_eq!(code(&i.install(&i.unpatched, "control")), 0);
    let mut seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    eprintln!("random kill seed: {seed}");
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut killed = 0;
    for k in 0..120 {
        let args: Vec<String> = match next() % 3 {
            0 => vec![
                "install".into(),
                i.patched.display().to_string(),
                "--layer".into(),
                "live".into(),
            ],
            1 => vec![
                "install".into(),
                i.unpatched.display().to_string(),
                "--layer".into(),
                "live".into(),
            ],
            _ => vec![
                "rollback".into(),
                "--to".into(),
                if k % 2 == 0 { "control" } else { "live" }.into(),
            ],
        };
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = i
            .cmd(&arg_refs)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_micros(next() % 12_000));
        if child.try_wait().expect("wait").is_none() {
            killed += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        let v = i.current_variant();
        assert!(
            v.as_deref() == Some("patched") || v.as_deref() == Some("unpatched"),
            "kill {k}: current is {v:?}"
        );
        assert!(i.verify_ok(), "kill {k}: verify --installed fails");
    }
    eprintln!("random kills: 120 runs, {killed} killed while running");
    assert!(
        killed >= 30,
        "too few kills landed inside a run ({killed}); timing window too short"
    );
    let o = i.install(&i.patched, "live");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(i.status()["transaction"].is_null());
}

#[test]
fn concurrent_installs_and_rollbacks_serialize() {
    let i = Installed::new();
    assert_eq!(code(&i.install(&i.patched, "live")), 0);
    assert_eq!(code(&i.install(&i.unpatched, "control")), 0);
    let before = i.receipts().len();
    let mut children = Vec::new();
    for k in 0..8 {
        let args: Vec<String> = match k % 4 {
            0 => vec![
                "install".into(),
                i.unpatched.display().to_string(),
                "--layer".into(),
                "live".into(),
            ],
            1 => vec!["rollback".into(), "--to".into(), "control".into()],
            2 => vec![
                "install".into(),
                i.patched.display().to_string(),
                "--layer".into(),
                "live".into(),
            ],
            _ => vec!["rollback".into(), "--to".into(), "live".into()],
        };
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        children.push(i.cmd(&arg_refs).output_spawn());
    }
    for c in children {
        let o = c.wait_with_output().expect("wait");
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let receipts = i.receipts();
    assert_eq!(receipts.len(), before + 8, "one receipt per command");
    // Serialized: each receipt starts from where the previous one ended.
    for w in receipts[before - 1..].windows(2) {
        assert_eq!(
            w[1]["current_before"], w[0]["current_after"],
            "{} then {}",
            w[0], w[1]
        );
        assert!(w[1]["seq"].as_u64() > w[0]["seq"].as_u64());
    }
    assert!(i.verify_ok());
    assert!(i.status()["transaction"].is_null());
}

trait SpawnOutput {
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
fn synthetic_build(dir: &Path, files: &[(&str, usize)]) -> PathBuf {
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
mod sha2_like {
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

/// Staging onto a full filesystem fails cleanly: live untouched, store clean, no journal.
/// Uses a real 1 MiB tmpfs where mounting is allowed (root), else a simulated write failure.
#[test]
fn enospc_while_staging_leaves_live_untouched_and_store_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small = synthetic_build(&dir.path().join("small"), &[("lib/libsmall.so", 10_000)]);
    let big = synthetic_build(&dir.path().join("big"), &[("lib/libbig.so", 3_000_000)]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let root = mnt.join("rollback");
    let run = |args: &[&str], simulate: bool| {
        let mut c = pinforge_cmd(dir.path());
        c.args(args).arg("--root").arg(&root);
        if simulate {
            c.env("PINFORGE_FAIL_WRITE_AFTER", "1000000");
        }
        c.output().expect("run")
    };
    let simulate = !mounted;
    eprintln!(
        "ENOSPC via {}",
        if mounted {
            "a real 1 MiB tmpfs"
        } else {
            "simulated write failure"
        }
    );
    let o = run(
        &[
            "install",
            small.to_str().expect("utf8"),
            "--layer",
            "live",
            "--copy",
        ],
        false,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = run(
        &[
            "install",
            big.to_str().expect("utf8"),
            "--layer",
            "live",
            "--copy",
        ],
        simulate,
    );
    let err = stderr(&o);
    // Checked on the full filesystem itself, before it is unmounted.
    let st = json(&run(&["status", "--json"], false));
    let verified = code(&run(&["verify", "--installed"], false));
    let store: Vec<String> = std::fs::read_dir(root.join("store"))
        .expect("store")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let journal = root.join("journal.json").exists();
    if mounted {
        let _ = Command::new("umount").arg(&mnt).status();
    }
    assert_eq!(code(&o), 4, "an I/O failure, not a success: {err}");
    assert!(
        err.contains("No space left on device") || err.contains("storage full"),
        "{err}"
    );
    assert!(err.contains("hint: free disk space"), "{err}");
    assert_eq!(st["current"]["variant"], "small", "live untouched");
    assert!(st["transaction"].is_null());
    assert!(!journal);
    assert_eq!(verified, 0, "live still verifies");
    assert_eq!(
        store.len(),
        1,
        "store holds only the small entry: {store:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Smoke decodes.

#[test]
fn model_tiny_writes_small_deterministic_gguf() {
    let dir = tempfile::tempdir().expect("tempdir");
    for arch in ["qwen2vl", "qwen2"] {
        let out = dir.path().join(format!("{arch}.gguf"));
        let o = pinforge(
            dir.path(),
            &[
                "model",
                "tiny",
                "--arch",
                arch,
                "-o",
                out.to_str().expect("utf8"),
                "--seed",
                "5",
            ],
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let bytes = std::fs::read(&out).expect("model");
        assert!(bytes.starts_with(b"GGUF"));
        assert!(bytes.len() < 1_000_000, "{} bytes", bytes.len());
        let again = dir.path().join("again.gguf");
        pinforge(
            dir.path(),
            &[
                "model",
                "tiny",
                "--arch",
                arch,
                "-o",
                again.to_str().expect("utf8"),
                "--seed",
                "5",
            ],
        );
        assert_eq!(
            std::fs::read(&again).expect("again"),
            bytes,
            "deterministic for a seed"
        );
    }
    let o = pinforge(
        dir.path(),
        &["model", "tiny", "--arch", "gpt9", "-o", "x.gguf"],
    );
    assert_eq!(code(&o), 2);
    // clap names the value and the choices (the values are listed since issue #8).
    assert!(
        stderr(&o).contains("gpt9") && stderr(&o).contains("qwen2vl"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn smoke_refuses_a_build_without_libllama_with_a_clear_error() {
    let t = Tiny::new();
    let j = json(&t.build("patched"));
    let o = pinforge(&t.ws, &["smoke", j["manifest"].as_str().expect("manifest")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no libllama shared library"),
        "{}",
        stderr(&o)
    );
}

fn smoke(ws: &Path, args: &[&str]) -> (i32, serde_json::Value) {
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
fn smoke_checks(ws: &Path, patched: &Path, unpatched: &Path) {
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

/// A filesystem where symlinks cannot be made is refused up front (a real read-only tmpfs
/// where mounting is allowed; the unit test in install.rs covers the refusal logic everywhere).
#[test]
fn install_root_on_a_filesystem_without_symlinks_is_refused_up_front() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("ro");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        skip("mount(8) of a tmpfs is not permitted here (the refusal logic is covered by install::tests::probe_refuses_simulated_filesystem_without_symlinks)");
        return;
    }
    let small = synthetic_build(&dir.path().join("small"), &[("lib/libsmall.so", 1000)]);
    let o = pinforge_cmd(dir.path())
        .args([
            "install",
            small.to_str().expect("utf8"),
            "--layer",
            "live",
            "--root",
        ])
        .arg(&mnt)
        .output()
        .expect("run");
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("install root refused"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("cannot create symbolic links"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("hint: put the install root"),
        "{}",
        stderr(&o)
    );
}

/// Tarball and folder pins: the digest printed by `vendor digest` pins them, a changed
/// source is refused.
#[test]
fn tarball_and_dir_pins_build_and_refuse_changed_sources() {
    let t = Tiny::new();
    let ws = &t.ws;
    // A tarball with one top-level folder, as release archives have.
    let tar = ws.parent().expect("parent").join("tiny-1.0.tar.gz");
    let st = Command::new("tar")
        .arg("czf")
        .arg(&tar)
        .arg("--exclude=.git")
        .arg("-C")
        .arg(ws.parent().expect("parent"))
        .arg("upstream")
        .status()
        .expect("tar");
    assert!(st.success());
    let digest_of = |p: &Path| -> String {
        let o = pinforge(ws, &["vendor", "digest", p.to_str().expect("utf8")]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        stdout(&o)
            .split_whitespace()
            .next()
            .expect("digest")
            .to_string()
    };
    let tar_sha = digest_of(&tar);
    let dir_sha = digest_of(&t.upstream);
    for (kind, extra) in [
        (
            "tarball",
            format!("path = \"{}\"\nsha256 = \"{tar_sha}\"", tar.display()),
        ),
        (
            "dir",
            format!(
                "path = \"{}\"\ntree-sha256 = \"{dir_sha}\"",
                t.upstream.display()
            ),
        ),
    ] {
        let text = std::fs::read_to_string(ws.join("recipes/tiny.toml"))
            .expect("recipe")
            .replace("kind = \"git\"", &format!("kind = \"{kind}\"\n{extra}"));
        let text: String = text
            .lines()
            .filter(|l| {
                !l.starts_with("url =") && !l.starts_with("tag =") && !l.starts_with("commit =")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(ws.join(format!("recipes/tiny-{kind}.toml")), text).expect("write");
        let o = pinforge(
            ws,
            &["build", &format!("recipes/tiny-{kind}.toml"), "--json"],
        );
        assert_eq!(code(&o), 0, "{kind}: {}", stderr(&o));
        let m = json(&o);
        assert_eq!(m["artifacts"][0]["path"], "lib/libtiny.so.1.0.0", "{kind}");
    }
    // The folder changes: its pin no longer holds.
    std::fs::write(
        t.upstream.join("tiny.c"),
        TINY_C.replace("return 1", "return 3"),
    )
    .expect("edit");
    let o = pinforge(ws, &["build", "recipes/tiny-dir.toml"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("tree digest mismatch"),
        "{}",
        stderr(&o)
    );
}

/// A compiler error is the engine's failure, not an input error: exit 3, the log's tail
/// (with the compiler's message) and the log's path.
#[test]
fn a_failing_compile_exits_3_with_the_log_tail_and_path() {
    let t = Tiny::new();
    let broken = TINY_PATCH.replace("+    return 2;\n", "+    return 2 +;\n");
    std::fs::write(t.ws.join("patches/0001-tiny-return-2.patch"), broken).expect("write");
    let o = t.build("patched");
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("error: expected expression") || err.contains("error:"),
        "{err}"
    );
    assert!(err.contains("tiny.c"), "{err}");
    assert!(err.contains("build/tiny/patched/build.log"), "{err}");
}
