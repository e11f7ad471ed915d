//! The rebase's commit protocol, a journaled transaction as install's is (issue #19). With
//! the workspace lock held from the first read:
//!
//! | step | what is durable after it |
//! |---|---|
//! | 1 | the journal (phase staging) names recipe, lock, bundle and the stage `.rebase-NAME` |
//! | 2 | the stage holds the new bundle, the new recipe and lock, and a copy of the old lock |
//! | 3 | the journal (phase commit) records every new digest |
//! | 4 | the bundle folder is exchanged with the staged one (`renameat2` exchange) |
//! | 5 | the staged lock is renamed over the lock (git pins) |
//! | 6 | the staged recipe is renamed over the recipe: the commit point |
//! | 7 | the stage (holding the old bundle) is removed |
//! | 8 | the journal is removed: the rebase is over |
//!
//! Each step is a variant of [`RebaseStep`], the crash point `rebase:N`. Whatever
//! stops the protocol (a failure here, or a kill) is settled from the journal by
//! [`super::recovery`]: before the commit point everything is undone, after it finished, so
//! the recipe's pin, its lock and the bundle are always all old or all new.

use super::journal::{self, Journal, Phase, OLD_LOCK, STAGED_BUNDLE, STAGED_LOCK, STAGED_RECIPE};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::txn::Step;
use pinforge_base::workspace::Workspace;
use std::path::{Path, PathBuf};

/// What a rebase replaces, decided and held in memory before anything is written.
pub(super) struct Change {
    /// The recipe (absolute).
    pub recipe: PathBuf,
    /// Its bytes as read under the lock.
    pub old_recipe: Vec<u8>,
    /// Its new bytes (parsed as a recipe before this point).
    pub new_recipe: Vec<u8>,
    /// The lock file and its new bytes (git pins).
    pub lock: Option<(PathBuf, Vec<u8>)>,
    /// The bundle folder (absolute, as the recipe names it).
    pub bundle: PathBuf,
    /// Its digest when the rebase read it.
    pub bundle_read: Sha256,
}

pinforge_base::steps! {
    /// The steps of a rebase's commit (the table above); each is the crash point
    /// `rebase:<index>`.
    pub enum RebaseStep for "rebase" {
        /// The journal (phase staging) names recipe, lock, bundle and the stage.
        Journaled = 1,
        /// The stage holds the new bundle, recipe and lock, and a copy of the old lock.
        Staged = 2,
        /// The journal (phase commit) records every new digest.
        CommitJournaled = 3,
        /// The bundle folder is exchanged with the staged one.
        BundleSwapped = 4,
        /// The staged lock is renamed over the lock (git pins).
        LockRenamed = 5,
        /// The staged recipe is renamed over the recipe: the commit point.
        Committed = 6,
        /// The stage (holding the old bundle) is removed.
        StageRemoved = 7,
        /// The journal is removed: the rebase is over.
        Closed = 8,
    }
}

/// Run the protocol. `fill` writes the new bundle into the folder it is given (inside the
/// stage, once the journal names it) and checks it.
pub(super) fn run(
    ws: &Workspace,
    change: &Change,
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let stage = journal::stage_of(&change.bundle)?;
    same_filesystem(change, &stage)?;
    let old_lock = match &change.lock {
        Some((p, _)) => journal::file_digest(p)?,
        None => None,
    };
    let mut j = Journal {
        phase: Phase::Staging,
        recipe: change.recipe.clone(),
        lock: change.lock.as_ref().map(|(p, _)| p.clone()),
        bundle: change.bundle.clone(),
        stage,
        old_recipe: Sha256::of_bytes(&change.old_recipe),
        new_recipe: None,
        old_lock,
        new_lock: None,
        old_bundle: journal::bundle_digest(&change.bundle)?,
        new_bundle: None,
    };
    // The bundle is what was audited, or nothing moves: a bundle written meanwhile by a
    // process that does not hold this workspace's lock (another workspace, a hand edit)
    // would otherwise be swapped out with its change lost.
    if j.old_bundle != change.bundle_read {
        return Err(Error::input(
            change.bundle.display(),
            "the bundle changed on disk while the rebase ran; nothing was written",
        )
        .with_hint("run the rebase again: it audits the bundle as it is now"));
    }
    journal::write(ws, &j)?;
    RebaseStep::Journaled.reached();
    // The stage is created by this run or the run stops here, before anything could settle
    // (and remove) a folder of that name that another rebase of the same bundle made.
    if let Err(e) = std::fs::create_dir(&j.stage).at("create the stage folder", &j.stage) {
        journal::remove(ws)?;
        return Err(e);
    }
    if let Err(e) = stage_and_commit(ws, &mut j, change, fill) {
        // Settled from the journal as a later command would: undone before the commit point,
        // finished after it. A failure after the commit point (removing the stage or the
        // journal) is then no failure of the rebase: the recipe, lock and bundle are all new.
        match super::recovery::settle(ws, &j) {
            // Settling removed what the failed step had left (the stage, the journal).
            Ok(r) if r.finished => return Ok(()),
            Ok(_) => return Err(e),
            Err(again) => {
                return Err(Error::Internal(format!(
                    "{e}; and settling the rebase failed: {again} (the journal {} stays for the next command)",
                    journal::path(ws).display()
                )))
            }
        }
    }
    Ok(())
}

/// Steps 2 to 8.
fn stage_and_commit(
    ws: &Workspace,
    j: &mut Journal,
    change: &Change,
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let staged = j.stage.join(STAGED_BUNDLE);
    fill(&staged)?;
    let new_bundle = journal::bundle_digest(&staged)?;
    let keep = |dest: &Path| fsx::mode_of(dest).unwrap_or(0o644);
    fsx::write_atomic_mode(
        &j.stage.join(STAGED_RECIPE),
        &change.new_recipe,
        keep(&change.recipe),
    )?;
    let mut new_lock = None;
    if let Some((lock, bytes)) = &change.lock {
        fsx::write_atomic_mode(&j.stage.join(STAGED_LOCK), bytes, keep(lock))?;
        if j.old_lock.is_some() {
            // The old lock's bytes and mode, to rename back on undo.
            fsx::write_atomic_mode(&j.stage.join(OLD_LOCK), &fsx::read(lock)?, keep(lock))?;
        }
        new_lock = Some(Sha256::of_bytes(bytes));
    }
    RebaseStep::Staged.reached();

    let next = Journal {
        phase: Phase::Commit,
        new_recipe: Some(Sha256::of_bytes(&change.new_recipe)),
        new_lock,
        new_bundle: Some(new_bundle),
        ..j.clone()
    };
    journal::write(ws, &next)?;
    *j = next;
    RebaseStep::CommitJournaled.reached();

    fsx::exchange(&staged, &j.bundle, "exchange with the staged bundle")?;
    fsx::sync_dir(&fsx::parent_of(&j.bundle))?;
    RebaseStep::BundleSwapped.reached();
    if let Some(lock) = &j.lock {
        rename(&j.stage.join(STAGED_LOCK), lock)?;
    }
    RebaseStep::LockRenamed.reached();
    rename(&j.stage.join(STAGED_RECIPE), &j.recipe)?;
    RebaseStep::Committed.reached();
    remove_stage(&j.stage)?;
    RebaseStep::StageRemoved.reached();
    journal::remove(ws)?;
    RebaseStep::Closed.reached();
    Ok(())
}

/// Rename `from` over `to` and make it durable.
pub(super) fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).at("rename into", to)?;
    fsx::sync_dir(&fsx::parent_of(to))
}

/// Remove the stage folder (a name derived from the bundle's, never from data) if it is there.
pub(super) fn remove_stage(stage: &Path) -> Result<()> {
    match std::fs::symlink_metadata(stage) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("inspect", stage, e)),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(stage).at("remove", stage)?,
        Ok(_) => std::fs::remove_file(stage).at("remove", stage)?,
    }
    fsx::sync_dir(&fsx::parent_of(stage))
}

/// The renames of steps 4 to 6 are atomic only inside one filesystem: refuse before the
/// journal when the recipe, its lock and the bundle are not on one.
fn same_filesystem(change: &Change, stage: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).at("inspect", p);
    let base = dev(&fsx::parent_of(stage))?;
    let mut others = vec![fsx::parent_of(&change.recipe)];
    if let Some((lock, _)) = &change.lock {
        others.push(fsx::parent_of(lock));
    }
    for o in others {
        if dev(&o)? != base {
            return Err(Error::input(
                change.recipe.display(),
                format!(
                    "the recipe's folder and the bundle folder {} are on different filesystems; \
                     a rebase replaces them together by renames, which cannot cross filesystems",
                    change.bundle.display()
                ),
            )
            .with_hint("keep recipes/ and the bundle folder on one filesystem"));
        }
    }
    Ok(())
}
