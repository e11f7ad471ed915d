//! Filesystem edges: every call attaches the path to its error, and writes that must never be
//! seen half-done go through a temp file in the same directory, fsync, rename, fsync of the
//! directory.

use crate::error::{Error, IoContext, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Read a whole regular file. A FIFO, device or socket is refused before it is opened (a
/// recipe or patch path that is a FIFO would otherwise hang the command, DESIGN §5); a missing
/// file stays an I/O `NotFound`, so callers can word "recipe not found" with their own hint.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    if let Err(e) = std::fs::metadata(path) {
        return Err(Error::io("read", path, e));
    }
    let mut file = open_regular(path, "file", true)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).at("read", path)?;
    Ok(bytes)
}

/// [`read`], with None for a file that is not there (a stamp or log that may not exist yet).
pub fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>> {
    match read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(Error::Io { ref source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Copy the regular file `from` over `to` with `from`'s permission bits, as `std::fs::copy`
/// does, but reading through [`open_regular`]: a FIFO or device named as the source is refused
/// instead of blocking or never ending. Returns the bytes copied.
pub fn copy_file(from: &Path, to: &Path) -> Result<u64> {
    let mut src = open_regular(from, "file to copy", true)?;
    let perm = src.metadata().at("stat", from)?.permissions();
    let mut dst = std::fs::File::create(to).at("create", to)?;
    let n = std::io::copy(&mut src, &mut dst).at("copy", from)?;
    dst.set_permissions(perm).at("chmod", to)?;
    Ok(n)
}

/// Open a folder (to fsync, lock or chmod it) without ever blocking: with `O_DIRECTORY` the
/// kernel refuses anything else at lookup, so a FIFO in a folder's place is never opened.
/// `what` words the error ("fsync directory").
pub fn open_dir(path: &Path, what: &'static str) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .at(what, path)
}

/// Read a whole UTF-8 regular file (see [`read`]).
pub fn read_to_string(path: &Path) -> Result<String> {
    String::from_utf8(read(path)?).map_err(|e| {
        Error::input(
            path.display(),
            format!(
                "not UTF-8 text (first bad byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Create a directory and its parents.
pub fn create_dir_all(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).at("create directory", path)
}

/// fsync a directory so that a rename inside it is durable.
pub fn sync_dir(path: &Path) -> Result<()> {
    open_dir(path, "fsync directory")?
        .sync_all()
        .at("fsync directory", path)
}

/// Write `bytes` to `path` atomically: readers see the old content or the new, never a prefix.
/// The file is readable by every account (0644): temp files start owner-only, and manifests,
/// state and receipts must be readable by the service accounts that consume them.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_mode(path, bytes, 0o644)
}

/// [`write_atomic`] with an explicit mode (for example 0o444 for a sealed store file).
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = parent_of(path);
    create_dir_all(&dir)?;
    let tmp = stage_atomic_mode(path, bytes, mode)?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .at("rename into", path)?;
    sync_dir(&dir)
}

/// The first half of [`write_atomic_mode`]: `bytes` in a synced temp file with `mode` beside
/// `path` (whose folder must exist), not yet renamed. A caller with several files to replace
/// stages them all before its commit point, so that only renames follow it; dropping the
/// returned path deletes the temp file.
pub fn stage_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<tempfile::TempPath> {
    stage_atomic_prefixed(path, bytes, mode, ".pinforge-tmp-")
}

/// [`stage_atomic_mode`] with the temp file's name starting with `prefix`, so that a writer
/// can later recognise (and clean up) the temp files a killed run of its own left behind.
pub fn stage_atomic_prefixed(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    prefix: &str,
) -> Result<tempfile::TempPath> {
    use std::os::unix::fs::PermissionsExt;
    let dir = parent_of(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempfile_in(&dir)
        .at("create temp file in", &dir)?;
    tmp.write_all(bytes).at("write", tmp.path())?;
    // The temp file is ours (just created), so setting its mode never touches a file another
    // account owns.
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .at("chmod", tmp.path())?;
    tmp.as_file().sync_all().at("fsync", tmp.path())?;
    Ok(tmp.into_temp_path())
}

/// Atomically exchange two paths (Linux `renameat2(RENAME_EXCHANGE)`, through rustix's safe
/// wrapper): a damaged entry and its fresh copy, or a bundle folder and its staged successor,
/// trade places, so the name never points at nothing. `what` words the error ("exchange with").
/// The caller syncs the parent folder when the exchange is its commit point.
pub fn exchange(a: &Path, b: &Path, what: &'static str) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE)
        .map_err(|e| Error::io(what, b, std::io::Error::from(e)))
}

/// Rename `from` onto `to` only if nothing is at `to` (Linux `renameat2(RENAME_NOREPLACE)`):
/// publishing a file that must never replace another (a key pair), atomically, even against a
/// writer that raced the caller's check. Something at `to` (a link included) is an input
/// error naming it.
pub fn rename_noreplace(from: &Path, to: &Path) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE).map_err(|e| {
        if e == rustix::io::Errno::EXIST {
            Error::input(
                to.display(),
                "appeared while it was being written; not overwritten",
            )
            .with_hint("another writer made it: choose another path")
        } else {
            Error::io("rename into", to, std::io::Error::from(e))
        }
    })
}

/// A new file at `path` (`O_EXCL`, not following a link) created with `mode` (so that a
/// secret is never readable by others, not even before a chmod), holding `bytes`, synced.
pub fn create_new_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .at("create", path)?;
    f.write_all(bytes).at("write", path)?;
    f.sync_all().at("fsync", path)
}

/// A secret's bytes (a private key): a regular file, at most `max` bytes, read into one buffer
/// sized up front (no reallocation leaves a copy behind) that is wiped when dropped.
pub fn read_secret(path: &Path, max: u64) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    use std::io::Read;
    if let Err(e) = std::fs::metadata(path) {
        return Err(Error::io("read", path, e));
    }
    let file = open_regular(path, "key file", true)?;
    let len = file.metadata().at("stat", path)?.len();
    if len > max {
        return Err(Error::input(
            path.display(),
            format!("is {len} bytes, more than a key ({max} at most); not read"),
        ));
    }
    // One byte of room tells a file that grew since the stat from one that did not.
    let cap = usize::try_from(len).unwrap_or(0) + 1;
    let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(cap));
    let n = file
        .take(cap as u64)
        .read_to_end(&mut bytes)
        .at("read", path)?;
    if n >= cap {
        return Err(
            Error::input(path.display(), "changed while it was read; not used")
                .with_hint("run the command again"),
        );
    }
    Ok(bytes)
}

/// The entries of `dir` named `PREFIX<PID>-…` whose writer (PID) is no longer running (what
/// a killed writer left: its staged temp files or folders); a name
/// that does not parse, or a writer that is alive (signal 0 reaches it, or it exists under
/// another account), is not listed. A missing folder has none.
pub fn dead_writer_entries(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut dead = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        let gone = matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        );
        if gone {
            dead.push(entry.path());
        }
    }
    dead.sort();
    Ok(dead)
}

/// The permission bits of the regular file at `path`, if there is one (a link is not followed).
pub fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions().mode() & 0o7777)
}

/// [`write_atomic`] keeping the mode of the file it replaces (0644 for a new one): an
/// operator's 0600 recipe or patch must not come back world-readable.
pub fn write_atomic_keep_mode(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_mode(path, bytes, mode_of(path).unwrap_or(0o644))
}

/// The directory a path lives in (`.` for a bare file name).
pub fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// An exclusive advisory lock on a directory, held for the guard's lifetime. The kernel drops
/// it when the process dies, so a killed run never leaves a stale lock behind. Locking the
/// directory itself (not a lock file in it) leaves the directory's contents untouched.
pub struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    /// Block until the lock on `dir` is ours (after a second, a notice names the holder).
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        DirLock::acquire_as(dir, "the lock")
    }

    /// [`DirLock::acquire`], the notice naming the lock as `what` ("the workspace lock").
    pub fn acquire_as(dir: &Path, what: &str) -> Result<DirLock> {
        let file = open_dir(dir, "open for locking")?;
        super::lock::lock_exclusive(&file, dir, what)?;
        Ok(DirLock { _file: file })
    }

    /// The lock on `dir` if no one holds it now; None when another process (or another
    /// handle of this one) does. For a folder only one command may work in at a time, where
    /// waiting would only make the second do the first one's work again.
    pub fn try_acquire(dir: &Path) -> Result<Option<DirLock>> {
        use fs4::fs_std::FileExt;
        let file = open_dir(dir, "open for locking")?;
        if file.try_lock_exclusive().at("lock", dir)? {
            Ok(Some(DirLock { _file: file }))
        } else {
            Ok(None)
        }
    }
}

/// The user's cache folder for pinforge: `$XDG_CACHE_HOME/pinforge`, else
/// `$HOME/.cache/pinforge` (where cargo, pip and sccache users look for caches). A relative
/// value is ignored, as the XDG base-directory specification says. `what` names the cache in
/// the error when neither is set.
pub fn user_cache_dir(what: &str) -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| Path::new(v).is_absolute())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .ok_or_else(|| {
            Error::input(
                what,
                "neither XDG_CACHE_HOME nor HOME is set (to an absolute path)",
            )
        })?;
    Ok(base.join("pinforge"))
}

/// Make `path` absolute against the current directory without resolving symlinks.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).at("make absolute", path)
}

/// What a file type is, for an error message; None for files, folders and links.
pub fn special_kind(ft: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_socket() {
        Some("a socket")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_file() || ft.is_dir() || ft.is_symlink() {
        None
    } else {
        Some("not a regular file")
    }
}

/// Open a regular file for reading without ever blocking on it. The path is inspected first
/// (a device is never even opened), then opened with `O_NONBLOCK` (opening a FIFO returns at
/// once) and checked again with `fstat` on the opened file, since the path may have changed in
/// between. Anything but a regular file is an input error naming the path. `follow` = false
/// adds `O_NOFOLLOW`, for entries of a tree being copied and files of the install root.
/// `O_NOCTTY` keeps a terminal swapped in after the check from becoming the controlling
/// terminal, and `O_CLOEXEC` keeps the descriptor out of the tools pinforge runs.
///
/// This is the one way pinforge opens a file that data named: the install root, manifests,
/// pins, folder pins and patch targets all come through here.
pub fn open_regular(path: &Path, what: &str, follow: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |kind: &str| {
        Error::input(
            path.display(),
            format!("{what} is {kind}, not a regular file; it was not read"),
        )
        .with_hint("only regular files are read: a device, FIFO or socket could block forever or never end")
    };
    let stat = if follow {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let meta = match stat {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::input(path.display(), format!("{what} not found")))
        }
        Err(e) => return Err(Error::io("stat", path, e)),
    };
    let kind_of = |m: &std::fs::Metadata| {
        let ft = m.file_type();
        special_kind(&ft)
            .or(ft.is_dir().then_some("a folder"))
            .or(ft.is_symlink().then_some("a symlink"))
    };
    if let Some(kind) = kind_of(&meta) {
        return Err(refuse(kind));
    }
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("a symlink"),
            Some(libc::ENXIO) => refuse("a socket"),
            Some(libc::ENOENT) => Error::input(path.display(), format!("{what} not found")),
            _ => Error::io("open", path, e),
        })?;
    let meta = file.metadata().at("stat", path)?;
    if let Some(kind) = kind_of(&meta) {
        return Err(refuse(kind));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sub/f.json");
        write_atomic(&p, b"one").expect("write");
        write_atomic(&p, b"two").expect("rewrite");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["f.json".to_string()]);
    }

    #[test]
    fn read_refuses_a_fifo_without_opening_it_and_keeps_not_found_an_io_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("r.toml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("cstr");
        assert_eq!(pinforge_sys::mkfifo(c.as_c_str(), 0o600), 0, "mkfifo");
        let e = read(&fifo).expect_err("a FIFO is refused");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("FIFO"), "{e}");
        let missing = read(&dir.path().join("none")).expect_err("missing");
        assert!(
            matches!(missing, Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{missing}"
        );
    }

    fn fifo_in(dir: &Path, name: &str) -> PathBuf {
        let fifo = dir.join(name);
        assert_eq!(pinforge_sys::mkfifo(fifo.as_path(), 0o600), 0, "mkfifo");
        fifo
    }

    #[test]
    fn the_other_reads_refuse_a_fifo_at_once_too() {
        // Issue #19 class 8: every way fsx reads (a file that may be missing, a copy's source, a
        // folder to fsync or lock) refuses a FIFO instead of blocking on it.
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = fifo_in(dir.path(), "p");
        let e = read_if_present(&fifo).expect_err("fifo");
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(read_if_present(&dir.path().join("none"))
            .expect("missing")
            .is_none());
        let e = copy_file(&fifo, &dir.path().join("copy")).expect_err("fifo source");
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(!dir.path().join("copy").exists(), "nothing created");
        assert!(open_dir(&fifo, "fsync directory").is_err());
        assert!(sync_dir(&fifo).is_err());
        assert!(DirLock::acquire(&fifo).is_err());
        sync_dir(dir.path()).expect("a folder syncs");
    }

    #[test]
    fn copy_file_keeps_the_mode_and_replaces_the_content() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("lib.so"), dir.path().join("out.so"));
        std::fs::write(&from, b"elf").expect("write");
        std::fs::set_permissions(&from, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        std::fs::write(&to, b"older and longer").expect("write");
        assert_eq!(copy_file(&from, &to).expect("copy"), 3);
        assert_eq!(std::fs::read(&to).expect("read"), b"elf");
        let mode = std::fs::metadata(&to).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
    }

    #[test]
    fn write_atomic_files_are_readable_by_everyone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("manifest.json");
        write_atomic(&p, b"{}").expect("write");
        let mode = std::fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o644,
            "issue #7 class 9: state and manifests are 0644"
        );
    }

    #[test]
    fn dir_lock_can_be_taken_twice_in_sequence() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(DirLock::acquire(dir.path()).expect("lock"));
        drop(DirLock::acquire(dir.path()).expect("relock"));
    }
}
