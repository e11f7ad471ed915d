//! Reading and removing things inside the install root without trusting them: every path is
//! inspected with `lstat` before use, files are opened `O_NOFOLLOW|O_NONBLOCK` and checked
//! with `fstat`, devices, FIFOs and sockets are refused before anything reads them, and entry
//! paths and link targets are checked component by component (lexically, through the links
//! before them).

use crate::digest::Sha256;
use crate::error::{Error, IoContext, Result};
use std::collections::BTreeMap;
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

/// Open a regular file for reading: the last component is not followed, a FIFO does not
/// block the open, and the opened object is checked to be a regular file.
pub(crate) fn open_regular(p: &Path) -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::input(
                    p.display(),
                    "is a symbolic link where a file belongs; refused",
                )
                .with_hint("only pinforge writes inside the install root; restore the file")
            } else {
                Error::io("open", p, e)
            }
        })?;
    let m = f.metadata().at("stat", p)?;
    match kind_of(&m) {
        Kind::File => Ok(f),
        Kind::Special(what) => Err(special_error(p, what)),
        _ => Err(Error::input(p.display(), "is not a regular file")),
    }
}

/// Read a small file (state, journal, receipt, entry record) safely, at most `limit` bytes.
pub(crate) fn read_limited(p: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = open_regular(p)?;
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

/// Hash an opened file (streamed: artifacts can be gigabytes).
pub(crate) fn hash_file(mut f: std::fs::File, p: &Path) -> Result<(Sha256, u64)> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).at("read", p)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((digest_of(hasher), size))
}

pub(crate) fn digest_of(h: sha2::Sha256) -> Sha256 {
    use sha2::Digest;
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    hex.parse()
        .expect("invariant: 32 bytes of SHA-256 are 64 hex digits")
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

/// Total bytes of the regular files in a tree (links not followed).
pub(crate) fn tree_bytes(p: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if m.is_dir() {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| tree_bytes(&e.path())).sum())
            .unwrap_or(0)
    } else if m.is_file() {
        m.len()
    } else {
        0
    }
}

/// The device and inode of a file, to tie an `lstat` to the later `fstat` of the opened file.
pub(crate) fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// A relative path from data: non-empty, `/`-separated normal components only (no `.`, `..`,
/// empty component, leading `/`), no NUL, newline or other control character (identity lines
/// are newline-separated).
pub(crate) fn check_rel(name: &str, what: &str) -> Result<()> {
    let bad = |why: &str| {
        Error::input(
            format!("`{}`", name.escape_debug()),
            format!("{what} refused: {why}"),
        )
        .with_hint("paths from manifests and the install root are relative, inside their root")
    };
    if name.is_empty() {
        return Err(bad("empty path"));
    }
    if name.starts_with('/') {
        return Err(bad("absolute path"));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(bad("control character in the path"));
    }
    for c in name.split('/') {
        match c {
            "" => return Err(bad("empty component")),
            "." | ".." => return Err(bad("`.` or `..` component escapes or aliases")),
            _ => {}
        }
    }
    Ok(())
}

/// Check that the files and links of one tree are a consistent set: no duplicate, no path
/// that runs through a link or a file, and every link target resolving (lexically, through
/// the links before it) inside the tree.
pub(crate) fn check_tree<'a>(
    files: impl Iterator<Item = &'a String>,
    links: &BTreeMap<String, String>,
) -> Result<()> {
    let files: Vec<&String> = files.collect();
    let mut leaves: BTreeMap<&str, &str> = BTreeMap::new();
    for f in &files {
        leaves.insert(f.as_str(), "file");
    }
    for l in links.keys() {
        if leaves.insert(l.as_str(), "link").is_some() {
            return Err(Error::input(
                format!("`{l}`"),
                "listed both as a file and as a link; refused",
            ));
        }
    }
    for name in leaves.keys() {
        let mut prefix = String::new();
        let comps: Vec<&str> = name.split('/').collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(c);
            if let Some(kind) = leaves.get(prefix.as_str()) {
                return Err(Error::input(
                    format!("`{name}`"),
                    format!("runs through `{prefix}`, which is a {kind}; refused"),
                )
                .with_hint("no path may pass through a symbolic link (or a file)"));
            }
        }
    }
    for (name, target) in links {
        resolve_inside(links, name, target)?;
    }
    Ok(())
}

/// Resolve `target` of the link `name` lexically inside its tree, through earlier links.
pub(crate) fn resolve_inside(
    links: &BTreeMap<String, String>,
    name: &str,
    target: &str,
) -> Result<Vec<String>> {
    let escape = |why: &str| {
        Error::input(
            format!("link `{name}` -> `{}`", target.escape_debug()),
            format!("refused: {why}"),
        )
        .with_hint("link targets must resolve inside their own tree")
    };
    if target.is_empty() || target.chars().any(|c| c.is_control()) {
        return Err(escape("empty target or control character"));
    }
    let mut start: Vec<String> = name.split('/').map(str::to_string).collect();
    start.pop();
    let mut depth = 0u32;
    walk(links, start, target, &mut depth).map_err(|why| escape(&why))
}

fn walk(
    links: &BTreeMap<String, String>,
    mut cur: Vec<String>,
    target: &str,
    depth: &mut u32,
) -> std::result::Result<Vec<String>, String> {
    if target.starts_with('/') {
        return Err("absolute target".into());
    }
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if cur.pop().is_none() {
                    return Err("resolves outside the tree".into());
                }
            }
            n => {
                cur.push(n.to_string());
                if let Some(t) = links.get(&cur.join("/")) {
                    *depth += 1;
                    if *depth > 40 {
                        return Err("too many levels of links".into());
                    }
                    cur.pop();
                    cur = walk(links, cur, t, depth)?;
                }
            }
        }
    }
    Ok(cur)
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
