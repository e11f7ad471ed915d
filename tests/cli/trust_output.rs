//! Issue #19 classes 2, 6 and 8 (the diff, history, status, install and `verify --installed`
//! parts): manifests `diff` cannot compare are refused as `verify` refuses them, text from
//! manifests and from the install root's records reaches the terminal escaped, names that
//! hold control characters are refused at install, and a special file in an installed layer
//! is a failed check that names it.
//!
//! Every test runs the real `pinforge` binary on synthetic builds (files written here, with a
//! manifest naming them), so no CMake build is needed.

use proptest::prelude::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// A command that runs longer than this is a hang.
const HANG: Duration = Duration::from_secs(20);

fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A temp workspace holding synthetic builds and install roots.
struct Fx {
    dir: tempfile::TempDir,
    ws: PathBuf,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        Fx { dir, ws }
    }

    /// A build under `builds/<name>/`: a library, its soname link and a header, one tool
    /// dependency; `edit` may change the manifest (a hostile one) before it is written.
    fn build(&self, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        let base = self.dir.path().join("builds").join(name);
        let out = base.join("out");
        std::fs::create_dir_all(out.join("lib")).expect("mkdir");
        std::fs::create_dir_all(out.join("include")).expect("mkdir");
        let lib = b"\x7fELF a synthetic library".to_vec();
        let header = b"int x(void);\n".to_vec();
        std::fs::write(out.join("lib/libx.so"), &lib).expect("write");
        std::fs::set_permissions(
            out.join("lib/libx.so"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        std::fs::write(out.join("include/x.h"), &header).expect("write");
        let _ = std::os::unix::fs::symlink("libx.so", out.join("lib/libx.so.1"));
        let mut m = json!({
            "_type": "https://in-toto.io/Statement/v1",
            "predicateType": "https://slsa.dev/provenance/v1",
            "subject": [
                {"name": "lib/libx.so", "digest": {"sha256": sha_hex(&lib)},
                 "annotations": {"size": lib.len()}},
                {"name": "include/x.h", "digest": {"sha256": sha_hex(&header)},
                 "annotations": {"size": header.len()}}
            ],
            "predicate": {
                "buildDefinition": {
                    "buildType": "https://pinforge.invalid/cmake-variant/v1",
                    "externalParameters": {"recipe": "synthetic", "variant": "v",
                        "build_type": "Release", "targets": ["llama"],
                        "cmake_args": ["-DGGML_NATIVE=OFF"], "patches": ["0001-fix.patch"]},
                    "internalParameters": {"artifact_root": "out", "inputs": {},
                        "input_digest": "0000000000000000000000000000000000000000000000000000000000000000"},
                    "resolvedDependencies": [
                        {"name": "tool:cc", "digest": {"sha256": sha_hex(b"cc")},
                         "annotations": {"version": "13.2.0"}},
                        {"name": "recipe", "digest": {"sha256": sha_hex(b"recipe")}}
                    ]
                },
                "runDetails": {"builder": {"id": "test"}, "metadata": {"invocationId": "x",
                    "startedOn": "", "finishedOn": ""},
                    "byproducts": [
                        {"name": "lib/libx.so.1", "annotations": {"link_target": "libx.so"}},
                        {"name": "build.log", "digest": {"sha256": sha_hex(b"")}}
                    ]}
            }
        });
        edit(&mut m);
        let path = base.join("manifest.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
        path
    }

    /// `pinforge ARGS` in the workspace, under the hang limit.
    fn run(&self, args: &[&str]) -> Output {
        let mut c = crate::pinforge_cmd(&self.ws);
        c.args(args);
        run_timeout(c, HANG).unwrap_or_else(|| panic!("pinforge {args:?} hung (> {HANG:?})"))
    }

    /// `pinforge ARGS --root ROOT`.
    fn run_in(&self, root: &Path, args: &[&str]) -> Output {
        let mut all = args.to_vec();
        let r = root.to_str().expect("utf8");
        all.extend(["--root", r]);
        self.run(&all)
    }
}

/// Run with a deadline; `None` means it had to be killed (a hang).
fn run_timeout(mut c: std::process::Command, limit: Duration) -> Option<Output> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return Some(child.wait_with_output().expect("output"));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

/// Everything a command wrote, both streams.
fn all_output(o: &Output) -> String {
    format!("{}{}", crate::stdout(o), crate::stderr(o))
}

/// The characters the shared rule (src/base/text.rs) refuses in names and escapes in shown
/// text, written out here independently: C0, DEL, C1, the bidi embeddings, overrides and
/// isolates, the zero-width marks and joiners, the line and paragraph separators, the BOM.
fn is_unsafe(c: char) -> bool {
    let u = c as u32;
    u < 0x20
        || (0x7f..0xa0).contains(&u)
        || (0x200b..=0x200f).contains(&u)
        || (0x2028..=0x202e).contains(&u)
        || (0x2060..=0x2069).contains(&u)
        || u == 0xfeff
}

/// One character of each class, the ones a terminal acts on first.
const CLASSES: [(&str, char); 12] = [
    ("NUL", '\0'),
    ("tab", '\t'),
    ("newline", '\n'),
    ("carriage return", '\r'),
    ("ESC", '\u{1b}'),
    ("DEL", '\u{7f}'),
    ("C1 NEL", '\u{85}'),
    ("C1 CSI", '\u{9b}'),
    ("bidi override", '\u{202e}'),
    ("bidi isolate", '\u{2067}'),
    ("zero-width space", '\u{200b}'),
    ("BOM", '\u{feff}'),
];

/// Assert that `out` holds no raw unsafe character but line breaks, and not `value` raw.
fn assert_escaped(out: &str, value: &str, what: &str) {
    let raw: Vec<char> = out.chars().filter(|&c| c != '\n' && is_unsafe(c)).collect();
    assert!(
        raw.is_empty(),
        "{what}: raw control characters {raw:?} in {out:?}"
    );
    assert!(
        !out.contains(value),
        "{what}: the value {value:?} reached the output raw: {out:?}"
    );
}

/// `value` with `c` put in its middle (at a character boundary).
fn with_char(value: &str, c: char) -> String {
    let mut at = value.len() / 2;
    while !value.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}{c}{}", &value[..at], &value[at..])
}

/// A manifest field that reaches output: its JSON pointer, the words a refusal names it by
/// (`None`: free text, shown escaped, not refused), and whether install refuses it.
struct Field {
    name: &'static str,
    pointer: &'static str,
    refusal: Option<&'static str>,
    install_refuses: bool,
}

const FIELDS: [Field; 11] = [
    Field {
        name: "recipe",
        pointer: "/predicate/buildDefinition/externalParameters/recipe",
        refusal: Some("recipe name (externalParameters.recipe)"),
        install_refuses: true,
    },
    Field {
        name: "variant",
        pointer: "/predicate/buildDefinition/externalParameters/variant",
        refusal: Some("variant name (externalParameters.variant)"),
        install_refuses: true,
    },
    Field {
        name: "subject name",
        pointer: "/subject/1/name",
        refusal: Some("subject `"),
        install_refuses: true,
    },
    Field {
        name: "link name",
        pointer: "/predicate/runDetails/byproducts/0/name",
        refusal: Some("link `"),
        install_refuses: true,
    },
    Field {
        name: "dependency name",
        pointer: "/predicate/buildDefinition/resolvedDependencies/0/name",
        refusal: Some("dependency name (resolvedDependencies)"),
        install_refuses: true,
    },
    Field {
        name: "link target",
        pointer: "/predicate/runDetails/byproducts/0/annotations/link_target",
        refusal: None,
        // It becomes a link in the store: a path, refused there.
        install_refuses: true,
    },
    Field {
        name: "tool version",
        pointer: "/predicate/buildDefinition/resolvedDependencies/0/annotations/version",
        refusal: None,
        install_refuses: false,
    },
    Field {
        name: "cmake argument",
        pointer: "/predicate/buildDefinition/externalParameters/cmake_args/0",
        refusal: None,
        install_refuses: false,
    },
    Field {
        name: "build type",
        pointer: "/predicate/buildDefinition/externalParameters/build_type",
        refusal: None,
        install_refuses: false,
    },
    Field {
        name: "target",
        pointer: "/predicate/buildDefinition/externalParameters/targets/0",
        refusal: None,
        install_refuses: false,
    },
    Field {
        name: "patch list entry",
        pointer: "/predicate/buildDefinition/externalParameters/patches/0",
        refusal: None,
        install_refuses: false,
    },
];

/// One field with one character through diff (both orders), verify and install.
fn check_field(fx: &Fx, clean: &Path, case: usize, field: &Field, c: char, class: &str) {
    let what = format!("{} with {class} (U+{:04X})", field.name, c as u32);
    let mut value = String::new();
    let hostile = fx.build(&format!("case-{case}"), |m| {
        let slot = m.pointer_mut(field.pointer).expect("field");
        value = with_char(slot.as_str().expect("string"), c);
        *slot = json!(value);
    });
    for (a, b) in [(clean, hostile.as_path()), (hostile.as_path(), clean)] {
        let o = fx.run(&["diff", s(a), s(b)]);
        let out = all_output(&o);
        assert_escaped(&out, &value, &format!("diff, {what}"));
        match field.refusal {
            Some(words) => {
                assert_eq!(crate::code(&o), 2, "diff, {what}: {out}");
                assert!(out.contains(s(&hostile)), "diff, {what}: {out}");
                assert!(out.contains(words), "diff, {what}: {out}");
            }
            None => assert_eq!(crate::code(&o), 1, "diff, {what}: {out}"),
        }
    }
    let o = fx.run(&["verify", s(&hostile)]);
    assert_escaped(&all_output(&o), &value, &format!("verify, {what}"));
    if field.refusal.is_some() {
        assert_eq!(crate::code(&o), 2, "verify, {what}: {}", all_output(&o));
    }
    let root = fx.dir.path().join(format!("root-{case}"));
    let o = fx.run_in(&root, &["install", s(&hostile), "--layer", "live"]);
    let out = all_output(&o);
    assert_escaped(&out, &value, &format!("install, {what}"));
    if field.install_refuses {
        assert_eq!(crate::code(&o), 2, "install, {what}: {out}");
        assert!(out.contains(s(&hostile)), "install, {what}: {out}");
        // Refused before anything is written: no generation was committed.
        assert!(!root.join("gens").join("1").exists(), "install, {what}");
    } else {
        assert_eq!(crate::code(&o), 0, "install, {what}: {out}");
        for cmd in [&["status"][..], &["history"], &["verify", "--installed"]] {
            let o = fx.run_in(&root, cmd);
            assert_eq!(crate::code(&o), 0, "{cmd:?}, {what}");
            assert_escaped(&all_output(&o), &value, &format!("{cmd:?}, {what}"));
        }
    }
}

/// The unsafe characters, every class, for the property test.
fn unsafe_char() -> impl Strategy<Value = char> {
    prop_oneof![
        (0u32..0x20).prop_map(|u| char::from_u32(u).expect("char")),
        Just('\u{7f}'),
        (0x80u32..0xa0).prop_map(|u| char::from_u32(u).expect("char")),
        (0x200bu32..=0x200f).prop_map(|u| char::from_u32(u).expect("char")),
        (0x2028u32..=0x202e).prop_map(|u| char::from_u32(u).expect("char")),
        (0x2060u32..=0x2069).prop_map(|u| char::from_u32(u).expect("char")),
        Just('\u{feff}'),
    ]
}

// issue #19 class 2, as a class: every manifest field that reaches output, with one character
// of every control class, then random ones: the output of diff, verify and install (and of
// status, history and verify --installed after an install that was accepted) holds no raw
// control character, names are refused (exit 2 naming the manifest and the field), and
// install refuses every value that becomes a name or a path.
#[test]
fn every_manifest_field_with_every_control_class_is_refused_or_escaped() {
    let fx = Fx::new();
    let clean = fx.build("clean", |_| {});
    let mut case = 0;
    for field in &FIELDS {
        for (class, c) in CLASSES {
            case += 1;
            check_field(&fx, &clean, case, field, c, class);
        }
    }
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    });
    let case = std::cell::Cell::new(case);
    runner
        .run(&(0..FIELDS.len(), unsafe_char()), |(f, c)| {
            case.set(case.get() + 1);
            check_field(&fx, &clean, case.get(), &FIELDS[f], c, "random");
            Ok(())
        })
        .expect("property");
}

// issue #19 class 6: what verify refuses, diff refuses: exit 2 naming the manifest file and
// the entry, on either side; before, these compared equal ("identical", exit 0).
#[test]
fn diff_refuses_what_verify_refuses_naming_the_manifest_and_the_entry() {
    let fx = Fx::new();
    let clean = fx.build("clean", |_| {});
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 5] = [
        (
            "subject with only a sha512",
            |m| m["subject"][1]["digest"] = json!({"sha512": "ab".repeat(64)}),
            "subject `include/x.h` has no sha256",
        ),
        (
            "sha256 that is not a digest",
            |m| m["subject"][1]["digest"]["sha256"] = json!("not-a-digest"),
            "subject `include/x.h`: `sha256` digest `not-a-digest` is not 64 lowercase hex digits",
        ),
        (
            "dependency listed twice, other digests",
            |m| {
                let deps = &mut m["predicate"]["buildDefinition"]["resolvedDependencies"];
                let mut twin = deps[0].clone();
                twin["digest"]["sha256"] = json!("0".repeat(64));
                deps.as_array_mut().expect("deps").push(twin);
            },
            "dependency `tool:cc` is listed twice",
        ),
        (
            "dependency listed twice, same digests",
            |m| {
                let deps = &mut m["predicate"]["buildDefinition"]["resolvedDependencies"];
                let twin = deps[0].clone();
                deps.as_array_mut().expect("deps").push(twin);
            },
            "dependency `tool:cc` is listed twice",
        ),
        (
            "dependency without a digest",
            |m| m["predicate"]["buildDefinition"]["resolvedDependencies"][1]["digest"] = json!({}),
            "dependency `recipe` has no digest",
        ),
    ];
    for (i, (what, edit, want)) in cases.iter().enumerate() {
        let bad = fx.build(&format!("bad-{i}"), edit);
        let twin = fx.build(&format!("twin-{i}"), edit);
        for (a, b, named) in [
            (clean.as_path(), bad.as_path(), bad.as_path()),
            (bad.as_path(), clean.as_path(), bad.as_path()),
            // Both sides alike: this used to read as "identical", exit 0.
            (bad.as_path(), twin.as_path(), bad.as_path()),
        ] {
            let o = fx.run(&["diff", s(a), s(b)]);
            let err = crate::stderr(&o);
            assert_eq!(crate::code(&o), 2, "{what}: {err}");
            assert!(err.contains(&format!("{}: ", s(named))), "{what}: {err}");
            assert!(err.contains(want), "{what}: {err}");
            assert!(crate::stdout(&o).is_empty(), "{what}: nothing compared");
        }
        // The same words from verify: one validation.
        let o = fx.run(&["verify", s(&bad)]);
        assert_eq!(crate::code(&o), 2, "verify, {what}");
        assert!(crate::stderr(&o).contains(want), "verify, {what}");
    }
    // The clean builds compare identical, so the refusals above are the checks' doing.
    let o = fx.run(&["diff", s(&clean), s(&fx.build("clean-2", |_| {}))]);
    assert_eq!(crate::code(&o), 0, "{}", all_output(&o));
    assert!(
        crate::stdout(&o).contains("identical"),
        "{}",
        all_output(&o)
    );
}

// issue #19 class 2, the examples: a link target's ESC sequence and a newline that would forge
// an `artifact … same` row reach the diff output escaped, one row each.
#[test]
fn diff_shows_a_link_target_and_a_tool_version_escaped_and_no_row_is_forged() {
    let fx = Fx::new();
    let clean = fx.build("clean", |_| {});
    let target = "\u{1b}]0;owned\u{7}\u{1b}[2Jlibx.so";
    let version = format!("13.2.0\n  artifact   {:<40} same  abc", "lib/evil.so");
    let hostile = fx.build("hostile", |m| {
        m["predicate"]["runDetails"]["byproducts"][0]["annotations"]["link_target"] = json!(target);
        m["predicate"]["buildDefinition"]["resolvedDependencies"][0]["annotations"]["version"] =
            json!(version);
    });
    let o = fx.run(&["diff", s(&clean), s(&hostile), "--all"]);
    assert_eq!(crate::code(&o), 1, "{}", all_output(&o));
    let out = crate::stdout(&o);
    assert_escaped(&out, target, "link target");
    assert_escaped(&out, &version, "tool version");
    assert!(out.contains("\\033]0;owned\\007\\033[2Jlibx.so"), "{out}");
    let artifact_rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("artifact"))
        .collect();
    assert_eq!(artifact_rows.len(), 2, "two real artifacts: {out}");
    let link_rows = out
        .lines()
        .filter(|l| l.trim_start().starts_with("link"))
        .count();
    assert_eq!(link_rows, 1, "{out}");
}

/// Set a JSON file's field (the root's records are sealed read-only; the test edits them as
/// an operator with a text editor would).
fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json");
    edit(&mut v);
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
    std::fs::write(path, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
}

// issue #19 class 2: history and status show the recipe and variant names (and receipt
// times) of an install root's records escaped, for every control class: a newline cannot
// forge a `* gen 9` row, an ESC sequence never reaches the terminal.
#[test]
fn history_and_status_show_names_from_edited_records_escaped() {
    let fx = Fx::new();
    let build = fx.build("clean", |_| {});
    let root = fx.dir.path().join("root");
    let o = fx.run_in(&root, &["install", s(&build), "--layer", "live", "--json"]);
    assert_eq!(crate::code(&o), 0, "{}", all_output(&o));
    let gen = crate::json(&o)["gen"].as_u64().expect("gen");
    let state = root.join("gens").join(gen.to_string()).join("state.json");
    let receipt = std::fs::read_dir(root.join("receipts"))
        .expect("receipts")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a receipt");
    let pristine_state = std::fs::read(&state).expect("read");
    let pristine_receipt = std::fs::read(&receipt).expect("read");
    for (class, c) in CLASSES {
        let recipe = format!("synthetic{c}\n* gen 9    #9    forged");
        let variant = format!("v{c}[31m");
        let time = format!("2026-01-01T00:00:00Z{c}");
        std::fs::write(&state, &pristine_state).expect("restore");
        std::fs::write(&receipt, &pristine_receipt).expect("restore");
        edit_json(&state, |v| {
            v["layers"]["live"]["recipe"] = json!(recipe);
            v["layers"]["live"]["variant"] = json!(variant);
        });
        edit_json(&receipt, |v| {
            v["to"]["recipe"] = json!(recipe);
            v["to"]["variant"] = json!(variant);
            v["time"] = json!(time);
        });
        for cmd in [&["status"][..], &["history"]] {
            let o = fx.run_in(&root, cmd);
            let out = all_output(&o);
            assert_eq!(crate::code(&o), 0, "{cmd:?} {class}: {out}");
            for v in [&recipe, &variant, &time] {
                assert_escaped(&out, v, &format!("{cmd:?} {class}"));
            }
            assert!(
                !out.lines().any(|l| l.starts_with("* gen 9")),
                "{cmd:?} {class}: a forged row: {out}"
            );
            assert!(out.contains("synthetic"), "{cmd:?} {class}: {out}");
        }
    }
}

/// What a test puts in place of an installed file.
#[derive(Debug, Clone, Copy)]
enum Stand {
    Fifo,
    Socket,
    Device,
    DanglingLink,
}

/// Replace `p` by `what`; false when this machine does not allow it (a device without the
/// privilege to make one). The socket's listener is returned to keep it bound.
fn stand_in(p: &Path, what: Stand) -> Option<Option<std::os::unix::net::UnixListener>> {
    if let Some(parent) = p.parent() {
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::remove_file(p).expect("rm");
    let made = |cmd: &mut std::process::Command| cmd.status().is_ok_and(|s| s.success());
    match what {
        Stand::Fifo => made(std::process::Command::new("mkfifo").arg(p)).then_some(None),
        Stand::Device => made(
            std::process::Command::new("mknod")
                .arg(p)
                .args(["c", "1", "3"])
                .stderr(Stdio::null()),
        )
        .then_some(None),
        Stand::DanglingLink => {
            std::os::unix::fs::symlink("no-such-file", p).expect("link");
            Some(None)
        }
        Stand::Socket => {
            // Socket paths are short (SUN_LEN): bind nearby, then move it into place.
            let short = std::env::temp_dir().join(format!("pf19-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&short);
            let l = std::os::unix::net::UnixListener::bind(&short).expect("socket");
            std::fs::rename(&short, p).expect("move socket");
            Some(Some(l))
        }
    }
}

// issue #19 class 8: an installed file replaced by a FIFO, a socket, a device or a dangling
// link is a failed check (exit 1) naming that file, as `sha256sum -c` treats an unreadable
// file, never a hang; `status --verify` agrees, and installing the build again repairs it.
#[test]
fn verify_installed_of_a_special_file_in_the_layer_fails_the_check_naming_it() {
    let fx = Fx::new();
    let build = fx.build("clean", |_| {});
    let root = fx.dir.path().join("root");
    let o = fx.run_in(&root, &["install", s(&build), "--layer", "live", "--json"]);
    assert_eq!(crate::code(&o), 0, "{}", all_output(&o));
    let status = crate::json(&fx.run_in(&root, &["status", "--json"]));
    let digest = status["layers"]["live"]["digest"].as_str().expect("digest");
    let entry = root.join("store").join(digest);
    for what in [
        Stand::Fifo,
        Stand::Socket,
        Stand::Device,
        Stand::DanglingLink,
    ] {
        let victim = entry.join("include/x.h");
        let Some(_listener) = stand_in(&victim, what) else {
            crate::skip(&format!(
                "cannot make a {what:?} here (mknod needs CAP_MKNOD)"
            ));
            // The entry lost its header: put it back for the next kind.
            let o = fx.run_in(&root, &["install", s(&build), "--layer", "live"]);
            assert_eq!(crate::code(&o), 0, "{}", all_output(&o));
            continue;
        };
        let o = fx.run_in(&root, &["verify", "--installed"]);
        let out = all_output(&o);
        assert_eq!(crate::code(&o), 1, "{what:?}: {out}");
        assert!(out.contains("MISMATCH"), "{what:?}: {out}");
        assert!(
            out.contains(s(&root.join("current/include/x.h"))),
            "{what:?} names the file: {out}"
        );
        let o = fx.run_in(&root, &["verify", "--installed", "--json"]);
        assert_eq!(crate::code(&o), 1, "{what:?}");
        let v = crate::json(&o);
        assert_eq!(v["ok"], false, "{what:?}");
        let o = fx.run_in(&root, &["status", "--verify"]);
        assert_eq!(
            crate::code(&o),
            1,
            "status --verify, {what:?}: {}",
            all_output(&o)
        );
        // Installing the build again repairs the entry.
        let o = fx.run_in(&root, &["install", s(&build), "--layer", "live", "--json"]);
        assert_eq!(crate::code(&o), 0, "{what:?}: {}", all_output(&o));
        assert_eq!(crate::json(&o)["repaired"], true, "{what:?}");
        let o = fx.run_in(&root, &["verify", "--installed"]);
        assert_eq!(crate::code(&o), 0, "{what:?}: {}", all_output(&o));
    }
}

/// An error message embeds values (here a path the user typed): whatever the command, the
/// error printer escapes every line of it, so a crafted name cannot drive the terminal.
#[test]
fn error_messages_show_embedded_values_escaped() {
    let t = tempfile::tempdir().expect("tmp");
    for (class, c) in CLASSES.iter().filter(|(_, c)| *c != '\0') {
        let name = with_char("manifest-name.json", *c);
        let missing = t.path().join(&name);
        for args in [
            vec!["verify", s(&missing)],
            vec!["diff", s(&missing), s(&missing)],
            vec!["patch", "lint", s(&missing)],
        ] {
            let o = crate::pinforge(t.path(), &args);
            assert_eq!(crate::code(&o), 2, "{class} {args:?}: {}", all_output(&o));
            assert_escaped(&crate::stderr(&o), &name, &format!("{class} {args:?}"));
        }
    }
}
