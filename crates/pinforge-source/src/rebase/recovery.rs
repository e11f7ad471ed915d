//! Recovery: the next command in the workspace (rebase, audit, build, patch, …) finds a killed
//! rebase's journal and settles it under the workspace lock: before the commit point (the
//! recipe's rename) everything is undone, after it the leftovers are removed; a state the
//! journal does not explain is refused, never guessed. The journal's paths are checked against
//! what the recipe itself names before any is touched.

use super::commit::{remove_stage, rename};
use super::journal::{self, Journal, Phase, OLD_LOCK, STAGED_BUNDLE};
use crate::recipe::Recipe;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use std::path::{Path, PathBuf};

/// A settled leftover rebase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The recipe it was rebasing.
    pub recipe: PathBuf,
    /// True: it had passed its commit point and was finished; false: it was undone.
    pub finished: bool,
}

/// Settle a leftover rebase in the workspace at `root`, if its journal is there. The lock is
/// taken only then (a journal exists only while its rebase holds the lock, or after it died),
/// so commands in a workspace without one pay a `stat`.
pub fn recover(root: &Path) -> Result<Option<Recovered>> {
    if std::fs::symlink_metadata(root.join(journal::JOURNAL)).is_err() {
        return Ok(None);
    }
    let ws = Workspace::new(root)?;
    let _lock = ws.lock()?;
    recover_locked(&ws)
}

/// [`recover`] for a caller that holds the lock.
pub(super) fn recover_locked(ws: &Workspace) -> Result<Option<Recovered>> {
    let Some(j) = journal::read(ws)? else {
        return Ok(None);
    };
    check_against_recipe(ws, &j)?;
    settle(ws, &j).map(Some)
}

/// The journal's bundle and lock must be the ones the recipe it names derives.
fn check_against_recipe(ws: &Workspace, j: &Journal) -> Result<()> {
    let refuse = |why: String| {
        Error::input(journal::path(ws).display(), format!("the rebase journal is refused: {why}"))
            .with_hint("pinforge does not guess: compare the recipe, its lock and the bundle folder with version control, then remove the journal")
    };
    let bytes = fsx::read(&j.recipe).map_err(|e| refuse(format!("its recipe: {e}")))?;
    let r = Recipe::parse_bytes(&bytes, &j.recipe, Some(&fsx::parent_of(&j.recipe)))
        .map_err(|e| refuse(format!("its recipe: {e}")))?;
    if r.patches_dir.as_deref() != Some(j.bundle.as_path()) {
        return Err(refuse(format!(
            "the bundle `{}` is not the folder the recipe names",
            j.bundle.display()
        )));
    }
    if j.lock.is_some() && j.lock != r.lock_path() {
        return Err(refuse("the lock is not the recipe's lock".into()));
    }
    Ok(())
}

/// Settle the rebase `j` describes, then remove its journal.
pub(super) fn settle(ws: &Workspace, j: &Journal) -> Result<Recovered> {
    let finished = match j.phase {
        // Nothing outside the stage was touched.
        Phase::Staging => {
            remove_stage(&j.stage)?;
            false
        }
        Phase::Commit => {
            let recipe = journal::file_digest(&j.recipe)?;
            let bundle = journal::bundle_digest(&j.bundle)?;
            let lock = match &j.lock {
                Some(l) => journal::file_digest(l)?,
                None => None,
            };
            let lock_new = j.lock.is_none() || j.new_lock.is_none() || lock == j.new_lock;
            if recipe == j.new_recipe && Some(bundle) == j.new_bundle && lock_new {
                // Past the commit point: only the stage (the old bundle) is left to remove.
                remove_stage(&j.stage)?;
                true
            } else if recipe == Some(j.old_recipe) {
                undo(ws, j, bundle, lock)?;
                false
            } else {
                return Err(unexplained(
                    ws,
                    j,
                    "the recipe is neither the old nor the new one",
                ));
            }
        }
    };
    journal::remove(ws)?;
    Ok(Recovered {
        recipe: j.recipe.clone(),
        finished,
    })
}

/// Before the commit point: the old bundle and lock back, then the stage removed. Each check
/// reads the current state first, so a crash during undo is settled again the same way.
fn undo(
    ws: &Workspace,
    j: &Journal,
    bundle: pinforge_base::digest::Sha256,
    lock: Option<pinforge_base::digest::Sha256>,
) -> Result<()> {
    let staged = j.stage.join(STAGED_BUNDLE);
    if bundle != j.old_bundle {
        let staged_old = staged.is_dir() && journal::bundle_digest(&staged)? == j.old_bundle;
        if Some(bundle) != j.new_bundle || !staged_old {
            return Err(unexplained(
                ws,
                j,
                "the bundle folder is neither the old one nor the new one with the old one staged",
            ));
        }
        fsx::exchange(&staged, &j.bundle, "exchange back with the old bundle")?;
        fsx::sync_dir(&fsx::parent_of(&j.bundle))?;
    }
    if let Some(path) = &j.lock {
        if lock != j.old_lock {
            if lock.is_none() || lock != j.new_lock {
                return Err(unexplained(
                    ws,
                    j,
                    "the lock is neither the old nor the new one",
                ));
            }
            match j.old_lock {
                Some(old) => {
                    let copy = j.stage.join(OLD_LOCK);
                    if journal::file_digest(&copy)? != Some(old) {
                        return Err(unexplained(
                            ws,
                            j,
                            "the staged copy of the old lock is not the old lock",
                        ));
                    }
                    rename(&copy, path)?;
                }
                None => {
                    std::fs::remove_file(path).map_err(|e| Error::io("remove", path, e))?;
                    fsx::sync_dir(&fsx::parent_of(path))?;
                }
            }
        }
    }
    remove_stage(&j.stage)
}

fn unexplained(ws: &Workspace, j: &Journal, why: &str) -> Error {
    Error::input(
        journal::path(ws).display(),
        format!(
            "an interrupted rebase of {} left a state its journal does not explain: {why}",
            j.recipe.display()
        ),
    )
    .with_hint(format!(
        "pinforge does not guess: compare {} and {} with version control (the stage {} may hold the other bundle), restore one consistent pin, then remove the journal",
        j.recipe.display(),
        j.bundle.display(),
        j.stage.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinforge_base::digest::Sha256;

    struct Fixture {
        _dir: tempfile::TempDir,
        ws: Workspace,
        j: Journal,
    }

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

    /// The state right after step 5 (bundle exchanged, lock renamed, recipe not yet): the
    /// bundle folder holds the new bundle, the stage the old one and the old lock's copy.
    fn after_step_5() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let bundle = root.join("patches");
        let stage = root.join(".rebase-patches");
        std::fs::create_dir_all(&bundle).expect("mkdir");
        std::fs::create_dir_all(stage.join(STAGED_BUNDLE)).expect("mkdir");
        std::fs::write(bundle.join("series"), b"new\n").expect("write");
        std::fs::write(stage.join(STAGED_BUNDLE).join("series"), b"old\n").expect("write");
        let recipe = root.join("up.toml");
        std::fs::write(&recipe, b"old recipe").expect("write");
        let lock = root.join("up.lock");
        std::fs::write(&lock, b"new lock").expect("write");
        std::fs::write(stage.join(OLD_LOCK), b"old lock").expect("write");
        let j = Journal {
            phase: Phase::Commit,
            recipe,
            lock: Some(lock),
            bundle: bundle.clone(),
            stage: stage.clone(),
            old_recipe: Sha256::of_bytes(b"old recipe"),
            new_recipe: Some(Sha256::of_bytes(b"new recipe")),
            old_lock: Some(Sha256::of_bytes(b"old lock")),
            new_lock: Some(Sha256::of_bytes(b"new lock")),
            old_bundle: journal::bundle_digest(&stage.join(STAGED_BUNDLE)).expect("digest"),
            new_bundle: Some(journal::bundle_digest(&bundle).expect("digest")),
        };
        let ws = Workspace::new(&root).expect("ws");
        journal::write(&ws, &j).expect("journal");
        Fixture { _dir: dir, ws, j }
    }

    // A failure (or a kill) after the exchange and before the recipe's rename: the old bundle
    // and the old lock are put back, the stage and the journal removed; settling twice is the
    // same as once.
    #[test]
    fn before_the_commit_point_the_old_bundle_and_lock_are_put_back() {
        let f = after_step_5();
        let r = settle(&f.ws, &f.j).expect("settle");
        assert!(!r.finished);
        assert_eq!(
            tree(&f.j.bundle),
            vec![("series".into(), b"old\n".to_vec())]
        );
        let lock = f.j.lock.clone().expect("lock");
        assert_eq!(std::fs::read(&lock).expect("lock"), b"old lock");
        assert!(!f.j.stage.exists());
        assert!(!journal::path(&f.ws).exists());
        settle(&f.ws, &f.j).expect("again");
        assert_eq!(
            tree(&f.j.bundle),
            vec![("series".into(), b"old\n".to_vec())]
        );
    }

    // Past the commit point (the recipe is the new one): only the leftovers go.
    #[test]
    fn after_the_commit_point_the_rebase_is_finished() {
        let f = after_step_5();
        std::fs::write(&f.j.recipe, b"new recipe").expect("write");
        let r = settle(&f.ws, &f.j).expect("settle");
        assert!(r.finished);
        assert_eq!(
            tree(&f.j.bundle),
            vec![("series".into(), b"new\n".to_vec())]
        );
        assert!(!f.j.stage.exists());
    }

    // A state the journal does not explain is refused and left as it is.
    #[test]
    fn a_recipe_that_is_neither_old_nor_new_is_refused() {
        let f = after_step_5();
        std::fs::write(&f.j.recipe, b"edited by hand").expect("write");
        let e = settle(&f.ws, &f.j).expect_err("unexplained");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("does not explain"), "{e}");
        assert!(f.j.stage.exists() && journal::path(&f.ws).exists());
    }
}
