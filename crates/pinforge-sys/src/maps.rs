//! Which files a running process has mapped: the question a served soak must answer to know
//! which `libllama` answered (issue #35: the patched and unpatched builds ship a byte-identical
//! `bin/llama-server`, so `/proc/PID/exe` cannot tell the arms apart; only the mapped
//! libraries differ). Linux tells it in `/proc/PID/maps`; another platform answers it here
//! (Windows: the module list of the process) and nowhere else.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One file a process maps, as the kernel names it: the path it resolved when the file was
/// mapped, and the device and inode of what is mapped (so that a file replaced on disk since
/// is told apart from the one the process runs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mapped {
    /// The path the kernel shows (links resolved), without the ` (deleted)` suffix.
    pub path: PathBuf,
    /// Device major number of the mapped file.
    pub major: u64,
    /// Device minor number.
    pub minor: u64,
    /// Inode number.
    pub inode: u64,
    /// The kernel marks the mapping ` (deleted)`: the name no longer leads to this file.
    pub deleted: bool,
}

impl Mapped {
    /// Whether `dev` and `ino` (as `stat` gives them) are the mapped file's.
    pub fn is(&self, dev: u64, ino: u64) -> bool {
        dev_major(dev) == self.major && dev_minor(dev) == self.minor && ino == self.inode
    }
}

/// The files process `pid` maps, each once, in path order. Anonymous mappings, the stack, the
/// heap and the kernel's own (`[vdso]`) are not files and are left out.
// The kernel's own fixed /proc file, never a path data names (what clippy.toml's rule about
// FIFOs and devices guards); sys does not depend on base's checked readers.
#[allow(clippy::disallowed_methods)]
pub fn mapped_files(pid: u32) -> std::io::Result<Vec<Mapped>> {
    let bytes = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(&bytes))
}

/// `/proc/PID/maps` text parsed: `START-END PERMS OFFSET MAJ:MIN INODE   PATH`.
fn parse_maps(bytes: &[u8]) -> Vec<Mapped> {
    let mut out: Vec<Mapped> = Vec::new();
    for line in bytes.split(|b| *b == b'\n') {
        let Some(m) = parse_line(line) else {
            continue;
        };
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out.sort();
    out
}

fn parse_line(line: &[u8]) -> Option<Mapped> {
    // Five fields separated by single spaces, then padding, then the path (which may hold
    // spaces, and bytes that are not UTF-8: it is taken as bytes).
    let mut rest = line;
    let mut fields: Vec<&[u8]> = Vec::with_capacity(5);
    for _ in 0..5 {
        let at = rest.iter().position(|b| *b == b' ')?;
        fields.push(&rest[..at]);
        rest = &rest[at + 1..];
    }
    let path = trim_start(rest);
    let inode: u64 = std::str::from_utf8(fields[4]).ok()?.parse().ok()?;
    // Inode 0 is an anonymous or kernel mapping; a real file's path is absolute.
    if inode == 0 || !path.starts_with(b"/") {
        return None;
    }
    let dev = std::str::from_utf8(fields[3]).ok()?;
    let (ma, mi) = dev.split_once(':')?;
    let major = u64::from_str_radix(ma, 16).ok()?;
    let minor = u64::from_str_radix(mi, 16).ok()?;
    const DELETED: &[u8] = b" (deleted)";
    let (path, deleted) = match path.strip_suffix(DELETED) {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(Mapped {
        path: PathBuf::from(OsStr::from_bytes(path)),
        major,
        minor,
        inode,
        deleted,
    })
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| **c == b' ').count();
    &b[n..]
}

// glibc's gnu_dev_major/minor encoding, as `stat`'s st_dev holds it on Linux.
fn dev_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)
}

fn dev_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn file_mappings_are_kept_once_and_the_rest_left_out() {
        let text = b"55d0-55d1 r--p 00000000 fd:01 1234 /opt/a b/bin/llama-server\n\
            55d1-55d2 r-xp 00001000 fd:01 1234 /opt/a b/bin/llama-server\n\
            7f00-7f01 r-xp 00000000 fd:01 99                         /opt/lib/libllama.so.0.0.1 (deleted)\n\
            7f02-7f03 rw-p 00000000 00:00 0 \n\
            7ffd-7ffe rw-p 00000000 00:00 0                          [stack]\n\
            ffff-ffff --xp 00000000 00:00 0                          [vsyscall]\n\
            7f04-7f05 r--p 00000000 fd:01 7 /opt/\xff.so\n\
            garbage\n";
        let m = parse_maps(text);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0].path, PathBuf::from("/opt/a b/bin/llama-server"));
        assert!(!m[0].deleted);
        assert_eq!((m[0].major, m[0].minor, m[0].inode), (0xfd, 1, 1234));
        assert_eq!(m[1].path, PathBuf::from("/opt/lib/libllama.so.0.0.1"));
        assert!(
            m[1].deleted,
            "the (deleted) mark is read, not kept in the path"
        );
        assert_eq!(m[2].path.as_os_str().as_bytes(), b"/opt/\xff.so");
    }

    #[test]
    fn this_process_maps_its_own_executable() {
        let exe = std::fs::canonicalize("/proc/self/exe").expect("exe");
        let meta = std::fs::metadata(&exe).expect("stat");
        let m = mapped_files(std::process::id()).expect("maps");
        let me = m
            .iter()
            .find(|x| x.path == exe)
            .expect("own executable mapped");
        assert!(me.is(meta.dev(), meta.ino()), "{me:?}");
        assert!(!me.is(meta.dev(), meta.ino() + 1));
    }
}
