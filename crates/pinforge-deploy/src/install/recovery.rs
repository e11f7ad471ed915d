//! Recovery: the next command after a crash reads the journal and the `state` link and
//! finishes (verify, receipt) or undoes the step the journal describes; a state the journal
//! does not explain is refused, never guessed. Without a journal, leftover staging folders and
//! temp links (names pinforge derives) are removed.

use super::*;

impl Root {
    /// Finish or undo an interrupted transaction. Called with the lock held.
    pub(super) fn recover(&self) -> Result<Option<PathBuf>> {
        self.clean_temp_files()?;
        let Some(j) = self.read_journal()? else {
            self.clean_orphans()?;
            return Ok(None);
        };
        let committed = self.committed_gen()?;
        let receipt = if committed == j.to_gen && j.phase == Phase::Commit {
            // The rename happened: roll forward (verify through current, write the receipt).
            let before = self.read_gen(j.from_gen)?;
            let after = self.read_gen(j.to_gen)?;
            let v = self.verify_layer(&after, j.layer)?;
            if !v.ok {
                // Same rule as a live run: a failed post-swap check reverts.
                self.revert(j.from_gen, j.to_gen)?;
            }
            let r = Receipt {
                seq: j.txid,
                op: j.op,
                layer: j.layer,
                from: before.layers.get(&j.layer).cloned(),
                to: after.layers.get(&j.layer).cloned(),
                current_before: before.current,
                current_after: after.current,
                time: pinforge_base::time::now_rfc3339(),
                reverted: !v.ok,
                verification: v,
                restoration_matches_recorded: None,
                unchanged: false,
                repaired: false,
                store: None,
                timings_us: BTreeMap::from([("recovered".to_string(), 1)]),
                gen: j.to_gen,
            };
            Some(self.write_receipt_recovered(&r)?)
        } else if committed == j.from_gen {
            // Not committed: undo everything the journal says was started. Every path is
            // derived from the journal's typed ids; `to_gen` is `from_gen + 1` (checked when
            // the journal was read), so the committed generation is never touched.
            safe::remove_tree(&self.path.join("state.tmp"))?;
            safe::remove_tree(&self.gen_dir(j.to_gen))?;
            if j.op == Op::Install {
                safe::remove_tree(&self.staging_dir(j.txid))?;
            }
            if let (Some(k), false) = (j.entry_key(), j.entry_preexisted) {
                // Only an entry no readable generation references may go; when any
                // generation cannot be read, nothing is removed.
                if let Some(keep) = self.referenced_everywhere()? {
                    if !keep.contains(&k) {
                        safe::remove_tree(&self.entry_dir(&k))?;
                    }
                }
            }
            fsx::sync_dir(&self.path.join("store"))?;
            None
        } else {
            return Err(Error::input(
                self.journal_path().display(),
                format!(
                    "unexplained state: the journal describes generation {} -> {} ({:?}), but \
                     `state` points at generation {committed}",
                    j.from_gen, j.to_gen, j.phase
                ),
            )
            .with_hint(
                "pinforge does not guess; inspect rollback/state and the journal, fix the \
                        link by hand, then remove the journal",
            ));
        };
        self.remove_journal()?;
        self.clean_orphans()?;
        Ok(receipt)
    }

    /// With no journal: remove staging folders and `state.tmp` (names pinforge derives), and
    /// refuse a generation newer than the committed one, which no step of the protocol
    /// leaves behind without its journal.
    pub(super) fn clean_orphans(&self) -> Result<()> {
        for name in self.names("store")? {
            if name
                .strip_prefix(".stage-")
                .is_some_and(|n| parse_gen_number(n).is_some())
            {
                safe::remove_tree(&self.path.join("store").join(name))?;
            }
        }
        let committed = self.committed_gen()?;
        for name in self.names("gens")? {
            if let Some(n) = parse_gen_number(&name) {
                if n > committed {
                    return Err(damaged(
                        self.gen_dir(n).display(),
                        format!(
                            "generation {n} is newer than the committed generation \
                             {committed}, and no journal explains it"
                        ),
                    ));
                }
            }
        }
        safe::remove_tree(&self.path.join("state.tmp"))
    }
}
