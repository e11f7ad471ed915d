//! A pin whose tree lacks a folder that a new `option()` gates (issue #39: crate 0.1.161 has no
//! llama.cpp `app/` while `option(LLAMA_BUILD_APP …)` defaults ON): a real CMake configure of a
//! tiny project whose top-level `if (WITH_APP) add_subdirectory(app)` names a missing folder.
//! The build passes `-DWITH_APP=OFF` and says why; a recipe that turns it on fails with a hint
//! that names the option and its line.

use crate::{code, commit_files, pinforge, stderr, TINY_C};
use git2::Repository;

const LISTS: &str = "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\noption(WITH_APP \"the app\" ON)\nadd_library(tiny SHARED tiny.c)\nif (WITH_APP)\n    add_subdirectory(app)\nendif()\n";

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = dir.path().join("upstream");
    let repo = Repository::init(&upstream).expect("init");
    let v1 = commit_files(
        &repo,
        &[("tiny.c", TINY_C), ("CMakeLists.txt", LISTS)],
        "v1",
    );
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
    let recipe = format!(
        r#"name = "gated"
default-variant = "plain"
[pin]
kind = "git"
url = "{url}"
commit = "{commit}"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
cmake-version = ">=3.24"
[base]
toolchain = "cpu"
targets = ["tiny"]
[variants.plain]
patches = []
[variants.with-app]
patches = []
cmake = {{ WITH_APP = true }}
"#,
        url = upstream.display(),
        commit = v1
    );
    std::fs::write(ws.join("recipes/gated.toml"), recipe).expect("recipe");
    dir
}

#[test]
fn an_option_gating_a_missing_folder_is_turned_off_and_a_recipe_that_sets_it_gets_a_hint() {
    let dir = workspace();
    let ws = dir.path().join("ws");
    let o = pinforge(
        &ws,
        &[
            "build",
            "recipes/gated.toml",
            "--variant",
            "plain",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let manifest =
        std::fs::read_to_string(ws.join("build/gated/plain/manifest.json")).expect("manifest");
    assert!(manifest.contains("\"-DWITH_APP=OFF\""), "{manifest}");
    let log = std::fs::read_to_string(ws.join("build/gated/plain/build.log")).expect("log");
    assert!(
        log.lines()
            .next()
            .is_some_and(|l| l.contains("-DWITH_APP=OFF") && l.contains("CMakeLists.txt:3")),
        "{log}"
    );

    let o = pinforge(
        &ws,
        &["build", "recipes/gated.toml", "--variant", "with-app"],
    );
    assert_ne!(code(&o), 0, "the recipe's WITH_APP=ON cannot configure");
    let err = stderr(&o);
    assert!(err.contains("no app/"), "{err}");
    assert!(err.contains("WITH_APP (CMakeLists.txt:3)"), "{err}");
    let manifest = ws.join("build/gated/with-app/manifest.json");
    assert!(!manifest.exists(), "a failed configure writes no manifest");
}
