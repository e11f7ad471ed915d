//! The fast integration tier (`cargo test`): the `pinforge` executable run as a user runs it, on
//! real temp directories, real git repositories (made with libgit2), real CMake and Ninja (from
//! `tools/bootstrap.sh`), a real OCI registry, Redis and Chromium, over a tiny C project pinned
//! from a local git repository. Nothing here builds llama.cpp: those tests are the slow tier,
//! `tests/llama/` (`cargo test --features slow-tests --test llama`).

// The tests read the files they made with plain std::fs: clippy.toml's fs entries are about
// files data names. The rules this also lifts (set_var, remove_var, exit) are kept for the
// tests by `trust_toolkit::test_code_keeps_the_rules_the_allow_lifts`.
#![allow(clippy::disallowed_methods)]

// One module per workstream; the fixtures both tiers share (pinforge runner, tiny upstream,
// install fixture) live in tests/common/ and are reachable from every module as `crate::…`.
#[path = "../common/mod.rs"]
mod common;
pub(crate) use common::*;

use git2::Repository;
use std::path::{Path, PathBuf};
use std::process::Command;

mod ablate_txn;
mod artifacts;
mod attribution;
mod audit;
mod audit_check;
mod audit_revert;
mod bisect;
mod bundle;
mod compile_cache;
mod cuda;
mod diff;
mod dist;
mod export_txn;
mod fleet;
mod flip;
mod flip_txn;
mod gated_options;
mod history;
mod inputs;
mod layers;
mod lock_wait;
mod noop;
mod output;
mod patch_apply;
mod rebase_resolve;
mod report;
mod report_served;
mod schemas;
mod serve_chat_bounds;
mod serve_fake;
mod serve_progress;
mod serve_tree;
mod shard;
mod ship;
mod ship_inputs;
mod sign;
mod sign_p256;
mod sign_prompt;
mod sign_txn;
mod sign_with;
mod smoke_scenario;
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

// jj's `test_no_forgotten_test_files`: a file in tests/cli/, tests/llama/ or tests/common/ that
// is no `mod` of its binary's main.rs (or of common/mod.rs) is never compiled, so its tests
// would silently never run.
#[test]
fn every_test_file_is_a_module_of_its_test_binary() {
    use std::collections::BTreeSet;
    for (folder, root, prefix) in [
        ("tests/cli", "main.rs", "mod "),
        ("tests/llama", "main.rs", "mod "),
        ("tests/common", "mod.rs", "pub(crate) mod "),
    ] {
        let dir = repo_root().join(folder);
        let main = std::fs::read_to_string(dir.join(root)).expect(folder);
        let declared: BTreeSet<String> = main
            .lines()
            .filter_map(|l| l.strip_prefix(prefix)?.strip_suffix(';'))
            .map(str::to_string)
            .collect();
        let mut files = BTreeSet::new();
        for e in std::fs::read_dir(&dir).expect(folder).flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".rs") {
                if stem != "main" && stem != "mod" {
                    files.insert(stem.to_string());
                }
            } else if p.join("mod.rs").is_file() {
                files.insert(name);
            }
        }
        let forgotten: Vec<&String> = files.difference(&declared).collect();
        assert!(
            forgotten.is_empty(),
            "{folder}/ files that are no `mod` of {root} (never compiled, never run): {forgotten:?}"
        );
    }
    // And the known test binaries only (DESIGN §4.7): cargo would build any other tests/*.rs
    // or tests/*/main.rs as a binary of its own, in neither tier's command.
    let others: Vec<String> = std::fs::read_dir(repo_root().join("tests"))
        .expect("tests")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            (p.extension().is_some_and(|x| x == "rs") && !p.ends_with("docs.rs"))
                || (p.join("main.rs").is_file() && !p.ends_with("cli") && !p.ends_with("llama"))
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(others.is_empty(), "a test binary of no tier: {others:?}");
}

// insta names a snapshot `<binary>__<module>__<name>.snap` and looks for it beside the binary's
// sources only: one left in another binary's folder (as the tier split once left the slow
// tier's ablation table in tests/cli) is never read, and the test fails as a new snapshot in
// CI. Every stored snapshot must name its folder's binary and one of its modules.
#[test]
fn every_snapshot_belongs_to_a_module_of_the_binary_beside_it() {
    for binary in ["cli", "llama"] {
        let dir = repo_root().join("tests").join(binary);
        let Ok(entries) = std::fs::read_dir(dir.join("snapshots")) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                !name.ends_with(".snap.new") && !name.ends_with(".pending-snap"),
                "tests/{binary}/snapshots/{name}: an unreviewed snapshot (cargo insta review)"
            );
            let rest = name
                .strip_prefix(&format!("{binary}__"))
                .unwrap_or_else(|| panic!("tests/{binary}/snapshots/{name}: not {binary}__*"));
            // `cli__NAME.snap` is asserted in main.rs itself; `cli__MODULE__NAME.snap` in a module.
            let Some((module, _)) = rest.split_once("__") else {
                continue;
            };
            assert!(
                dir.join(format!("{module}.rs")).is_file()
                    || dir.join(module).join("mod.rs").is_file(),
                "tests/{binary}/snapshots/{name}: tests/{binary} has no module `{module}`"
            );
        }
    }
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
    let folders = ["tests/cli", "tests/llama", "tests/common"];
    for e in folders.iter().flat_map(|f| {
        std::fs::read_dir(repo_root().join(f))
            .expect("tests")
            .flatten()
    }) {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let uses = text.matches(exe).count();
        let want = usize::from(e.path().ends_with("tests/common/mod.rs"));
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
fn the_help_and_the_reference_list_the_same_exit_codes_as_the_enum() {
    // issue #8: one exit-code enum generates the help's table; the book's exit-code reference
    // (which the README points to) must say the same.
    let o = pinforge(&repo_root(), &["--help"]);
    let help = stdout(&o);
    let page = "docs/reference/exit-codes.md";
    let readme = std::fs::read_to_string(repo_root().join(page)).expect(page);
    for c in pinforge_base::error::ExitCode::ALL {
        let line = format!("  {}  {}", c.code(), c.meaning());
        assert!(help.contains(&line), "--help lacks `{line}`:\n{help}");
        let row = format!("| {} | {} |", c.code(), c.meaning());
        assert!(readme.contains(&row), "{page} lacks `{row}`");
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

    // gc keeps every referenced entry. Control holds its own copy of `unpatched`
    // (`store/<digest>.own`, issue #36), so the linked `unpatched` entry the popped live
    // generation used is referenced by nothing and goes, and control's copy stays.
    let unpatched = PathBuf::from(
        i.status()["layers"]["control"]["entry"]
            .as_str()
            .expect("control entry"),
    );
    let own_name = format!(
        "store/{}",
        unpatched.file_name().expect("name").to_string_lossy()
    );
    assert!(own_name.ends_with(".own"), "{own_name}");
    let o = i.run(&["gc"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("removed 1 entr(ies)"), "{}", stdout(&o));
    assert!(!stdout(&o).contains(".own"), "{}", stdout(&o));
    assert!(i.root.join(&own_name).is_dir(), "control's own entry stays");
    assert!(i.verify_ok());
    // Once control is replaced by `patched`, control's own `unpatched` copy goes.
    assert_eq!(code(&i.install(&i.patched, "control")), 0);
    let o = i.run(&["gc"]);
    assert!(stdout(&o).contains("removed 1 entr(ies)"), "{}", stdout(&o));
    assert!(stdout(&o).contains(&own_name), "{}", stdout(&o));
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
