//! The writes of `repair` (see `repair`): one damaged entry staged from its planned
//! sources, re-hashed whole, and swapped in; and the report.

use super::repair::{EntryPlan, RepairOutcome, RepairStep};
use super::*;

impl Root {
    /// Stage `p`'s entry beside the store, check it, and exchange it with the damaged one
    /// (or rename it into place when the damaged one is gone); the damaged folder is then
    /// removed from the stage's place.
    pub(super) fn repair_entry(&self, p: &EntryPlan) -> Result<()> {
        let staging = self.staging_dir(self.next_seq()?);
        safe::remove_tree(&staging)?;
        self.stage_repair(p, &staging)?;
        RepairStep::Staged.reached();
        let v = check_key(&staging, &p.key, &staging)?;
        if !v.ok {
            safe::remove_tree(&staging)?;
            return Err(mismatch_error(
                &self.entry_dir(&p.key),
                "the repaired entry does not re-hash to its name (a source changed while it \
                 was read); nothing swapped",
                &v,
            ));
        }
        RepairStep::Verified.reached();
        let dir = self.entry_dir(&p.key);
        if safe::kind(&dir)? == Kind::Missing {
            std::fs::rename(&staging, &dir).at("rename into", &dir)?;
        } else {
            fsx::exchange(&staging, &dir, "exchange with")?;
        }
        fsx::sync_dir(&self.path.join("store"))?;
        RepairStep::Swapped.reached();
        safe::remove_tree(&staging)?;
        fsx::sync_dir(&self.path.join("store"))
    }

    /// The entry's files from their sources (an own entry: reflinks or copies; a linked one:
    /// links to objects, an object whose bytes are wrong written afresh under its name),
    /// then its links, records and sealed folders, as install stages them.
    fn stage_repair(&self, p: &EntryPlan, staging: &Path) -> Result<()> {
        std::fs::create_dir(staging).at("create directory", staging)?;
        let objects = match p.key.sharing {
            Sharing::Linked => Some(self.objects_dir()?),
            Sharing::Own => None,
        };
        let mut written = 0u64;
        for (seq, (name, rec)) in p.info.files.iter().enumerate() {
            let from = p
                .sources
                .get(name)
                .ok_or_else(|| Error::Internal(format!("no planned source for {name}")))?;
            let to = staging.join(name);
            fsx::create_dir_all(&fsx::parent_of(&to))?;
            match &objects {
                None => {
                    let src = fsx::open_regular(from, "repair source", false)?;
                    own::reflink_or_copy(src, from, &to, rec.mode(), None, &mut written)?;
                }
                Some(objects) => {
                    let obj = objects.join(object_name(rec));
                    if !object_holds(&obj, rec)? {
                        let tmp = objects.join(format!("{TMP_PREFIX}repair-{seq}"));
                        safe::remove_tree(&tmp)?;
                        let src = fsx::open_regular(from, "repair source", false)?;
                        super::store::copy_file(src, from, &tmp, rec.mode(), None, &mut written)?;
                        fsx::open_regular(&tmp, "object", false)?
                            .sync_all()
                            .at("fsync", &tmp)?;
                        // Only the bytes the name says take the name over.
                        if !object_holds(&tmp, rec)? {
                            safe::remove_tree(&tmp)?;
                            return Err(Error::check(
                                from.display(),
                                "a repair source changed while it was copied; nothing swapped",
                            ));
                        }
                        std::fs::rename(&tmp, &obj).at("rename into", &obj)?;
                    }
                    match std::fs::hard_link(&obj, &to) {
                        Ok(()) => {}
                        Err(e) if link_fallback(&e) => {
                            let src = fsx::open_regular(&obj, "object", false)?;
                            super::store::copy_file(
                                src,
                                &obj,
                                &to,
                                rec.mode(),
                                None,
                                &mut written,
                            )?;
                        }
                        Err(e) => return Err(Error::io("link", &to, e)),
                    }
                }
            }
            fsx::open_regular(&to, "staged file", false)?
                .sync_all()
                .at("fsync", &to)?;
        }
        if let Some(objects) = &objects {
            fsx::sync_dir(objects)?;
        }
        for (name, target) in &p.info.links {
            let to = staging.join(name);
            fsx::create_dir_all(&fsx::parent_of(&to))?;
            std::os::unix::fs::symlink(target, &to).at("create link", &to)?;
        }
        let json =
            serde_json::to_vec_pretty(&p.info).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic_mode(&staging.join(ENTRY_RECORD), &json, FILE_MODE)?;
        fsx::write_atomic_mode(&staging.join(ENTRY_MANIFEST), &p.manifest, FILE_MODE)?;
        super::store::seal_dirs(staging)
    }

    /// `repairs/<n>.json`, the next free number, written atomically (the lock is held). The
    /// file is the document `repair --json` prints, `report` naming the file itself, so one
    /// schema (`pinforge.repair/v1`) reads both.
    pub(super) fn write_repair_report(&self, out: &mut RepairOutcome) -> Result<()> {
        let dir = self.path.join("repairs");
        match safe::kind(&dir)? {
            Kind::Dir => {}
            Kind::Missing => {
                std::fs::create_dir(&dir).at("create directory", &dir)?;
                fsx::sync_dir(&self.path)?;
            }
            _ => {
                return Err(damaged(dir.display(), "`repairs` is not a folder"));
            }
        }
        let n = self
            .names("repairs")?
            .iter()
            .filter_map(|n| n.strip_suffix(".json")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let p = dir.join(format!("{n}.json"));
        out.report = Some(p.clone());
        let mut doc = serde_json::Map::new();
        doc.insert(
            "schema".into(),
            pinforge_record::schema_id::REPAIR.to_string().into(),
        );
        match serde_json::to_value(&*out).map_err(|e| Error::Internal(e.to_string()))? {
            serde_json::Value::Object(fields) => doc.extend(fields),
            other => return Err(Error::Internal(format!("repair outcome as {other}"))),
        }
        let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic_mode(&p, &bytes, FILE_MODE)?;
        fsx::sync_dir(&dir)
    }
}

/// The object `obj` is a regular file of the recorded size, sealed mode and bytes.
fn object_holds(obj: &Path, rec: &FileRec) -> Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    if !looks_intact(obj, rec) {
        return Ok(false);
    }
    let f = fsx::open_regular(obj, "object", false)?;
    let (sha, size) = Sha256::of_reader(f, obj)?;
    let mode = std::fs::symlink_metadata(obj)
        .at("stat", obj)?
        .permissions()
        .mode()
        & 0o7777;
    Ok(sha == rec.sha256 && size == rec.size && mode == rec.mode())
}
