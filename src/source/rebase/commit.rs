//! The rebase's commit: the staged bundle folder exchanged with the old one in one step, then
//! the staged lock and recipe renamed into place, with everything put back when a step fails.

use super::DROPPED_DIR;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use std::path::Path;

/// `bytes` in a synced temp file beside `dest`, with `dest`'s mode when it exists (0644 else).
pub(super) fn stage_file(dest: &Path, bytes: &[u8]) -> Result<tempfile::TempPath> {
    fsx::stage_atomic_mode(dest, bytes, fsx::mode_of(dest).unwrap_or(0o644))
}

/// Exchange the staged bundle `new_dir` with `dir`, then rename each staged file onto its
/// destination in order (the last is the commit point). On any failure after the exchange the
/// bundle is swapped back and the destinations already replaced get their old bytes back: the
/// old bundle (then in the stage, deleted with it) must never go while the recipe names it.
pub(super) fn commit_swap(
    stage: tempfile::TempDir,
    dir: &Path,
    files: Vec<(tempfile::TempPath, std::path::PathBuf)>,
) -> Result<()> {
    let new_dir = &stage.path().join("bundle");
    // Each destination with its old bytes and mode, to put back.
    type Previous = (std::path::PathBuf, Option<(Vec<u8>, u32)>);
    let mut previous: Vec<Previous> = Vec::new();
    for (_, dest) in &files {
        use std::os::unix::fs::PermissionsExt;
        let old = match std::fs::symlink_metadata(dest) {
            Ok(m) if m.is_file() => Some((fsx::read(dest)?, m.permissions().mode() & 0o7777)),
            _ => None,
        };
        previous.push((dest.clone(), old));
    }
    exchange(new_dir, dir)?;
    let mut done = 0;
    let mut failure = None;
    for (tmp, dest) in files {
        match tmp.persist(&dest) {
            Ok(()) => done += 1,
            Err(e) => {
                failure = Some(Error::io("rename into", &dest, e.error));
                break;
            }
        }
    }
    let Some(err) = failure else {
        for (dest, _) in &previous {
            fsx::sync_dir(&fsx::parent_of(dest))?;
        }
        return Ok(());
    };
    for (dest, old) in previous.iter().take(done) {
        let undone = match old {
            Some((bytes, mode)) => fsx::write_atomic_mode(dest, bytes, *mode),
            None => std::fs::remove_file(dest).at("remove", dest),
        };
        if let Err(e) = undone {
            return Err(Error::Internal(format!(
                "{err}; and restoring {} failed: {e}",
                dest.display()
            )));
        }
    }
    if let Err(e) = exchange(new_dir, dir) {
        // The old bundle is in the stage: keep it on disk for the operator.
        let kept = stage.keep();
        return Err(Error::Internal(format!(
            "{err}; and swapping the old bundle back failed: {e} (the old bundle is at {})",
            kept.join("bundle").display()
        )));
    }
    Err(err)
}

/// Copy the regular files of `src` (and of its `dropped/`) into a new folder `dest`.
pub(super) fn copy_flat(src: &Path, dest: &Path) -> Result<()> {
    fsx::create_dir_all(dest)?;
    for sub in [None, Some(DROPPED_DIR)] {
        let from = sub
            .map(|s| src.join(s))
            .unwrap_or_else(|| src.to_path_buf());
        if !from.is_dir() {
            continue;
        }
        let to = sub
            .map(|s| dest.join(s))
            .unwrap_or_else(|| dest.to_path_buf());
        fsx::create_dir_all(&to)?;
        for e in std::fs::read_dir(&from).at("read directory", &from)? {
            let e = e.at("read directory", &from)?;
            let m = std::fs::symlink_metadata(e.path()).at("inspect", &e.path())?;
            if m.is_file() {
                use std::os::unix::fs::PermissionsExt;
                fsx::write_atomic_mode(
                    &to.join(e.file_name()),
                    &fsx::read(&e.path())?,
                    m.permissions().mode() & 0o7777,
                )?;
            } else if !(sub.is_none() && m.is_dir() && e.file_name() == DROPPED_DIR) {
                // The old folder is replaced as a whole: anything not copied would be lost.
                return Err(Error::input(
                    e.path().display(),
                    "the bundle folder holds something other than regular files and dropped/; \
                     the rebase replaces the folder as a whole and would lose it",
                )
                .with_hint("move it out of the bundle folder (links and subfolders are not part of a bundle)"));
            }
        }
    }
    Ok(())
}

/// Swap two folders in one step and make the swap durable.
fn exchange(a: &Path, b: &Path) -> Result<()> {
    fsx::exchange(a, b, "exchange with the staged bundle")?;
    fsx::sync_dir(&fsx::parent_of(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .expect("read")
            .map(|e| {
                let p = e.expect("entry").path();
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, std::fs::read(&p).expect("read"))
            })
            .collect();
        out.sort();
        out
    }

    // review item 1: a failure after the bundle exchange (here the recipe's rename, onto a
    // directory: deterministic as root too) swaps the old bundle back and restores the lock.
    #[test]
    fn a_failed_rename_after_the_exchange_puts_the_old_bundle_and_lock_back() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("patches");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("0001-a.patch"), b"old a").expect("write");
        std::fs::write(dir.join("series"), b"0001-a.patch\n").expect("write");
        let before = tree(&dir);
        let stage = tempfile::Builder::new()
            .prefix(".rebase-")
            .tempdir_in(root.path())
            .expect("stage");
        let new_dir = stage.path().join("bundle");
        std::fs::create_dir(&new_dir).expect("mkdir");
        std::fs::write(new_dir.join("series"), b"\n").expect("write");
        let lock = root.path().join("up.lock");
        std::fs::write(&lock, b"old lock").expect("write");
        let recipe = root.path().join("up.toml");
        std::fs::create_dir(&recipe).expect("mkdir");
        std::fs::write(recipe.join("x"), b"x").expect("write");
        let files = vec![
            (stage_file(&lock, b"new lock").expect("stage"), lock.clone()),
            (
                stage_file(&recipe, b"new recipe").expect("stage"),
                recipe.clone(),
            ),
        ];
        let err = commit_swap(stage, &dir, files).expect_err("the recipe rename fails");
        assert!(err.to_string().contains("up.toml"), "{err}");
        assert_eq!(tree(&dir), before, "the old bundle is back, byte for byte");
        assert_eq!(std::fs::read(&lock).expect("lock"), b"old lock");
        let left: Vec<_> = std::fs::read_dir(root.path())
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "no stage or temp file is left: {left:?}");
    }

    // review item 1: the lock's rename fails (its path is a directory): the recipe is never
    // touched and the old bundle is back.
    #[test]
    fn a_failed_lock_rename_leaves_the_recipe_and_the_bundle_as_they_were() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("patches");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("series"), b"0001-a.patch\n").expect("write");
        let before = tree(&dir);
        let stage = tempfile::Builder::new()
            .prefix(".rebase-")
            .tempdir_in(root.path())
            .expect("stage");
        std::fs::create_dir(stage.path().join("bundle")).expect("mkdir");
        let lock = root.path().join("up.lock");
        std::fs::create_dir(&lock).expect("mkdir");
        std::fs::write(lock.join("x"), b"x").expect("write");
        let recipe = root.path().join("up.toml");
        std::fs::write(&recipe, b"old recipe").expect("write");
        let files = vec![
            (stage_file(&lock, b"new lock").expect("stage"), lock.clone()),
            (
                stage_file(&recipe, b"new recipe").expect("stage"),
                recipe.clone(),
            ),
        ];
        let err = commit_swap(stage, &dir, files).expect_err("the lock rename fails");
        assert!(err.to_string().contains("up.lock"), "{err}");
        assert_eq!(tree(&dir), before);
        assert_eq!(std::fs::read(&recipe).expect("recipe"), b"old recipe");
    }
}
