//! Writing an export (issue #19 class 5): the whole new bundle folder is staged beside the old
//! one (its own files copied, the exported patches and the series written), read back with the
//! bundle reader, and swapped in with one atomic exchange, or one rename when there was no
//! folder yet ([`txn::DirCommit`], as records and pulls are committed). A failure at any point
//! before the swap (a full disk, a file that cannot be read) drops the stage and leaves the old
//! bundle exactly as it was; readers see the old bundle or the new, never a mix. A stage a
//! killed writer left is removed by the next writer (its process id is in the stage's name).

use super::{name::BUNDLE_OWN, Exported};
use crate::patch::Bundle;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::txn::DirCommit;
use std::path::{Path, PathBuf};

pinforge_base::steps! {
    /// The steps of writing a bundle folder (export, and bisect's header rewrite).
    pub enum BundleWriteStep for "patch-write" {
        /// The new folder is staged, read back and synced.
        Staged = 1,
        /// It replaced the old folder (the commit point).
        Swapped = 2,
    }
}

/// The stage name's prefix (`PREFIX<pid>-patches`), beside the bundle folder.
const STAGE_PREFIX: &str = ".pinforge-bundle-";

/// The folder of dropped patches (one of the bundle's own names).
const DROPPED: &str = "dropped";

/// Write `exported` and their series as the bundle folder `dir`, whole or not at all. Comment
/// lines of an existing series stay; its entries become the exported order; every other file
/// of the folder (the ledger, `dropped/`, patches not exported) is carried over with its mode.
pub fn write_bundle(dir: &Path, exported: &[Exported]) -> Result<()> {
    let old = existing_folder(dir)?;
    let dest = old.clone().unwrap_or_else(|| dir.to_path_buf());
    fsx::create_dir_all(&fsx::parent_of(&dest))?;
    let commit = DirCommit::begin(&dest, STAGE_PREFIX)?;
    let new_dir = commit.stage().to_path_buf();
    let mut series = String::new();
    if let Some(old) = &old {
        // The files about to be written are not copied: the export replaces them.
        let mut replaced: Vec<&str> = exported.iter().map(|e| e.file.as_str()).collect();
        replaced.push("series");
        copy_own_files(old, &new_dir, &replaced)?;
        let old_series = old.join("series");
        if fsx::mode_of(&old_series).is_some() {
            for l in fsx::read_to_string(&old_series)?.lines() {
                if l.trim_start().starts_with('#') {
                    series.push_str(l);
                    series.push('\n');
                }
            }
        }
    }
    for e in exported {
        series.push_str(&e.file);
        series.push('\n');
        stage_keeping_mode(old.as_deref(), &new_dir, &e.file, &e.bytes)?;
    }
    stage_keeping_mode(old.as_deref(), &new_dir, "series", series.as_bytes())?;
    // The folders' modes last, so a read-only old folder does not stop the writes above.
    if let Some(old) = &old {
        if new_dir.join(DROPPED).is_dir() {
            keep_folder_mode(&old.join(DROPPED), &new_dir.join(DROPPED))?;
        }
        keep_folder_mode(old, &new_dir)?;
    }
    check_reads_back(&new_dir, exported)?;
    // The commit point: one exchange (or one rename onto the free name).
    commit.commit(BundleWriteStep::Staged, BundleWriteStep::Swapped)
}

/// Rewrite some patches of the bundle folder `dir` in place (a header field that `bisect
/// --write` sets), whole or not at all, as an export writes: the folder staged beside the old
/// one with every other file and the series as they were, read back with the bundle reader,
/// and swapped in with one exchange. Each replaced file must be a patch of the series.
pub fn rewrite_patches(dir: &Path, replaced: &[(String, Vec<u8>)]) -> Result<()> {
    let old = existing_folder(dir)?.ok_or_else(|| {
        Error::input(dir.display(), "no bundle folder to rewrite")
            .with_hint("name the recipe whose `patches` folder holds the patch")
    })?;
    let before = Bundle::load(&old)?;
    for (name, _) in replaced {
        if !before.series.iter().any(|e| e.id.as_str() == name) {
            return Err(Error::input(
                old.join(name).display(),
                "is not a patch of the bundle's series",
            )
            .with_hint("name a file the series lists"));
        }
    }
    let commit = DirCommit::begin(&old, STAGE_PREFIX)?;
    let new_dir = commit.stage().to_path_buf();
    let names: Vec<&str> = replaced.iter().map(|(n, _)| n.as_str()).collect();
    copy_own_files(&old, &new_dir, &names)?;
    for (name, bytes) in replaced {
        stage_keeping_mode(Some(&old), &new_dir, name, bytes)?;
    }
    if new_dir.join(DROPPED).is_dir() {
        keep_folder_mode(&old.join(DROPPED), &new_dir.join(DROPPED))?;
    }
    keep_folder_mode(&old, &new_dir)?;
    let after = Bundle::load(&new_dir)?;
    let ids = |b: &Bundle| {
        b.series
            .iter()
            .map(|e| e.id.to_string())
            .collect::<Vec<_>>()
    };
    let same_bytes = replaced.iter().all(|(n, bytes)| {
        after
            .files
            .iter()
            .any(|(id, p)| id.as_str() == n && &p.bytes == bytes)
    });
    if ids(&after) != ids(&before) || !same_bytes {
        return Err(Error::Internal(format!(
            "the staged bundle {} does not read back as the rewrite; nothing was replaced",
            new_dir.display()
        )));
    }
    commit.commit(BundleWriteStep::Staged, BundleWriteStep::Swapped)
}

/// The folder to replace: `dir` itself, or where it points when it is a link to a folder (the
/// link stays); None when there is none yet. Anything else at `dir` is refused.
fn existing_folder(dir: &Path) -> Result<Option<PathBuf>> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("inspect", dir, e)),
        Ok(m) if m.is_dir() => Ok(Some(dir.to_path_buf())),
        Ok(m) if m.file_type().is_symlink() && dir.is_dir() => {
            std::fs::canonicalize(dir).at("resolve", dir).map(Some)
        }
        Ok(_) => Err(Error::input(dir.display(), "is not a folder")
            .with_hint("name the bundle folder to write with --dir")),
    }
}

/// `bytes` as `new_dir/name`, with the mode the file had in the old folder (0644 for a new
/// one): an operator's 0600 patch must not come back world-readable.
fn stage_keeping_mode(old: Option<&Path>, new_dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let mode = old
        .and_then(|o| fsx::mode_of(&o.join(name)))
        .unwrap_or(0o644);
    stage_file(&new_dir.join(name), bytes, mode)
}

/// Write a new file of the private stage and sync it. No temp file and rename: nothing reads
/// the stage before the swap, and an error then names the patch being written, not a temp name.
fn stage_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .at("create", path)?;
    f.write_all(bytes).at("write", path)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .at("chmod", path)?;
    f.sync_all().at("fsync", path)
}

/// Copy the regular files of `src` (but those named in `replaced`) and of its `dropped/` into
/// `dest`, modes kept. The folder is replaced as a whole, so anything else in it (a link,
/// another folder, a FIFO) would be lost: it is refused before the swap, naming it.
fn copy_own_files(src: &Path, dest: &Path, replaced: &[&str]) -> Result<()> {
    for sub in [None, Some(DROPPED)] {
        let (from, to) = match sub {
            Some(s) => (src.join(s), dest.join(s)),
            None => (src.to_path_buf(), dest.to_path_buf()),
        };
        if sub.is_some() && !from.is_dir() {
            continue;
        }
        fsx::create_dir_all(&to)?;
        let mut entries: Vec<_> = std::fs::read_dir(&from)
            .at("read directory", &from)?
            .collect::<std::io::Result<_>>()
            .at("read directory", &from)?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let m = std::fs::symlink_metadata(&path).at("inspect", &path)?;
            let top_level_replaced = sub.is_none()
                && e.file_name()
                    .to_str()
                    .is_some_and(|n| replaced.contains(&n));
            if m.is_file() && top_level_replaced {
                continue;
            }
            if m.is_file() {
                use std::os::unix::fs::PermissionsExt;
                let bytes = fsx::read(&path)?;
                stage_file(
                    &to.join(e.file_name()),
                    &bytes,
                    m.permissions().mode() & 0o7777,
                )?;
            } else if !(sub.is_none() && m.is_dir() && e.file_name() == DROPPED) {
                return Err(Error::input(
                    path.display(),
                    "the bundle folder holds something other than regular files and dropped/; \
                     the export replaces the folder as a whole and would lose it",
                )
                .with_hint("move it out of the bundle folder (links, FIFOs and subfolders are not part of a bundle)"));
            }
        }
    }
    Ok(())
}

/// Give the staged folder `to` the permission bits of the folder `from` it replaces: a 0700
/// bundle must not come back 0755 after the swap.
fn keep_folder_mode(from: &Path, to: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(from)
        .at("inspect", from)?
        .permissions()
        .mode()
        & 0o7777;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode)).at("chmod", to)
}

/// The staged folder, read by the bundle reader, lists exactly the exported files in order
/// and holds each with the exported bytes; and none of them is one of the bundle's own names.
fn check_reads_back(new_dir: &Path, exported: &[Exported]) -> Result<()> {
    let b = Bundle::load(new_dir)?;
    let listed: Vec<&str> = b.series.iter().map(|e| e.id.as_str()).collect();
    let want: Vec<&str> = exported.iter().map(|e| e.file.as_str()).collect();
    let same_bytes = exported.iter().all(|e| {
        b.files
            .iter()
            .any(|(id, p)| id.as_str() == e.file && p.bytes == e.bytes)
    });
    let owns = exported
        .iter()
        .any(|e| BUNDLE_OWN.iter().any(|o| o.eq_ignore_ascii_case(&e.file)));
    if listed != want || !same_bytes || owns {
        return Err(Error::Internal(format!(
            "the staged bundle {} does not read back as the export (series {listed:?}); nothing was replaced",
            new_dir.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = include_str!("../../../../../patches/0003-kv-cache-can-shift-mrope.patch");
    const NAME: &str = "0003-kv-cache-can-shift-mrope.patch";

    // A kill before or after the swap leaves the bundle whole and a stage beside it; the next
    // rewrite removes a dead writer's stage (and no other kind's), and the rewrite lands.
    #[test]
    fn a_killed_writers_stage_is_removed_by_the_next_rewrite() {
        let d = tempfile::tempdir().expect("tmp");
        let dir = d.path().join("patches");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(NAME), PATCH).expect("write");
        std::fs::write(dir.join("series"), format!("{NAME}\n")).expect("write");
        // No process has this id: the stage of a writer that was killed.
        let dead = d.path().join(format!("{STAGE_PREFIX}2147483646-patches"));
        std::fs::create_dir_all(&dead).expect("mkdir");
        std::fs::write(dead.join(NAME), b"half-written").expect("write");
        let other = d.path().join(".export-aB3xY9");
        std::fs::create_dir_all(&other).expect("mkdir");
        let bytes = PATCH.replace("Last-Update: 2026-11-30", "Last-Update: 2026-12-07");
        assert_ne!(bytes, PATCH);
        rewrite_patches(&dir, &[(NAME.to_string(), bytes.clone().into_bytes())]).expect("rewrite");
        assert!(!dead.exists(), "the dead writer's stage is gone");
        assert!(other.exists(), "another kind of folder is not touched");
        assert_eq!(
            std::fs::read_to_string(dir.join(NAME)).expect("read"),
            bytes
        );
        let left: Vec<String> = std::fs::read_dir(d.path())
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !left.iter().any(|n| n.starts_with(STAGE_PREFIX)),
            "no stage of this writer is left: {left:?}"
        );
    }
}
