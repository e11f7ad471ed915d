//! Taking an exclusive `flock(2)` lock that another command may hold, and saying so: after a
//! second of waiting, one notice names the lock and its holder (PID and command line) and the
//! wait goes on blocking, as `cargo` ("Blocking waiting for file lock on build directory")
//! and `apt` ("Waiting for cache lock: … held by process N") do.

use crate::error::{IoContext, Result};
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a lock is tried quietly before the notice.
const QUIET: Duration = Duration::from_secs(1);

/// Lock `file` (opened from `path`) exclusively, blocking until it is ours; `what` names the
/// lock in the notice ("the workspace lock").
pub fn lock_exclusive(file: &File, path: &Path, what: &str) -> Result<()> {
    lock_exclusive_telling(file, path, what, &crate::text::notice::emit)
}

/// [`lock_exclusive`] with the notice sent to `tell` (the unit tests' own sink: the process
/// sink is shared by every test thread).
fn lock_exclusive_telling(file: &File, path: &Path, what: &str, tell: &dyn Fn(&str)) -> Result<()> {
    use fs4::fs_std::FileExt;
    let start = Instant::now();
    loop {
        if file.try_lock_exclusive().at("lock", path)? {
            return Ok(());
        }
        if start.elapsed() >= QUIET {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    tell(&waiting_line(file, path, what));
    file.lock_exclusive().at("lock", path)?;
    Ok(())
}

/// `waiting for the workspace lock on DIR, held by PID 4242 (pinforge build); …`.
fn waiting_line(file: &File, path: &Path, what: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    let holders = match file.metadata() {
        Ok(m) => pinforge_sys::locks::flock_holders(m.dev(), m.ino()),
        Err(_) => Vec::new(),
    };
    let by = match holders.as_slice() {
        [] => String::new(),
        hs => {
            let named: Vec<String> = hs
                .iter()
                .map(|h| match h.command.as_str() {
                    "" => format!("PID {}", h.pid),
                    c => format!("PID {} ({})", h.pid, crate::text::shown(c)),
                })
                .collect();
            format!(", held by {}", named.join(", "))
        }
    };
    format!(
        "waiting for {what} on {}{by}; it is released when that command ends",
        crate::text::shown(&path.display().to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_held_lock_is_waited_for_with_one_notice_naming_the_holder() {
        let dir = tempfile::tempdir().expect("tmp");
        let held = File::open(dir.path()).expect("open");
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .expect("lock");
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s2 = Arc::clone(&seen);
        let path = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            let f = File::open(&path).expect("open");
            let tell = |l: &str| {
                if let Ok(mut v) = s2.lock() {
                    v.push(l.to_string());
                }
            };
            lock_exclusive_telling(&f, &path, "the test lock", &tell).expect("lock");
        });
        std::thread::sleep(Duration::from_millis(1600));
        drop(held);
        waiter.join().expect("join");
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(
            seen[0].starts_with("waiting for the test lock on "),
            "{seen:?}"
        );
        let me = format!("held by PID {} (", std::process::id());
        assert!(seen[0].contains(&me), "{seen:?}");
    }
}
