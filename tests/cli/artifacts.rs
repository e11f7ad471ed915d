//! Build artifacts are what the project installs: staged `cmake --install`, the file API cross-check, consumers of an installed layer, recipe values that must not escape their meaning.
//!
//! Projects are real CMake projects in real git repositories (pinned as git pins), built with
//! the bootstrapped CMake and Ninja; the whisper.cpp test builds the tree vendored by the
//! registry crate `whisper-rs-sys` through the shipped recipe `recipes/whisper-cpu.toml`.

use crate::{code, commit_files, json, pinforge, pinforge_cmd, stderr, stdout};
use git2::Repository;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A CMake project of our own in a git repository, and a workspace whose recipe pins it.
struct Proj {
    _dir: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
    upstream: PathBuf,
    commit: String,
}

impl Proj {
    /// `parent`: where the temp folder goes (a path with a space, for the space tests).
    fn new_in(parent: Option<&Path>, files: &[(&str, &str)]) -> Proj {
        let dir = match parent {
            Some(p) => {
                std::fs::create_dir_all(p).expect("mkdir parent");
                tempfile::tempdir_in(p).expect("tempdir")
            }
            None => tempfile::tempdir().expect("tempdir"),
        };
        let base = dir.path().to_path_buf();
        let upstream = base.join("up stream");
        let repo = Repository::init(&upstream).expect("init");
        let commit = commit_files(&repo, files, "v1").to_string();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
        std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
        std::fs::write(ws.join("patches/series"), "").expect("series");
        Proj {
            _dir: dir,
            base,
            ws,
            upstream,
            commit,
        }
    }

    fn new(files: &[(&str, &str)]) -> Proj {
        Proj::new_in(None, files)
    }

    /// Write `recipes/FILE` pinning the project; `cmake` is the inside of `[base.cmake]`.
    fn recipe(&self, file: &str, targets: &str, cmake: &str) -> PathBuf {
        let text = format!(
            r#"default-variant = "v"
[pin]
kind = "git"
url = "{url}"
commit = "{commit}"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
[base]
toolchain = "cpu"
targets = {targets}
patches = []
[base.cmake]
BUILD_SHARED_LIBS = true
{cmake}
[variants.v]
"#,
            url = self.upstream.display().to_string().replace('\\', "\\\\"),
            commit = self.commit,
        );
        let p = self.ws.join("recipes").join(file);
        std::fs::write(&p, text).expect("write recipe");
        p
    }

    fn build(&self, recipe: &Path) -> Output {
        pinforge(
            &self.ws,
            &["build", recipe.to_str().expect("utf8"), "--json"],
        )
    }
}

fn manifest_of(o: &Output) -> (PathBuf, serde_json::Value) {
    let j = json(o);
    let p = PathBuf::from(j["manifest"].as_str().expect("manifest"));
    let m = serde_json::from_slice(&std::fs::read(&p).expect("manifest")).expect("json");
    (p, m)
}

fn subjects(m: &serde_json::Value) -> Vec<String> {
    m["subject"]
        .as_array()
        .expect("subjects")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect()
}

fn run_ok(cmd: &mut Command) -> String {
    let o = cmd.output().expect("spawn");
    assert!(
        o.status.success(),
        "{cmd:?} failed\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Run with a deadline: a command that hangs is killed and the test fails, never hangs.
fn with_timeout(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let id = child.id();
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait"),
        Err(_) => {
            // The child this test started.
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(id as i32).expect("pid"),
                rustix::process::Signal::KILL,
            );
            panic!("{cmd:?} hung: killed after {:?}", started.elapsed());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A project with its libraries under src/ and install rules (issue #13 item 3).

const SRC_ROOT_CMAKE: &str = r#"cmake_minimum_required(VERSION 3.14)
project(layered VERSION 2.1.0 LANGUAGES C)
include(GNUInstallDirs)
add_subdirectory(src)
install(FILES include/layered.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
configure_file(layered.pc.in ${CMAKE_CURRENT_BINARY_DIR}/layered.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/layered.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(EXPORT layeredTargets NAMESPACE layered:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layered)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/layered-config.cmake "include(\${CMAKE_CURRENT_LIST_DIR}/layeredTargets.cmake)\nset(LAYERED_PREFIX_AT_CONFIGURE \"${CMAKE_INSTALL_PREFIX}\")\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/layered-config.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layered)
"#;
const SRC_CMAKE: &str = r#"add_library(layered_core SHARED core.c)
set_target_properties(layered_core PROPERTIES VERSION 2.1.0 SOVERSION 2)
add_library(layered SHARED layered.c)
set_target_properties(layered PROPERTIES VERSION 2.1.0 SOVERSION 2)
target_link_libraries(layered PRIVATE layered_core)
target_include_directories(layered PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
install(TARGETS layered layered_core EXPORT layeredTargets)
"#;
const SRC_PC: &str = "prefix=@CMAKE_INSTALL_PREFIX@\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\n\nName: layered\nDescription: test\nVersion: @PROJECT_VERSION@\nLibs: -L${libdir} -llayered\nCflags: -I${includedir}\n";
const SRC_CORE_C: &str =
    "const char *core_where(void) { return __FILE__; }\nint layered_core_value(void) { return 40; }\n";
const SRC_LAYERED_C: &str =
    "int layered_core_value(void);\nint layered_value(void) { return layered_core_value() + 2; }\n";
const SRC_H: &str = "int layered_value(void);\n";

fn layered() -> Proj {
    Proj::new(&[
        ("CMakeLists.txt", SRC_ROOT_CMAKE),
        ("src/CMakeLists.txt", SRC_CMAKE),
        ("layered.pc.in", SRC_PC),
        ("src/core.c", SRC_CORE_C),
        ("src/layered.c", SRC_LAYERED_C),
        ("include/layered.h", SRC_H),
    ])
}

const CONSUMER_C: &str = "#include <stdio.h>\n#include <layered.h>\nint main(void) { printf(\"layered %d\\n\", layered_value()); return 0; }\n";

// issue #13 item 3: a project whose libraries are under src/ of the build folder.
#[test]
fn libraries_under_src_are_installed_artifacts_and_a_consumer_links_against_the_layer() {
    let p = layered();
    let r = p.recipe("layered.toml", r#"["layered"]"#, "");
    let o = p.build(&r);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (mpath, m) = manifest_of(&o);
    let names = subjects(&m);
    for want in [
        "include/layered.h",
        "lib/liblayered.so.2.1.0",
        "lib/liblayered_core.so.2.1.0",
        "lib/pkgconfig/layered.pc",
        "lib/cmake/layered/layered-config.cmake",
        "lib/cmake/layered/layeredTargets.cmake",
    ] {
        assert!(names.contains(&want.to_string()), "{want} in {names:?}");
    }
    let internal = &m["predicate"]["buildDefinition"]["internalParameters"];
    assert_eq!(internal["artifact_root"], "stage");
    assert_eq!(internal["staging"], "cmake-install");
    // The cross-check is recorded: each built library and the artifact installing it.
    let built: Vec<(String, String)> = m["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts")
        .iter()
        .filter_map(|b| {
            Some((
                b["name"].as_str()?.strip_prefix("built:")?.to_string(),
                b["annotations"]["installed_as"].as_str()?.to_string(),
            ))
        })
        .collect();
    assert_eq!(
        built,
        vec![
            (
                "src/liblayered.so.2.1.0".to_string(),
                "lib/liblayered.so.2.1.0".to_string()
            ),
            (
                "src/liblayered_core.so.2.1.0".to_string(),
                "lib/liblayered_core.so.2.1.0".to_string()
            ),
        ]
    );
    // Links are recorded as links.
    let links: Vec<String> = m["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts")
        .iter()
        .filter(|b| b["annotations"].get("link_target").is_some())
        .map(|b| b["name"].as_str().expect("name").to_string())
        .collect();
    assert!(
        links.contains(&"lib/liblayered.so".to_string()),
        "{links:?}"
    );

    // Relocatable package files: no prefix, no workspace path.
    let stage = p.ws.join("build/layered/v/stage");
    let pc = std::fs::read_to_string(stage.join("lib/pkgconfig/layered.pc")).expect("pc");
    assert!(pc.starts_with("prefix=${pcfiledir}/../..\n"), "{pc}");
    let cfg = std::fs::read_to_string(stage.join("lib/cmake/layered/layered-config.cmake"))
        .expect("config");
    assert!(
        cfg.contains("\"${CMAKE_CURRENT_LIST_DIR}/../../..\""),
        "{cfg}"
    );
    // Installed run paths stay $ORIGIN-relative.
    let lib = std::fs::read(stage.join("lib/liblayered.so.2.1.0")).expect("lib");
    assert!(
        String::from_utf8_lossy(&lib).contains("$ORIGIN"),
        "installed RUNPATH is $ORIGIN-relative"
    );

    // issue #7 class 9: the build's manifest is readable by every account.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&mpath)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644);

    let v = pinforge(&p.ws, &["verify", mpath.to_str().expect("utf8")]);
    assert_eq!(code(&v), 0, "{}{}", stdout(&v), stderr(&v));

    // Install into a layer; consumers build against `current` with pkg-config and with
    // find_package, and run.
    let root = p.base.join("root");
    let i = pinforge(
        &p.ws,
        &[
            "install",
            mpath.to_str().expect("utf8"),
            "--layer",
            "live",
            "--root",
            root.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&i), 0, "{}", stderr(&i));
    let current = root.join("current");
    let consumer = p.base.join("consumer");
    std::fs::create_dir_all(&consumer).expect("mkdir");
    std::fs::write(consumer.join("main.c"), CONSUMER_C).expect("write");
    let flags = run_ok(
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "layered"])
            .env("PKG_CONFIG_PATH", current.join("lib/pkgconfig"))
            .env_remove("PKG_CONFIG_LIBDIR"),
    );
    assert!(
        flags.contains(&current.display().to_string()),
        "pkg-config resolves the prefix to the layer: {flags}"
    );
    let exe = consumer.join("pc-consumer");
    let mut cc = Command::new("cc");
    cc.arg(consumer.join("main.c")).arg("-o").arg(&exe);
    cc.args(flags.split_whitespace());
    cc.arg(format!("-Wl,-rpath,{}", current.join("lib").display()));
    run_ok(&mut cc);
    assert_eq!(run_ok(&mut Command::new(&exe)), "layered 42\n");

    std::fs::write(
        consumer.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.14)\nproject(consumer C)\nfind_package(layered REQUIRED)\nadd_executable(cm-consumer main.c)\ntarget_link_libraries(cm-consumer layered::layered)\n",
    )
    .expect("write");
    let cmake = crate::tool_path().join("cmake");
    let b = consumer.join("b");
    run_ok(
        Command::new(&cmake)
            .arg("-S")
            .arg(&consumer)
            .arg("-B")
            .arg(&b)
            .arg("-G")
            .arg("Ninja")
            .arg(format!(
                "-DCMAKE_MAKE_PROGRAM={}",
                crate::tool_path().join("ninja").display()
            ))
            .arg(format!("-DCMAKE_PREFIX_PATH={}", current.display())),
    );
    run_ok(Command::new(&cmake).arg("--build").arg(&b));
    assert_eq!(
        run_ok(&mut Command::new(b.join("cm-consumer"))),
        "layered 42\n"
    );
}

// issue #13: staged artifacts are the same bytes in another workspace (prefix maps, the fixed
// install prefix, relocated package files).
#[test]
fn staged_artifacts_are_identical_across_workspaces() {
    let a = layered();
    let b = layered();
    let ja = json(&a.build(&a.recipe("layered.toml", r#"["layered"]"#, "")));
    let jb = json(&b.build(&b.recipe("layered.toml", r#"["layered"]"#, "")));
    assert_eq!(ja["artifacts"], jb["artifacts"]);
    assert_eq!(ja["links"], jb["links"]);
}

// issue #13: a library the requested target built that no install rule installs fails the
// build with exit 1, naming it.
#[test]
fn a_built_library_no_install_rule_covers_fails_the_build_with_exit_1_naming_it() {
    // The requested target's dependency is not installed.
    let p = layered();
    std::fs::write(
        p.upstream.join("src/CMakeLists.txt"),
        SRC_CMAKE.replace(
            "install(TARGETS layered layered_core EXPORT layeredTargets)",
            "install(TARGETS layered)",
        ),
    )
    .expect("write");
    std::fs::write(
        p.upstream.join("CMakeLists.txt"),
        SRC_ROOT_CMAKE.replace(
            "install(EXPORT layeredTargets NAMESPACE layered:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layered)\n",
            "",
        ),
    )
    .expect("write");
    let repo = Repository::open(&p.upstream).expect("repo");
    let commit = commit_files(&repo, &[], "drop the core install rule").to_string();
    let p = Proj { commit, ..p };
    let o = p.build(&p.recipe("layered.toml", r#"["layered"]"#, ""));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("liblayered_core.so.2.1.0"), "{e}");
    assert!(e.contains("target `layered_core`"), "{e}");
    assert!(
        !e.contains("liblayered.so.2.1.0 "),
        "the installed one is covered: {e}"
    );
    assert!(!p.ws.join("build/layered/v/manifest.json").exists());

    // The requested target itself excluded: the project installs only a header.
    let q = Proj::new(&[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.14)\nproject(hdr C)\nadd_library(hdr SHARED hdr.c)\ninstall(FILES hdr.h DESTINATION include)\n",
        ),
        ("hdr.c", "int hdr(void) { return 1; }\n"),
        ("hdr.h", "int hdr(void);\n"),
    ]);
    let o = q.build(&q.recipe("hdr.toml", r#"["hdr"]"#, ""));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("libhdr.so (target `hdr`)"),
        "{}",
        stderr(&o)
    );
}

// issue #13: install rules that write outside the prefix are refused, not staged.
#[test]
fn install_rules_writing_outside_the_prefix_fail_the_build() {
    let p = Proj::new(&[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.14)\nproject(out C)\nadd_library(out SHARED out.c)\ninstall(TARGETS out)\ninstall(FILES out.c DESTINATION /etc/pinforge-test)\n",
        ),
        ("out.c", "int out(void) { return 1; }\n"),
    ]);
    let o = p.build(&p.recipe("out.toml", r#"["out"]"#, ""));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("outside the install prefix"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new("/etc/pinforge-test").exists());
}

// issue #7 class 1 (dedup review finding 3): the build resolves its staged links with the
// resolver install uses, so `l -> .` plus `x -> l/l/../../etc` (each text alone looks local)
// fails the build with exit 1 naming the link, and no manifest install would refuse is written.
#[test]
fn staged_links_escaping_through_an_earlier_link_fail_the_build_naming_the_link() {
    let p = Proj::new(&[
        (
            "CMakeLists.txt",
            concat!(
                "cmake_minimum_required(VERSION 3.14)\nproject(esc C)\n",
                "add_library(esc SHARED esc.c)\ninstall(TARGETS esc)\n",
                "install(CODE \"set(p \\\"\\$ENV{DESTDIR}\\${CMAKE_INSTALL_PREFIX}\\\")\n",
                "file(CREATE_LINK . \\${p}/l SYMBOLIC)\n",
                "file(CREATE_LINK l/l/../../etc \\${p}/x SYMBOLIC)\")\n",
            ),
        ),
        ("esc.c", "int esc(void) { return 1; }\n"),
    ]);
    let o = p.build(&p.recipe("esc.toml", r#"["esc"]"#, ""));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("outside the prefix"), "{e}");
    assert!(e.contains("l/l/../../etc"), "{e}");
    assert!(!p.ws.join("build/esc/v/manifest.json").exists());
}

// ---------------------------------------------------------------------------------------------
// A second real CMake project: whisper.cpp vendored by whisper-rs-sys (issue #13 item 3).

const WHISPER_C: &str = "#include <stdio.h>\n#include <whisper.h>\nint main(void) { printf(\"whisper %s\\n%s\\n\", whisper_version(), whisper_print_system_info()); return 0; }\n";
const GGML_C: &str = "#include <stdio.h>\n#include <ggml.h>\nint main(void) { printf(\"ggml %s\\n\", ggml_type_name(GGML_TYPE_F32)); return 0; }\n";

#[test]
fn whisper_cpp_builds_with_every_library_in_the_manifest_and_links_from_the_installed_layer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
    let recipe = ws.join("recipes/whisper-cpu.toml");
    std::fs::copy(crate::repo_root().join("recipes/whisper-cpu.toml"), &recipe)
        .expect("copy recipe");
    // The recipe's bundle: one packaging patch (configure must not write into the source).
    std::fs::create_dir_all(ws.join("patches-whisper")).expect("mkdir");
    for e in std::fs::read_dir(crate::repo_root().join("patches-whisper")).expect("bundle") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), ws.join("patches-whisper").join(e.file_name())).expect("copy");
    }
    let started = Instant::now();
    let o = pinforge(&ws, &["build", recipe.to_str().expect("utf8"), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    eprintln!("whisper.cpp build: {:.0?}", started.elapsed());
    let (mpath, m) = manifest_of(&o);
    assert_eq!(
        m["predicate"]["buildDefinition"]["externalParameters"]["patches"],
        serde_json::json!(["0001-cmake-configure-package-json-into-the-build-folder.patch"])
    );
    let names = subjects(&m);
    for lib in [
        "libwhisper.so",
        "libggml.so",
        "libggml-base.so",
        "libggml-cpu.so",
    ] {
        assert!(
            names
                .iter()
                .any(|n| n.strip_prefix("lib/").is_some_and(|f| f.starts_with(lib))),
            "{lib} in {names:?}"
        );
    }
    for f in [
        "include/whisper.h",
        "include/ggml.h",
        "lib/pkgconfig/whisper.pc",
        "lib/cmake/whisper/whisper-config.cmake",
        "lib/cmake/ggml/ggml-config.cmake",
    ] {
        assert!(names.contains(&f.to_string()), "{f} in {names:?}");
    }
    // Built under src/ and ggml/src/ of the build folder, covered by lib/ artifacts.
    let built: Vec<String> = m["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts")
        .iter()
        .filter_map(|b| {
            b["name"]
                .as_str()?
                .strip_prefix("built:")
                .map(str::to_string)
        })
        .collect();
    assert!(
        built.iter().any(|b| b.starts_with("src/libwhisper.so")),
        "{built:?}"
    );
    assert!(
        built
            .iter()
            .any(|b| b.starts_with("ggml/src/libggml-base.so")),
        "{built:?}"
    );

    let v = pinforge(&ws, &["verify", mpath.to_str().expect("utf8")]);
    assert_eq!(code(&v), 0, "{}{}", stdout(&v), stderr(&v));

    let root = dir.path().join("root");
    let i = pinforge(
        &ws,
        &[
            "install",
            mpath.to_str().expect("utf8"),
            "--layer",
            "live",
            "--root",
            root.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&i), 0, "{}", stderr(&i));
    let current = root.join("current");

    // pkg-config: whisper.pc.
    let c = dir.path().join("consumer");
    std::fs::create_dir_all(&c).expect("mkdir");
    std::fs::write(c.join("w.c"), WHISPER_C).expect("write");
    let flags = run_ok(
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "whisper"])
            .env("PKG_CONFIG_PATH", current.join("lib/pkgconfig"))
            .env_remove("PKG_CONFIG_LIBDIR"),
    );
    let exe = c.join("w");
    let mut cc = Command::new("cc");
    cc.arg(c.join("w.c")).arg("-o").arg(&exe);
    cc.args(flags.split_whitespace());
    cc.arg(format!("-Wl,-rpath,{}", current.join("lib").display()));
    run_ok(&mut cc);
    let out = run_ok(&mut Command::new(&exe));
    assert!(out.starts_with("whisper 1.8.3\n"), "{out}");
    assert!(out.contains("CPU"), "{out}");

    // find_package(ggml) through a real CMake run.
    std::fs::write(c.join("g.c"), GGML_C).expect("write");
    std::fs::write(
        c.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.14)\nproject(consumer C CXX)\nfind_package(ggml REQUIRED)\nadd_executable(g g.c)\ntarget_link_libraries(g ggml::ggml)\n",
    )
    .expect("write");
    let cmake = crate::tool_path().join("cmake");
    let b = c.join("b");
    run_ok(
        Command::new(&cmake)
            .arg("-S")
            .arg(&c)
            .arg("-B")
            .arg(&b)
            .arg("-G")
            .arg("Ninja")
            .arg(format!(
                "-DCMAKE_MAKE_PROGRAM={}",
                crate::tool_path().join("ninja").display()
            ))
            .arg(format!("-DCMAKE_PREFIX_PATH={}", current.display())),
    );
    run_ok(Command::new(&cmake).arg("--build").arg(&b));
    assert_eq!(run_ok(&mut Command::new(b.join("g"))), "ggml f32\n");
}

// ---------------------------------------------------------------------------------------------
// issue #7 class 7: recipe values that escape their meaning.

const FLAGS_C: &str =
    "const char *where(void) { return __FILE__; }\nint extra(void) { return EXTRA_VALUE; }\n";
const FLAGS_CMAKE: &str = "cmake_minimum_required(VERSION 3.14)\nproject(flags C)\nadd_library(flags SHARED flags.c)\ninstall(TARGETS flags)\n";

fn flags_project(parent: Option<&Path>) -> Proj {
    Proj::new_in(
        parent,
        &[("CMakeLists.txt", FLAGS_CMAKE), ("flags.c", FLAGS_C)],
    )
}

fn assert_prefix_mapped(p: &Proj, o: &Output, recipe_name: &str) {
    assert_eq!(code(o), 0, "{}", stderr(o));
    let lib =
        p.ws.join("build")
            .join(recipe_name)
            .join("v/stage/lib/libflags.so");
    let bytes = std::fs::read(&lib).expect("lib");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("/pinforge/src/flags.c"),
        "__FILE__ prefix-mapped"
    );
    assert!(
        !text.contains(&p.base.display().to_string()),
        "no machine path in the library"
    );
}

// issue #7 class 7: user flags are appended to the reproducibility flags, never replace them.
#[test]
fn recipe_c_flags_are_appended_to_the_prefix_maps_and_the_manifest_shows_both() {
    let p = flags_project(None);
    for key in ["CMAKE_C_FLAGS", "\"CMAKE_C_FLAGS:STRING\""] {
        let name = if key.contains(':') { "typed" } else { "plain" };
        let r = p.recipe(
            &format!("{name}.toml"),
            r#"["flags"]"#,
            &format!("{key} = \"-DEXTRA_VALUE=7\""),
        );
        let o = p.build(&r);
        assert_prefix_mapped(&p, &o, name);
        let (_, m) = manifest_of(&o);
        let args: Vec<String> = m["predicate"]["buildDefinition"]["externalParameters"]
            ["cmake_args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("str").to_string())
            .collect();
        let c_flags: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("-DCMAKE_C_FLAGS"))
            .collect();
        assert_eq!(
            c_flags,
            vec!["-DCMAKE_C_FLAGS=-ffile-prefix-map=${SRC}=/pinforge/src -ffile-prefix-map=../src=/pinforge/src -ffile-prefix-map=${BUILD}=/pinforge/build -DEXTRA_VALUE=7"],
            "{key}: one CMAKE_C_FLAGS, reproducibility flags first: {args:?}"
        );
    }
}

// issue #7 class 7: paths are passed as arguments, never re-split — workspace, upstream
// repository and recipe all under a folder with a space.
#[test]
fn a_workspace_path_with_a_space_builds_and_stays_prefix_mapped() {
    let parent = std::env::temp_dir().join(format!("pinforge space test {}", std::process::id()));
    let p = flags_project(Some(&parent));
    assert!(p.ws.display().to_string().contains(' '));
    let r = p.recipe(
        "sp.toml",
        r#"["flags"]"#,
        "CMAKE_C_FLAGS = \"-DEXTRA_VALUE=1\"",
    );
    let o = p.build(&r);
    assert_prefix_mapped(&p, &o, "sp");
    let (mpath, _) = manifest_of(&o);
    let v = pinforge(&p.ws, &["verify", mpath.to_str().expect("utf8")]);
    assert_eq!(code(&v), 0, "{}{}", stdout(&v), stderr(&v));

    // Another member: the compiler itself in a folder with a space (the toolchain's `cc`).
    let tools = p.base.join("tool dir");
    std::fs::create_dir_all(&tools).expect("mkdir");
    let gcc = crate::which("gcc").expect("gcc on PATH");
    std::os::unix::fs::symlink(&gcc, tools.join("gcc")).expect("link");
    let text = std::fs::read_to_string(&r).expect("recipe").replace(
        "cc = \"gcc\"",
        &format!("cc = \"{}\"", tools.join("gcc").display()),
    );
    let r2 = p.ws.join("recipes/cc.toml");
    std::fs::write(&r2, text).expect("write");
    let o = p.build(&r2);
    assert_prefix_mapped(&p, &o, "cc");
    let (m2, _) = manifest_of(&o);
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&m2).expect("manifest")).expect("json");
    assert_eq!(
        m["predicate"]["buildDefinition"]["internalParameters"]["inputs"]["tool:cc"],
        serde_json::Value::from(
            std::fs::canonicalize(&gcc)
                .expect("real gcc")
                .display()
                .to_string()
        )
    );
    drop(p);
    let _ = std::fs::remove_dir_all(&parent);
}

// issue #7 class 7: typed keys do not bypass the reserved-key check; names that become paths
// are identifiers. Each is refused with exit 2 at file:line:column before anything is built.
#[test]
fn recipe_values_that_escape_their_meaning_are_refused_with_their_position() {
    let p = flags_project(None);
    // The `[base.cmake]` entries of `Proj::recipe` start on line 15.
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "typed.toml",
            "\"CMAKE_BUILD_TYPE:STRING\" = \"Debug\"".into(),
            "`CMAKE_BUILD_TYPE:STRING` is set by pinforge",
            ":15:",
        ),
        (
            "prefix.toml",
            "\"CMAKE_INSTALL_PREFIX:PATH\" = \"/usr\"".into(),
            "`CMAKE_INSTALL_PREFIX:PATH` is set by pinforge",
            ":15:",
        ),
        (
            "twice.toml",
            "X = \"1\"\n\"X:BOOL\" = \"OFF\"".into(),
            "set the same CMake variable `X`",
            ":16:",
        ),
        (
            "nul.toml",
            "X = \"a\\u0000b\"".into(),
            "holds a NUL or a line break",
            ":15:",
        ),
    ];
    for (file, cmake, want, line) in cases {
        let r = p.recipe(file, r#"["flags"]"#, &cmake);
        let o = p.build(&r);
        assert_eq!(code(&o), 2, "{file}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(want), "{file}: {e}");
        assert!(
            e.contains(&format!("{file}{line}")),
            "{file}: error names file:line:column: {e}"
        );
    }
    assert!(!p.ws.join("build").exists(), "nothing was built");

    // A file named `...toml` would be the recipe `..`, writing beside build/.
    let dots = p.recipe("...toml", r#"["flags"]"#, "");
    let o = p.build(&dots);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("recipe name `..`"), "{}", stderr(&o));
    assert!(stderr(&o).contains("...toml:1:1"), "{}", stderr(&o));
    // A toolchain or variant name that is a path.
    let text = std::fs::read_to_string(&dots).expect("recipe");
    for (file, from, to) in [
        ("tc.toml", "[toolchain.cpu]", "[toolchain.\"../cpu\"]"),
        ("var.toml", "[variants.v]", "[variants.\"..\"]"),
    ] {
        let path = p.ws.join("recipes").join(file);
        std::fs::write(&path, text.replace(from, to)).expect("write");
        let o = p.build(&path);
        assert_eq!(code(&o), 2, "{file}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{file}:")),
            "{file}: {}",
            stderr(&o)
        );
    }
    assert!(!p.ws.join("build").exists());
    assert!(!p.base.join("v").exists() && !p.ws.join("v").exists());
}

// ---------------------------------------------------------------------------------------------
// issue #7 classes 4 and 10, manifest side: reads that hang or mislead.

fn synthetic(dir: &Path) -> (PathBuf, serde_json::Value) {
    let path = crate::synthetic_build(dir, &[("lib/liba.so", 64), ("include/a.h", 8)]);
    let m = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    (path, m)
}

fn mkfifo(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()));
}

fn verify_quickly(ws: &Path, manifest: &Path) -> Output {
    let mut c = pinforge_cmd(ws);
    c.args(["verify", manifest.to_str().expect("utf8")]);
    with_timeout(c, Duration::from_secs(20))
}

// issue #7 class 4: verify refuses devices and FIFOs unopened: a subject or the manifest with
// exit 2, an input as a mismatch naming why (exit 1).
#[test]
fn verify_refuses_fifos_and_devices_named_by_a_manifest_without_hanging() {
    let d = tempfile::tempdir().expect("tempdir");
    let (path, m) = synthetic(d.path());
    assert_eq!(
        code(&verify_quickly(d.path(), &path)),
        0,
        "the fixture verifies"
    );

    // A FIFO where a subject should be.
    let a = d.path().join("out/lib/liba.so");
    std::fs::remove_file(&a).expect("rm");
    mkfifo(&a);
    let o = verify_quickly(d.path(), &path);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
    std::fs::remove_file(&a).expect("rm");

    // A subject that is a link to /dev/zero.
    std::os::unix::fs::symlink("/dev/zero", &a).expect("link");
    let o = verify_quickly(d.path(), &path);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    std::fs::remove_file(&a).expect("rm");

    // Inputs: /dev/zero and a FIFO, named as the recipe input (an absolute path for an input
    // that is not a tool: never opened) and as a tool (placed, then refused by its kind before
    // any open). Each is a mismatch naming why (exit 1), never a hang.
    let fifo = d.path().join("input.fifo");
    mkfifo(&fifo);
    let cases = [
        ("recipe", "/dev/zero".to_string(), "not a tool; not read"),
        ("recipe", fifo.display().to_string(), "not a tool; not read"),
        ("tool:cc", "/dev/zero".to_string(), "resolves to /dev/zero"),
        (
            "tool:cc",
            fifo.display().to_string(),
            "a FIFO, not a regular file",
        ),
    ];
    for (name, input, why) in cases {
        let mut m2 = m.clone();
        m2["predicate"]["buildDefinition"]["resolvedDependencies"] = serde_json::json!([
            {"name": name, "digest": {"sha256": "00".repeat(32)}}
        ]);
        m2["predicate"]["buildDefinition"]["internalParameters"]["inputs"] =
            serde_json::json!({name: input});
        let p2 = d.path().join("m2.json");
        std::fs::write(&p2, serde_json::to_vec(&m2).expect("json")).expect("write");
        std::fs::write(&a, vec![0u8; 0]).expect("restore");
        let o = verify_quickly(d.path(), &p2);
        assert_eq!(code(&o), 1, "{name} {input}: {}{}", stdout(&o), stderr(&o));
        assert!(
            stdout(&o).contains(why),
            "{name} {input}: {}{}",
            stdout(&o),
            stderr(&o)
        );
    }

    // The manifest itself a FIFO.
    let mf = d.path().join("manifest.fifo");
    mkfifo(&mf);
    let o = verify_quickly(d.path(), &mf);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

// issue #7 classes 1 and 10 (manifest side): subject paths and the artifact root are relative
// and checked component by component; duplicate subjects are refused when parsed.
#[test]
fn manifests_with_escaping_or_duplicate_subjects_are_refused_with_exit_2() {
    let d = tempfile::tempdir().expect("tempdir");
    let (path, m) = synthetic(d.path());
    std::fs::create_dir_all(d.path().join("elsewhere")).expect("mkdir");
    std::fs::write(d.path().join("elsewhere/a.h"), b"x").expect("write");
    std::os::unix::fs::symlink("../elsewhere", d.path().join("out/via")).expect("link");

    let write = |name: &str, f: &dyn Fn(&mut serde_json::Value)| -> PathBuf {
        let mut v = m.clone();
        f(&mut v);
        let p = d.path().join(name);
        std::fs::write(&p, serde_json::to_vec(&v).expect("json")).expect("write");
        p
    };
    let subject = |name: &str| -> Box<dyn Fn(&mut serde_json::Value)> {
        let name = name.to_string();
        Box::new(move |v: &mut serde_json::Value| v["subject"][0]["name"] = name.clone().into())
    };
    let cases: Vec<(&str, PathBuf, &str)> = vec![
        (
            "absolute",
            write("abs.json", &*subject("/dev/zero")),
            "is absolute",
        ),
        (
            "dotdot",
            write("up.json", &*subject("../../etc/passwd")),
            "`..`",
        ),
        (
            "empty",
            write("empty.json", &*subject("lib//liba.so")),
            "empty component",
        ),
        (
            "through a link",
            write("via.json", &*subject("via/a.h")),
            "passes through something that is not a folder",
        ),
        (
            "duplicate",
            write("dup.json", &|v: &mut serde_json::Value| {
                let first = v["subject"][0].clone();
                v["subject"].as_array_mut().expect("array").push(first);
            }),
            "listed twice",
        ),
        (
            "root absolute",
            write("root.json", &|v: &mut serde_json::Value| {
                v["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"] =
                    "/".into()
            }),
            "artifact root `/`",
        ),
        (
            "root escaping",
            write("root2.json", &|v: &mut serde_json::Value| {
                v["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"] =
                    "../../etc".into()
            }),
            "artifact root `../../etc`",
        ),
        (
            "link named twice",
            write("duplink.json", &|v: &mut serde_json::Value| {
                let name = v["subject"][0]["name"].clone();
                v["predicate"]["runDetails"]["byproducts"] = serde_json::json!([
                    {"name": name, "annotations": {"link_target": "x"}}
                ]);
            }),
            "listed twice",
        ),
    ];
    for (what, p, want) in cases {
        let o = verify_quickly(d.path(), &p);
        assert_eq!(code(&o), 2, "{what}: {}{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains(want), "{what}: {}", stderr(&o));
    }
    // The artifact root itself reached through a link.
    std::os::unix::fs::symlink("out", d.path().join("outlink")).expect("link");
    let p = write("rootlink.json", &|v: &mut serde_json::Value| {
        v["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"] = "outlink".into()
    });
    let o = verify_quickly(d.path(), &p);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    // And the untouched manifest still verifies.
    assert_eq!(code(&verify_quickly(d.path(), &path)), 0);
}

// issue #13: a build that writes into its pinned source tree no longer builds the tree the
// manifest names: it fails at once (exit 1), naming the file, instead of at the next verify.
#[test]
fn a_build_that_writes_into_its_source_tree_fails_naming_the_file() {
    let p = Proj::new(&[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.14)\nproject(w C)\nfile(WRITE ${CMAKE_SOURCE_DIR}/generated.json \"{}\")\nadd_library(w SHARED w.c)\ninstall(TARGETS w)\n",
        ),
        ("w.c", "int w(void) { return 1; }\n"),
    ]);
    let o = p.build(&p.recipe("w.toml", r#"["w"]"#, ""));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("wrote into its pinned source tree"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("generated.json"), "{}", stderr(&o));
    assert!(!p.ws.join("build/w/v/manifest.json").exists());
}

// issue #13: a project without any install rule is staged from the file API: its library and
// the links beside it in lib/, and the manifest says how it was staged.
#[test]
fn a_project_without_install_rules_is_staged_from_the_code_model_and_says_so() {
    let p = Proj::new(&[
        ("CMakeLists.txt", crate::TINY_CMAKE),
        ("tiny.c", crate::TINY_C),
    ]);
    let o = p.build(&p.recipe("bare.toml", r#"["tiny"]"#, ""));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["staging"], "built-libraries");
    assert_eq!(
        j["links"],
        serde_json::json!([
            ["lib/libtiny.so", "libtiny.so.1"],
            ["lib/libtiny.so.1", "libtiny.so.1.0.0"]
        ])
    );
    let (_, m) = manifest_of(&o);
    assert_eq!(subjects(&m), vec!["lib/libtiny.so.1.0.0".to_string()]);
    assert_eq!(
        m["predicate"]["buildDefinition"]["internalParameters"]["staging"],
        "built-libraries"
    );
    assert_eq!(j["coverage"][0]["built"], "bin/libtiny.so.1.0.0");
}

// A staged file that embeds this machine's source path (GCC's AddressSanitizer does this with
// every object's source name, and no flag remaps it) builds, is named in a note, and is marked
// in the manifest: the record says the artifact will differ in another workspace.
#[test]
fn a_staged_file_embedding_a_machine_path_is_noted_and_marked_in_the_manifest() {
    let p = Proj::new(&[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.14)\nproject(where C)\nadd_library(where SHARED where.c)\ninstall(TARGETS where)\nfile(WRITE ${CMAKE_BINARY_DIR}/where.txt \"${CMAKE_SOURCE_DIR}\\n\")\ninstall(FILES ${CMAKE_BINARY_DIR}/where.txt DESTINATION share)\n",
        ),
        ("where.c", "int where(void) { return 1; }\n"),
    ]);
    let o = p.build(&p.recipe("where.toml", r#"["where"]"#, ""));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("embed this machine's build paths")
            && stderr(&o).contains("share/where.txt"),
        "{}",
        stderr(&o)
    );
    let (_, m) = manifest_of(&o);
    let marked: Vec<&str> = m["subject"]
        .as_array()
        .expect("subjects")
        .iter()
        .filter(|s| s["annotations"]["embeds_machine_path"] == true)
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(marked, vec!["share/where.txt"], "only that file is marked");
}
