//! The install root (`rollback/`): an immutable store of build outputs named by their digest,
//! three named layers (live, control, original substrate), one `current` path consumers run
//! through, a lock, a journal present only during a transaction, and receipts.
//!
//! ```text
//! rollback/
//!   store/<output-digest>/        immutable entry: the artifacts, links, entry.json
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

use crate::digest::Sha256;
use crate::error::{Error, IoContext, Result};
use crate::fsx;
use crate::manifest::Statement;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The three layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

/// What a store entry is: recorded once, when the entry is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// Output digest (the entry's name).
    pub digest: Sha256,
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
    /// The build's input digest.
    pub input_digest: Sha256,
    /// Files: path → (sha256, size).
    pub files: BTreeMap<String, (Sha256, u64)>,
    /// Links among the outputs: path → target.
    pub links: BTreeMap<String, String>,
}

/// One layer's entry in a generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Output digest.
    pub digest: Sha256,
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
}

/// A generation: the whole visible state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenState {
    /// Generation number.
    pub gen: u64,
    /// Layers.
    pub layers: BTreeMap<Layer, Slot>,
    /// Which layer `current` shows.
    pub current: Option<Layer>,
    /// Earlier live entries, most recent last: what `rollback` returns to.
    pub live_history: Vec<Slot>,
}

impl GenState {
    fn current_slot(&self) -> Option<(Layer, &Slot)> {
        let l = self.current?;
        self.layers.get(&l).map(|s| (l, s))
    }
}

/// The journal: written before the commit point, removed after the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Transaction id (also the receipt's sequence number).
    pub txid: u64,
    /// install | rollback.
    pub op: String,
    /// Generation before.
    pub from_gen: u64,
    /// Generation being created.
    pub to_gen: u64,
    /// Staging folder (installs).
    pub staging: Option<String>,
    /// Entry being added (installs).
    pub entry: Option<Sha256>,
    /// Whether that entry already existed (then undo must not remove it).
    pub entry_preexisted: bool,
    /// staging | commit.
    pub phase: String,
    /// Layer concerned.
    pub layer: Layer,
}

/// Verification of an entry through a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// Everything matched.
    pub ok: bool,
    /// Path checked through (e.g. `rollback/current`).
    pub through: String,
    /// Files checked.
    pub files: usize,
    /// Differences.
    pub mismatches: Vec<crate::manifest::Mismatch>,
}

/// A receipt: what a transaction did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    /// Sequence number.
    pub seq: u64,
    /// install | rollback | recover.
    pub op: String,
    /// Layer changed (install) or shown (rollback).
    pub layer: Layer,
    /// What the layer (install) or `current` (rollback) showed before.
    pub from: Option<Slot>,
    /// What it shows now.
    pub to: Option<Slot>,
    /// Which layer `current` showed before and after.
    pub current_before: Option<Layer>,
    /// See `current_before`.
    pub current_after: Option<Layer>,
    /// RFC 3339.
    pub time: String,
    /// Verification after the swap.
    pub verification: Verification,
    /// Whether the swap was reverted because verification failed.
    pub reverted: bool,
    /// Rollbacks: whether the restored state matches, byte for byte, the entry as recorded
    /// when it was installed (every file's SHA-256 and size, every link).
    pub restoration_matches_recorded: Option<bool>,
    /// True when the state already was the requested one (nothing swapped).
    pub unchanged: bool,
    /// Timings in microseconds: stage, verify, commit (the rename), total.
    pub timings_us: BTreeMap<String, u64>,
    /// Generation committed.
    pub gen: u64,
}

/// What `status` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Install root.
    pub root: PathBuf,
    /// `{layer, digest, recipe, variant}` of current, or null.
    pub current: Option<StatusSlot>,
    /// Each layer or null.
    pub layers: BTreeMap<String, Option<StatusSlot>>,
    /// The unfinished transaction, or null.
    pub transaction: Option<Journal>,
    /// Generation.
    pub gen: u64,
    /// Earlier live entries (the rollback stack), most recent last.
    pub live_history: Vec<Slot>,
}

/// A layer in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusSlot {
    /// Layer name.
    pub layer: String,
    /// Output digest.
    pub digest: Sha256,
    /// Recipe.
    pub recipe: String,
    /// Variant.
    pub variant: String,
    /// Result of the last verification of this entry recorded in a receipt.
    pub verification: String,
}

/// Test hooks: `PINFORGE_CRASH_AT=op:N` makes the process SIGKILL itself right after step N of
/// `op` (install or rollback); `PINFORGE_FAIL_WRITE_AFTER=BYTES` makes staging copies fail with
/// ENOSPC after that many bytes (where a small filesystem cannot be mounted);
/// `PINFORGE_FS_PROBE=nosymlink` makes the filesystem probe report no symlink support.
fn crash_point(op: &str, step: u32) {
    if let Ok(v) = std::env::var("PINFORGE_CRASH_AT") {
        if v == format!("{op}:{step}") {
            kill_self();
        }
    }
}

#[allow(unsafe_code)]
fn kill_self() {
    // SAFETY: getpid and kill have no memory-safety preconditions; SIGKILL ends the process
    // here, which is what the crash-consistency tests need (no destructors, no flushing).
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// The number of crash points of each operation (for tests and the closing report).
pub const INSTALL_STEPS: u32 = 10;
/// See [`INSTALL_STEPS`].
pub const ROLLBACK_STEPS: u32 = 7;

/// An install root.
pub struct Root {
    path: PathBuf,
}

/// How staging placed the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StageMode {
    /// Hard links into the build folder (no data copied).
    Link,
    /// Copies (different filesystem).
    Copy,
}

impl Root {
    /// Open (creating on first use) the install root, probing that the filesystem has what the
    /// commit protocol needs.
    pub fn open(path: &Path) -> Result<Root> {
        let path = fsx::absolute(path)?;
        fsx::create_dir_all(&path)?;
        let root = Root { path };
        if !root.path.join("state").exists() {
            root.probe_fs()?;
        }
        for d in ["store", "gens", "receipts"] {
            fsx::create_dir_all(&root.path.join(d))?;
        }
        Ok(root)
    }

    /// The root folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Refuse filesystems without symlinks or atomic rename over an existing link.
    fn probe_fs(&self) -> Result<()> {
        let refuse = |why: String| {
            Error::input(
                self.path.display(),
                format!("install root refused: the filesystem {why}"),
            )
            .with_hint(
                "put the install root (--root / PINFORGE_ROOT) on a POSIX filesystem \
                 (ext4, xfs, btrfs, tmpfs): the commit point is a rename(2) of a symlink",
            )
        };
        let a = self.path.join(".probe-a");
        let b = self.path.join(".probe-b");
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
        let simulated = std::env::var("PINFORGE_FS_PROBE").ok().as_deref() == Some("nosymlink");
        if simulated {
            return Err(refuse("does not support symbolic links (simulated)".into()));
        }
        std::os::unix::fs::symlink("x", &a)
            .map_err(|e| refuse(format!("cannot create symbolic links ({e})")))?;
        std::os::unix::fs::symlink("y", &b)
            .map_err(|e| refuse(format!("cannot create symbolic links ({e})")))?;
        std::fs::rename(&a, &b)
            .map_err(|e| refuse(format!("cannot atomically rename over a link ({e})")))?;
        let target = std::fs::read_link(&b).map_err(|e| refuse(format!("lost a link ({e})")))?;
        let _ = std::fs::remove_file(&b);
        if target != Path::new("x") {
            return Err(refuse("did not replace a link atomically".into()));
        }
        Ok(())
    }

    fn lock(&self) -> Result<std::fs::File> {
        use fs4::fs_std::FileExt;
        let p = self.path.join("lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .at("open", &p)?;
        f.lock_exclusive().at("lock", &p)?;
        Ok(f)
    }

    fn journal_path(&self) -> PathBuf {
        self.path.join("journal.json")
    }

    fn read_journal(&self) -> Result<Option<Journal>> {
        let p = self.journal_path();
        if !p.exists() {
            return Ok(None);
        }
        let text = fsx::read_to_string(&p)?;
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::input(p.display(), format!("journal unreadable: {e}")).with_hint(
                "the journal is written atomically, so this is outside damage; inspect it, \
                 then remove it only if `state` is known good",
            )
        })
    }

    fn write_journal(&self, j: &Journal) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(j).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic(&self.journal_path(), &bytes)
    }

    fn remove_journal(&self) -> Result<()> {
        let p = self.journal_path();
        match std::fs::remove_file(&p) {
            Ok(()) => fsx::sync_dir(&self.path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", &p, e)),
        }
    }

    /// The generation `state` points at (0 with an empty state when nothing was installed).
    fn committed_gen(&self) -> Result<u64> {
        let link = self.path.join("state");
        match std::fs::read_link(&link) {
            Ok(t) => parse_gen(&t).ok_or_else(|| {
                Error::input(
                    link.display(),
                    format!("`state` points at {}, not at a generation", t.display()),
                )
                .with_hint("the install root was changed by hand; restore the link to gens/<n>")
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::io("read link", &link, e)),
        }
    }

    fn read_gen(&self, gen: u64) -> Result<GenState> {
        if gen == 0 {
            return Ok(GenState::default());
        }
        let p = self.gen_dir(gen).join("state.json");
        let text = fsx::read_to_string(&p)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::input(p.display(), format!("generation state unreadable: {e}")))
    }

    fn gen_dir(&self, gen: u64) -> PathBuf {
        self.path.join("gens").join(gen.to_string())
    }

    fn entry_dir(&self, digest: &Sha256) -> PathBuf {
        self.path.join("store").join(digest.to_hex())
    }

    /// Read an entry's record.
    pub fn entry_info(&self, digest: &Sha256) -> Result<EntryInfo> {
        let p = self.entry_dir(digest).join("entry.json");
        let text = fsx::read_to_string(&p)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::input(p.display(), format!("store entry unreadable: {e}")))
    }

    /// Write generation `gs.gen`: its link farm and state.json, fsynced.
    fn write_gen(&self, gs: &GenState) -> Result<()> {
        let dir = self.gen_dir(gs.gen);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).at("remove stale generation", &dir)?;
        }
        fsx::create_dir_all(&dir)?;
        for (layer, slot) in &gs.layers {
            let target = PathBuf::from("../../store").join(slot.digest.to_hex());
            let link = dir.join(layer.as_str());
            std::os::unix::fs::symlink(&target, &link).at("create link", &link)?;
        }
        if let Some((_, slot)) = gs.current_slot() {
            let target = PathBuf::from("../../store").join(slot.digest.to_hex());
            let link = dir.join("current");
            std::os::unix::fs::symlink(&target, &link).at("create link", &link)?;
        }
        let bytes = serde_json::to_vec_pretty(gs).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic(&dir.join("state.json"), &bytes)?;
        fsx::sync_dir(&dir)?;
        fsx::sync_dir(&self.path.join("gens"))
    }

    /// Make sure the stable consumer paths exist (`current`, `live`, ... -> state/...).
    fn ensure_stable_links(&self) -> Result<()> {
        for name in ["current", "live", "control", "original"] {
            let link = self.path.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(PathBuf::from("state").join(name), &link)
                    .at("create link", &link)?;
            }
        }
        fsx::sync_dir(&self.path)
    }

    /// Prepare `state.tmp` pointing at `gen` (not yet the commit).
    fn prepare_swap(&self, gen: u64) -> Result<PathBuf> {
        let tmp = self.path.join("state.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(PathBuf::from("gens").join(gen.to_string()), &tmp)
            .at("create link", &tmp)?;
        fsx::sync_dir(&self.path)?;
        Ok(tmp)
    }

    /// The commit point: one rename(2) of a link.
    fn swap(&self, tmp: &Path) -> Result<u64> {
        let t = Instant::now();
        let state = self.path.join("state");
        std::fs::rename(tmp, &state).at("rename over", &state)?;
        fsx::sync_dir(&self.path)?;
        Ok(t.elapsed().as_micros() as u64)
    }

    fn next_seq(&self) -> Result<u64> {
        let dir = self.path.join("receipts");
        let mut max = 0;
        for e in std::fs::read_dir(&dir)
            .at("read directory", &dir)?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = name.split('-').next().and_then(|n| n.parse::<u64>().ok()) {
                max = max.max(n);
            }
        }
        Ok(max + 1)
    }

    fn write_receipt(&self, r: &Receipt) -> Result<PathBuf> {
        let p = self
            .path
            .join("receipts")
            .join(format!("{:06}-{}.json", r.seq, r.op));
        let bytes = serde_json::to_vec_pretty(r).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic(&p, &bytes)?;
        Ok(p)
    }

    /// Re-hash an entry through `through` (a path that resolves to the entry).
    pub fn verify_through(&self, info: &EntryInfo, through: &Path) -> Result<Verification> {
        let mut mismatches = Vec::new();
        for (name, (sha, size)) in &info.files {
            let p = through.join(name);
            let shown = p.display().to_string();
            match std::fs::metadata(&p) {
                Err(_) => mismatches.push(crate::manifest::Mismatch {
                    path: shown,
                    expected: sha.to_string(),
                    actual: "missing".into(),
                    role: "installed".into(),
                }),
                Ok(_) => {
                    let (actual, n) = Sha256::of_file(&p)?;
                    if actual != *sha || n != *size {
                        mismatches.push(crate::manifest::Mismatch {
                            path: shown,
                            expected: sha.to_string(),
                            actual: actual.to_string(),
                            role: "installed".into(),
                        });
                    }
                }
            }
        }
        for (name, target) in &info.links {
            let p = through.join(name);
            let actual = std::fs::read_link(&p)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "missing".into());
            if &actual != target {
                mismatches.push(crate::manifest::Mismatch {
                    path: p.display().to_string(),
                    expected: format!("link to {target}"),
                    actual,
                    role: "installed".into(),
                });
            }
        }
        Ok(Verification {
            ok: mismatches.is_empty(),
            through: through.display().to_string(),
            files: info.files.len(),
            mismatches,
        })
    }

    // -----------------------------------------------------------------------------------------
    // Recovery.

    /// Finish or undo an interrupted transaction. Called with the lock held.
    fn recover(&self) -> Result<Option<PathBuf>> {
        let Some(j) = self.read_journal()? else {
            // No journal: clean leftovers of a crash before the journal was written.
            self.clean_orphans(None)?;
            return Ok(None);
        };
        let committed = self.committed_gen()?;
        let receipt = if committed == j.to_gen && j.phase == "commit" {
            // The rename happened: roll forward (verify through current, write the receipt).
            let before = self.read_gen(j.from_gen)?;
            let after = self.read_gen(j.to_gen)?;
            let v = self.verify_layer(&after, j.layer)?;
            if !v.ok {
                // Same rule as a live run: a failed post-swap check reverts.
                let tmp = self.prepare_swap(j.from_gen)?;
                self.swap(&tmp)?;
            }
            let r = Receipt {
                seq: j.txid,
                op: j.op.clone(),
                layer: j.layer,
                from: before.layers.get(&j.layer).cloned(),
                to: after.layers.get(&j.layer).cloned(),
                current_before: before.current,
                current_after: after.current,
                time: crate::manifest::now_rfc3339(),
                reverted: !v.ok,
                verification: v,
                restoration_matches_recorded: None,
                unchanged: false,
                timings_us: BTreeMap::from([("recovered".to_string(), 1)]),
                gen: j.to_gen,
            };
            Some(self.write_receipt(&r)?)
        } else if committed == j.from_gen {
            // Not committed: undo everything the journal says was started.
            let _ = std::fs::remove_file(self.path.join("state.tmp"));
            let g = self.gen_dir(j.to_gen);
            if g.exists() {
                std::fs::remove_dir_all(&g).at("remove", &g)?;
            }
            if let Some(s) = &j.staging {
                let p = self.path.join(s);
                if p.exists() {
                    remove_tree(&p)?;
                }
            }
            if let (Some(d), false) = (&j.entry, j.entry_preexisted) {
                let e = self.entry_dir(d);
                if e.exists() && !self.referenced().contains(d) {
                    remove_tree(&e)?;
                }
            }
            fsx::sync_dir(&self.path.join("store"))?;
            None
        } else {
            return Err(Error::input(
                self.journal_path().display(),
                format!(
                    "unexplained state: the journal describes generation {} -> {}, but `state` \
                     points at generation {committed}",
                    j.from_gen, j.to_gen
                ),
            )
            .with_hint(
                "pinforge does not guess; inspect rollback/state and the journal, fix the \
                        link by hand, then remove the journal",
            ));
        };
        self.remove_journal()?;
        self.clean_orphans(None)?;
        Ok(receipt)
    }

    /// Remove staging folders, `state.tmp` and generations newer than the committed one that
    /// no journal accounts for (a crash before the journal was written leaves them).
    fn clean_orphans(&self, keep_staging: Option<&str>) -> Result<()> {
        let store = self.path.join("store");
        for e in std::fs::read_dir(&store)
            .at("read directory", &store)?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".stage-") && Some(name.as_str()) != keep_staging {
                remove_tree(&e.path())?;
            }
        }
        let committed = self.committed_gen()?;
        let gens = self.path.join("gens");
        for e in std::fs::read_dir(&gens)
            .at("read directory", &gens)?
            .flatten()
        {
            if let Some(n) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) {
                if n > committed {
                    std::fs::remove_dir_all(e.path()).at("remove", &e.path())?;
                }
            }
        }
        let _ = std::fs::remove_file(self.path.join("state.tmp"));
        Ok(())
    }

    /// Digests referenced by the committed generation (layers and history).
    fn referenced(&self) -> Vec<Sha256> {
        let gs = self
            .committed_gen()
            .and_then(|g| self.read_gen(g))
            .unwrap_or_default();
        gs.layers
            .values()
            .chain(&gs.live_history)
            .map(|s| s.digest)
            .collect()
    }

    /// Verify the entry a layer holds, through the path consumers of that layer use: `current`
    /// when the layer is the current one, its own stable link otherwise.
    fn verify_layer(&self, gs: &GenState, layer: Layer) -> Result<Verification> {
        let Some(slot) = gs.layers.get(&layer) else {
            return self.verify_state(gs);
        };
        let through = if gs.current == Some(layer) {
            self.path.join("current")
        } else {
            self.path.join(layer.as_str())
        };
        let info = self.entry_info(&slot.digest)?;
        self.verify_through(&info, &through)
    }

    fn verify_state(&self, gs: &GenState) -> Result<Verification> {
        match gs.current_slot() {
            Some((_, slot)) => {
                let info = self.entry_info(&slot.digest)?;
                self.verify_through(&info, &self.path.join("current"))
            }
            None => Ok(Verification {
                ok: true,
                through: self.path.join("current").display().to_string(),
                files: 0,
                mismatches: vec![],
            }),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Operations.

    /// Install the outputs of `manifest` into `layer`.
    pub fn install(
        &self,
        manifest_path: &Path,
        layer: Layer,
        mode: Option<StageMode>,
    ) -> Result<InstallOutcome> {
        let t_total = Instant::now();
        let statement = Statement::read(manifest_path)?;
        let artifact_root = statement.artifact_root(manifest_path);
        let info = entry_info_of(&statement)?;
        let _lock = self.lock()?;
        let recovered = self.recover()?;

        let from_gen = self.committed_gen()?;
        let before = self.read_gen(from_gen)?;
        let slot = Slot {
            digest: info.digest,
            recipe: info.recipe.clone(),
            variant: info.variant.clone(),
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
        after.layers.insert(layer, slot.clone());
        let seq = self.next_seq()?;

        if after.layers == before.layers && after.current == before.current {
            // Already installed: verify and record, no swap.
            let v = self.verify_layer(&before, layer)?;
            let r = Receipt {
                seq,
                op: "install".into(),
                layer,
                from: before.layers.get(&layer).cloned(),
                to: Some(slot),
                current_before: before.current,
                current_after: before.current,
                time: crate::manifest::now_rfc3339(),
                verification: v.clone(),
                reverted: false,
                restoration_matches_recorded: None,
                unchanged: true,
                timings_us: BTreeMap::from([(
                    "total".into(),
                    t_total.elapsed().as_micros() as u64,
                )]),
                gen: from_gen,
            };
            let receipt = self.write_receipt(&r)?;
            return Ok(InstallOutcome {
                receipt,
                recovered,
                verification: v,
                stage_mode: None,
                entry: self.entry_dir(&info.digest),
            });
        }

        let entry_dir = self.entry_dir(&info.digest);
        let entry_preexisted = entry_dir.exists();
        let staging_name = format!(".stage-{seq}");
        let staging = self.path.join("store").join(&staging_name);
        let mut journal = Journal {
            txid: seq,
            op: "install".into(),
            from_gen,
            to_gen: after.gen,
            staging: Some(format!("store/{staging_name}")),
            entry: Some(info.digest),
            entry_preexisted,
            phase: "staging".into(),
            layer,
        };
        self.write_journal(&journal)?;
        crash_point("install", 1);

        let mut timings = BTreeMap::new();
        // Everything between the journal and the new generation either completes or is undone
        // here (a crash in between is undone by recovery from the journal instead).
        let placed = self.place_entry(
            &info,
            &entry_dir,
            &staging,
            &artifact_root,
            manifest_path,
            mode,
            &mut timings,
        );
        let used_mode = match placed {
            Ok(m) => m,
            Err(e) => {
                self.abort_install(&journal)?;
                return Err(e);
            }
        };
        crash_point("install", 4);

        self.write_gen(&after)?;
        crash_point("install", 5);
        let tmp = self.prepare_swap(after.gen)?;
        journal.phase = "commit".into();
        journal.staging = None;
        self.write_journal(&journal)?;
        crash_point("install", 6);
        let commit_us = self.swap(&tmp)?;
        timings.insert("commit".to_string(), commit_us);
        self.ensure_stable_links()?;
        crash_point("install", 7);

        let (v, reverted) = self.check_swap(&after, layer, from_gen, &mut timings)?;
        crash_point("install", 8);
        timings.insert("total".to_string(), t_total.elapsed().as_micros() as u64);
        let r = Receipt {
            seq,
            op: "install".into(),
            layer,
            from: before.layers.get(&layer).cloned(),
            to: Some(slot),
            current_before: before.current,
            current_after: if reverted {
                before.current
            } else {
                after.current
            },
            time: crate::manifest::now_rfc3339(),
            verification: v.clone(),
            reverted,
            restoration_matches_recorded: None,
            unchanged: false,
            timings_us: timings,
            gen: if reverted { from_gen } else { after.gen },
        };
        let receipt = self.write_receipt(&r)?;
        crash_point("install", 9);
        self.remove_journal()?;
        crash_point("install", 10);
        if reverted {
            return Err(self.reverted_error(&v, &receipt));
        }
        Ok(InstallOutcome {
            receipt,
            recovered,
            verification: v,
            stage_mode: used_mode,
            entry: entry_dir,
        })
    }

    /// Put the entry into the store: reuse a verified existing entry, or stage the build's
    /// files (links or copies), verify them against the manifest, seal, rename into place.
    #[allow(clippy::too_many_arguments)]
    fn place_entry(
        &self,
        info: &EntryInfo,
        entry_dir: &Path,
        staging: &Path,
        artifact_root: &Path,
        manifest_path: &Path,
        mode: Option<StageMode>,
        timings: &mut BTreeMap<String, u64>,
    ) -> Result<Option<StageMode>> {
        if entry_dir.exists() {
            // Immutable entries are reused, but only after they are verified.
            let v = self.verify_through(info, entry_dir)?;
            if !v.ok {
                return Err(mismatch_error(
                    entry_dir,
                    "existing store entry is damaged",
                    &v,
                ));
            }
            crash_point("install", 2);
            crash_point("install", 3);
            return Ok(None);
        }
        let t = Instant::now();
        let m = stage(artifact_root, staging, info, mode)?;
        // The manifest travels with the entry: what it was built from, for smoke and audit.
        fsx::write_atomic(&staging.join("manifest.json"), &fsx::read(manifest_path)?)?;
        timings.insert("stage".to_string(), t.elapsed().as_micros() as u64);
        crash_point("install", 2);
        let t = Instant::now();
        let v = self.verify_through(info, staging)?;
        timings.insert("verify_staged".to_string(), t.elapsed().as_micros() as u64);
        if !v.ok {
            return Err(mismatch_error(
                manifest_path,
                "build outputs do not match the manifest; nothing installed",
                &v,
            ));
        }
        crash_point("install", 3);
        seal(staging)?;
        std::fs::rename(staging, entry_dir).at("rename into", entry_dir)?;
        fsx::sync_dir(&self.path.join("store"))?;
        Ok(Some(m))
    }

    /// The post-swap check shared by install and rollback: verify the changed layer through
    /// its consumers' path and, on a mismatch, swap back to the previous generation.
    fn check_swap(
        &self,
        after: &GenState,
        layer: Layer,
        from_gen: u64,
        timings: &mut BTreeMap<String, u64>,
    ) -> Result<(Verification, bool)> {
        let t = Instant::now();
        let v = self.verify_layer(after, layer)?;
        timings.insert(
            "verify_after_swap".to_string(),
            t.elapsed().as_micros() as u64,
        );
        if !v.ok {
            let tmp = self.prepare_swap(from_gen)?;
            self.swap(&tmp)?;
        }
        let reverted = !v.ok;
        Ok((v, reverted))
    }

    fn reverted_error(&self, v: &Verification, receipt: &Path) -> Error {
        mismatch_error(
            Path::new(&v.through),
            &format!(
                "verification after the swap failed, so the swap was reverted (receipt {})",
                receipt.display()
            ),
            v,
        )
    }

    fn abort_install(&self, j: &Journal) -> Result<()> {
        if let Some(s) = &j.staging {
            let p = self.path.join(s);
            if p.exists() {
                remove_tree(&p)?;
            }
        }
        self.remove_journal()
    }

    /// Point `current` at another layer (`to`), or with `None` restore the previous live entry
    /// (pop the rollback stack).
    pub fn rollback(&self, to: Option<Layer>) -> Result<RollbackOutcome> {
        let t_total = Instant::now();
        let _lock = self.lock()?;
        let recovered = self.recover()?;
        let from_gen = self.committed_gen()?;
        let before = self.read_gen(from_gen)?;
        let mut after = before.clone();
        after.gen = from_gen + 1;
        let layer = match to {
            Some(l) => {
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
            None => {
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
        let target = after
            .layers
            .get(&layer)
            .cloned()
            .ok_or_else(|| Error::Internal("rollback target vanished".into()))?;
        let info = self.entry_info(&target.digest)?;
        // The restored entry must still be what was recorded when it was installed.
        let pre = self.verify_through(&info, &self.entry_dir(&target.digest))?;
        if !pre.ok {
            return Err(mismatch_error(
                &self.entry_dir(&target.digest),
                &format!("the {layer} entry is damaged; not switching to it"),
                &pre,
            ));
        }
        let mut timings = BTreeMap::new();
        let unchanged = after.layers == before.layers && after.current == before.current;
        let (v, reverted, gen) = if unchanged {
            (self.verify_state(&before)?, false, from_gen)
        } else {
            let mut journal = Journal {
                txid: seq,
                op: "rollback".into(),
                from_gen,
                to_gen: after.gen,
                staging: None,
                entry: None,
                entry_preexisted: true,
                phase: "staging".into(),
                layer,
            };
            self.write_journal(&journal)?;
            crash_point("rollback", 1);
            self.write_gen(&after)?;
            crash_point("rollback", 2);
            let tmp = self.prepare_swap(after.gen)?;
            journal.phase = "commit".into();
            self.write_journal(&journal)?;
            crash_point("rollback", 3);
            timings.insert("commit".to_string(), self.swap(&tmp)?);
            self.ensure_stable_links()?;
            crash_point("rollback", 4);
            let (v, reverted) = self.check_swap(&after, layer, from_gen, &mut timings)?;
            crash_point("rollback", 5);
            (v, reverted, if reverted { from_gen } else { after.gen })
        };
        timings.insert("total".to_string(), t_total.elapsed().as_micros() as u64);
        let r = Receipt {
            seq,
            op: "rollback".into(),
            layer,
            from: before.current_slot().map(|(_, s)| s.clone()),
            to: Some(target),
            current_before: before.current,
            current_after: if reverted {
                before.current
            } else {
                after.current
            },
            time: crate::manifest::now_rfc3339(),
            restoration_matches_recorded: Some(v.ok),
            verification: v.clone(),
            reverted,
            unchanged,
            timings_us: timings,
            gen,
        };
        let receipt = self.write_receipt(&r)?;
        if !unchanged {
            crash_point("rollback", 6);
            self.remove_journal()?;
            crash_point("rollback", 7);
        }
        if reverted {
            return Err(self.reverted_error(&v, &receipt));
        }
        Ok(RollbackOutcome {
            receipt,
            recovered,
            verification: v,
            layer,
        })
    }

    /// The state as it is now (read-only: no lock, no recovery; an unfinished transaction is
    /// reported, not resolved).
    pub fn status(&self) -> Result<Status> {
        let gen = self.committed_gen()?;
        let gs = self.read_gen(gen)?;
        let last = self.last_verifications()?;
        let show = |layer: Layer, s: &Slot| StatusSlot {
            layer: layer.to_string(),
            digest: s.digest,
            recipe: s.recipe.clone(),
            variant: s.variant.clone(),
            verification: last
                .get(&s.digest)
                .map(|ok| if *ok { "ok" } else { "mismatch" })
                .unwrap_or("unverified")
                .to_string(),
        };
        Ok(Status {
            root: self.path.clone(),
            current: gs.current_slot().map(|(l, s)| show(l, s)),
            layers: Layer::ALL
                .iter()
                .map(|l| (l.to_string(), gs.layers.get(l).map(|s| show(*l, s))))
                .collect(),
            transaction: self.read_journal()?,
            gen,
            live_history: gs.live_history.clone(),
        })
    }

    fn last_verifications(&self) -> Result<BTreeMap<Sha256, bool>> {
        let dir = self.path.join("receipts");
        let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
            .at("read directory", &dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        let mut out = BTreeMap::new();
        for p in names {
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            let Ok(r) = serde_json::from_str::<Receipt>(&text) else {
                continue;
            };
            if let Some(to) = &r.to {
                if r.verification.files > 0 || r.verification.ok {
                    out.insert(to.digest, r.verification.ok);
                }
            }
        }
        Ok(out)
    }

    /// Re-hash an installed layer (or `current`) through its stable path.
    pub fn verify_installed(&self, layer: Option<Layer>) -> Result<Verification> {
        let gen = self.committed_gen()?;
        let gs = self.read_gen(gen)?;
        let (slot, through) = match layer {
            None => {
                let (_, s) = gs.current_slot().ok_or_else(|| {
                    Error::input(self.path.display(), "nothing is installed")
                        .with_hint("`pinforge install ...` first")
                })?;
                (s.clone(), self.path.join("current"))
            }
            Some(l) => (
                gs.layers.get(&l).cloned().ok_or_else(|| {
                    Error::input(format!("layer `{l}`"), "nothing is installed in that layer")
                })?,
                self.path.join(l.as_str()),
            ),
        };
        let info = self.entry_info(&slot.digest)?;
        self.verify_through(&info, &through)
    }

    /// Remove store entries and generations nothing references (nor the journal).
    pub fn gc(&self) -> Result<GcOutcome> {
        let _lock = self.lock()?;
        self.recover()?;
        let keep = self.referenced();
        let committed = self.committed_gen()?;
        let mut removed = Vec::new();
        let store = self.path.join("store");
        for e in std::fs::read_dir(&store)
            .at("read directory", &store)?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Ok(d) = name.parse::<Sha256>() {
                if !keep.contains(&d) {
                    remove_tree(&e.path())?;
                    removed.push(name);
                }
            }
        }
        let gens = self.path.join("gens");
        let mut gens_removed = 0;
        for e in std::fs::read_dir(&gens)
            .at("read directory", &gens)?
            .flatten()
        {
            if let Some(n) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) {
                if n != committed {
                    std::fs::remove_dir_all(e.path()).at("remove", &e.path())?;
                    gens_removed += 1;
                }
            }
        }
        fsx::sync_dir(&store)?;
        Ok(GcOutcome {
            removed_entries: removed,
            removed_generations: gens_removed,
            kept_entries: keep.len(),
        })
    }
}

/// Result of `install`.
#[derive(Debug, Clone, Serialize)]
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
}

/// Result of `rollback`.
#[derive(Debug, Clone, Serialize)]
pub struct RollbackOutcome {
    /// Receipt path.
    pub receipt: PathBuf,
    /// Receipt of a recovered earlier transaction, if any.
    pub recovered: Option<PathBuf>,
    /// Post-swap verification.
    pub verification: Verification,
    /// The layer `current` now shows.
    pub layer: Layer,
}

/// Result of `gc`.
#[derive(Debug, Clone, Serialize)]
pub struct GcOutcome {
    /// Store entries removed.
    pub removed_entries: Vec<String>,
    /// Old generations removed.
    pub removed_generations: usize,
    /// Entries kept.
    pub kept_entries: usize,
}

/// A failed verification as an error naming the first differing file.
fn mismatch_error(subject: &Path, what: &str, v: &Verification) -> Error {
    let first = v.mismatches.first().map(|m| m.path.as_str()).unwrap_or("?");
    Error::check(
        subject.display(),
        format!(
            "{what} ({} mismatch(es), first: {first})",
            v.mismatches.len()
        ),
    )
}

fn parse_gen(target: &Path) -> Option<u64> {
    let mut c = target.components();
    if c.next()?.as_os_str() != "gens" {
        return None;
    }
    c.next()?.as_os_str().to_str()?.parse().ok()
}

/// The store entry a manifest describes: its files, links and output digest (SHA-256 over the
/// sorted `path sha256 size` and `path -> target` lines).
pub fn entry_info_of(st: &Statement) -> Result<EntryInfo> {
    let mut files = BTreeMap::new();
    for s in &st.subject {
        let sha = s.sha256().ok_or_else(|| {
            Error::input(
                format!("subject `{}`", s.name),
                "manifest subject without sha256",
            )
        })?;
        let size = s
            .annotations
            .get("size")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| {
                Error::input(
                    format!("subject `{}`", s.name),
                    "manifest subject without size",
                )
            })?;
        check_rel(&s.name)?;
        files.insert(s.name.clone(), (sha, size));
    }
    let mut links = BTreeMap::new();
    for b in &st.predicate.run_details.byproducts {
        if let Some(t) = b.annotations.get("link_target").and_then(|v| v.as_str()) {
            check_rel(&b.name)?;
            links.insert(b.name.clone(), t.to_string());
        }
    }
    let mut text = String::new();
    for (p, (sha, size)) in &files {
        text.push_str(&format!("{p} {sha} {size}\n"));
    }
    for (p, t) in &links {
        text.push_str(&format!("{p} -> {t}\n"));
    }
    let params = &st.predicate.build_definition.external_parameters;
    Ok(EntryInfo {
        digest: Sha256::of_bytes(text.as_bytes()),
        recipe: params.recipe.clone(),
        variant: params.variant.clone(),
        input_digest: st.input_digest(),
        files,
        links,
    })
}

fn check_rel(name: &str) -> Result<()> {
    let p = Path::new(name);
    let ok = p
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if ok && !name.is_empty() {
        Ok(())
    } else {
        Err(Error::input(
            format!("`{name}`"),
            "manifest path escapes the artifact root",
        ))
    }
}

/// Place the entry's files in `staging`: hard links when the filesystem allows, copies
/// otherwise; every file and folder fsynced.
fn stage(
    src_root: &Path,
    staging: &Path,
    info: &EntryInfo,
    mode: Option<StageMode>,
) -> Result<StageMode> {
    fsx::create_dir_all(staging)?;
    let mut used = mode.unwrap_or(StageMode::Link);
    let fail_after: Option<u64> = std::env::var("PINFORGE_FAIL_WRITE_AFTER")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut written = 0u64;
    let mut dirs = vec![staging.to_path_buf()];
    for name in info.files.keys() {
        let from = src_root.join(name);
        let to = staging.join(name);
        let parent = fsx::parent_of(&to);
        if !dirs.contains(&parent) {
            fsx::create_dir_all(&parent)?;
            dirs.push(parent);
        }
        if !from.is_file() {
            return Err(Error::check(
                from.display(),
                "build output listed in the manifest is missing; rebuild, then install",
            ));
        }
        let linked = used == StageMode::Link && std::fs::hard_link(&from, &to).is_ok();
        if !linked {
            used = StageMode::Copy;
            copy_file(&from, &to, fail_after, &mut written)?;
        }
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .at("fsync", &to)?;
    }
    for (name, target) in &info.links {
        let to = staging.join(name);
        let parent = fsx::parent_of(&to);
        if !dirs.contains(&parent) {
            fsx::create_dir_all(&parent)?;
            dirs.push(parent);
        }
        std::os::unix::fs::symlink(target, &to).at("create link", &to)?;
    }
    let json = serde_json::to_vec_pretty(info).map_err(|e| Error::Internal(e.to_string()))?;
    fsx::write_atomic(&staging.join("entry.json"), &json)?;
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        fsx::sync_dir(d)?;
    }
    Ok(used)
}

fn copy_file(from: &Path, to: &Path, fail_after: Option<u64>, written: &mut u64) -> Result<()> {
    use std::io::{Read, Write};
    let mut src = std::fs::File::open(from).at("open", from)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .at("create", to)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src.read(&mut buf).at("read", from)?;
        if n == 0 {
            break;
        }
        if let Some(limit) = fail_after {
            if *written + n as u64 > limit {
                return Err(Error::io(
                    "write",
                    to,
                    std::io::Error::from(std::io::ErrorKind::StorageFull),
                ));
            }
        }
        dst.write_all(&buf[..n]).at("write", to)?;
        *written += n as u64;
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(from)
        .at("stat", from)?
        .permissions()
        .mode();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode & 0o755)).at("chmod", to)
}

/// Make an entry read-only before it enters the store (immutability against accidents; a
/// deliberate writer is caught by verification).
fn seal(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).at("read directory", dir)?.flatten() {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).at("stat", &p)?;
        if m.is_dir() {
            seal(&p)?;
        } else if m.is_file() {
            let mode = m.permissions().mode() & 0o555;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).at("chmod", &p)?;
        }
    }
    Ok(())
}

/// Remove a tree that may contain read-only files (sealed entries).
fn remove_tree(p: &Path) -> Result<()> {
    std::fs::remove_dir_all(p).at("remove", p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_names_round_trip() {
        for l in Layer::ALL {
            assert_eq!(Layer::parse(l.as_str()).expect("parse"), l);
        }
        assert!(Layer::parse("staging").is_err());
    }

    #[test]
    fn gen_links_parse() {
        assert_eq!(parse_gen(Path::new("gens/12")), Some(12));
        assert_eq!(parse_gen(Path::new("/elsewhere/12")), None);
        assert_eq!(parse_gen(Path::new("gens/x")), None);
    }

    #[test]
    fn manifest_paths_must_stay_inside() {
        assert!(check_rel("bin/libllama.so").is_ok());
        assert!(check_rel("../x").is_err());
        assert!(check_rel("/abs").is_err());
    }

    #[test]
    fn probe_refuses_simulated_filesystem_without_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::env::set_var("PINFORGE_FS_PROBE", "nosymlink");
        let r = Root::open(&dir.path().join("root"));
        std::env::remove_var("PINFORGE_FS_PROBE");
        let e = r.err().expect("refused");
        assert!(e.to_string().contains("symbolic links"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }
}
