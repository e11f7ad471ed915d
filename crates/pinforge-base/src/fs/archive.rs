//! Writing an untrusted tree (archive entries, a pinned folder; a git tree through
//! `source::upstream::extract`, which uses the same model) into a fresh
//! folder so that nothing reaches outside it: every path is checked component by component,
//! every symlink is resolved against the tree itself (lexically, through the other links of the
//! tree, as the kernel would follow them) before it is created, no entry may sit below a link,
//! devices, FIFOs and sockets are refused before anything opens them, and `.git` entries are
//! skipped and counted, never written.
//!
//! The order is fixed: the whole tree is modelled while regular files are written (files never
//! sit below a link, so writing them cannot follow one), the model's links are resolved once
//! every entry is known (a link added later could redirect an earlier one), and only then are
//! the links created. A refusal returns before any link exists; the caller's temp folder is
//! removed with everything in it.

use crate::error::{Error, IoContext, Result};
use crate::fsx;
pub use crate::tree::{is_git, TreeModel};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// `.git` entries left out of a materialized tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitSkips {
    /// Entries skipped (each file, folder or link at or below a `.git` component).
    pub entries: u64,
    /// The `.git` paths themselves, relative to the tree root (`.git`, `sub/.git`).
    pub roots: BTreeSet<String>,
}

impl GitSkips {
    fn record(&mut self, rel: &Path) {
        self.entries += 1;
        let mut root = PathBuf::new();
        for c in rel.components() {
            root.push(c);
            if is_git(c.as_os_str()) {
                break;
            }
        }
        self.roots.insert(root.display().to_string());
    }
}

/// What writing a tree produced.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// Regular files written.
    pub files: u64,
    /// `.git` entries left out.
    pub skipped_git: GitSkips,
}

/// `path` as Normal components only (`.` dropped); None for `..`, absolute or empty paths.
pub fn safe_rel(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Check every link of the model and create them under `dest`: the last step of writing a
/// tree.
pub fn finish(model: &TreeModel, dest: &Path, refuse: impl Fn(&Path, &str) -> Error) -> Result<()> {
    model
        .check_links()
        .map_err(|(p, why)| refuse(&p, &why.to_string()))?;
    for (rel, target) in model.links() {
        let at = dest.join(rel);
        fsx::create_dir_all(&fsx::parent_of(&at))?;
        std::os::unix::fs::symlink(target, &at).at("create symlink", &at)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Archives.

/// Extract a `.crate` / `.tar.gz` / `.tar`, keeping only entries under `top/subdir`. Every
/// entry path is checked before anything is written; hard links, devices and FIFOs are
/// refused; `.git` entries are skipped and counted; symlinks are created last and only when
/// they resolve inside the tree.
pub fn extract_archive(archive: &Path, dest: &Path, subdir: Option<&str>) -> Result<Written> {
    let mut tar = tar::Archive::new(open_archive(archive)?);
    let mut model = TreeModel::default();
    let mut out = Written::default();
    let mut top: Option<PathBuf> = None;
    let sub = subdir.map(Path::new);
    let bad = |entry: &Path, why: &str| refused_entry(archive, entry, why);
    let corrupt = |e: std::io::Error| malformed_archive(archive, e);
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let raw = entry.path().map_err(corrupt)?.into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader | tar::EntryType::GNULongName
        ) {
            continue;
        }
        // `./` (the root of `tar -C dir .`) names nothing.
        if raw.components().all(|c| c == Component::CurDir) {
            continue;
        }
        let rel = safe_rel(&raw).ok_or_else(|| bad(&raw, "path escapes the destination"))?;
        // Every archive pinforge accepts has one top-level folder (`name-version/`), as cargo,
        // GitHub and Python's sdists write them; strip it, then the subdir.
        let mut comps = rel.components();
        let first = PathBuf::from(comps.next().map(|c| c.as_os_str()).unwrap_or_default());
        if is_git(first.as_os_str()) {
            continue; // a `.git` beside the top folder is outside every tree
        }
        match &top {
            None => top = Some(first.clone()),
            Some(t) if *t != first => {
                return Err(bad(&raw, "archive has more than one top-level folder"))
            }
            _ => {}
        }
        let inner: PathBuf = comps.collect();
        let inner = match sub {
            Some(s) => match inner.strip_prefix(s) {
                Ok(p) => p.to_path_buf(),
                Err(_) => continue,
            },
            None => inner,
        };
        if inner.as_os_str().is_empty() {
            continue;
        }
        if inner.components().any(|c| is_git(c.as_os_str())) {
            out.skipped_git.record(&inner);
            continue;
        }
        write_entry(
            &mut entry, kind, &raw, &inner, dest, &mut model, &mut out, &bad, &corrupt,
        )?;
    }
    if out.files == 0 {
        return Err(Error::input(
            archive.display(),
            format!(
                "no files extracted{}",
                subdir.map(|s| format!(" under `{s}`")).unwrap_or_default()
            ),
        )
        .with_hint("check the pin's `subdir`"));
    }
    finish(&model, dest, bad)?;
    Ok(out)
}

/// The bytes of the one regular-file entry named `member` (as the archive names it, `./`
/// dropped) of `archive`. The whole archive is read with the refusals of `extract_archive`:
/// every entry path must stay inside the archive, and the member must be a plain file, present
/// exactly once: a link, a folder, a device or a second entry of that name is refused.
pub fn read_member(archive: &Path, member: &str) -> Result<Vec<u8>> {
    let want = safe_rel(Path::new(member)).ok_or_else(|| {
        Error::input(
            archive.display(),
            format!("member `{member}` is not a relative path"),
        )
    })?;
    let mut tar = tar::Archive::new(open_archive(archive)?);
    let bad = |entry: &Path, why: &str| refused_entry(archive, entry, why);
    let corrupt = |e: std::io::Error| malformed_archive(archive, e);
    let mut found: Option<Vec<u8>> = None;
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let raw = entry.path().map_err(corrupt)?.into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader | tar::EntryType::GNULongName
        ) || raw.components().all(|c| c == Component::CurDir)
        {
            continue;
        }
        let rel = safe_rel(&raw).ok_or_else(|| bad(&raw, "path escapes the destination"))?;
        if rel != want {
            continue;
        }
        if found.is_some() {
            return Err(bad(&raw, "the archive holds this member more than once"));
        }
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).map_err(corrupt)?;
                found = Some(bytes);
            }
            tar::EntryType::Symlink | tar::EntryType::Link => {
                return Err(bad(&raw, "the pinned member is a link, not a file"))
            }
            _ => return Err(bad(&raw, "the pinned member is not a regular file")),
        }
    }
    found.ok_or_else(|| {
        Error::input(
            archive.display(),
            format!("the archive has no member `{member}`"),
        )
        .with_hint("check the pin's `bundle` path (`tar tzf` lists the archive)")
    })
}

/// The refusal of one archive entry (an escape, a link, a duplicate, …), naming the archive.
fn refused_entry(archive: &Path, entry: &Path, why: &str) -> Error {
    Error::input(
        archive.display(),
        format!("refused archive entry `{}`: {why}", entry.display()),
    )
    .with_hint("the archive is malformed or hostile; nothing from it was used")
}

/// A read error inside a pinned archive. Its digest matched its pin, so this is a malformed
/// archive (bad input), not a fault of this machine.
fn malformed_archive(archive: &Path, e: std::io::Error) -> Error {
    Error::input(archive.display(), format!("malformed archive: {e}")).with_hint(
        "the pinned archive cannot be read as a tar (or .tar.gz); nothing from it was used",
    )
}

/// The archive as a byte stream: gunzipped when it starts with the gzip magic.
fn open_archive(archive: &Path) -> Result<Box<dyn Read>> {
    let mut file = fsx::open_regular(archive, "archive", true)?;
    let mut magic = [0u8; 2];
    let gz = file.read(&mut magic).at("read", archive)? == 2 && magic == [0x1f, 0x8b];
    let file = fsx::open_regular(archive, "archive", true)?;
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(reader)
}

/// Write one checked archive entry at `inner` under `dest`: a folder or file now, a symlink into
/// the model (created last, by `finish`); anything else is refused.
#[allow(clippy::too_many_arguments)]
fn write_entry(
    entry: &mut tar::Entry<'_, Box<dyn Read>>,
    kind: tar::EntryType,
    raw: &Path,
    inner: &Path,
    dest: &Path,
    model: &mut TreeModel,
    out: &mut Written,
    bad: &dyn Fn(&Path, &str) -> Error,
    corrupt: &dyn Fn(std::io::Error) -> Error,
) -> Result<()> {
    let target = dest.join(inner);
    match kind {
        tar::EntryType::Directory => {
            model
                .add_dir(inner)
                .map_err(|why| bad(raw, &why.to_string()))?;
            fsx::create_dir_all(&target)?;
        }
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            model
                .add_file(inner)
                .map_err(|why| bad(raw, &why.to_string()))?;
            fsx::create_dir_all(&fsx::parent_of(&target))?;
            let exec = entry.header().mode().unwrap_or(0o644) & 0o111 != 0;
            let mut f = create_file(&target, exec)?;
            // A short read is the archive's fault; a failed write is this machine's.
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = entry.read(&mut buf).map_err(corrupt)?;
                if n == 0 {
                    break;
                }
                std::io::Write::write_all(&mut f, &buf[..n]).at("write", &target)?;
            }
            out.files += 1;
        }
        tar::EntryType::Symlink => {
            let link = entry
                .link_name()
                .map_err(corrupt)?
                .ok_or_else(|| bad(raw, "symlink without target"))?
                .into_owned();
            model
                .add_link(inner, &link)
                .map_err(|why| bad(raw, &why.to_string()))?;
        }
        tar::EntryType::Link => return Err(bad(raw, "hard links are not allowed")),
        tar::EntryType::Char | tar::EntryType::Block => {
            return Err(bad(raw, "device files are not allowed"))
        }
        tar::EntryType::Fifo => return Err(bad(raw, "FIFOs are not allowed")),
        _ => {
            return Err(bad(
                raw,
                "only files, folders and in-tree symlinks are allowed",
            ))
        }
    }
    Ok(())
}

/// A new file (never an existing one: `create_new` also refuses to follow a planted link),
/// 0755 or 0644 whatever the archive claimed.
pub fn create_file(path: &Path, exec: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if exec { 0o755 } else { 0o644 })
        .open(path)
        .at("create", path)
        .and_then(|f| {
            // The umask may have narrowed the mode; the tree's modes are part of its content.
            use std::os::unix::fs::PermissionsExt;
            let perm = if exec { 0o755 } else { 0o644 };
            f.set_permissions(std::fs::Permissions::from_mode(perm))
                .at("chmod", path)?;
            Ok(f)
        })
}

// ---------------------------------------------------------------------------------------------
// Pinned folders.

/// `base/sub` when every component of `sub` is a real folder: the folder pin's digest covers
/// `base` and records a link as its text, so a `subdir` through a link would copy content the
/// digest never saw.
pub fn real_subdir(base: &Path, sub: Option<&str>) -> Result<PathBuf> {
    let mut at = base.to_path_buf();
    for c in Path::new(sub.unwrap_or("")).components() {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at).at("stat", &at)?;
        if !meta.file_type().is_dir() {
            return Err(Error::input(
                at.display(),
                "the pin's `subdir` goes through a symlink or a file; it must be a folder inside the pinned folder",
            ));
        }
    }
    Ok(at)
}

/// Copy a pinned folder into `dest`: links are copied as links (never followed) and only when
/// they resolve inside the copy; devices, FIFOs and sockets are refused before anything opens
/// them; `.git` entries are skipped and counted.
pub fn copy_dir(src: &Path, dest: &Path) -> Result<Written> {
    let mut model = TreeModel::default();
    let mut out = Written::default();
    copy_walk(src, dest, Path::new(""), &mut model, &mut out)?;
    finish(&model, dest, |rel, why| {
        Error::input(
            src.join(rel).display(),
            format!("refused folder pin entry: {why}"),
        )
        .with_hint("links in a pinned folder must resolve inside it; nothing was used")
    })?;
    Ok(out)
}

fn copy_walk(
    src: &Path,
    dest: &Path,
    rel: &Path,
    model: &mut TreeModel,
    out: &mut Written,
) -> Result<()> {
    let dir = src.join(rel);
    let mut names: Vec<OsString> = std::fs::read_dir(&dir)
        .at("read directory", &dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()
        .at("read directory", &dir)?;
    names.sort();
    for name in names {
        let r = rel.join(&name);
        let from = src.join(&r);
        let to = dest.join(&r);
        let meta = std::fs::symlink_metadata(&from).at("stat", &from)?;
        if is_git(&name) {
            count_git(&from, &r, &meta, out)?;
            continue;
        }
        let refuse = |why: &str| {
            Error::input(from.display(), format!("refused folder pin entry: {why}"))
                .with_hint("a pinned folder holds files, folders and in-tree links only")
        };
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = std::fs::read_link(&from).at("read link", &from)?;
            model
                .add_link(&r, &target)
                .map_err(|w| refuse(&w.to_string()))?;
        } else if ft.is_dir() {
            model.add_dir(&r).map_err(|w| refuse(&w.to_string()))?;
            fsx::create_dir_all(&to)?;
            copy_walk(src, dest, &r, model, out)?;
        } else if let Some(kind) = fsx::special_kind(&ft) {
            return Err(Error::input(
                from.display(),
                format!("refused folder pin entry: it is {kind}"),
            )
            .with_hint("devices, FIFOs and sockets are never read; remove it from the folder"));
        } else {
            model.add_file(&r).map_err(|w| refuse(&w.to_string()))?;
            let mut f = fsx::open_regular(&from, "folder pin entry", false)?;
            use std::os::unix::fs::PermissionsExt;
            let exec = f.metadata().at("stat", &from)?.permissions().mode() & 0o111 != 0;
            let mut w = create_file(&to, exec)?;
            std::io::copy(&mut f, &mut w).at("copy", &from)?;
            out.files += 1;
        }
    }
    Ok(())
}

/// Count a skipped `.git` entry of a folder and, when it is a folder, what it holds (without
/// following links or opening anything).
fn count_git(path: &Path, rel: &Path, meta: &std::fs::Metadata, out: &mut Written) -> Result<()> {
    out.skipped_git.record(rel);
    if meta.file_type().is_dir() {
        let mut names: Vec<OsString> = std::fs::read_dir(path)
            .at("read directory", path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .at("read directory", path)?;
        names.sort();
        for n in names {
            let p = path.join(&n);
            let m = std::fs::symlink_metadata(&p).at("stat", &p)?;
            count_git(&p, &rel.join(&n), &m, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
