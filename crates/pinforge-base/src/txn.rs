//! The one shape of a transaction that writes more than one file: its steps are an enum (one
//! per transaction, declared with [`steps!`]), each step is a crash point the kill tests
//! iterate ([`Step::ALL`], [`Step::crash_at`]), and a folder's new contents are staged beside
//! it and swapped in at once ([`DirCommit`]: an exchange with the old folder, or a rename onto
//! a name that is free), so a reader sees the old folder or the new one, never a mix.
//!
//! Why an enum and not numbers: a numbered crash point (`crash_point("pull", 3)`) is a
//! promise between the code and a test that neither checks. With the steps as an enum, the
//! test kills the process at every variant of `ALL`, so a step added to the code is a step the
//! kill test reaches, and a renumbering is a compile error in one place.
//!
//! The install root's transaction (journal, generations, the `state` link) has its own steps
//! in `pinforge-deploy` (`install::InstallStep`, `RollbackStep`), which implement [`Step`] too.

use crate::error::{IoContext, Result};
use crate::fsx;
use std::fmt;
use std::path::{Path, PathBuf};

/// One step of one transaction, in order. A step's index (from 1) is its crash point:
/// with the test hooks built in, the crash-at hook set to `OP:INDEX` SIGKILLs the process
/// right after the step (see `hooks`, which alone may name the variable).
pub trait Step: Copy + fmt::Debug + PartialEq + 'static {
    /// The transaction's name, the crash point's prefix (`pull`, `sign`, `flip`).
    const OP: &'static str;
    /// Every step, in the order the transaction runs them.
    const ALL: &'static [Self];
    /// The step's place in the order, from 1.
    fn index(self) -> u32;

    /// The crash-at hook's value that kills the process right after this step.
    fn crash_at(self) -> String {
        format!("{}:{}", Self::OP, self.index())
    }

    /// The step is done: the crash point (a no-op without the test hooks).
    fn reached(self) {
        crate::hooks::crash_point(Self::OP, self.index());
    }
}

/// Declare a transaction's steps: an enum whose variants are numbered from 1 in order, and
/// its [`Step`] implementation.
///
/// ```
/// pinforge_base::steps! {
///     /// The steps of a demo transaction.
///     pub enum DemoStep for "demo" {
///         /// Staged.
///         Staged = 1,
///         /// Swapped in.
///         Swapped = 2,
///     }
/// }
/// use pinforge_base::txn::Step;
/// assert_eq!(DemoStep::ALL, &[DemoStep::Staged, DemoStep::Swapped]);
/// assert_eq!(DemoStep::Swapped.crash_at(), "demo:2");
/// ```
#[macro_export]
macro_rules! steps {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident for $op:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $n:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $n, )+
        }

        impl $crate::txn::Step for $name {
            const OP: &'static str = $op;
            const ALL: &'static [Self] = &[$( $name::$variant, )+];
            fn index(self) -> u32 {
                self as u32
            }
        }
    };
}

/// A folder's new contents, staged beside it under a name of this writer's
/// (`PREFIX<pid>-<name>`), then swapped in at once by [`DirCommit::commit`]. Dropping it
/// before the commit removes the stage; a stage a killed writer left is removed by the next
/// [`DirCommit::begin`] in the same folder (the writer's process id is in the name, and only
/// a dead writer's stages are touched).
pub struct DirCommit {
    target: PathBuf,
    stage: PathBuf,
    parent: PathBuf,
    armed: bool,
}

impl DirCommit {
    /// Start staging `target`'s new contents: remove what dead writers left in its parent
    /// under `prefix`, then create the (empty) stage folder. `prefix` names the kind of
    /// stage (`.pinforge-final-`), so that cleanup never touches another kind's.
    pub fn begin(target: &Path, prefix: &str) -> Result<DirCommit> {
        let parent = fsx::parent_of(target);
        let name = target.file_name().ok_or_else(|| {
            crate::error::Error::Internal(format!("{} has no name to stage", target.display()))
        })?;
        remove_dead_stages(&parent, prefix)?;
        let stage = parent.join(format!(
            "{prefix}{}-{}",
            std::process::id(),
            name.to_string_lossy()
        ));
        if std::fs::symlink_metadata(&stage).is_ok() {
            // Ours by name (this process id): a failed earlier commit of this process.
            std::fs::remove_dir_all(&stage).at("remove", &stage)?;
        }
        std::fs::create_dir(&stage).at("create directory", &stage)?;
        Ok(DirCommit {
            target: target.to_path_buf(),
            stage,
            parent,
            armed: true,
        })
    }

    /// The stage folder to fill.
    pub fn stage(&self) -> &Path {
        &self.stage
    }

    /// Swap the stage in: sync the stage, reach `staged`, exchange it with the target (or
    /// rename it onto the target's free name), sync the parent (the commit point), reach
    /// `swapped`, and remove the old contents. A failure before the swap removes the stage
    /// and leaves the target as it was.
    pub fn commit<S: Step>(mut self, staged: S, swapped: S) -> Result<()> {
        fsx::sync_dir(&self.stage)?;
        staged.reached();
        let exists = std::fs::symlink_metadata(&self.target).is_ok();
        if exists {
            fsx::exchange(&self.stage, &self.target, "exchange with")?;
        } else {
            fsx::rename_noreplace(&self.stage, &self.target)?;
        }
        // From here the stage name holds the old contents (or nothing): not ours to undo.
        self.armed = false;
        fsx::sync_dir(&self.parent)?;
        swapped.reached();
        if exists {
            std::fs::remove_dir_all(&self.stage).at("remove", &self.stage)?;
        }
        Ok(())
    }
}

/// Remove the stages in `dir` named `PREFIX<pid>-…` whose writer is gone (what a killed
/// writer left); a live writer's stage is never touched. Returns how many were removed.
pub fn remove_dead_stages(dir: &Path, prefix: &str) -> Result<usize> {
    let mut removed = 0;
    for p in fsx::dead_writer_entries(dir, prefix)? {
        // remove_dir_all removes a link itself, never what it points to.
        match std::fs::remove_dir_all(&p) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(crate::error::Error::io("remove stale stage", &p, e)),
        }
    }
    Ok(removed)
}

impl Drop for DirCommit {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: a stage left here is a dead writer's for the next begin.
            let _ = std::fs::remove_dir_all(&self.stage);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::steps! {
        /// Test steps.
        enum T for "t" {
            /// One.
            A = 1,
            /// Two.
            B = 2,
        }
    }

    #[test]
    fn steps_are_numbered_in_order_and_name_their_crash_point() {
        assert_eq!(T::ALL, &[T::A, T::B]);
        assert_eq!(T::A.crash_at(), "t:1");
        assert_eq!(T::B.index(), 2);
    }

    #[test]
    fn a_commit_replaces_a_folder_whole_and_creates_a_missing_one() {
        let d = tempfile::tempdir().expect("tempdir");
        let target = d.path().join("rec");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::write(target.join("old.txt"), "old").expect("old");
        let c = DirCommit::begin(&target, ".stage-").expect("begin");
        std::fs::write(c.stage().join("new.txt"), "new").expect("new");
        c.commit(T::A, T::B).expect("commit");
        assert!(target.join("new.txt").is_file() && !target.join("old.txt").exists());
        let fresh = d.path().join("fresh");
        let c = DirCommit::begin(&fresh, ".stage-").expect("begin");
        std::fs::write(c.stage().join("x"), "x").expect("x");
        c.commit(T::A, T::B).expect("commit");
        assert!(fresh.join("x").is_file());
        let left: Vec<_> = std::fs::read_dir(d.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left.len(), 2, "no stage is left: {left:?}");
    }

    #[test]
    fn a_dropped_stage_is_removed_and_the_target_is_untouched() {
        let d = tempfile::tempdir().expect("tempdir");
        let target = d.path().join("rec");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::write(target.join("old.txt"), "old").expect("old");
        let c = DirCommit::begin(&target, ".stage-").expect("begin");
        let stage = c.stage().to_path_buf();
        std::fs::write(stage.join("half"), "h").expect("half");
        drop(c);
        assert!(!stage.exists());
        assert!(target.join("old.txt").is_file());
    }

    #[test]
    fn a_dead_writers_stage_is_removed_and_a_live_ones_is_kept() {
        let d = tempfile::tempdir().expect("tempdir");
        let target = d.path().join("rec");
        // No process has this id (above the kernel's pid_max): its stage counts as dead.
        let dead = d.path().join(".stage-999999999-rec");
        std::fs::create_dir(&dead).expect("dead");
        let c = DirCommit::begin(&target, ".stage-").expect("begin");
        assert!(!dead.exists(), "the dead writer's stage is gone");
        assert!(c.stage().is_dir());
    }
}
