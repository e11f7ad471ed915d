//! The no-op build's fast path (issue #8, speed): a metadata stamp decides that nothing
//! changed, and every kind of change sends the build down the full path again.

use crate::{code, json, pinforge, stderr, stdout, Tiny};
use std::path::PathBuf;

/// The build log: the full path rewrites it, the fast path never touches it.
fn log_stat(t: &Tiny) -> (std::time::SystemTime, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(t.ws.join("build/tiny/patched/build.log")).expect("log");
    (m.modified().expect("mtime"), m.ino())
}

fn built(t: &Tiny) -> serde_json::Value {
    let o = t.build("patched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    json(&o)
}

/// A fresh build, then a no-op build that must take the fast path.
fn fast_after_build(t: &Tiny) -> serde_json::Value {
    let first = built(t);
    assert_eq!(first["cached"], false);
    // mtime granularity: a later rewrite of the log must be visible.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let log = log_stat(t);
    let o = t.build("patched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).trim().is_empty(),
        "the fast path runs no stage: {}",
        stderr(&o)
    );
    let j = json(&o);
    assert_eq!(j["cached"], true, "{j}");
    assert_eq!(j["steps_run"], 0);
    assert_eq!(j["input_digest"], first["input_digest"]);
    assert_eq!(j["artifacts"], first["artifacts"]);
    assert_eq!(log_stat(t), log, "the fast path left the build log alone");
    std::thread::sleep(std::time::Duration::from_millis(20));
    j
}

/// The next build took the full path (its log was rewritten) and says `cached` or not.
fn full_path(t: &Tiny, cached: bool) -> serde_json::Value {
    let log = log_stat(t);
    let j = built(t);
    assert_ne!(log_stat(t), log, "the full path ran (build log rewritten)");
    assert_eq!(j["cached"], cached, "{j}");
    j
}

// issue #8 speed: the second build of an unchanged variant is answered from the stamp.
#[test]
fn a_no_op_build_is_answered_from_the_stamp_without_running_any_stage() {
    let t = Tiny::new();
    fast_after_build(&t);
    // And again: the fast path leaves the stamp valid.
    let o = t.build("patched");
    assert_eq!(json(&o)["cached"], true);
    assert!(stderr(&o).trim().is_empty(), "{}", stderr(&o));
}

// issue #8 speed: an output changed behind pinforge's back is re-staged by the full path,
// which finds the same outputs as the manifest (cached) and restores the file.
#[test]
fn a_tampered_artifact_sends_the_build_down_the_full_path_and_is_restored() {
    let t = Tiny::new();
    let j = fast_after_build(&t);
    let lib = t.ws.join("build/tiny/patched/stage/lib/libtiny.so.1.0.0");
    let want = std::fs::read(&lib).expect("lib");
    let mut bytes = want.clone();
    bytes[100] ^= 0xff;
    std::fs::write(&lib, &bytes).expect("tamper");
    let again = full_path(&t, true);
    assert_eq!(again["artifacts"], j["artifacts"]);
    assert_eq!(std::fs::read(&lib).expect("lib"), want, "restored");
    // Then the fast path again.
    assert_eq!(json(&t.build("patched"))["cached"], true);
}

// issue #8 speed: a changed patch, a changed recipe, a touched source file and a changed
// tool search path each invalidate the stamp.
#[test]
fn every_input_kind_invalidates_the_stamp() {
    let t = Tiny::new();
    fast_after_build(&t);

    // A patch rewritten with other bytes: rebuilt, and the reason is named.
    let patch = t.ws.join("patches/0001-tiny-return-2.patch");
    let text = std::fs::read_to_string(&patch).expect("patch");
    std::fs::write(&patch, text.replace("return 2;", "return 3;")).expect("edit");
    let j = full_path(&t, false);
    assert_eq!(
        j["rebuilt_because"],
        serde_json::json!(["patch 0001-tiny-return-2.patch changed"])
    );
    fast_after_build_again(&t);

    // The same patch bytes written again (new mtime and ctime): the full path decides, and
    // finds nothing to rebuild.
    std::fs::write(&patch, std::fs::read(&patch).expect("patch")).expect("rewrite");
    full_path(&t, true);
    fast_after_build_again(&t);

    // The recipe: a changed CMake option.
    let recipe = t.ws.join("recipes/tiny.toml");
    let text = std::fs::read_to_string(&recipe).expect("recipe");
    std::fs::write(
        &recipe,
        text.replace(
            "BUILD_SHARED_LIBS = true }",
            "BUILD_SHARED_LIBS = true, TINY_X = \"1\" }",
        ),
    )
    .expect("edit");
    full_path(&t, false);
    fast_after_build_again(&t);

    // A file of the vendor tree that no build step reads: the stamp's tree listing sees it,
    // and the full path refuses the modified tree as it always did.
    let tree = PathBuf::from(j["source_tree"].as_str().expect("tree"));
    std::fs::write(tree.join("README.extra"), "x").expect("add");
    let o = t.build("patched");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("vendor tree was modified"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(tree.join("README.extra")).expect("rm");

    // A new folder searched for tools: the key changes.
    let tools = t.ws.join("more-tools");
    std::fs::create_dir(&tools).expect("mkdir");
    let log = log_stat(&t);
    let o = crate::pinforge_cmd(&t.ws)
        .env(
            "PINFORGE_TOOL_PATH",
            std::env::join_paths([tools.as_path(), crate::tool_path().as_path()]).expect("join"),
        )
        .args([
            "build",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--json",
        ])
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_ne!(log_stat(&t), log, "the full path ran");
}

/// A no-op build after a full one takes the fast path.
fn fast_after_build_again(t: &Tiny) {
    std::thread::sleep(std::time::Duration::from_millis(20));
    let log = log_stat(t);
    let o = t.build("patched");
    assert_eq!(json(&o)["cached"], true, "{}", stderr(&o));
    assert_eq!(log_stat(t), log, "fast path");
    std::thread::sleep(std::time::Duration::from_millis(20));
}

// issue #8 speed, the documented limit: a same-size rewrite whose mtime is put back is a
// change the metadata stamp cannot see when the ctime is also unchanged — which user space
// cannot arrange, so here the ctime moves and the stamp notices; `verify` re-hashes anyway.
#[test]
fn a_same_size_rewrite_with_the_old_mtime_is_still_seen_through_its_ctime_and_by_verify() {
    let t = Tiny::new();
    let j = fast_after_build(&t);
    let lib = t.ws.join("build/tiny/patched/stage/lib/libtiny.so.1.0.0");
    let m = std::fs::metadata(&lib).expect("lib");
    let mut bytes = std::fs::read(&lib).expect("lib");
    bytes[100] ^= 0xff;
    // Writing in place keeps the inode and the size; the mtime is then put back.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&lib)
        .or_else(|_| {
            let mut p = m.permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o644);
            std::fs::set_permissions(&lib, p)?;
            std::fs::OpenOptions::new().write(true).open(&lib)
        })
        .expect("open");
    f.write_all(&bytes).expect("write");
    f.set_modified(m.modified().expect("mtime"))
        .expect("mtime back");
    drop(f);
    let manifest = j["manifest"].as_str().expect("manifest");
    let v = pinforge(&t.ws, &["verify", manifest]);
    assert_eq!(code(&v), 1, "verify re-hashes: {}", stderr(&v));
    full_path(&t, true);
    let v = pinforge(&t.ws, &["verify", manifest]);
    assert_eq!(code(&v), 0, "restored by the full path: {}", stderr(&v));
}

// Review finding: a no-op build reports the compile cache it was asked for. `--no-cache` after
// a cached build is not answered from a stamp that recorded the cache as on.
#[test]
fn a_no_op_build_with_other_cache_settings_reports_those_settings() {
    let t = Tiny::new();
    fast_after_build(&t);
    let o = pinforge(
        &t.ws,
        &[
            "build",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--no-cache",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["cached"], true, "{j}");
    assert_eq!(j["compile_cache"]["enabled"], false, "{j}");
    assert_eq!(j["compile_cache"]["hits"], 0, "{j}");
}

// issue #23 (operator leftover): `build -q` prints nothing on success, on the full path and on
// the stamp's fast path alike; an error still reaches stderr, with its exit code.
#[test]
fn a_quiet_build_prints_nothing_on_success_and_its_error_still_reaches_stderr() {
    let t = Tiny::new();
    let quiet = |variant: &str| {
        pinforge(
            &t.ws,
            &["build", "recipes/tiny.toml", "--variant", variant, "-q"],
        )
    };
    for path in ["full path", "fast path"] {
        let o = quiet("patched");
        assert_eq!(code(&o), 0, "{path}: {}", stderr(&o));
        assert_eq!(stdout(&o), "", "{path}: -q prints no artifact list");
        assert_eq!(stderr(&o), "", "{path}: -q prints no stage line");
    }
    // Without -q the same build still says what it did.
    let o = pinforge(
        &t.ws,
        &["build", "recipes/tiny.toml", "--variant", "patched"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("cached tiny/patched"),
        "{}",
        stdout(&o)
    );

    let o = quiet("no-such-variant");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("no-such-variant"), "{}", stderr(&o));
}
