//! The commit point and the transaction type: a transaction writes its journal, runs its
//! steps in order (each one a crash point the tests kill the process at), commits once by
//! renaming a new `state` link over the old, and closes with its receipt and by removing the
//! journal. What a crash leaves is finished or undone by `recovery` from the journal.

use super::*;
use std::marker::PhantomData;

/// The protocol steps every install-root transaction shares, named so that [`Txn`] can run
/// them for either operation. The steps themselves are [`pinforge_base::txn::Step`]s: a
/// step's index (from 1) is its crash point `op:N`, where the test hooks SIGKILL the process.
pub(crate) trait Step: pinforge_base::txn::Step {
    /// The operation these are the steps of (the journal's `op`).
    const KIND: Op;
    /// The journal is written (phase staging).
    const JOURNALED: Self;
    /// The new generation is written and fsynced.
    const GEN_WRITTEN: Self;
    /// `state.tmp` points at the new generation and the journal says commit.
    const COMMIT_JOURNALED: Self;
    /// The commit point: `state` was renamed over; the stable links exist.
    const COMMITTED: Self;
    /// The post-swap verification ran (and reverted on a mismatch).
    const CHECKED: Self;
    /// The receipt is written.
    const RECEIPTED: Self;
    /// The journal is removed: the transaction is over.
    const CLOSED: Self;
}

pinforge_base::steps! {
    /// The steps of an install, in order; each is the crash point `install:<index>`.
    pub enum InstallStep for "install" {
        /// See [`Step::JOURNALED`].
        Journaled = 1,
        /// The build's files are staged (or an intact entry is reused).
        Staged = 2,
        /// The staged files match the manifest.
        StagedVerified = 3,
        /// The entry is in the store.
        Placed = 4,
        /// See [`Step::GEN_WRITTEN`].
        GenWritten = 5,
        /// See [`Step::COMMIT_JOURNALED`].
        CommitJournaled = 6,
        /// See [`Step::COMMITTED`].
        Committed = 7,
        /// See [`Step::CHECKED`].
        Checked = 8,
        /// See [`Step::RECEIPTED`].
        Receipted = 9,
        /// See [`Step::CLOSED`].
        Closed = 10,
    }
}

impl InstallStep {
    /// The number of steps (and of crash points) of an install.
    pub const COUNT: u32 = <InstallStep as pinforge_base::txn::Step>::ALL.len() as u32;
}

impl Step for InstallStep {
    const KIND: Op = Op::Install;
    const JOURNALED: Self = InstallStep::Journaled;
    const GEN_WRITTEN: Self = InstallStep::GenWritten;
    const COMMIT_JOURNALED: Self = InstallStep::CommitJournaled;
    const COMMITTED: Self = InstallStep::Committed;
    const CHECKED: Self = InstallStep::Checked;
    const RECEIPTED: Self = InstallStep::Receipted;
    const CLOSED: Self = InstallStep::Closed;
}

pinforge_base::steps! {
    /// The steps of a rollback, in order; each is the crash point `rollback:<index>`. A
    /// rollback that changes nothing runs no transaction, so it has none of them.
    pub enum RollbackStep for "rollback" {
        /// See [`Step::JOURNALED`].
        Journaled = 1,
        /// See [`Step::GEN_WRITTEN`].
        GenWritten = 2,
        /// See [`Step::COMMIT_JOURNALED`].
        CommitJournaled = 3,
        /// See [`Step::COMMITTED`].
        Committed = 4,
        /// See [`Step::CHECKED`].
        Checked = 5,
        /// See [`Step::RECEIPTED`].
        Receipted = 6,
        /// See [`Step::CLOSED`].
        Closed = 7,
    }
}

impl RollbackStep {
    /// The number of steps (and of crash points) of a rollback.
    pub const COUNT: u32 = <RollbackStep as pinforge_base::txn::Step>::ALL.len() as u32;
}

impl Step for RollbackStep {
    const KIND: Op = Op::Rollback;
    const JOURNALED: Self = RollbackStep::Journaled;
    const GEN_WRITTEN: Self = RollbackStep::GenWritten;
    const COMMIT_JOURNALED: Self = RollbackStep::CommitJournaled;
    const COMMITTED: Self = RollbackStep::Committed;
    const CHECKED: Self = RollbackStep::Checked;
    const RECEIPTED: Self = RollbackStep::Receipted;
    const CLOSED: Self = RollbackStep::Closed;
}

/// What one transaction changes: the committed generation before it and the one it makes,
/// computed before anything is written. Its journal and its receipt are derived from it.
pub(super) struct Change {
    /// The transaction id, also the receipt's sequence number.
    pub(super) seq: u64,
    pub(super) op: Op,
    /// The layer installed into (install) or shown by `current` after (rollback).
    pub(super) layer: Layer,
    pub(super) before: GenState,
    /// Generation `before.gen + 1`.
    pub(super) after: GenState,
}

impl Change {
    /// The new generation would look exactly like the committed one.
    pub(super) fn unchanged(&self) -> bool {
        self.after.layers == self.before.layers && self.after.current == self.before.current
    }

    /// The journal of this change: `staging` is whether it stages an entry (installs), whose
    /// folder name is derived from the transaction id.
    pub(super) fn journal(
        &self,
        staging: bool,
        entry: Option<EntryKey>,
        entry_preexisted: bool,
    ) -> Journal {
        Journal {
            txid: self.seq,
            op: self.op,
            from_gen: self.before.gen,
            to_gen: self.after.gen,
            staging: staging.then(|| format!("store/{}", staging_name(self.seq))),
            entry: entry.map(|k| k.digest),
            entry_sharing: entry.map(|k| k.sharing).unwrap_or_default(),
            entry_preexisted,
            phase: Phase::Staging,
            layer: self.layer,
        }
    }

    /// The receipt of this change. `from` is what the operation reports it left (install:
    /// the layer's entry; rollback: what `current` showed). A reverted or unchanged one
    /// leaves the committed generation and `current` as they were.
    pub(super) fn receipt(
        &self,
        from: Option<GenSlot>,
        verification: Verification,
        reverted: bool,
        unchanged: bool,
        timings_us: BTreeMap<String, u64>,
    ) -> Receipt {
        let kept = reverted || unchanged;
        Receipt {
            seq: self.seq,
            op: self.op,
            layer: self.layer,
            from,
            to: self.after.layers.get(&self.layer).cloned(),
            current_before: self.before.current,
            current_after: if kept {
                self.before.current
            } else {
                self.after.current
            },
            time: pinforge_base::time::now_rfc3339(),
            verification,
            reverted,
            restoration_matches_recorded: None,
            unchanged,
            repaired: false,
            store: None,
            timings_us,
            gen: if kept {
                self.before.gen
            } else {
                self.after.gen
            },
        }
    }
}

/// `state.tmp`, prepared and not yet renamed: [`Txn::commit`] takes it by value, so a
/// transaction reaches its commit point once.
pub(super) struct Prepared(PathBuf);

/// One running install or rollback. Its journal is on disk from [`Txn::begin`] to
/// [`Txn::finish`]; its steps are reached in their order, each once (anything else is an
/// internal error, never a silent skip of a crash point).
pub(super) struct Txn<'r, S: Step> {
    root: &'r Root,
    journal: Journal,
    /// The index of the last step reached (0: none yet).
    reached: u32,
    steps: PhantomData<S>,
}

impl<'r, S: Step> Txn<'r, S> {
    /// Write the journal: from here on a crash is finished or undone by recovery.
    pub(super) fn begin(root: &'r Root, journal: Journal) -> Result<Txn<'r, S>> {
        root.write_journal(&journal)?;
        let mut txn = Txn {
            root,
            journal,
            reached: 0,
            steps: PhantomData,
        };
        txn.reach(S::JOURNALED)?;
        Ok(txn)
    }

    /// Mark `step` done (the next one in order) and pass its crash point.
    pub(super) fn reach(&mut self, step: S) -> Result<()> {
        if step.index() != self.reached + 1 {
            return Err(Error::Internal(format!(
                "{} step {step:?} reached out of order (after step {})",
                S::KIND,
                self.reached
            )));
        }
        self.reached = step.index();
        step.reached();
        Ok(())
    }

    /// Write the new generation beside the committed one.
    pub(super) fn write_gen(&mut self, after: &GenState) -> Result<()> {
        self.root.write_gen(after)?;
        self.reach(S::GEN_WRITTEN)
    }

    /// Point `state.tmp` at the new generation and journal the commit phase (the staging
    /// folder, if any, is gone by now: it became the entry).
    pub(super) fn prepare_commit(&mut self) -> Result<Prepared> {
        let tmp = self.root.prepare_swap(self.journal.to_gen)?;
        self.journal.phase = Phase::Commit;
        self.journal.staging = None;
        self.root.write_journal(&self.journal)?;
        self.reach(S::COMMIT_JOURNALED)?;
        Ok(Prepared(tmp))
    }

    /// The commit point, then the stable consumer paths. Returns the rename's microseconds.
    pub(super) fn commit(&mut self, prepared: Prepared) -> Result<u64> {
        let us = self.root.swap(&prepared.0)?;
        self.root.ensure_stable_links()?;
        self.reach(S::COMMITTED)?;
        Ok(us)
    }

    /// The post-swap check: verify the changed layer through its consumers' path and, on a
    /// mismatch, swap back to the previous generation. Returns the check and whether it
    /// reverted.
    pub(super) fn check(
        &mut self,
        after: &GenState,
        layer: Layer,
        timings: &mut BTreeMap<String, u64>,
    ) -> Result<(Verification, bool)> {
        let t = Instant::now();
        let v = self.root.verify_layer(after, layer)?;
        timings.insert(
            "verify_after_swap".to_string(),
            t.elapsed().as_micros() as u64,
        );
        if !v.ok {
            self.root.revert(self.journal.from_gen, after.gen)?;
        }
        self.reach(S::CHECKED)?;
        let reverted = !v.ok;
        Ok((v, reverted))
    }

    /// Write the receipt, then remove the journal: the transaction is over.
    pub(super) fn finish(mut self, receipt: &Receipt) -> Result<PathBuf> {
        let p = self.root.write_receipt(receipt)?;
        self.reach(S::RECEIPTED)?;
        self.root.remove_journal()?;
        self.reach(S::CLOSED)?;
        Ok(p)
    }

    /// The transaction id (temp names in `objects/` carry it).
    pub(super) fn txid(&self) -> u64 {
        self.journal.txid
    }

    /// The staging folder of this transaction, derived from its id (never the journal's text).
    pub(super) fn staging_dir(&self) -> PathBuf {
        self.root.staging_dir(self.journal.txid)
    }

    /// `placed`, or, when placing the entry failed, that error after undoing the transaction:
    /// its staging folder and its journal removed, so the next command has nothing to recover.
    pub(super) fn or_abort<T>(&self, placed: Result<T>) -> Result<T> {
        if placed.is_err() {
            safe::remove_tree(&self.staging_dir())?;
            self.root.remove_journal()?;
        }
        placed
    }
}

impl Root {
    /// Prepare `state.tmp` pointing at `gen` (not yet the commit).
    pub(super) fn prepare_swap(&self, gen: u64) -> Result<PathBuf> {
        let tmp = self.path.join("state.tmp");
        safe::remove_tree(&tmp)?;
        std::os::unix::fs::symlink(PathBuf::from("gens").join(gen.to_string()), &tmp)
            .at("create link", &tmp)?;
        fsx::sync_dir(&self.path)?;
        Ok(tmp)
    }

    /// The commit point: one rename(2) of a link.
    pub(super) fn swap(&self, tmp: &Path) -> Result<u64> {
        let t = Instant::now();
        let state = self.path.join("state");
        std::fs::rename(tmp, &state).at("rename over", &state)?;
        fsx::sync_dir(&self.path)?;
        Ok(t.elapsed().as_micros() as u64)
    }

    /// Swap back to `from_gen` after a failed post-swap check, and drop the generation that
    /// failed (so no generation newer than the committed one outlives its journal).
    pub(super) fn revert(&self, from_gen: u64, to_gen: u64) -> Result<()> {
        let tmp = self.prepare_swap(from_gen)?;
        self.swap(&tmp)?;
        safe::remove_tree(&self.gen_dir(to_gen))?;
        fsx::sync_dir(&self.path.join("gens"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinforge_base::txn::Step as _;

    #[test]
    fn step_indices_are_their_place_in_order_from_one() {
        // The crash tests name steps by these numbers (the crash hook's `op:N`), and the
        // journal's op and the crash point's prefix are one name.
        for (i, s) in InstallStep::ALL.iter().copied().enumerate() {
            assert_eq!(s.index(), i as u32 + 1, "{s:?}");
        }
        for (i, s) in RollbackStep::ALL.iter().copied().enumerate() {
            assert_eq!(s.index(), i as u32 + 1, "{s:?}");
        }
        assert_eq!(InstallStep::Closed.index(), InstallStep::COUNT);
        assert_eq!(RollbackStep::Closed.index(), RollbackStep::COUNT);
        assert_eq!(
            <InstallStep as pinforge_base::txn::Step>::OP,
            InstallStep::KIND.as_str()
        );
        assert_eq!(
            <RollbackStep as pinforge_base::txn::Step>::OP,
            RollbackStep::KIND.as_str()
        );
    }

    #[test]
    fn steps_out_of_order_are_an_internal_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = Root {
            path: dir.path().to_path_buf(),
            signer: pinforge_record::sign::record::Signer::none(),
        };
        let mut txn: Txn<'_, RollbackStep> = Txn {
            root: &root,
            journal: Journal {
                txid: 1,
                op: Op::Rollback,
                from_gen: 0,
                to_gen: 1,
                staging: None,
                entry: None,
                entry_sharing: Sharing::Linked,
                entry_preexisted: true,
                phase: Phase::Staging,
                layer: Layer::Live,
            },
            reached: 1,
            steps: PhantomData,
        };
        assert!(txn.reach(RollbackStep::Committed).is_err());
        assert!(txn.reach(RollbackStep::Journaled).is_err());
        assert!(txn.reach(RollbackStep::GenWritten).is_ok());
    }
}
