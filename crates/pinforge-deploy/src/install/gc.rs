//! `gc`: remove store entries and generations that nothing references, and only when the
//! committed state and every generation read and validate (damaged state is never read as
//! empty state).

use super::*;

/// Result of `gc`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GcOutcome {
    /// Nothing was removed: this is what `gc` would remove.
    pub dry_run: bool,
    /// Store entries removed (or that would be).
    pub removed_entries: Vec<String>,
    /// Bytes freed: the objects removed, and the files of removed entries that no object
    /// or other entry shares (entries from before the object store). An inode still linked
    /// from elsewhere (a build folder a file was hard-linked from) is not freed by this.
    pub bytes_freed: u64,
    /// Objects removed (or that would be): no remaining entry's record names them.
    pub removed_objects: usize,
    /// Old generations removed (or that would be).
    pub removed_generations: usize,
    /// Entries kept (referenced by the committed generation or the journal).
    pub kept_entries: usize,
    /// Referenced entries that are not in the store (damage gc cannot repair).
    pub missing_entries: Vec<String>,
}

impl GcOutcome {
    fn default_for(dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            removed_entries: Vec::new(),
            bytes_freed: 0,
            removed_objects: 0,
            removed_generations: 0,
            kept_entries: 0,
            missing_entries: Vec::new(),
        }
    }
}

impl Root {
    /// Remove store entries and generations nothing references. Deletes only when the
    /// committed state and every generation read and validate; otherwise refuses (exit 2).
    /// With `dry_run`, reports what would go and removes nothing.
    pub fn gc(&self, dry_run: bool) -> Result<GcOutcome> {
        if safe::kind(&self.path.join("state"))? == Kind::Missing && self.is_fresh()? {
            return Ok(GcOutcome::default_for(dry_run));
        }
        let _lock = self.lock()?;
        let journal = if dry_run {
            self.read_journal()?
        } else {
            self.recover()?;
            None
        };
        let refuse = |e: Error| {
            Error::input(
                self.path.display(),
                format!("gc refused, nothing removed: {e}"),
            )
            .with_hint(
                "gc deletes only from a root whose state reads and validates; inspect the \
                 named file (or restore it), then run gc again",
            )
        };
        let committed = self.committed_gen().map_err(refuse)?;
        let gs = self.read_gen(committed).map_err(refuse)?;
        let mut keep = gs.referenced();
        let mut old_gens = Vec::new();
        for name in self.names("gens")? {
            if let Some(n) = parse_gen_number(&name) {
                // What an unreadable generation references is unknown: refuse.
                self.read_gen(n).map_err(refuse)?;
                if n != committed {
                    old_gens.push(n);
                }
            }
        }
        if let Some(k) = journal.as_ref().and_then(|j| j.entry_key()) {
            keep.insert(k);
        }
        let mut out = GcOutcome::default_for(dry_run);
        for k in &keep {
            if safe::kind(&self.entry_dir(k))? == Kind::Missing {
                out.missing_entries.push(k.dir_name());
            }
        }
        for name in self.names("store")? {
            let Some(k) = EntryKey::parse(&name) else {
                continue;
            };
            if keep.contains(&k) {
                continue;
            }
            let p = self.entry_dir(&k);
            out.bytes_freed += safe::unshared_bytes(&p);
            if !dry_run {
                safe::remove_tree(&p)?;
            }
            out.removed_entries.push(name);
        }
        for n in old_gens {
            if !dry_run {
                safe::remove_tree(&self.gen_dir(n))?;
            }
            out.removed_generations += 1;
        }
        // Objects after entries: what the kept entries' records name stays (an object
        // removed by a crash in between is written again by the next install that needs it).
        let (objects, bytes) = self.gc_objects(&keep, dry_run).map_err(refuse)?;
        out.removed_objects = objects.len();
        out.bytes_freed += bytes;
        if !dry_run {
            fsx::sync_dir(&self.path.join("store"))?;
            fsx::sync_dir(&self.path.join("gens"))?;
        }
        out.kept_entries = keep.len();
        Ok(out)
    }
}
