//! Issue #38, distributed compilation: a small CMake project built through a real sccache-dist
//! scheduler and build server on loopback is byte-identical to a local build (`diff` says
//! so), says where its compiles ran, records it in the manifest and never records the token;
//! a build server killed mid-build leaves a build that finishes here, says so and has the
//! same bytes; and what a distributed build cannot keep (debug information) or must not trust
//! (another sccache binary, no token, a crafted URL) is refused with exit 2.

use crate::common::dist::{self, Fleet, TOKEN};
use crate::{code, commit_files, json, pinforge_cmd, skip, stderr, stdout};
use git2::Repository;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// A C project of `units` translation units (each a little work for the compiler, so that a
/// build lasts long enough to be interrupted), with a Release and a RelWithDebInfo variant.
struct Project {
    dir: tempfile::TempDir,
    upstream: PathBuf,
    commit: String,
}

fn unit(i: usize) -> String {
    // Macros on a line (`__LINE__`, `SQ`): a remote compile of preprocessed source must still
    // give these bytes.
    let mut s =
        format!("#define SQ(x) ((x) * (x))\nint unit_{i}(int x) {{\n    int acc = __LINE__;\n");
    for k in 0..40 {
        s.push_str(&format!(
            "    acc += SQ(x + {k}) ^ (acc >> {}); if (acc & {}) acc -= SQ({k});\n",
            k % 7 + 1,
            1 << (k % 5)
        ));
    }
    s.push_str("    return acc;\n}\n");
    s
}

impl Project {
    fn new(units: usize) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        let upstream = dir.path().join("upstream");
        let repo = Repository::init(&upstream).expect("init");
        let sources: Vec<(String, String)> =
            (0..units).map(|i| (format!("u{i}.c"), unit(i))).collect();
        let list: Vec<&str> = sources.iter().map(|(n, _)| n.as_str()).collect();
        let cmake = format!(
            "cmake_minimum_required(VERSION 3.14)\nproject(farm C)\nadd_library(farm SHARED {})\ninstall(TARGETS farm)\n",
            list.join(" ")
        );
        let mut files: Vec<(&str, &str)> = sources
            .iter()
            .map(|(n, c)| (n.as_str(), c.as_str()))
            .collect();
        files.push(("CMakeLists.txt", &cmake));
        let oid = commit_files(&repo, &files, "v1");
        Project {
            dir,
            upstream,
            commit: oid.to_string(),
        }
    }

    fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.dir.path().join(name);
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        let recipe = format!(
            "name = \"farm\"\ndefault-variant = \"release\"\n[pin]\nkind = \"git\"\nurl = \"{}\"\ncommit = \"{}\"\n[toolchain.gcc]\ncc = \"gcc\"\ncxx = \"g++\"\n[base]\ntoolchain = \"gcc\"\nbuild-type = \"Release\"\ntargets = [\"farm\"]\n[variants.release]\npatches = []\n[variants.debuginfo]\npatches = []\nbuild-type = \"RelWithDebInfo\"\n",
            self.upstream.display(),
            self.commit
        );
        std::fs::write(ws.join("recipes/farm.toml"), recipe).expect("recipe");
        ws
    }
}

fn build(ws: &Path, variant: &str, extra: &[&str]) -> Output {
    pinforge_cmd(ws)
        .env("PINFORGE_DIST_TOKEN", TOKEN)
        .args([
            "build",
            "recipes/farm.toml",
            "--variant",
            variant,
            "--no-cache",
        ])
        .args(extra)
        .output()
        .expect("run pinforge")
}

fn ok(o: &Output, what: &str) -> Value {
    assert_eq!(code(o), 0, "{what}: {}{}", stdout(o), stderr(o));
    json(o)
}

fn manifest(ws: &Path, variant: &str) -> PathBuf {
    ws.join("build/farm").join(variant).join("manifest.json")
}

fn diff_says_identical(a: &Path, b: &Path) {
    let o = pinforge_cmd(a.parent().expect("parent"))
        .arg("diff")
        .arg(a)
        .arg(b)
        .output()
        .expect("diff");
    assert_eq!(code(&o), 0, "diff: {}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("identical"), "{}", stdout(&o));
}

/// Every file under `dir` (bytes), for a search for the token.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let t = e.file_type().expect("type");
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                let b = std::fs::read(e.path()).unwrap_or_default();
                if b.windows(needle.len()).any(|w| w == needle) {
                    hits.push(e.path());
                }
            }
        }
    }
    hits
}

fn fleet() -> Option<Fleet> {
    if let Some(why) = dist::missing() {
        skip(&why);
        return None;
    }
    Some(Fleet::start())
}

// issue #38 "Proof of byte identity": the same inputs built here and through the farm give the
// same bytes; the output, the JSON, the manifest and the build server's own log all say the
// compiles ran there; the token is in no file the build leaves.
#[test]
fn a_project_built_through_a_loopback_farm_is_byte_identical_to_a_local_build() {
    let Some(fleet) = fleet() else { return };
    let p = Project::new(6);
    let (here, there) = (p.workspace("local"), p.workspace("farm"));
    let t = Instant::now();
    ok(&build(&here, "release", &["--json"]), "local build");
    let local_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let j = ok(
        &build(&there, "release", &["--json", "--dist", &fleet.url]),
        "distributed build",
    );
    let dist_s = t.elapsed().as_secs_f64();
    let d = &j["dist"];
    assert_eq!(d["distributed"], 6, "{j:#}\n{}", fleet.log());
    assert_eq!(d["fell_back"], 0, "{d:#}");
    assert_eq!(d["servers"][&fleet.server_addr], 6, "{d:#}");
    assert_eq!(d["version"], "0.16.0");
    assert!(
        fleet.server_jobs() >= 6,
        "the build server ran {} jobs\n{}",
        fleet.server_jobs(),
        fleet.log()
    );
    // The text form says it in a line of its own (a third workspace: the second build of
    // `there` would be a no-op).
    let o = build(&p.workspace("text"), "release", &["--dist", &fleet.url]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let want = format!(
        "  dist       6 of 6 compiles on 1 build server ({})",
        fleet.server_addr
    );
    assert!(
        stdout(&o).lines().any(|l| l == want),
        "{want}\n{}",
        stdout(&o)
    );
    // The manifest's run details name the scheduler and the counts, never the token.
    let m: Value =
        serde_json::from_slice(&std::fs::read(manifest(&there, "release")).expect("manifest"))
            .expect("manifest json");
    let text = m.to_string();
    assert!(text.contains("distributed-compile"), "{text}");
    assert!(text.contains(&fleet.url), "{text}");
    assert!(
        files_holding(&there.join("build"), TOKEN.as_bytes()).is_empty(),
        "the token was left in {:?}",
        files_holding(&there.join("build"), TOKEN.as_bytes())
    );
    diff_says_identical(&manifest(&here, "release"), &manifest(&there, "release"));
    eprintln!("farm: local {local_s:.1}s, distributed {dist_s:.1}s (6 units, one loopback server)");
}

// issue #38 "Killing the build server mid-build": the build finishes here, says how many
// compiles fell back, and its bytes are a local build's.
#[test]
fn a_build_server_killed_mid_build_leaves_a_local_build_with_the_same_bytes() {
    let Some(mut fleet) = fleet() else { return };
    let p = Project::new(24);
    let (here, there) = (p.workspace("local"), p.workspace("farm"));
    ok(&build(&here, "release", &["--json"]), "local build");
    let child = pinforge_cmd(&there)
        .env("PINFORGE_DIST_TOKEN", TOKEN)
        .args(["build", "recipes/farm.toml", "--no-cache", "-j1", "--json"])
        .args(["--dist", &fleet.url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the build");
    let deadline = Instant::now() + Duration::from_secs(120);
    while fleet.server_jobs() < 2 {
        assert!(Instant::now() < deadline, "no remote job: {}", fleet.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    fleet.kill_server();
    let o = child.wait_with_output().expect("build");
    let j = ok(&o, "build after the server died");
    let d = &j["dist"];
    let (remote, local) = (d["distributed"].as_u64(), d["local"].as_u64());
    assert!(remote.is_some_and(|n| n >= 1), "{d:#}");
    assert!(local.is_some_and(|n| n >= 1), "{d:#}");
    assert_eq!(
        remote.unwrap_or(0) + local.unwrap_or(0),
        24,
        "every unit compiled once: {d:#}"
    );
    assert!(
        d["fell_back"].as_u64().is_some_and(|n| n >= 1),
        "the fallback is counted: {d:#}"
    );
    assert!(
        stderr(&o).contains("fell back to local compilation"),
        "the build says so: {}",
        stderr(&o)
    );
    diff_says_identical(&manifest(&here, "release"), &manifest(&there, "release"));
    let line = stderr(&o);
    let line = line.lines().rfind(|l| l.contains("fell back"));
    eprintln!("farm after the kill: {}", line.unwrap_or_default().trim());
}

// What a distributed build cannot keep: debug information (gcc's line table from preprocessed
// source has other columns). Refused with the target, the flag and the reason; no manifest.
// The scheduler need not answer: the refusal comes from the compile flags.
#[test]
fn a_distributed_build_with_debug_information_is_refused() {
    if let Some(why) = dist::missing() {
        skip(&why);
        return;
    }
    let p = Project::new(2);
    let ws = p.workspace("farm");
    let o = build(&ws, "debuginfo", &["--dist", "http://127.0.0.1:1"]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("target `farm` compiles with `-g`"), "{e}");
    assert!(e.contains("not be byte-identical"), "{e}");
    assert!(e.contains("hint:"), "{e}");
    assert!(!manifest(&ws, "debuginfo").exists());
    assert!(
        !ws.join("build/farm/debuginfo/sccache-dist.toml").exists(),
        "the token's file is removed on failure"
    );
}

// Inputs an attacker or a typo controls, refused before anything is built (exit 2, the value
// named): no token, a URL with credentials or a line break, and an sccache that says 0.16.0
// but is not the pinned binary.
#[test]
fn distributed_build_inputs_are_refused_with_exit_2() {
    let p = Project::new(1);
    let ws = p.workspace("farm");
    let no_token = pinforge_cmd(&ws)
        .args(["build", "recipes/farm.toml", "--dist", "http://127.0.0.1:1"])
        .output()
        .expect("run");
    assert_eq!(code(&no_token), 2, "{}", stderr(&no_token));
    assert!(
        stderr(&no_token).contains("PINFORGE_DIST_TOKEN"),
        "{}",
        stderr(&no_token)
    );
    // Refused before the pin is fetched or a folder made.
    assert!(!ws.join("vendor").exists() && !ws.join("build").exists());
    for (url, why) in [
        ("http://u:secret@127.0.0.1:1", "credentials"),
        (
            "http://h\n[cache.redis]",
            "whitespace or a control character",
        ),
        ("127.0.0.1:10600", "http:// or https://"),
    ] {
        let o = build(&ws, "release", &["--dist", url]);
        assert_eq!(code(&o), 2, "{url:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{url:?}: {}", stderr(&o));
    }
    // A look-alike: first on the tool path, prints the pinned version, is another binary.
    let fake = p.dir.path().join("fake-bin");
    std::fs::create_dir_all(&fake).expect("mkdir");
    let sccache = fake.join("sccache");
    std::fs::write(&sccache, "#!/bin/sh\necho 'sccache 0.16.0'\n").expect("fake");
    let mut perms = std::fs::metadata(&sccache).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&sccache, perms).expect("chmod");
    let tools = std::env::join_paths([fake.clone(), crate::tool_path()]).expect("join");
    let o = pinforge_cmd(&ws)
        .env("PINFORGE_TOOL_PATH", tools)
        .env("PINFORGE_DIST_TOKEN", TOKEN)
        .args(["build", "recipes/farm.toml", "--dist", "http://127.0.0.1:1"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("distributed builds use sccache 0.16.0"),
        "{}",
        stderr(&o)
    );
    assert!(!ws.join("vendor").exists() && !ws.join("build").exists());
}
