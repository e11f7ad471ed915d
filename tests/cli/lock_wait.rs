//! Issue #35, item 5: a command that waits on a lock another process holds says so on stderr
//! after a second, naming the lock, the holder's PID and command line, and then goes on once
//! the lock is released (as cargo's "Blocking waiting for file lock" and apt's "Waiting for
//! cache lock … held by process N" do); under `-q` it waits silently.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Hold an exclusive flock on `path` (a file or folder) until the handle is dropped.
fn hold(path: &std::path::Path) -> std::fs::File {
    let f = std::fs::File::open(path).expect("open for lock");
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).expect("flock");
    f
}

/// Start `cmd`, let it wait on the held lock for 2.5 s, check it is still waiting, release
/// the lock, and return what it printed.
fn waited(mut cmd: Command, held: std::fs::File) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(2500));
    let still = child.try_wait().expect("try_wait").is_none();
    drop(held);
    let o = child.wait_with_output().expect("wait");
    assert!(still, "it waited for the lock: {}", stderr(&o));
    o
}

#[test]
fn issue_35_a_wait_on_the_install_roots_lock_names_the_holder_then_goes_on() {
    let i = Installed::new();
    assert_eq!(code(&i.install(&i.patched, "live")), 0);
    let root = i.root.display().to_string();
    let mut cmd = pinforge_cmd(&i.t.ws);
    cmd.args(["gc", "--root", &root]);
    let o = waited(cmd, hold(&i.root.join("lock")));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    let lock = i.root.join("lock");
    assert!(
        err.contains(&format!(
            "note: waiting for the install root's lock on {}",
            lock.display()
        )),
        "{err}"
    );
    // The holder is this test process; /proc names its command line.
    assert!(
        err.contains(&format!("held by PID {} (", std::process::id())),
        "{err}"
    );
    assert_eq!(err.matches("waiting for").count(), 1, "one notice: {err}");
    assert!(stdout(&o).contains("gc: removed"), "{}", stdout(&o));

    // -q: the same wait, and no notice.
    let mut cmd = pinforge_cmd(&i.t.ws);
    cmd.args(["gc", "-q", "--root", &root]);
    let o = waited(cmd, hold(&i.root.join("lock")));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("waiting for"), "{}", stderr(&o));
}

#[test]
fn issue_35_a_wait_on_the_workspace_lock_names_it_and_the_build_still_runs() {
    let t = Tiny::new();
    let mut cmd = pinforge_cmd(&t.ws);
    cmd.args([
        "build",
        "recipes/tiny.toml",
        "--variant",
        "patched",
        "--json",
    ]);
    let o = waited(cmd, hold(&t.ws));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("note: waiting for the workspace lock on "),
        "{err}"
    );
    assert!(
        err.contains(&format!("held by PID {} (", std::process::id())),
        "{err}"
    );
    // stdout is still the one JSON document.
    assert!(json(&o)["manifest"].is_string(), "{}", stdout(&o));
}
