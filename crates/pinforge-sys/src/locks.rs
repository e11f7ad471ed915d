//! Who holds a `flock(2)` lock: the one question a waiting command must answer before it
//! blocks ("waiting for the workspace lock held by PID 4242 (pinforge build)"). Linux tells
//! it in `/proc/locks`; another platform answers it here (or says nothing) and nowhere else.

use std::path::Path;

/// A process holding a lock, as far as the system tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its command line, arguments joined by one space (empty when it cannot be read).
    pub command: String,
}

/// The holders of a granted `FLOCK` write lock on the file with device `dev` and inode `ino`
/// (the values `stat` gives). Empty when the system does not say (no `/proc`, or the lock
/// was released meanwhile); never an error, since this only words a message.
// The kernel's own fixed /proc files, never a path data names (what clippy.toml's rule about
// FIFOs and devices guards); sys does not depend on base's checked readers.
#[allow(clippy::disallowed_methods)]
pub fn flock_holders(dev: u64, ino: u64) -> Vec<Holder> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    parse_proc_locks(&text, dev_major(dev), dev_minor(dev), ino)
        .into_iter()
        .map(|pid| Holder {
            pid,
            command: command_of(pid),
        })
        .collect()
}

/// The pids of granted `FLOCK` locks on `major:minor:ino` in `/proc/locks` text. Lines of
/// waiters (`N: -> FLOCK …`) are not holders and are skipped.
fn parse_proc_locks(text: &str, major: u64, minor: u64, ino: u64) -> Vec<u32> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF`
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else {
            continue;
        };
        let mut id = f[5].split(':');
        let (Some(ma), Some(mi), Some(i)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        let same = u64::from_str_radix(ma, 16).ok() == Some(major)
            && u64::from_str_radix(mi, 16).ok() == Some(minor)
            && i.parse::<u64>().ok() == Some(ino);
        if same && !out.contains(&pid) {
            out.push(pid);
        }
    }
    out
}

/// `/proc/PID/cmdline` with its NULs as spaces, lossily decoded and capped (it is shown).
#[allow(clippy::disallowed_methods)] // a fixed /proc file, as above
fn command_of(pid: u32) -> String {
    let p = Path::new("/proc").join(pid.to_string()).join("cmdline");
    let Ok(bytes) = std::fs::read(p) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let joined: Vec<&str> = text.split('\0').filter(|s| !s.is_empty()).collect();
    joined.join(" ").chars().take(200).collect()
}

// glibc's gnu_dev_major/minor encoding, as `stat`'s st_dev holds it on Linux.
fn dev_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)
}

fn dev_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests make and open their own temp folder
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn granted_flocks_are_holders_and_waiters_are_not() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4343 fd:01:1234567 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 77 fd:01:1234567 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 88 fd:01:7654321 0 EOF\n";
        assert_eq!(parse_proc_locks(text, 0xfd, 1, 1234567), vec![4242]);
        assert_eq!(
            parse_proc_locks("garbage\n\n1: FLOCK", 0xfd, 1, 1),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn this_process_is_named_as_the_holder_of_its_own_flock() {
        let dir = std::env::temp_dir().join(format!("pf-locks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = std::fs::File::open(&dir).expect("open");
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).expect("lock");
        let m = f.metadata().expect("stat");
        let holders = flock_holders(m.dev(), m.ino());
        drop(f);
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(holders.len(), 1, "{holders:?}");
        assert_eq!(holders[0].pid, std::process::id());
        assert!(!holders[0].command.is_empty());
    }
}
