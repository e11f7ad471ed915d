//! Standard output that closes early or cannot be written (issue #7 class 8): a closed pipe
//! ends quietly, a write error after a commit says that the commit happened.

use crate::{code, pinforge_cmd, repo_root, stderr, Installed};
use std::process::Stdio;

/// Run pinforge with its stdout connected to a pipe whose read end is already closed, so the
/// first write fails with EPIPE deterministically (no race with a `head` that exits).
fn run_with_closed_stdout(args: &[&str]) -> std::process::Output {
    let (reader, writer) = rustix::pipe::pipe().expect("pipe");
    drop(reader);
    pinforge_cmd(&repo_root())
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run pinforge")
}

#[test]
fn a_closed_pipe_ends_patch_list_quietly_with_its_own_exit_code() {
    // issue #7 class 8: `pinforge patch list | head -1` panicked with exit 101.
    for args in [
        &["patch", "list"][..],
        &["patch", "list", "--json"][..],
        &["patch", "lint"][..],
        &["--help"][..],
    ] {
        let o = run_with_closed_stdout(args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_full_stdout_after_install_commits_says_the_install_happened() {
    // issue #7 class 8: `install --json > /dev/full` committed, then panicked.
    let i = Installed::new();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let o = i
        .cmd(&[
            "install",
            i.patched.to_str().expect("utf8"),
            "--layer",
            "live",
            "--json",
        ])
        .stdout(Stdio::from(full))
        .output()
        .expect("run");
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("cannot write the report"), "{err}");
    assert!(err.contains("committed stays committed"), "{err}");
    // And it did commit: live shows the patched build.
    assert_eq!(i.current_variant().as_deref(), Some("patched"));
}
