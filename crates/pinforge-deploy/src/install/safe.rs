//! Reading and removing things inside the install root without trusting them: every path is
//! inspected with `lstat` before use, files are opened through [`pinforge_base::fsx::open_regular`]
//! (inspected before the open, `O_NOFOLLOW|O_NONBLOCK`, checked with `fstat`), devices, FIFOs
//! and sockets are refused before anything opens them, and entry paths and link targets are
//! checked component by component, links resolved through the links before them by the one
//! resolver in [`pinforge_base::tree`].

use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::tree::TreeModel;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What a path is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Missing,
    File,
    Dir,
    Link,
    /// A FIFO, socket or device: never opened.
    Special(&'static str),
}

/// `lstat` a path.
pub(crate) fn kind(p: &Path) -> Result<Kind> {
    match std::fs::symlink_metadata(p) {
        Ok(m) => Ok(kind_of(&m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Kind::Missing),
        // A path through a file (ENOTDIR) does not exist either.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(Kind::Missing),
        Err(e) => Err(Error::io("stat", p, e)),
    }
}

pub(crate) fn kind_of(m: &std::fs::Metadata) -> Kind {
    let t = m.file_type();
    if t.is_symlink() {
        Kind::Link
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else if t.is_fifo() {
        Kind::Special("a FIFO")
    } else if t.is_socket() {
        Kind::Special("a socket")
    } else if t.is_block_device() {
        Kind::Special("a block device")
    } else if t.is_char_device() {
        Kind::Special("a character device")
    } else {
        Kind::Special("a special file")
    }
}

/// The refusal of a special file (exit 2): reading it could block forever or have effects.
pub(crate) fn special_error(p: &Path, what: &str) -> Error {
    Error::input(
        p.display(),
        format!("is {what}; refused (pinforge never opens devices, FIFOs or sockets)"),
    )
    .with_hint("remove it: only regular files, folders and links belong there")
}

/// Read a small file (state, journal, receipt, entry record) safely, at most `limit` bytes.
pub(crate) fn read_limited(p: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = pinforge_base::fsx::open_regular(p, "file", false)?;
    let mut out = Vec::new();
    f.take(limit + 1).read_to_end(&mut out).at("read", p)?;
    if out.len() as u64 > limit {
        return Err(Error::input(
            p.display(),
            format!("is larger than {limit} bytes; not a file pinforge wrote"),
        ));
    }
    Ok(out)
}

/// Remove a file, link or whole tree without following any link in it. Folders of sealed
/// entries are 0555, so each folder (one that is really a folder, opened without following)
/// is made writable just before its contents go.
pub(crate) fn remove_tree(p: &Path) -> Result<()> {
    match kind(p)? {
        Kind::Missing => Ok(()),
        Kind::Dir => {
            let d = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(p)
                .at("open", p)?;
            d.set_permissions(std::fs::Permissions::from_mode(0o755))
                .at("chmod", p)?;
            for e in std::fs::read_dir(p).at("read directory", p)? {
                let e = e.at("read directory", p)?;
                remove_tree(&e.path())?;
            }
            std::fs::remove_dir(p).at("remove", p)
        }
        _ => std::fs::remove_file(p).at("remove", p),
    }
}

/// Bytes of the regular files under `p` that nothing else links (link count 1): what
/// removing `p` frees. An entry's files linked to objects are freed with their objects.
pub(crate) fn unshared_bytes(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if m.is_dir() {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| unshared_bytes(&e.path())).sum())
            .unwrap_or(0)
    } else if m.is_file() && m.nlink() == 1 {
        m.len()
    } else {
        0
    }
}

/// The device and inode of a file, to tie an `lstat` to the later `fstat` of the opened file.
pub(crate) fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// A relative path from data, by the one rule of [`pinforge_record::manifest::check_relative`]:
/// non-empty, `/`-separated normal components only (no `.`, `..`, empty component, leading
/// `/`), no NUL, newline or other control character (identity lines are newline-separated).
pub(crate) fn check_rel(name: &str, what: &str) -> Result<()> {
    pinforge_record::manifest::check_relative(name).map_err(|why| {
        Error::input(
            format!("`{}`", name.escape_debug()),
            format!("{what} refused: {why}"),
        )
        .with_hint("paths from manifests and the install root are relative, inside their root")
    })
}

/// Check that the files and links of one tree are a consistent set: no duplicate, no path
/// that runs through a link or a file, and every link target resolving inside the tree
/// (through the links before it), by the shared [`TreeModel`].
pub(crate) fn check_tree<'a>(
    files: impl Iterator<Item = &'a String>,
    links: &BTreeMap<String, String>,
) -> Result<()> {
    let mut model = TreeModel::default();
    let refuse = |name: &str, why: pinforge_base::tree::Refusal| {
        Error::input(
            format!("`{}`", name.escape_debug()),
            format!("{why}; refused"),
        )
        .with_hint("no path may pass through a symbolic link (or a file), or appear twice")
    };
    for f in files {
        model.add_file(Path::new(f)).map_err(|why| refuse(f, why))?;
    }
    for (name, target) in links {
        check_target(name, target)?;
        model
            .add_link(Path::new(name), Path::new(target))
            .map_err(|why| link_refused(name, target, &why))?;
    }
    model.check_links().map_err(|(p, why)| {
        let name = p.to_str().unwrap_or_default();
        let target = links.get(name).map(String::as_str).unwrap_or_default();
        link_refused(name, target, &why)
    })
}

fn link_refused(name: &str, target: &str, why: &dyn fmt::Display) -> Error {
    Error::input(
        format!(
            "link `{}` -> `{}`",
            name.escape_debug(),
            target.escape_debug()
        ),
        format!("refused: {why}"),
    )
    .with_hint("link targets must resolve inside their own tree")
}

/// A link target from data: non-empty, no control character (identity lines are
/// newline-separated).
fn check_target(name: &str, target: &str) -> Result<()> {
    if target.is_empty() || target.chars().any(|c| c.is_control()) {
        return Err(link_refused(
            name,
            target,
            &"empty target or control character",
        ));
    }
    Ok(())
}

/// Where the link `name` -> `target` leads among `links`, as components relative to the
/// tree's root; refused when it leaves the tree, loops or is absolute. (The tests' window on
/// the resolver that [`check_tree`] uses.)
#[cfg(test)]
pub(crate) fn resolve_inside(
    links: &BTreeMap<String, String>,
    name: &str,
    target: &str,
) -> Result<Vec<String>> {
    check_target(name, target)?;
    let mut model = TreeModel::default();
    for (l, t) in links.iter().filter(|(l, _)| l.as_str() != name) {
        model
            .add_link(Path::new(l), Path::new(t))
            .map_err(|why| link_refused(l, t, &why))?;
    }
    model
        .add_link(Path::new(name), Path::new(target))
        .map_err(|why| link_refused(name, target, &why))?;
    let end = model
        .resolve(Path::new(name))
        .map_err(|why| link_refused(name, target, &why))?;
    // Every component came from a `&str`, so each is UTF-8.
    Ok(end
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(str::to_string))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn relative_paths_are_checked_component_by_component() {
        assert!(check_rel("lib/libllama.so", "p").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a/.",
            "a\nb",
        ] {
            assert!(check_rel(bad, "p").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn link_targets_resolve_through_earlier_links() {
        // issue #7 class 1: `l -> .` then `l/l/../../x` escapes although its text looks local.
        let l = links(&[("l", "."), ("a/up", "../..")]);
        assert!(resolve_inside(&l, "l", ".").is_ok());
        assert!(resolve_inside(&l, "x", "l/l/../../etc").is_err());
        assert!(resolve_inside(&l, "a/up", "../..").is_err());
        assert!(resolve_inside(&l, "lib/so", "libx.so.1").is_ok());
        assert!(resolve_inside(&l, "lib/so", "/abs").is_err());
        let cycle = links(&[("a", "b"), ("b", "a")]);
        assert!(resolve_inside(&cycle, "a", "b").is_err());
    }

    #[test]
    fn a_path_through_a_link_is_refused() {
        // issue #7 class 1: `zz -> ../outside`, then `zz/file`.
        let l = links(&[("zz", "sub")]);
        let files = ["zz/file".to_string()];
        assert!(check_tree(files.iter(), &l).is_err());
        let files = ["sub/file".to_string()];
        assert!(check_tree(files.iter(), &l).is_ok());
        let dup = links(&[("sub/file", "x")]);
        assert!(check_tree(files.iter(), &dup).is_err());
    }

    // Review finding 1: the install root's files are opened by the shared open, which
    // inspects the path first, so a device or a link where state, an entry record or a
    // receipt belongs is refused (exit 2) without being opened.
    #[test]
    fn devices_and_links_in_place_of_a_record_are_refused() {
        let e = read_limited(Path::new("/dev/null"), 100).expect_err("device");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("a character device"), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("real.json"), b"{}").expect("write");
        std::os::unix::fs::symlink("real.json", dir.path().join("state.json")).expect("link");
        let e = read_limited(&dir.path().join("state.json"), 100).expect_err("link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(
            read_limited(&dir.path().join("real.json"), 100).expect("file"),
            b"{}"
        );
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .expect("mkfifo");
        assert!(ok.success());
        let e = read_limited(&p, 100).expect_err("refused");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert_eq!(kind(&p).expect("kind"), Kind::Special("a FIFO"));
    }
}
