//! Own entries (issue #36): the files of a control or original entry are its own, so that no
//! write through another entry's hard link can reach the layer an operator falls back to.
//! Each file is a reflink of the build output where the file system has them (`FICLONE`:
//! the blocks are shared copy-on-write, the inode is not) and a copy otherwise; the store
//! use of the install records which.

use super::*;

/// How one own file was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Made {
    /// A reflink: new inode, shared blocks.
    Reflink,
    /// A byte copy.
    Copy,
}

/// Errors of `FICLONE` that mean "not here" (the file system has no reflinks, or the two
/// files are on different ones): the file is copied instead.
fn no_reflink(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [
        Errno::OPNOTSUPP,
        Errno::NOTSUP,
        Errno::XDEV,
        Errno::INVAL,
        Errno::NOTTY,
        Errno::PERM,
        Errno::BADF,
        Errno::ISDIR,
    ]
    .contains(&e)
}

/// Make `to` (created here, sealed `mode`) a file of its own with the bytes of the opened
/// build output `src`: a reflink when the file system allows one, else a copy.
pub(super) fn reflink_or_copy(
    src: std::fs::File,
    from: &Path,
    to: &Path,
    mode: u32,
    fail_after: Option<u64>,
    written: &mut u64,
) -> Result<Made> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .at("create", to)?;
    match rustix::fs::ioctl_ficlone(&dst, &src) {
        Ok(()) => {
            dst.set_permissions(std::fs::Permissions::from_mode(mode))
                .at("chmod", to)?;
            return Ok(Made::Reflink);
        }
        Err(e) if no_reflink(e) => {
            drop(dst);
            std::fs::remove_file(to).at("remove", to)?;
        }
        Err(e) => return Err(Error::io("reflink", to, e.into())),
    }
    super::store::copy_file(src, from, to, mode, fail_after, written)?;
    Ok(Made::Copy)
}

/// Whether any regular file below `dir` has more than one link: an own entry whose file
/// has gained a second name shares its inode (and its damage) with that name.
pub(super) fn shared_files(dir: &Path) -> Result<Vec<String>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        for e in std::fs::read_dir(&d).at("read directory", &d)? {
            let e = e.at("read directory", &d)?;
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let m = std::fs::symlink_metadata(e.path()).at("stat", &e.path())?;
            if m.is_dir() {
                stack.push((e.path(), r));
            } else if m.is_file() && m.nlink() > 1 {
                out.push(r);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_own_file_has_the_bytes_and_mode_and_an_inode_of_its_own() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let from = dir.path().join("lib.so");
        std::fs::write(&from, b"bytes of a library").expect("write");
        let to = dir.path().join("own.so");
        let mut written = 0;
        let src = std::fs::File::open(&from).expect("open");
        let made = reflink_or_copy(src, &from, &to, 0o444, None, &mut written).expect("own");
        assert_eq!(std::fs::read(&to).expect("read"), b"bytes of a library");
        let (a, b) = (
            std::fs::metadata(&from).expect("stat"),
            std::fs::metadata(&to).expect("stat"),
        );
        assert_ne!(a.ino(), b.ino(), "{made:?}: a new inode either way");
        assert_eq!(b.permissions().mode() & 0o7777, 0o444);
        // A write to the source (what a damaged build folder is) never reaches the copy.
        std::fs::write(&from, b"damaged").expect("write");
        assert_eq!(std::fs::read(&to).expect("read"), b"bytes of a library");
        assert!(shared_files(dir.path()).expect("walk").is_empty());
        std::fs::hard_link(&to, dir.path().join("second-name")).expect("link");
        assert_eq!(
            shared_files(dir.path()).expect("walk"),
            vec!["own.so".to_string(), "second-name".to_string()]
        );
    }
}
