//! `repair` (issue #36): every entry the committed generation references (its layers and the
//! live rollback stack) is re-hashed; a damaged one is staged afresh from verified sources
//! and swapped in whole with one `renameat2` exchange, as a reinstall of a damaged entry is.
//!
//! Nothing is believed on its name. An entry's record is used only when its listing hashes
//! to the entry's digest (its own record, its twin's in the other sharing, or the record a
//! `--from` manifest makes); every file's bytes come from the first candidate whose bytes
//! hash to the recorded digest: the entry's own file, a file of another entry, the object,
//! or a build output of a `--from` manifest. The staged entry is re-hashed whole before the
//! swap. When a damaged file has no such source, nothing at all is written (exit 1).
//!
//! The plan is made read-only under the lock; the writes follow it entry by entry. A kill
//! at any step leaves each entry either as it was or repaired: the stage and a swapped-out
//! entry are `store/.stage-<n>` folders, removed by the next command's recovery, and an
//! object is only ever renamed over by bytes that hash to its name.

use super::*;

pinforge_base::steps! {
    /// The steps of a repair; each is the crash point `repair:<index>`, passed at the first
    /// entry that reaches it.
    pub enum RepairStep for "repair" {
        /// The plan is made: every damaged entry has a verified source for every file.
        Planned = 1,
        /// An entry is staged from its sources.
        Staged = 2,
        /// The staged entry re-hashes to its name.
        Verified = 3,
        /// The staged entry is swapped in; the damaged one is in the stage's place.
        Swapped = 4,
        /// The report is written.
        Reported = 5,
    }
}

/// The report of a repair (`repair --json`, and `repairs/<n>.json` after a repair that
/// changed something).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RepairOutcome {
    /// The install root.
    pub root: PathBuf,
    /// When the repair (or the plan) ran, RFC 3339 in UTC.
    pub time: String,
    /// Only the plan: nothing was written.
    pub dry_run: bool,
    /// Entries the committed generation references that re-hashed intact.
    pub intact: Vec<String>,
    /// The damaged entries, each with what was (or would be) repaired from where.
    pub repaired: Vec<RepairedEntry>,
    /// The report file written (`repairs/<n>.json`), when something was repaired.
    pub report: Option<PathBuf>,
}

/// One damaged entry.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RepairedEntry {
    /// `store/<digest>` or `store/<digest>.own`.
    pub entry: String,
    /// How it holds its files.
    pub sharing: Sharing,
    /// What references it in the committed generation: layers, and `live history N`.
    pub referenced_by: Vec<String>,
    /// What the re-hash found wrong (path, expected, found).
    pub mismatches: Vec<pinforge_record::manifest::Mismatch>,
    /// Every file whose bytes came from somewhere other than the entry itself, with the
    /// source (checked against the recorded digest before use).
    pub sources: BTreeMap<String, String>,
    /// Damaged files whose inode other entries (or the object) hold too: the damage reached
    /// them as well, and none of them is a source.
    pub shared_with: BTreeMap<String, Vec<String>>,
    /// Where the record came from (`itself`, its twin, or a `--from` manifest).
    pub record_from: String,
}

/// A damaged entry's plan: its record, where each file comes from, its manifest bytes.
pub(super) struct EntryPlan {
    pub(super) key: EntryKey,
    pub(super) info: EntryInfo,
    pub(super) sources: BTreeMap<String, PathBuf>,
    pub(super) manifest: Vec<u8>,
    pub(super) report: RepairedEntry,
}

/// A `--from` manifest read as an install plan (untrusted, checked as install checks it).
struct FromBuild {
    manifest: PathBuf,
    plan: Plan,
}

impl Root {
    /// Re-hash every entry the committed generation references and repair the damaged ones
    /// from verified sources (see the module docs); `from` are build manifests that may
    /// supply files. With `dry_run`, only the plan.
    pub fn repair(&self, from: &[PathBuf], dry_run: bool) -> Result<RepairOutcome> {
        if safe::kind(&self.path.join("state"))? == Kind::Missing && self.is_fresh()? {
            return Err(Error::input(self.path.display(), "nothing is installed")
                .with_hint("`pinforge install ...` first"));
        }
        let builds: Vec<FromBuild> = from
            .iter()
            .map(|m| {
                Plan::read(m).map(|plan| FromBuild {
                    manifest: m.clone(),
                    plan,
                })
            })
            .collect::<Result<_>>()?;
        let _lock = self.lock()?;
        if !dry_run {
            self.recover()?;
        }
        // The report's folder is checked before anything is written, so a repair never
        // stops between its swaps and its report for a reason known up front.
        let reports = self.path.join("repairs");
        if !matches!(safe::kind(&reports)?, Kind::Dir | Kind::Missing) {
            return Err(Error::input(reports.display(), "`repairs` is not a folder")
                .with_hint("move it away; repair writes its reports there"));
        }
        let gs = self.read_gen(self.committed_gen()?)?;
        let mut uses: BTreeMap<EntryKey, Vec<String>> = BTreeMap::new();
        for (l, s) in &gs.layers {
            uses.entry(s.key()).or_default().push(l.to_string());
        }
        for (i, s) in gs.live_history.iter().enumerate().rev() {
            let n = gs.live_history.len() - i;
            uses.entry(s.key())
                .or_default()
                .push(format!("live history {n}"));
        }
        let mut intact = Vec::new();
        let mut plans = Vec::new();
        let mut missing = Vec::new();
        for (key, referenced_by) in uses {
            let dir = self.entry_dir(&key);
            let v = check_key(&dir, &key, &dir)?;
            if v.ok {
                intact.push(key.to_string());
                continue;
            }
            match self.plan_entry(key, referenced_by, v.mismatches, &builds)? {
                Ok(p) => plans.push(p),
                Err(why) => missing.push(why),
            }
        }
        if !missing.is_empty() {
            return Err(Error::check(
                self.path.display(),
                format!(
                    "no verified source for: {}; nothing repaired",
                    missing.join("; ")
                ),
            )
            .with_hint(
                "pass the build's manifest with --from (its outputs are checked against the \
                 recorded digests), or install or pull the entry again",
            ));
        }
        RepairStep::Planned.reached();
        let mut out = RepairOutcome {
            root: self.path.clone(),
            time: pinforge_base::time::now_rfc3339(),
            dry_run,
            intact,
            repaired: plans.iter().map(|p| p.report.clone()).collect(),
            report: None,
        };
        if dry_run || plans.is_empty() {
            return Ok(out);
        }
        for p in &plans {
            self.repair_entry(p)?;
        }
        self.write_repair_report(&mut out)?;
        RepairStep::Reported.reached();
        Ok(out)
    }

    /// The plan for one damaged entry, or (as the error) why no verified source exists.
    fn plan_entry(
        &self,
        key: EntryKey,
        referenced_by: Vec<String>,
        mismatches: Vec<pinforge_record::manifest::Mismatch>,
        builds: &[FromBuild],
    ) -> Result<std::result::Result<EntryPlan, String>> {
        let dir = self.entry_dir(&key);
        let twin = EntryKey {
            digest: key.digest,
            sharing: match key.sharing {
                Sharing::Linked => Sharing::Own,
                Sharing::Own => Sharing::Linked,
            },
        };
        let record = if let Ok(info) = self.read_entry(&key) {
            Some((info, "itself".to_string()))
        } else if let Ok(info) = self.read_entry(&twin) {
            Some((info, twin.to_string()))
        } else {
            builds
                .iter()
                .find(|b| b.plan.info.digest == key.digest)
                .map(|b| (b.plan.info.clone(), b.manifest.display().to_string()))
        };
        let Some((info, record_from)) = record else {
            return Ok(Err(format!("{key} (its record)")));
        };
        let candidates = self.candidates(&key, builds)?;
        let mut sources = BTreeMap::new();
        let mut from_elsewhere = BTreeMap::new();
        let mut shared_with = BTreeMap::new();
        let mut unsourced = Vec::new();
        for (name, rec) in &info.files {
            let own = dir.join(name);
            if matches_rec(&own, rec)? {
                sources.insert(name.clone(), own);
                continue;
            }
            let damaged_inode = inode(&own);
            let mut sharers = Vec::new();
            let mut found = None;
            for (label, path) in candidates.get(&rec.sha256).into_iter().flatten() {
                if damaged_inode.is_some() && inode(path) == damaged_inode {
                    sharers.push(label.clone());
                    continue;
                }
                if found.is_none() && matches_rec(path, rec)? {
                    found = Some((label.clone(), path.clone()));
                }
            }
            if !sharers.is_empty() {
                shared_with.insert(name.clone(), sharers);
            }
            match found {
                Some((label, path)) => {
                    from_elsewhere.insert(name.clone(), label);
                    sources.insert(name.clone(), path);
                }
                None => unsourced.push(name.clone()),
            }
        }
        if !unsourced.is_empty() {
            return Ok(Err(format!("{key}: {}", unsourced.join(", "))));
        }
        let manifest = [
            dir.join(ENTRY_MANIFEST),
            self.entry_dir(&twin).join(ENTRY_MANIFEST),
        ]
        .iter()
        .filter_map(|p| safe::read_limited(p, RECORD_LIMIT).ok())
        .chain(builds.iter().map(|b| b.plan.manifest_bytes.clone()))
        .find(|bytes| manifest_agrees(bytes, &info));
        let Some(manifest) = manifest else {
            return Ok(Err(format!("{key} (its manifest.json)")));
        };
        Ok(Ok(EntryPlan {
            key,
            sources,
            manifest,
            report: RepairedEntry {
                entry: key.to_string(),
                sharing: key.sharing,
                referenced_by,
                mismatches,
                sources: from_elsewhere,
                shared_with,
                record_from,
            },
            info,
        }))
    }

    /// Every place bytes of a given digest may be found, by digest, in a fixed order: the
    /// other entries of the store (their records believed only when they hash to their
    /// names), the objects, then the `--from` builds' outputs.
    fn candidates(
        &self,
        key: &EntryKey,
        builds: &[FromBuild],
    ) -> Result<BTreeMap<Sha256, Vec<(String, PathBuf)>>> {
        let mut out: BTreeMap<Sha256, Vec<(String, PathBuf)>> = BTreeMap::new();
        for name in self.names("store")? {
            let Some(other) = EntryKey::parse(&name) else {
                continue;
            };
            if other == *key {
                continue;
            }
            let Ok(info) = self.read_entry(&other) else {
                continue;
            };
            for (f, rec) in &info.files {
                let p = self.entry_dir(&other).join(f);
                out.entry(rec.sha256)
                    .or_default()
                    .push((format!("{other}/{f}"), p));
            }
        }
        let objects = self.path.join(super::objects::OBJECTS);
        for name in self.names(super::objects::OBJECTS).unwrap_or_default() {
            if let Some((d, _)) = super::objects::parse_object_name(&name) {
                out.entry(d)
                    .or_default()
                    .push((format!("objects/{name}"), objects.join(&name)));
            }
        }
        for b in builds {
            for (f, rec) in &b.plan.info.files {
                if let Some((p, _)) = b.plan.sources.get(f) {
                    out.entry(rec.sha256)
                        .or_default()
                        .push((format!("{}: {f}", b.manifest.display()), p.clone()));
                }
            }
        }
        Ok(out)
    }
}

/// The file at `p` is a regular file (not followed) whose bytes hash to `rec`.
fn matches_rec(p: &Path, rec: &FileRec) -> Result<bool> {
    if safe::kind(p)? != Kind::File {
        return Ok(false);
    }
    let Ok(f) = fsx::open_regular(p, "repair source", false) else {
        return Ok(false);
    };
    let (sha, size) = Sha256::of_reader(f, p)?;
    Ok(sha == rec.sha256 && size == rec.size)
}

/// The (device, inode) of a regular file, not followed.
fn inode(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
}

/// A manifest is the entry's only when it parses and its subjects are exactly the entry's
/// files with their digests (it is not part of the identity, so it must agree with it).
fn manifest_agrees(bytes: &[u8], info: &EntryInfo) -> bool {
    let Ok(st) = pinforge_record::manifest::Statement::parse(bytes, Path::new(ENTRY_MANIFEST))
    else {
        return false;
    };
    let subjects: BTreeMap<&str, Option<Sha256>> = st
        .subject
        .iter()
        .map(|s| (s.name.as_str(), s.sha256()))
        .collect();
    subjects.len() == info.files.len()
        && info
            .files
            .iter()
            .all(|(n, r)| subjects.get(n.as_str()) == Some(&Some(r.sha256)))
}
