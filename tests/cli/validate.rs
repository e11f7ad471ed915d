//! Issue #11: `pinforge validate`, the A/B row harness, on the default recipe's real
//! AddressSanitizer builds installed as control (unpatched-asan) and live (patched-asan) in a
//! root of the test's own; resume after a SIGKILL; input errors before anything is written.

use crate::{code, pinforge, stderr};

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
