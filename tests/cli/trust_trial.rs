//! Issue #19 classes 7 and 10: `validate --resume` trusts nothing of its run folder (every
//! recorded row is checked against the run's settings, a link anywhere in or at the folder is
//! refused, exit 2 naming it), and `ablate` never takes a recipe variant named like one of its
//! subsets for the subset's build.

use crate::{code, pinforge, stderr};
use std::path::Path;

/// Issue #19 class 7: a run folder that is a link (here to a real-looking run outside the
/// workspace), a `validate/` that is a link, and a `rows.jsonl` that is a link are each exit 2
/// naming the link (never exit 4 with a raw OS error), before any build is looked at, and
/// nothing is written through them.
#[test]
fn validate_refuses_a_run_folder_or_row_file_that_is_a_link_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(ws.join("validate")).expect("ws");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("settings.json"), b"{}").expect("settings");
    std::fs::write(outside.join("rows.jsonl"), b"").expect("rows");
    let listing = |p: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(p)
            .expect("ls")
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = listing(&outside);
    let resume = |id: &str| {
        pinforge(
            &ws,
            &[
                "validate", "a.json", "b.json", "--rows", "2", "--resume", id,
            ],
        )
    };

    std::os::unix::fs::symlink(&outside, ws.join("validate/r1")).expect("link");
    let o = resume("r1");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("validate/r1") && err.contains("symlink"),
        "{err}"
    );
    assert!(!err.contains("a.json"), "refused before the builds: {err}");

    let run = ws.join("validate/r2");
    std::fs::create_dir(&run).expect("run");
    std::fs::write(run.join("settings.json"), b"{}").expect("settings");
    std::os::unix::fs::symlink(outside.join("rows.jsonl"), run.join("rows.jsonl")).expect("link");
    let o = resume("r2");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("validate/r2/rows.jsonl") && err.contains("symlink"),
        "{err}"
    );
    assert!(!err.contains("os error"), "no raw OS error: {err}");

    // A fresh run under a validate/ that is a link is refused too.
    std::fs::rename(ws.join("validate"), dir.path().join("old-validate")).expect("mv");
    std::os::unix::fs::symlink(&outside, ws.join("validate")).expect("link");
    let o = pinforge(&ws, &["validate", "a.json", "b.json", "--rows", "2"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
    assert_eq!(listing(&outside), before, "nothing written through a link");
}
