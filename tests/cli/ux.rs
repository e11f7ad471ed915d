//! The operator UX that cargo and Nix users expect (issue #8): examples in every help, listed
//! values, completions and a man page from the clap definition, -q/-v, --color and NO_COLOR.

use crate::{code, json, pinforge, pinforge_cmd, repo_root, stderr, stdout, Tiny};
use std::process::Command;

/// Every visible command and subcommand, as the help lists them.
const COMMANDS: &[&[&str]] = &[
    &["build"],
    &["verify"],
    &["install"],
    &["diff"],
    &["rollback"],
    &["status"],
    &["gc"],
    &["history"],
    &["smoke"],
    &["validate"],
    &["exec"],
    &["completions"],
    &["man"],
    &["patch", "lint"],
    &["patch", "list"],
    &["patch", "apply"],
    &["patch", "bundle"],
    &["patch", "commit-message"],
    &["model", "tiny"],
    &["vendor", "digest"],
];

#[test]
fn every_command_help_has_an_example() {
    for cmd in COMMANDS {
        let mut args = cmd.to_vec();
        args.push("--help");
        let o = pinforge(&repo_root(), &args);
        assert_eq!(code(&o), 0, "{cmd:?}: {}", stderr(&o));
        let help = stdout(&o);
        assert!(
            help.contains("Example:") || help.contains("Examples:"),
            "`pinforge {} --help` has no example:\n{help}",
            cmd.join(" ")
        );
    }
}

#[test]
fn enumerated_options_list_their_possible_values() {
    for (cmd, values) in [
        (
            &["install", "--help"][..],
            "[possible values: live, control, original]",
        ),
        (
            &["rollback", "--help"][..],
            "[possible values: live, control, original]",
        ),
        (
            &["verify", "--help"][..],
            "[possible values: current, live, control, original]",
        ),
        (
            &["smoke", "--help"][..],
            "[possible values: qwen2vl, qwen2]",
        ),
        (
            &["model", "tiny", "--help"][..],
            "[possible values: qwen2vl, qwen2]",
        ),
        (&["--help"][..], "- always: Always color"),
    ] {
        let o = pinforge(&repo_root(), cmd);
        assert!(
            stdout(&o).contains(values),
            "{cmd:?} lacks {values}:\n{}",
            stdout(&o)
        );
    }
    // A value outside the list is a usage error naming the choices.
    let o = pinforge(&repo_root(), &["rollback", "--to", "staging"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("live"), "{}", stderr(&o));
}

#[test]
fn completions_and_the_man_page_come_from_the_clap_definition() {
    let o = pinforge(&repo_root(), &["completions", "bash"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let bash = stdout(&o);
    for word in ["rollback", "--layer", "--smoke-arch", "completions"] {
        assert!(bash.contains(word), "bash completions lack {word}");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = pinforge(&repo_root(), &["completions", shell]);
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains("pinforge"), "{shell}");
    }
    let o = pinforge(&repo_root(), &["man"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let man = stdout(&o);
    assert!(man.contains(".TH pinforge 1"), "{man}");
    assert!(man.contains("rollback"), "the man page lists the commands");
}

#[test]
fn quiet_and_verbose_conflict_and_a_cached_build_is_one_line_unless_verbose() {
    let o = pinforge(&repo_root(), &["status", "-q", "-v"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));

    let t = Tiny::new();
    let first = t.build("patched");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let again = pinforge(
        &t.ws,
        &["build", "recipes/tiny.toml", "--variant", "patched"],
    );
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    let lines: Vec<String> = stdout(&again).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 1, "a cached build is one line: {lines:?}");
    assert!(lines[0].starts_with("cached tiny/patched"), "{lines:?}");
    let verbose = pinforge(
        &t.ws,
        &["build", "recipes/tiny.toml", "--variant", "patched", "-v"],
    );
    assert!(stdout(&verbose).lines().count() > 1, "{}", stdout(&verbose));
    assert!(
        stdout(&verbose).contains("manifest"),
        "{}",
        stdout(&verbose)
    );
    // -q: no stage lines on stderr.
    let quiet = pinforge(
        &t.ws,
        &["build", "recipes/tiny.toml", "--variant", "patched", "-q"],
    );
    assert_eq!(code(&quiet), 0);
    assert!(
        stderr(&quiet).trim().is_empty(),
        "-q printed: {}",
        stderr(&quiet)
    );
    // The JSON of a build still says cached.
    assert_eq!(json(&t.build("patched"))["cached"], true);
}

#[test]
fn color_is_used_only_when_asked_or_on_a_terminal_and_never_with_no_color() {
    let t = Tiny::new();
    let m = json(&t.build("patched"))["manifest"]
        .as_str()
        .expect("manifest")
        .to_string();
    let always = pinforge(&t.ws, &["verify", &m, "--color", "always"]);
    assert_eq!(code(&always), 0, "{}", stderr(&always));
    assert!(
        stdout(&always).contains("\u{1b}[32mok\u{1b}[0m"),
        "{}",
        stdout(&always)
    );
    // Not a terminal (a pipe here): auto means no color.
    let auto = pinforge(&t.ws, &["verify", &m]);
    assert!(!stdout(&auto).contains('\u{1b}'), "{}", stdout(&auto));
    let never = pinforge(&t.ws, &["verify", &m, "--color=never"]);
    assert!(!stdout(&never).contains('\u{1b}'));
    let no_color = pinforge_cmd(&t.ws)
        .args(["verify", &m])
        .env("NO_COLOR", "1")
        .output()
        .expect("run");
    assert!(!stdout(&no_color).contains('\u{1b}'));
}

#[test]
fn every_json_document_names_its_schema() {
    // issue #8: every JSON document carries a schema id.
    let t = Tiny::new();
    let build = t.build("patched");
    assert_eq!(code(&build), 0, "{}", stderr(&build));
    let line = stdout(&build);
    assert_eq!(
        line.trim_end().lines().count(),
        1,
        "one JSON line per build"
    );
    assert_eq!(json(&build)["schema"], "pinforge.build/v1", "{line}");
    let m = json(&build)["manifest"]
        .as_str()
        .expect("manifest")
        .to_string();
    let model = t.ws.join("tiny.gguf");
    let model = model.to_str().expect("utf8");
    let root = t.ws.join("rollback");
    let root = root.to_str().expect("utf8");
    let upstream = t.upstream.join("tiny.c");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["verify", &m], "pinforge.verify/v1"),
        (vec!["diff", &m, &m], "pinforge.diff/v1"),
        (vec!["patch", "list"], "pinforge.patch-list/v1"),
        (vec!["patch", "lint"], "pinforge.patch-lint/v1"),
        (
            vec!["model", "tiny", "--arch", "qwen2", "-o", model],
            "pinforge.model-tiny/v1",
        ),
        (
            vec!["vendor", "digest", upstream.to_str().expect("utf8")],
            "pinforge.vendor-digest/v1",
        ),
        (
            vec!["install", &m, "--layer", "live", "--root", root],
            "pinforge.install/v1",
        ),
        (vec!["status", "--root", root], "pinforge.status/v1"),
        (
            vec!["verify", "--installed", "--root", root],
            "pinforge.verify-installed/v1",
        ),
        (vec!["gc", "--root", root], "pinforge.gc/v1"),
    ];
    for (mut args, schema) in cases {
        args.push("--json");
        let o = pinforge(&t.ws, &args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert_eq!(json(&o)["schema"], schema, "{args:?}: {}", stdout(&o));
    }
}

#[test]
fn build_says_why_it_rebuilt_and_logs_progress_lines_when_not_on_a_terminal() {
    // issue #8: rebuild reasons; a line per stage and per ~10% with elapsed time in logs.
    let t = Tiny::new();
    let first = t.build("patched");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(
        json(&first)["rebuilt_because"],
        serde_json::json!(["no previous build of this variant"])
    );
    let log = stderr(&first);
    assert!(
        log.contains("configure patched  ["),
        "stage lines carry elapsed time: {log}"
    );
    assert!(
        log.contains("compile 100% ("),
        "the compile reaches 100% in the log: {log}"
    );

    let cached = t.build("patched");
    assert_eq!(json(&cached)["cached"], true);
    assert_eq!(json(&cached)["rebuilt_because"], serde_json::json!([]));

    let patch = t.ws.join("patches/0001-tiny-return-2.patch");
    let text = std::fs::read_to_string(&patch).expect("patch");
    std::fs::write(&patch, text.replace("return 2;", "return 3;")).expect("edit");
    let o = t.build("patched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let because = json(&o)["rebuilt_because"].clone();
    assert_eq!(
        because,
        serde_json::json!(["patch 0001-tiny-return-2.patch changed"]),
        "only the patch, not the source tree it implies"
    );
    let human = pinforge(
        &t.ws,
        &["build", "recipes/tiny.toml", "--variant", "unpatched"],
    );
    assert!(
        stdout(&human).contains("because    no previous build of this variant"),
        "{}",
        stdout(&human)
    );
}

#[test]
fn a_missing_or_special_model_file_is_an_input_error_not_an_internal_one() {
    // issue #8: input errors are 2 everywhere (a missing model file exited 4).
    let t = Tiny::new();
    let m = json(&t.build("patched"))["manifest"]
        .as_str()
        .expect("manifest")
        .to_string();
    let o = pinforge(&t.ws, &["smoke", &m, "--model", "no-such.gguf"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such.gguf"), "{}", stderr(&o));
    let fifo = t.ws.join("model.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    let o = pinforge(
        &t.ws,
        &["smoke", &m, "--model", fifo.to_str().expect("utf8")],
    );
    assert_eq!(
        code(&o),
        2,
        "a FIFO is refused, never opened for reading: {}",
        stderr(&o)
    );
}

#[test]
fn a_variant_without_patches_needs_no_patch_folder() {
    let t = Tiny::new();
    std::fs::remove_dir_all(t.ws.join("patches")).expect("rm patches");
    let o = t.build("unpatched");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The patched variant still needs its bundle, and says where it looked.
    let o = t.build("patched");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("patch folder not found"),
        "{}",
        stderr(&o)
    );
}

// issue #8: a hint that suggests a command repeats the --root and --workspace the user gave
// (quoted for the shell), and only those typed on the command line.
#[test]
fn hints_name_the_root_and_workspace_actually_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("my root");
    let o = pinforge(
        dir.path(),
        &["status", "--root", root.to_str().expect("utf8")],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "`pinforge install --root '{}'` creates the root",
            root.display()
        )),
        "{}",
        stderr(&o)
    );
    // Without --root, or with PINFORGE_ROOT: the hint is the plain command.
    let o = pinforge(dir.path(), &["status"]);
    assert!(
        stderr(&o).contains("`pinforge install` creates the root"),
        "{}",
        stderr(&o)
    );
    let o = pinforge_cmd(dir.path())
        .env("PINFORGE_ROOT", &root)
        .arg("status")
        .output()
        .expect("run");
    assert!(
        stderr(&o).contains("`pinforge install` creates the root"),
        "{}",
        stderr(&o)
    );

    // --workspace (and the recipe given) reach the build the hint suggests.
    let t = Tiny::new();
    let parent = t.ws.parent().expect("parent").to_path_buf();
    let recipe = t.ws.join("recipes/tiny.toml");
    let o = pinforge(
        &parent,
        &[
            "--workspace",
            "ws",
            "install",
            recipe.to_str().expect("utf8"),
            "--variant",
            "unpatched",
            "--layer",
            "live",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "hint: run `pinforge --workspace ws build {} --variant unpatched` first",
            recipe.display()
        )),
        "{}",
        stderr(&o)
    );
}

// issue #8: the generation hint of an installed root names that root.
#[test]
fn a_missing_generation_hint_names_the_root_in_use() {
    let i = crate::Installed::new();
    let o = i.install(&i.patched, "live");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = i.run(&["rollback", "--to-generation", "999"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "hint: `pinforge history --root {}` lists the generations still on disk",
            i.root.display()
        )),
        "{}",
        stderr(&o)
    );
}

/// The fixed folder on the host: only the folder itself, whatever ran in a namespace.
fn host_fixed_folder(t: &Tiny) -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(&t.ws).expect("ws").uid();
    std::path::PathBuf::from(format!("/tmp/pinforge-{uid}"))
}

fn host_fixed_listing(t: &Tiny) -> Vec<String> {
    match std::fs::read_dir(host_fixed_folder(t)) {
        Ok(d) => d
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn exec(t: &Tiny, variant: &str, cmd: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", "recipes/tiny.toml", "--variant", variant, "--"];
    args.extend_from_slice(cmd);
    pinforge_cmd(&t.ws)
        .env_remove("PINFORGE_FIXED_PATH")
        .args(&args)
        .output()
        .expect("run pinforge")
}

/// Build `patched` of the tiny project at the fixed build path: its `--json` line and its
/// manifest, or `None` (said
/// out loud, and a failure under PINFORGE_REQUIRE_TOOLS) where namespaces are refused and exec
/// cannot be checked.
fn built_at_the_fixed_path(t: &Tiny) -> Option<(serde_json::Value, serde_json::Value)> {
    let o = pinforge_cmd(&t.ws)
        .env_remove("PINFORGE_FIXED_PATH")
        .args([
            "build",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--json",
        ])
        .output()
        .expect("build");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(j["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    let bp = build_path(&m);
    if bp["fixed"] != true {
        crate::skip(&format!(
            "this machine refuses private mount namespaces, so exec cannot be checked: {bp}"
        ));
        return None;
    }
    Some((j, m))
}

/// The annotations of a manifest's `build_path` byproduct.
fn build_path(m: &serde_json::Value) -> serde_json::Value {
    m["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts")
        .iter()
        .find(|b| b["name"] == "build_path")
        .expect("build_path")["annotations"]
        .clone()
}

// The operator leftover: `cmake --build` by hand in a build folder at the fixed path failed
// ("The source directory /tmp/pinforge-0/src does not exist"), and CMake's regeneration left
// folders in the host's fixed folder. `pinforge exec` runs it in the build's namespace.
#[test]
fn exec_runs_cmake_by_hand_in_the_builds_namespace_and_the_host_fixed_folder_stays_empty() {
    let t = Tiny::new();
    let Some((j, m)) = built_at_the_fixed_path(&t) else {
        return;
    };
    let cmake = m["predicate"]["buildDefinition"]["internalParameters"]["inputs"]["tool:cmake"]
        .as_str()
        .expect("tool:cmake")
        .to_string();
    let fixed = host_fixed_folder(&t);
    assert!(
        host_fixed_listing(&t).is_empty(),
        "{:?}",
        host_fixed_listing(&t)
    );

    // From the fixed build folder, with the source tree where the build saw it.
    let o = exec(
        &t,
        "patched",
        &["sh", "-c", "pwd; test -f ../src/CMakeLists.txt"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), fixed.join("build").display().to_string());

    // A changed CMakeLists.txt makes `cmake --build` regenerate: that too happens inside.
    let tree = std::path::PathBuf::from(j["source_tree"].as_str().expect("source_tree"));
    let lists = tree.join("CMakeLists.txt");
    let text = std::fs::read_to_string(&lists).expect("CMakeLists.txt");
    std::fs::write(&lists, format!("{text}# touched by hand\n")).expect("touch");
    let o = exec(&t, "patched", &[&cmake, "--build", "."]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("Re-running CMake"),
        "the edit made CMake regenerate:\n{}",
        stdout(&o)
    );
    assert!(
        host_fixed_listing(&t).is_empty(),
        "exec left {:?} in {}",
        host_fixed_listing(&t),
        fixed.display()
    );

    // The command's exit code is passed through.
    let o = exec(&t, "patched", &["sh", "-c", "exit 7"]);
    assert_eq!(code(&o), 7, "{}", stderr(&o));
}

#[test]
fn exec_of_an_unknown_a_never_built_or_an_unfixed_variant_is_exit_2() {
    let t = Tiny::new();
    let o = exec(&t, "no-such-variant", &["true"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-variant"), "{}", stderr(&o));

    let o = exec(&t, "unpatched", &["true"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("was never built"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("pinforge build --variant unpatched"),
        "{}",
        stderr(&o)
    );

    // Built at its real folder: nothing to mount, and the error says where to run it.
    let o = pinforge_cmd(&t.ws)
        .env("PINFORGE_FIXED_PATH", "0")
        .args([
            "build",
            "recipes/tiny.toml",
            "--variant",
            "unpatched",
            "--json",
        ])
        .output()
        .expect("build");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = exec(&t, "unpatched", &["true"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("was built at its real folder (PINFORGE_FIXED_PATH=0)")
            && stderr(&o).contains("run the command there directly")
            && stderr(&o).contains(
                &t.ws
                    .join("build/tiny/unpatched/cmake")
                    .display()
                    .to_string()
            ),
        "{}",
        stderr(&o)
    );
}

// The manifest's build_path becomes mount binds: exec refuses one that names folders this
// workspace and user would not have built at (a manifest copied from another workspace, or
// edited), so no crafted value can bind another folder of the host into the namespace.
#[test]
fn exec_refuses_a_manifest_whose_build_path_is_not_this_workspaces() {
    let t = Tiny::new();
    let Some((_, m)) = built_at_the_fixed_path(&t) else {
        return;
    };
    let mpath = t.ws.join("build/tiny/patched/manifest.json");
    let original = std::fs::read_to_string(&mpath).expect("manifest");
    let bp = build_path(&m);
    let real_source = bp["real_source"].as_str().expect("real_source").to_string();
    let real_variant = bp["real_variant"]
        .as_str()
        .expect("real_variant")
        .to_string();
    for (from, to, says) in [
        (
            &real_source,
            "/etc",
            "is not a vendor tree of this workspace",
        ),
        (&real_variant, "/etc", "not this variant's folder"),
        (
            &real_source,
            &format!("{real_source}/../../build"),
            "is not a vendor tree of this workspace",
        ),
    ] {
        let forged = original.replace(&format!("\"{from}\""), &format!("\"{to}\""));
        assert_ne!(forged, original, "{from}");
        std::fs::write(&mpath, &forged).expect("forge");
        let o = exec(&t, "patched", &["true"]);
        assert_eq!(code(&o), 2, "{to}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{to}: {}", stderr(&o));
    }
    std::fs::write(&mpath, &original).expect("restore");
    let o = exec(&t, "patched", &["true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

// Ctrl-C reaches the whole foreground group: pinforge must outwait the command (an
// interactive shell ignores SIGINT) rather than die and orphan it on the terminal.
#[test]
fn exec_outlives_an_interrupt_and_passes_on_the_commands_exit_code() {
    let t = Tiny::new();
    if built_at_the_fixed_path(&t).is_none() {
        return;
    }
    let mut child = pinforge_cmd(&t.ws)
        .env_remove("PINFORGE_FIXED_PATH")
        .args(["exec", "recipes/tiny.toml", "--variant", "patched", "--"])
        .args(["sh", "-c", "sleep 2; exit 5"])
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(5), "{status:?}");
}
