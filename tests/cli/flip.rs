//! `pinforge flip` and `pinforge ablate` (issue #10): single-axis flips with a pre-registered
//! hypothesis, refused multi-axis flips, invalid trials, and the patch ablation, on the tiny
//! project and on the real default recipe (through the shared llama.cpp workspace).

pub(crate) use crate::common::flip::read_json;
use crate::{code, json, pinforge, stderr, Tiny};
use std::path::Path;

// issue #10 "a two-axis flip is refused without --allow-multi": exit 2, both axes named, the
// hint given, and nothing written (no flips/ folder, no build).
#[test]
fn a_two_axis_flip_is_refused_with_exit_2_naming_both_axes_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = pinforge(
        dir.path(),
        &[
            "flip",
            "--from",
            "unpatched",
            "--to",
            "patched-asan",
            "--hypothesis",
            "the patches are the fix",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("2 axes (patches, sanitizer)"), "{err}");
    assert!(err.contains("LLAMA_SANITIZE_ADDRESS"), "{err}");
    assert!(err.contains("--allow-multi"), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("ls").count(),
        0,
        "a refused flip leaves the workspace empty"
    );
    // Zero differing axes: nothing to test, refused the same way.
    let o = pinforge(
        dir.path(),
        &[
            "flip",
            "--from",
            "patched",
            "--to",
            "patched",
            "--hypothesis",
            "h",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no axis differs"), "{}", stderr(&o));
    // A hypothesis with an escape sequence would repaint whoever reads the summary.
    let o = pinforge(
        dir.path(),
        &[
            "flip",
            "--from",
            "unpatched",
            "--to",
            "patched",
            "--hypothesis",
            "a\u{1b}[2Jb",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
}

/// The tiny recipe plus a variant whose C flags make CMake's compiler check fail: it differs
/// from `patched` in one CMake setting and cannot configure.
pub(crate) fn tiny_with_broken_variant() -> Tiny {
    let t = Tiny::new();
    let path = t.ws.join("recipes/tiny.toml");
    let mut text = std::fs::read_to_string(&path).expect("recipe");
    text.push_str("[variants.broken]\ncmake = { CMAKE_C_FLAGS = \"-fpinforge-no-such-flag\" }\n");
    std::fs::write(&path, text).expect("write recipe");
    t
}

// issue #10 "an invalid trial gives invalid, exit 1, and a record that says why".
#[test]
fn a_flip_to_a_variant_that_fails_to_configure_is_invalid_exit_1_with_the_reason_recorded() {
    let t = tiny_with_broken_variant();
    let o = pinforge(
        &t.ws,
        &[
            "flip",
            "recipes/tiny.toml",
            "--from",
            "patched",
            "--to",
            "broken",
            "--hypothesis",
            "the C flags are the defect",
            "--prediction",
            "the signature disappears",
            "--json",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["schema"], "pinforge.flip/v1");
    assert_eq!(j["verdict"], "invalid");
    assert_eq!(j["axis"], "cmake");
    assert_eq!(j["single_setting"], true);
    assert_eq!(j["hypothesis"], "the C flags are the defect");
    let reason = j["reason"].as_str().expect("reason");
    assert!(reason.contains("the to side did not build"), "{reason}");
    assert!(reason.contains("cmake"), "{reason}");
    assert!(
        j["smoke"]["from"].is_null() && j["smoke"]["to"].is_null(),
        "{j}"
    );
    // The record on disk is the same document, complete, with the failure's log tail.
    let record_path = j["record"].as_str().expect("record");
    assert!(
        record_path.contains("flips/tiny--patched--broken-0001/record.json"),
        "{record_path}"
    );
    let rec = read_json(Path::new(record_path));
    assert_eq!(rec["state"], "complete");
    assert_eq!(rec["verdict"], "invalid");
    assert_eq!(rec["reason"], j["reason"]);
    assert_eq!(rec["prediction"], "the signature disappears");
    assert!(rec["registered_at"].as_str().is_some());
    let to_err = rec["builds"]["to"]["error"].as_str().expect("to error");
    assert!(to_err.contains("-fpinforge-no-such-flag"), "{to_err}");
    assert!(rec["builds"]["from"]["manifest_sha256"].as_str().is_some());
    assert_eq!(rec["diff"][0]["key"], "CMAKE_C_FLAGS");
    let summary = std::fs::read_to_string(j["summary"].as_str().expect("summary")).expect("md");
    assert!(summary.contains("**Verdict:** invalid"), "{summary}");
    assert!(summary.contains("Why the to build failed"), "{summary}");
    // A second run is a new record; the first stays as evidence.
    let o = pinforge(
        &t.ws,
        &[
            "flip",
            "recipes/tiny.toml",
            "--from",
            "patched",
            "--to",
            "broken",
            "--hypothesis",
            "again",
            "--json",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(json(&o)["id"]
        .as_str()
        .is_some_and(|id| id.ends_with("-0002")));
    assert_eq!(
        read_json(Path::new(record_path))["hypothesis"],
        "the C flags are the defect"
    );
}

// issue #10 "the hypothesis and the prediction are written to the record before anything is
// built": a flip killed right after registration leaves a registered record (hypothesis,
// prediction, axis, both configurations, version, time) and no build folder.
#[test]
fn the_pre_registration_is_on_disk_before_anything_is_built() {
    let t = Tiny::new();
    let o = crate::pinforge_cmd(&t.ws)
        .env("PINFORGE_CRASH_AT", "flip:registered")
        .args([
            "flip",
            "recipes/tiny.toml",
            "--from",
            "unpatched",
            "--to",
            "patched",
            "--hypothesis",
            "tiny.c's return value is the defect",
            "--prediction",
            "patched returns 2",
        ])
        .output()
        .expect("run pinforge");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    assert!(!t.ws.join("build").exists(), "nothing was built");
    let rec = read_json(&t.ws.join("flips/tiny--unpatched--patched-0001/record.json"));
    assert_eq!(rec["schema"], "pinforge.flip/v1");
    assert_eq!(rec["state"], "registered");
    assert!(rec["verdict"].is_null());
    assert_eq!(rec["hypothesis"], "tiny.c's return value is the defect");
    assert_eq!(rec["prediction"], "patched returns 2");
    assert_eq!(rec["axis"], "patches");
    assert_eq!(
        rec["configurations"]["from"]["patches"],
        serde_json::json!([])
    );
    assert_eq!(
        rec["configurations"]["to"]["patches"][0]["file"],
        "0001-tiny-return-2.patch"
    );
    assert!(
        rec["configurations"]["to"]["toolchain"]["tools"]["cc"]["version"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    );
    assert_eq!(rec["pinforge_version"], env!("CARGO_PKG_VERSION"));
    assert!(rec["registered_at"].as_str().is_some());
}

#[test]
fn flip_and_ablate_help_have_examples_and_their_exit_codes() {
    for cmd in ["flip", "ablate"] {
        let o = pinforge(&crate::repo_root(), &[cmd, "--help"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let help = crate::stdout(&o);
        assert!(help.contains("Example"), "{help}");
        assert!(help.contains("Exit codes: 0"), "{help}");
    }
}

// issue #10 host-compiler axis, generically and fast: a tiny recipe whose second toolchain is
// clang. The flip is one axis (toolchain) whose rows carry both compilers' exact versions; both
// sides build, the library differs, and since the tiny project has no libllama to smoke the
// trial is invalid (exit 1) with that reason — never counted as evidence.
#[test]
fn a_compiler_flip_records_both_exact_versions_and_the_artifacts_that_differ() {
    let t = Tiny::new();
    let path = t.ws.join("recipes/tiny.toml");
    let text = std::fs::read_to_string(&path).expect("recipe").replace(
        "[base]",
        "[toolchain.clang]\ncc = \"clang\"\ncxx = \"clang++\"\n[base]",
    ) + "[variants.clang]\ntoolchain = \"clang\"\n";
    std::fs::write(&path, text).expect("write recipe");
    let o = pinforge(
        &t.ws,
        &[
            "flip",
            "recipes/tiny.toml",
            "--from",
            "patched",
            "--to",
            "clang",
            "--hypothesis",
            "the host compiler is the defect",
            "--json",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["axis"], "toolchain");
    assert_eq!(j["single_setting"], true);
    let row = |key: &str| {
        j["diff"]
            .as_array()
            .expect("diff")
            .iter()
            .find(|r| r["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} row: {j}"))
    };
    let cc = row("cc");
    assert!(
        cc["from"].as_str().is_some_and(|v| v.starts_with("gcc ")),
        "{cc}"
    );
    assert!(
        cc["to"].as_str().is_some_and(|v| v.starts_with("clang ")),
        "{cc}"
    );
    let to_version = j["configurations"]["to"]["toolchain"]["tools"]["cc"]["version"]
        .as_str()
        .expect("clang version");
    assert!(
        cc["to"].as_str().is_some_and(|v| v.contains(to_version)),
        "{cc}"
    );
    assert_eq!(row("name")["to"], "clang");
    // Both built; the compiled library differs between the compilers.
    assert!(
        j["builds"]["from"]["error"].is_null() && j["builds"]["to"]["error"].is_null(),
        "{j}"
    );
    assert!(
        j["artifacts"].as_array().expect("artifacts").iter().any(
            |a| a["same"] == false && a["path"].as_str().is_some_and(|p| p.contains("libtiny"))
        ),
        "{j}"
    );
    assert!(j["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .all(|a| a["embeds_machine_path"].is_boolean()));
    assert_eq!(j["verdict"], "invalid");
    assert!(
        j["reason"]
            .as_str()
            .is_some_and(|r| r.contains("from side's smoke could not run")),
        "{}",
        j["reason"]
    );
}
