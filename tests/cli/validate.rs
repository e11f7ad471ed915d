//! Issue #11: `pinforge validate`, the A/B row harness, on the default recipe's real
//! AddressSanitizer builds installed as control (unpatched-asan) and live (patched-asan) in a
//! root of the test's own; resume after a SIGKILL; input errors before anything is written.

use crate::{code, pinforge, stderr, stdout};

/// Issue #11: bad input is exit 2 before any build is touched or any run folder written: an
/// unsupported schema keyword (named with its file), a run id that is a path, one layer.
#[test]
fn validate_refuses_bad_input_before_writing_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let schema = ws.join("s.json");
    std::fs::write(&schema, r#"{"type":"string","pattern":"^a+$"}"#).expect("schema");
    let o = pinforge(
        ws,
        &[
            "validate", "a.json", "b.json", "--rows", "5", "--schema", "s.json",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("s.json"), "{}", stderr(&o));
    assert!(stderr(&o).contains("`pattern`"), "{}", stderr(&o));
    let o = pinforge(
        ws,
        &[
            "validate", "a.json", "b.json", "--rows", "5", "--resume", "../x",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let o = pinforge(ws, &["validate", "--installed", "live", "--rows", "5"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("two layers"), "{}", stderr(&o));
    let o = pinforge(ws, &["validate", "a.json", "b.json", "--rows", "5"]);
    assert_eq!(code(&o), 2, "missing manifests: {}", stderr(&o));
    assert!(!ws.join("validate").exists(), "nothing written");
}

/// Issue #35: `--budget` is bounded by the soak engine's context, and `--help` says so; the
/// bound's ends are accepted by the check and the first value past it is refused, naming it.
#[test]
fn issue_35_the_budget_bound_is_in_the_help_and_is_the_one_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let h = pinforge(ws, &["validate", "--help"]);
    assert!(stdout(&h).contains("1 to 128"), "{}", stdout(&h));
    let o = pinforge(
        ws,
        &[
            "validate", "a.json", "b.json", "--rows", "5", "--budget", "129",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--budget 129: must be 1 to 128 tokens"),
        "{}",
        stderr(&o)
    );
    // 128 passes the bound: the run goes on to the (missing) manifests.
    let o = pinforge(
        ws,
        &[
            "validate", "a.json", "b.json", "--rows", "5", "--budget", "128",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!stderr(&o).contains("--budget"), "{}", stderr(&o));
    assert!(stderr(&o).contains("a.json"), "{}", stderr(&o));
    let f = pinforge(ws, &["flip", "--help"]);
    assert!(stdout(&f).contains("1 to 128"), "{}", stdout(&f));
}
