//! `bisect` (issue #39 §2) refuses what it cannot search before anything is built: a range
//! that is not `crate:NAME@OLD..NEW` or `git:URL@OLD..NEW` or runs backwards, a repository
//! that cannot be fetched (leaving no cache repository), a `--vcs-repo` beside a git range, a patch the series does not
//! list or that declares no `Pinforge-Check`, a `--vcs-repo` that is not a repository. Each is
//! exit 2 naming the value, with nothing written under the workspace. The real bisect of 0001
//! over 0.1.137..0.1.144 (four ASan builds) is measured in docs/guide/audit-and-rebase.md.

use crate::audit_check::shipped_copy;
use crate::{code, pinforge, stderr};

const P1: &str = "0001-batch-size-ubatch-reserve-pos-for-mrope.patch";
const P3: &str = "0003-kv-cache-can-shift-mrope.patch";
const RANGE: &str = "crate:llama-cpp-sys-2@0.1.137..0.1.144";

#[test]
fn bad_input_is_refused_naming_the_value_and_nothing_is_written() {
    let d = shipped_copy();
    let recipe = d.path().join("recipes/mrope-cpu.toml");
    let recipe = recipe.to_str().expect("utf8");
    let ws = tempfile::tempdir().expect("ws");
    let missing = d.path().join("no-such-repo");
    let git_missing = format!("git:{}@b8148..b8233", missing.display());
    let not_git = d.path().join("patches");
    // 0003 ships with a check; this copy's 0003 has it taken out, to be refused as uncheckable.
    let p3 = d.path().join("patches").join(P3);
    let text = std::fs::read_to_string(&p3).expect("read 0003");
    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("Pinforge-Check:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without, text, "0003 ships a Pinforge-Check");
    std::fs::write(&p3, without).expect("write 0003");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--patch",
                P1,
                "--range",
                "crate:llama-cpp-sys-2@0.1.144..0.1.137",
            ],
            "the range's first version is above its last",
        ),
        (
            vec![
                "--patch",
                P1,
                "--range",
                "npm:node-llama-cpp@3.15.0..3.16.0",
            ],
            "a range is of crate releases (crate:) or of a git repository's commits (git:)",
        ),
        (
            vec!["--patch", P1, "--range", &git_missing],
            "cannot fetch its branches and tags",
        ),
        (
            vec!["--patch", P1, "--range", "git:/x@b1..b2~1"],
            "`b2~1` is not a tag name or a commit id",
        ),
        (
            vec![
                "--patch",
                P1,
                "--range",
                &git_missing,
                "--vcs-repo",
                not_git.to_str().expect("utf8"),
            ],
            "a git range is already in upstream order",
        ),
        (
            vec![
                "--patch",
                P1,
                "--range",
                "crate:llama-cpp-sys-2@0.1.x..0.1.144",
            ],
            "0.1.x",
        ),
        (
            vec!["--patch", P1, "--range", "crate:llama-cpp-sys-2@0.1.137"],
            "crate:llama-cpp-sys-2@0.1.137",
        ),
        (
            vec!["--patch", "9999-nope.patch", "--range", RANGE],
            "is not a patch of the recipe's bundle",
        ),
        (
            vec!["--patch", P3, "--range", RANGE],
            "declares no Pinforge-Check",
        ),
        (
            vec![
                "--patch",
                P1,
                "--range",
                RANGE,
                "--vcs-repo",
                missing.to_str().expect("utf8"),
            ],
            "not a git repository",
        ),
        (
            vec![
                "--patch",
                P1,
                "--range",
                RANGE,
                "--vcs-repo",
                not_git.to_str().expect("utf8"),
            ],
            "not a git repository",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["bisect", recipe];
        all.extend(&args);
        let o = pinforge(ws.path(), &all);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: want `{says}` in {err}");
        assert!(err.contains("hint:"), "{args:?}: no hint in {err}");
        assert!(
            !ws.path().join("build").exists(),
            "{args:?}: something was built or logged"
        );
        let cached: Vec<_> = std::fs::read_dir(ws.path().join("vendor/cache/git"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            cached.is_empty(),
            "{args:?}: a cache repository was left: {cached:?}"
        );
    }
    // The bundle is untouched (--write was never reached): the shipped bytes.
    let text = std::fs::read(d.path().join("patches").join(P1)).expect("read");
    let shipped = std::fs::read(crate::repo_root().join("patches").join(P1)).expect("shipped");
    assert_eq!(text, shipped);
}

// The real output of `bisect --json` with `--vcs-repo` needs a clone of the crate's repository
// and four cold ASan builds (11 min 13 s here); the slow tier bisects a shorter range in version
// order (tests/llama/bisect.rs). The document recorded from the longer run (0001 over
// 0.1.137..0.1.144 with the crate's repository, 2026-12-07) is kept as a fixture and validated
// against the schema the types generate, so the upstream-order members are checked too; its
// content is the answer the guide quotes.
#[test]
fn the_recorded_real_bisect_validates_against_its_schema_and_says_what_the_guide_says() {
    let text = include_str!("fixtures/bisect-0001-0.1.137..0.1.144.json");
    let doc: serde_json::Value = serde_json::from_str(text).expect("json");
    assert_eq!(crate::schemas::validate(&doc), "pinforge.bisect/v1");
    assert_eq!(doc["found"]["kind"], "exact");
    assert_eq!(doc["first_fixed_release"], "0.1.139");
    assert_eq!(
        doc["first_good"]["upstream"].as_str().map(|s| &s[..12]),
        Some("c5a778891ba0")
    );
    let probes = doc["probes"].as_array().expect("probes");
    assert!(probes.len() <= doc["bound"].as_u64().expect("bound") as usize);
    let marks: Vec<&str> = probes.iter().filter_map(|p| p["mark"].as_str()).collect();
    assert_eq!(marks, ["bad", "good", "good", "good"]);
    // The run that wrote 0001's header (`--write`, every build current): the shipped header
    // carries its line.
    assert_eq!(doc["written"], true);
    let line = doc["applied_upstream"].as_str().expect("applied_upstream");
    let shipped =
        std::fs::read_to_string(crate::repo_root().join("patches").join(P1)).expect("read 0001");
    assert!(
        shipped.contains(&format!("\nApplied-Upstream: {line}\n")),
        "patches/{P1} does not carry its bisect's line: {line}"
    );
}

// issue #39 §3: 0003's Applied-Upstream is the one its bisect wrote, not a bracket. The
// document is the real run over 0.1.137..0.1.144 with the crate's repository (2026-12-07),
// after 0003 gained its context-shift check; the shipped header must carry its line.
#[test]
fn the_shipped_0003_header_carries_the_line_its_recorded_bisect_wrote() {
    let text = include_str!("fixtures/bisect-0003-0.1.137..0.1.144.json");
    let doc: serde_json::Value = serde_json::from_str(text).expect("json");
    assert_eq!(crate::schemas::validate(&doc), "pinforge.bisect/v1");
    assert_eq!(doc["found"]["kind"], "exact");
    assert_eq!(doc["first_fixed_release"], "0.1.139");
    assert!(
        doc["check"]
            .as_str()
            .unwrap_or_default()
            .contains("scenario=kshift"),
        "{}",
        doc["check"]
    );
    let line = doc["applied_upstream"].as_str().expect("applied_upstream");
    assert!(line.starts_with("b8233 (llama.cpp c5a778891ba0"), "{line}");
    let shipped =
        std::fs::read_to_string(crate::repo_root().join("patches").join(P3)).expect("read 0003");
    assert!(
        shipped.contains(&format!("\nApplied-Upstream: {line}\n")),
        "patches/{P3} does not carry its bisect's line: {line}"
    );
    let marks: Vec<&str> = doc["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter_map(|p| p["mark"].as_str())
        .collect();
    assert_eq!(marks, ["bad", "good", "good", "good"]);
}
