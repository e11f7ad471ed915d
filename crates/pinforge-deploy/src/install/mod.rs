//! The install root (`rollback/`): an immutable store of build outputs named by their digest,
//! three named layers (live, control, original substrate), one `current` path consumers run
//! through, a lock, a journal present only during a transaction, and receipts.
//!
//! ```text
//! rollback/
//!   store/<output-digest>/        immutable linked entry (live and its rollback stack): the
//!                                 artifacts, links, entry.json
//!   store/<output-digest>.own/    immutable own entry (control, original): files of its own,
//!                                 reflinks or copies, sharing no inode (see `own`)
//!   objects/<sha256>[.x]          file objects (`.x`: executable): every linked entry's file
//!                                 is a hard link to one, so live generations share unchanged
//!                                 files (see `objects`)
//!   gens/<n>/                     generation n: live, control, original, current -> ../../store/..
//!                                 and state.json (layers, current layer, live history)
//!   state -> gens/<n>             THE commit point: one rename(2) of this link
//!   current -> state/current      stable paths consumers use (never change)
//!   live, control, original -> state/<layer>
//!   lock                          flock: serializes invocations, released by the kernel on death
//!   journal.json                  present only while a transaction runs (or after a crash)
//!   receipts/<seq>-<op>.json      one per install and rollback
//! ```
//!
//! Every change builds a complete new generation beside the old one, fsyncs it, and commits by
//! renaming a new `state` link over the old: any observer, and any crash, sees the old
//! generation or the new one. Recovery reads the journal and the `state` link and finishes or
//! undoes the step it describes; a state the journal does not explain is refused, never guessed.
//!
//! Nothing read back from the root is trusted: the root's own paths are derived
//! from typed ids (`gens/<u64>`, `store/<Sha256>`, `store/.stage-<txid>`), never taken from a
//! file; an entry's identity is recomputed from its content, modes and link targets and
//! compared with its folder name and with the generation that references it; devices, FIFOs
//! and sockets are refused before they are opened; a root whose committed state cannot be
//! read is damaged, never empty, and nothing is deleted from it.

// One file per concern: `record` (the on-disk records and their parsers), `layout` (root
// open, lock, folders, generation/entry/receipt I/O), `txn` (the commit point and the
// transaction type with its steps), `journal` (the transaction record), `recovery` (finish
// or undo after a crash), `store` (the install plan and staging), `verify` (resolution and
// the entry check), `status` (read-only views: status, history, verify --installed), `gc`,
// `objects` (the content-addressed file objects linked entries link to), `own` (the
// known-good layers' files of their own),
// `safe` (inspect-before-open file access). This file holds the layers, the public surface
// (every public type is re-exported here) and the two operations, install and rollback,
// each a sequence of transaction steps.
mod gc;
mod journal;
mod layout;
mod objects;
mod own;
mod record;
mod recovery;
mod repair;
mod repair_stage;
mod safe;
mod signed;
mod status;
mod store;
mod txn;
mod verify;

pub use gc::GcOutcome;
use journal::staging_name;
pub(crate) use journal::{Journal, Op, Phase};
pub use layout::Root;
use layout::{damaged, entry_link, parse_gen_number};
pub(crate) use objects::StoreUse;
use objects::{link_fallback, looks_intact, object_name};
use pinforge_base::txn::Step as _;
pub use record::{
    identity, parse_entry_record, parse_receipt, parse_receipt_name, parse_state, EntryInfo,
    EntryKey, FileRec, GenSlot, GenState, Receipt, Sharing, Verification,
};
use record::{
    validate_listing, ENTRY_MANIFEST, ENTRY_RECORD, EXEC_MODE, FILE_MODE, RECORD_LIMIT, TMP_PREFIX,
};
pub use repair::{RepairOutcome, RepairStep, RepairedEntry};
pub use status::{History, Status, VerificationState};
pub use store::StageMode;
use store::{Existing, Plan};
use txn::{Change, Txn};
pub use txn::{InstallStep, RollbackStep};
use verify::{check_entry, check_key, check_result, mismatch_error, Resolved};

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use safe::Kind;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The three layers.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// The build in service.
    Live,
    /// The same build without the patches: the negative-result comparator.
    Control,
    /// The original substrate (e.g. unpatched on another toolchain).
    Original,
}

impl Layer {
    /// All layers, in display order.
    pub const ALL: [Layer; 3] = [Layer::Live, Layer::Control, Layer::Original];

    /// The layer's name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Layer::Live => "live",
            Layer::Control => "control",
            Layer::Original => "original",
        }
    }

    /// Parse a layer name.
    pub fn parse(s: &str) -> Result<Layer> {
        match s {
            "live" => Ok(Layer::Live),
            "control" => Ok(Layer::Control),
            "original" => Ok(Layer::Original),
            other => Err(Error::input(
                format!("layer `{other}`"),
                "unknown layer; expected live, control or original",
            )),
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Root {
    /// Install the outputs of `manifest` into `layer`. The manifest is not trusted: its
    /// artifact root and every path and link in it are checked before anything is read.
    pub fn install(
        &self,
        manifest_path: &Path,
        layer: Layer,
        mode: Option<StageMode>,
    ) -> Result<InstallOutcome> {
        let t_total = Instant::now();
        let plan = Plan::read(manifest_path)?;
        let _lock = self.lock()?;
        self.init_if_fresh()?;
        let recovered = self.recover()?;
        let change = self.install_change(&plan.info, layer)?;
        let key = EntryKey {
            digest: plan.info.digest,
            sharing: Sharing::for_layer(layer),
        };
        let entry = self.existing_entry(&key)?;
        if entry.ok && change.unchanged() {
            return self.install_unchanged(&change, entry, recovered, t_total);
        }
        let journal = change.journal(true, Some(key), entry.kind != Kind::Missing);
        let mut txn = Txn::<InstallStep>::begin(self, journal)?;
        let mut timings = BTreeMap::new();
        // Everything between the journal and the new generation either completes or is undone
        // here (a crash in between is undone by recovery from the journal instead).
        let placed = self.place_entry(&mut txn, &plan, &entry, mode, &mut timings);
        let placed = txn.or_abort(placed)?;
        txn.reach(InstallStep::Placed)?;
        txn.write_gen(&change.after)?;
        let prepared = txn.prepare_commit()?;
        timings.insert("commit".to_string(), txn.commit(prepared)?);
        let (v, reverted) = txn.check(&change.after, layer, &mut timings)?;
        timings.insert("total".to_string(), t_total.elapsed().as_micros() as u64);
        let from = change.before.layers.get(&layer).cloned();
        let r = Receipt {
            repaired: placed.repaired,
            store: placed.store,
            ..change.receipt(from, v.clone(), reverted, false, timings)
        };
        let receipt = txn.finish(&r)?;
        check_result(&v, reverted, &receipt, "already installed")?;
        Ok(InstallOutcome::new(
            receipt,
            r,
            recovered,
            placed.mode,
            entry.dir,
        ))
    }

    /// What installing `info` into `layer` makes of the committed generation: the layer shows
    /// the entry; a new live entry pushes the old one on the rollback stack and is shown by
    /// `current`; another layer is shown only when nothing was.
    fn install_change(&self, info: &EntryInfo, layer: Layer) -> Result<Change> {
        let from_gen = self.committed_gen()?;
        let before = self.read_gen(from_gen)?;
        let slot = GenSlot {
            digest: info.digest,
            recipe: info.recipe.clone(),
            variant: info.variant.clone(),
            sharing: Sharing::for_layer(layer),
        };
        let mut after = before.clone();
        after.gen = from_gen + 1;
        if layer == Layer::Live {
            if let Some(old) = before.layers.get(&Layer::Live) {
                if old.digest != slot.digest {
                    after.live_history.push(old.clone());
                }
            }
            after.current = Some(Layer::Live);
        } else if after.current.is_none() {
            after.current = Some(layer);
        }
        after.layers.insert(layer, slot);
        let seq = self.next_seq()?;
        Ok(Change {
            seq,
            op: Op::Install,
            layer,
            before,
            after,
        })
    }

    /// Already installed (and intact): verify and record, no transaction, no swap.
    fn install_unchanged(
        &self,
        change: &Change,
        entry: Existing,
        recovered: Option<PathBuf>,
        t_total: Instant,
    ) -> Result<InstallOutcome> {
        let v = self.verify_layer(&change.before, change.layer)?;
        let timings = BTreeMap::from([("total".into(), t_total.elapsed().as_micros() as u64)]);
        let from = change.before.layers.get(&change.layer).cloned();
        let r = change.receipt(from, v.clone(), false, true, timings);
        let receipt = self.write_receipt(&r)?;
        check_result(&v, false, &receipt, "already installed")?;
        Ok(InstallOutcome::new(receipt, r, recovered, None, entry.dir))
    }

    /// [`Root::rollback`], or back (or forward) to a whole earlier generation: its layers,
    /// `current` and rollback stack become the state of a new generation, every entry it
    /// names re-hashed first. Rolling forward again is the same command with a later number.
    pub fn rollback_to(&self, to: RollbackTo) -> Result<RollbackOutcome> {
        let t_total = Instant::now();
        if safe::kind(&self.path.join("state"))? == Kind::Missing && self.is_fresh()? {
            return Err(Error::input(self.path.display(), "nothing is installed")
                .with_hint("`pinforge install ...` first"));
        }
        let _lock = self.lock()?;
        let recovered = self.recover()?;
        let change = self.rollback_change(to)?;
        let layer = change.layer;
        let target = change
            .after
            .layers
            .get(&layer)
            .cloned()
            .ok_or_else(|| Error::Internal("rollback target vanished".into()))?;
        // The restored entry must still be what was recorded when it was installed.
        let what = format!("the {layer} entry is damaged; not switching to it");
        self.require_intact(&target.key(), &what)?;
        let mut timings = BTreeMap::new();
        let unchanged = change.unchanged();
        let (v, reverted, txn) = if unchanged {
            (self.verify_layer(&change.before, layer)?, false, None)
        } else {
            let mut txn = Txn::<RollbackStep>::begin(self, change.journal(false, None, true))?;
            txn.write_gen(&change.after)?;
            let prepared = txn.prepare_commit()?;
            timings.insert("commit".to_string(), txn.commit(prepared)?);
            let (v, reverted) = txn.check(&change.after, layer, &mut timings)?;
            (v, reverted, Some(txn))
        };
        timings.insert("total".to_string(), t_total.elapsed().as_micros() as u64);
        let from = change.before.current_slot().map(|(_, s)| s.clone());
        let r = Receipt {
            restoration_matches_recorded: Some(v.ok),
            ..change.receipt(from, v.clone(), reverted, unchanged, timings)
        };
        let receipt = match txn {
            Some(txn) => txn.finish(&r)?,
            None => self.write_receipt(&r)?,
        };
        check_result(&v, reverted, &receipt, "nothing to switch")?;
        Ok(RollbackOutcome::new(receipt, r, recovered))
    }

    /// What the rollback `to` makes of the committed generation, and the layer `current`
    /// shows then.
    fn rollback_change(&self, to: RollbackTo) -> Result<Change> {
        let from_gen = self.committed_gen()?;
        let before = self.read_gen(from_gen)?;
        let mut after = before.clone();
        after.gen = from_gen + 1;
        let layer = match to {
            RollbackTo::Generation(n) => self.restore_generation(n, &mut after)?,
            RollbackTo::Layer(l) => {
                if !before.layers.contains_key(&l) {
                    return Err(Error::input(
                        format!("layer `{l}`"),
                        "nothing is installed in that layer",
                    )
                    .with_hint("`pinforge status` lists the layers"));
                }
                after.current = Some(l);
                l
            }
            RollbackTo::PreviousLive => {
                let prev = after.live_history.pop().ok_or_else(|| {
                    Error::input("rollback", "no earlier live build to return to")
                        .with_hint("use `--to control` or `--to original` to switch layers")
                })?;
                after.layers.insert(Layer::Live, prev);
                after.current = Some(Layer::Live);
                Layer::Live
            }
        };
        let seq = self.next_seq()?;
        Ok(Change {
            seq,
            op: Op::Rollback,
            layer,
            before,
            after,
        })
    }

    /// Give `after` the layers, `current` and rollback stack of generation `n`, every entry
    /// of which must still be intact (not only the one `current` shows); returns the layer
    /// `current` shows.
    fn restore_generation(&self, n: u64, after: &mut GenState) -> Result<Layer> {
        let dir = self.gen_dir(n);
        if n == 0 || safe::kind(&dir)? != Kind::Dir {
            return Err(Error::input(
                format!("generation {n}"),
                "that generation is not on disk (gc removes generations nothing needs)",
            )
            .with_hint("`pinforge history` lists the generations still on disk"));
        }
        let old = self.read_gen(n)?;
        after.layers = old.layers;
        after.current = old.current;
        after.live_history = old.live_history;
        let layer = after.current.ok_or_else(|| {
            Error::input(
                format!("generation {n}"),
                "shows no layer through `current`",
            )
        })?;
        for (l, slot) in &after.layers {
            let what = format!("generation {n}'s {l} entry is damaged; not restoring it");
            self.require_intact(&slot.key(), &what)?;
        }
        Ok(layer)
    }
}

/// Result of `install`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct InstallOutcome {
    /// Receipt path.
    pub receipt: PathBuf,
    /// Receipt of a recovered earlier transaction, if any.
    pub recovered: Option<PathBuf>,
    /// Post-swap verification.
    pub verification: Verification,
    /// How the files were staged (None when the entry already existed).
    pub stage_mode: Option<StageMode>,
    /// The store entry.
    pub entry: PathBuf,
    /// A damaged store entry was replaced by a fresh copy of the build.
    pub repaired: bool,
    /// What staging did in the object store (None when the entry already existed).
    pub store: Option<StoreUse>,
    /// What the layer showed before.
    pub left: Option<GenSlot>,
    /// What it shows now.
    pub reached: Option<GenSlot>,
    /// Nothing changed (the build was already installed there).
    pub unchanged: bool,
    /// The generation committed (the one before, when unchanged).
    pub gen: u64,
}

/// Result of `rollback`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RollbackOutcome {
    /// Receipt path.
    pub receipt: PathBuf,
    /// Receipt of a recovered earlier transaction, if any.
    pub recovered: Option<PathBuf>,
    /// Post-swap verification.
    pub verification: Verification,
    /// The layer `current` now shows.
    pub layer: Layer,
    /// What `current` showed before.
    pub left: Option<GenSlot>,
    /// What it shows now.
    pub reached: Option<GenSlot>,
    /// Nothing changed (the state already was the requested one).
    pub unchanged: bool,
    /// The generation committed (the one before, when unchanged).
    pub gen: u64,
}

impl InstallOutcome {
    /// The outcome its receipt `r` (written at `receipt`) describes.
    fn new(
        receipt: PathBuf,
        r: Receipt,
        recovered: Option<PathBuf>,
        stage_mode: Option<StageMode>,
        entry: PathBuf,
    ) -> InstallOutcome {
        InstallOutcome {
            receipt,
            recovered,
            verification: r.verification,
            stage_mode,
            entry,
            repaired: r.repaired,
            store: r.store,
            left: r.from,
            reached: r.to,
            unchanged: r.unchanged,
            gen: r.gen,
        }
    }
}

impl RollbackOutcome {
    /// The outcome its receipt `r` (written at `receipt`) describes.
    fn new(receipt: PathBuf, r: Receipt, recovered: Option<PathBuf>) -> RollbackOutcome {
        RollbackOutcome {
            receipt,
            recovered,
            verification: r.verification,
            layer: r.layer,
            left: r.from,
            reached: r.to,
            unchanged: r.unchanged,
            gen: r.gen,
        }
    }
}

/// Where a rollback goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackTo {
    /// Live returns to the previous live build (the default).
    PreviousLive,
    /// `current` shows another layer.
    Layer(Layer),
    /// The whole state of an earlier (or, after a rollback, later) generation.
    Generation(u64),
}

#[cfg(test)]
mod tests;
