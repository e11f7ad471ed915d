//! Issue #20, the server tree: the `npm` pin (a package tarball carrying the upstream as a git
//! bundle), requested programs staged into `bin/` with a run path that reaches `lib/`, and the
//! shipped `recipes/mrope-server.toml` built for real (llama-server of llama.cpp b7698 from
//! node-llama-cpp 3.15.0), verified, run from the stage and from a fresh install root, smoked.
//!
//! The npm-pin tests build a tiny real CMake project (a library and a program that links it)
//! packed the way `npm pack` packs (`package/…`, gzip), with its tree as a real `git bundle`.

use crate::{code, commit_files, json, pinforge, pinforge_cmd, skip, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

const TINY_C: &str = "int tiny_value(void) { return 7; }\n";
const MAIN_C: &str =
    "#include <stdio.h>\nint tiny_value(void);\nint main(void) { printf(\"tiny %d\\n\", tiny_value()); return 0; }\n";
const CMAKE: &str = "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\nadd_library(tiny SHARED tiny.c)\nadd_executable(tinyserve main.c)\ntarget_link_libraries(tinyserve tiny)\nset_target_properties(tiny tinyserve PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n";

const MEMBER: &str = "package/llama/gitRelease.bundle";

/// Through the system's sha256sum, as the other tests do: independent of pinforge's hashing.
fn sha256(bytes: &[u8]) -> String {
    crate::sha2_like::digest_hex(bytes)
}

/// `git` with a fixed identity in `dir`; None when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<()> {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| ())
}

/// One tar entry of a package tarball: a file, or a symlink named `name` pointing at `target`.
enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Link(&'a str, &'a str),
}

fn tgz(entries: &[Entry]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        match e {
            Entry::File(name, data) => {
                h.set_size(data.len() as u64);
                b.append_data(&mut h, name, *data).expect("append");
            }
            Entry::Link(name, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, name, target).expect("append link");
            }
        }
    }
    b.into_inner().expect("tar").finish().expect("gzip")
}

/// A workspace with a tiny upstream as git bundles: `whole` (self-contained) and `thin` (with a
/// prerequisite commit).
struct Pkg {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    whole: Vec<u8>,
    thin: Vec<u8>,
}

impl Pkg {
    fn new() -> Option<Pkg> {
        let dir = tempfile::tempdir().expect("tempdir");
        let up = dir.path().join("up");
        let repo = git2::Repository::init(&up).expect("init");
        commit_files(
            &repo,
            &[
                ("tiny.c", TINY_C),
                ("main.c", MAIN_C),
                ("CMakeLists.txt", CMAKE),
            ],
            "v1",
        );
        git(&up, &["bundle", "create", "../whole.bundle", "HEAD"])?;
        commit_files(&repo, &[("README", "later\n")], "v2");
        git(&up, &["bundle", "create", "../thin.bundle", "HEAD~1..HEAD"])?;
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        Some(Pkg {
            whole: std::fs::read(dir.path().join("whole.bundle")).expect("bundle"),
            thin: std::fs::read(dir.path().join("thin.bundle")).expect("bundle"),
            _dir: dir,
            ws,
        })
    }

    /// Write `tgz` as `recipes/p.tgz` and a recipe pinning it (`path` when `local`, else the
    /// package name only, so that the workspace cache or npm must supply it).
    fn recipe(&self, tgz: &[u8], sha: &str, bundle_sha: &str, local: bool, rpath: bool) {
        std::fs::write(self.ws.join("recipes/p.tgz"), tgz).expect("write tgz");
        let path = if local { "path = \"p.tgz\"\n" } else { "" };
        let cmake = if rpath {
            "{ BUILD_SHARED_LIBS = true, CMAKE_BUILD_WITH_INSTALL_RPATH = true }"
        } else {
            "{ BUILD_SHARED_LIBS = true }"
        };
        let text = format!(
            "name = \"tinypkg\"\ndefault-variant = \"plain\"\n[pin]\nkind = \"npm\"\npackage = \"tinypkg\"\n\
             version = \"1.0.0\"\nsha256 = \"{sha}\"\n{path}bundle = \"{MEMBER}\"\nbundle-sha256 = \"{bundle_sha}\"\n\
             build-number = 42\n[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\ncmake-version = \">=3.24\"\n\
             [base]\ntoolchain = \"cpu\"\ntargets = [\"tinyserve\"]\ncmake = {cmake}\n[variants.plain]\npatches = []\n"
        );
        std::fs::write(self.ws.join("recipes/tinypkg.toml"), text).expect("write recipe");
    }

    /// `pinforge build` of the recipe, with npm replaced by a program that does not exist: no
    /// test here may reach the registry.
    fn build(&self) -> std::process::Output {
        pinforge_cmd(&self.ws)
            .args(["build", "recipes/tinypkg.toml", "--json"])
            .env("PINFORGE_NPM", self.ws.join("no-npm-here"))
            .output()
            .expect("run pinforge")
    }

    fn vendor_trees(&self) -> Vec<String> {
        std::fs::read_dir(self.ws.join("vendor"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != "cache")
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn have_tools() -> bool {
    if crate::which("git").is_none() {
        skip("git is not installed (it makes the test's bundles)");
        return false;
    }
    true
}

#[test]
fn an_npm_pin_builds_its_bundle_tree_and_stages_the_program_beside_its_library() {
    if !have_tools() {
        return;
    }
    let p = Pkg::new().expect("package");
    let pkg = tgz(&[
        Entry::File("package/package.json", b"{}"),
        Entry::File(MEMBER, &p.whole),
    ]);
    p.recipe(&pkg, &sha256(&pkg), &sha256(&p.whole), true, true);
    let o = p.build();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    crate::schemas::validate(&j);
    let names: Vec<&str> = j["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .filter_map(|a| a["path"].as_str())
        .collect();
    assert_eq!(names, ["bin/tinyserve", "lib/libtiny.so"], "{j}");
    let root = PathBuf::from(j["artifact_root"].as_str().expect("root"));
    let exe = root.join("bin/tinyserve");
    let rp = pinforge_base::elf::run_path(&std::fs::read(&exe).expect("read")).expect("ELF");
    assert!(rp.iter().any(|p| p == "$ORIGIN/../lib"), "{rp:?}");
    // It runs from the stage: the loader finds lib/ through the run path alone.
    let run = Command::new(&exe).env_clear().output().expect("run");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "tiny 7\n");

    // The manifest names the tarball, the bundle and the bundle's commit.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(j["manifest"].as_str().expect("m")).expect("read"))
            .expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let up = deps
        .iter()
        .find(|d| d["name"] == "upstream")
        .expect("upstream");
    assert_eq!(up["uri"], "npm:tinypkg@1.0.0");
    assert_eq!(up["digest"]["sha256"], sha256(&pkg).as_str());
    assert_eq!(
        up["annotations"]["bundle_sha256"],
        sha256(&p.whole).as_str()
    );
    let commit = up["digest"]["gitCommit"].as_str().expect("commit");
    assert_eq!(up["annotations"]["build_commit"], &commit[..9]);
    assert_eq!(up["annotations"]["build_number"], 42);
    let v = pinforge(&p.ws, &["verify", j["manifest"].as_str().expect("m")]);
    assert_eq!(code(&v), 0, "{}", stdout(&v));

    // Offline: the same pin without `path`, its tarball in the workspace's npm cache, builds
    // (cached: the same inputs) although npm cannot run.
    let cache = p.ws.join("vendor/cache/npm");
    std::fs::create_dir_all(&cache).expect("mkdir");
    std::fs::write(cache.join("tinypkg-1.0.0.tgz"), &pkg).expect("seed cache");
    p.recipe(&pkg, &sha256(&pkg), &sha256(&p.whole), false, true);
    let o = p.build();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Without the cached copy pinforge would have to run npm: said, exit 2.
    std::fs::remove_file(cache.join("tinypkg-1.0.0.tgz")).expect("rm");
    let o = p.build();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("npm"), "{}", stderr(&o));
}

#[test]
fn a_program_whose_run_path_cannot_reach_lib_is_not_staged() {
    if !have_tools() {
        return;
    }
    let p = Pkg::new().expect("package");
    let pkg = tgz(&[Entry::File(MEMBER, &p.whole)]);
    p.recipe(&pkg, &sha256(&pkg), &sha256(&p.whole), true, false);
    let o = p.build();
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("would not find lib/"), "{e}");
    assert!(e.contains("CMAKE_BUILD_WITH_INSTALL_RPATH"), "{e}");
    assert!(
        !p.ws.join("build/tinypkg/plain/manifest.json").exists(),
        "no manifest for a stage that does not run"
    );
}

#[test]
fn hostile_npm_pin_inputs_are_refused_before_a_tree_exists() {
    if !have_tools() {
        return;
    }
    let p = Pkg::new().expect("package");
    let good = tgz(&[Entry::File(MEMBER, &p.whole)]);
    let zero = "0".repeat(64);
    let cases: Vec<(Vec<u8>, Option<String>, String, &str)> = vec![
        // The tarball is not the pinned one.
        (
            good.clone(),
            Some(zero.clone()),
            sha256(&p.whole),
            "SHA-256 mismatch",
        ),
        // The bundle is not the pinned one.
        (good.clone(), None, zero.clone(), "bundle-sha256"),
        // The bundle member is a link (to a file that is there), or missing.
        (
            tgz(&[
                Entry::File("package/real.bundle", &p.whole),
                Entry::Link(MEMBER, "../real.bundle"),
            ]),
            None,
            sha256(&p.whole),
            "is a link",
        ),
        (
            tgz(&[Entry::File("package/other.bundle", &p.whole)]),
            None,
            sha256(&p.whole),
            "has no member",
        ),
        // A thin bundle: its pack needs a commit pinforge does not have.
        (
            tgz(&[Entry::File(MEMBER, &p.thin)]),
            None,
            sha256(&p.thin),
            "prerequisite",
        ),
    ];
    for (pkg, sha, bundle_sha, want) in cases {
        let sha = sha.unwrap_or_else(|| sha256(&pkg));
        p.recipe(&pkg, &sha, &bundle_sha, true, true);
        let o = p.build();
        assert_eq!(code(&o), 2, "{want}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{want}: {}", stderr(&o));
        assert_eq!(p.vendor_trees(), Vec::<String>::new(), "{want}: no tree");
        assert!(!p.ws.join("build/tinypkg").exists(), "{want}: no build");
    }
}

// ---------------------------------------------------------------------------------------------
// The shipped server recipe, built for real in the shared workspace.
