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

//!
//! Nothing read back from the root is trusted (DESIGN §5): the root's own paths are derived
//! from typed ids (`gens/<u64>`, `store/<Sha256>`, `store/.stage-<txid>`), never taken from a
//! file; an entry's identity is recomputed from its content, modes and link targets and
//! compared with its folder name and with the generation that references it; devices, FIFOs
//! and sockets are refused before they are opened; a root whose committed state cannot be
//! read is damaged, never empty, and nothing is deleted from it.

// One file per protocol step: `journal` (the transaction record), `recovery` (finish or
// undo after a crash), `status` (read-only views: status, history, verify --installed), `gc`,
// `safe` (inspect-before-open file access). The store, generations, staging and the
// install/rollback transactions stay in this file. Every public type is re-exported here, so
// `crate::deploy::install::…` paths are unchanged.
mod gc;
mod journal;
mod recovery;
mod safe;
mod status;

pub use gc::GcOutcome;
use journal::staging_name;
pub use journal::{parse_journal, Journal, Op, Phase};
pub use status::{History, HistoryRow, Status, StatusSlot, VerificationState};

use crate::artifact::manifest::Statement;
use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use safe::Kind;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Largest state, journal, receipt or entry record pinforge reads back (it writes far less).
const RECORD_LIMIT: u64 = 16 << 20;
/// Sealed modes: installed trees are readable by everyone and writable by none.
const FILE_MODE: u32 = 0o444;
/// See [`FILE_MODE`]: executables and folders.
const EXEC_MODE: u32 = 0o555;
/// Metadata files every entry carries beside its artifacts (not part of its identity).
const ENTRY_RECORD: &str = "entry.json";
/// See [`ENTRY_RECORD`].
const ENTRY_MANIFEST: &str = "manifest.json";
/// Prefix of `fsx::write_atomic`'s temp files: a killed run can leave one behind.
const TMP_PREFIX: &str = ".pinforge-tmp-";

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

/// One file of a store entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileRec {
    /// Content digest.
    pub sha256: Sha256,
    /// Size in bytes.
    pub size: u64,
    /// Sealed 0555 (true) or 0444 (false).
    pub executable: bool,
}

impl FileRec {
    fn mode(&self) -> u32 {
        if self.executable {
            EXEC_MODE
        } else {
            FILE_MODE
        }
    }
}

/// What a store entry is: recorded once, when the entry is created. The record is only
/// believed when the digest of its listing equals the entry's name (see [`identity`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntryInfo {
    /// Output digest (the entry's name): [`identity`] of `files` and `links`.
    pub digest: Sha256,
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
    /// The build's input digest.
    pub input_digest: Sha256,
    /// Files: path → digest, size, mode.
    pub files: BTreeMap<String, FileRec>,
    /// Links among the outputs: path → target.
    pub links: BTreeMap<String, String>,
}

/// An entry's identity: SHA-256 over the sorted `path sha256 size mode` and `path -> target`
/// lines. Paths and targets hold no newline (checked), so the text is unambiguous.
pub fn identity(files: &BTreeMap<String, FileRec>, links: &BTreeMap<String, String>) -> Sha256 {
    let mut text = String::new();
    for (p, f) in files {
        text.push_str(&format!("{p} {} {} {:o}\n", f.sha256, f.size, f.mode()));
    }
    for (p, t) in links {
        text.push_str(&format!("{p} -> {t}\n"));
    }
    Sha256::of_bytes(text.as_bytes())
}

/// Check the listing of an entry: every path relative and inside, no path through a link,
/// links resolving inside, metadata names not reused, and the digest its own identity.
fn validate_listing(
    files: &BTreeMap<String, FileRec>,
    links: &BTreeMap<String, String>,
) -> Result<()> {
    for name in files.keys().chain(links.keys()) {
        safe::check_rel(name, "entry path")?;
        if name == ENTRY_RECORD || name == ENTRY_MANIFEST || name.starts_with(TMP_PREFIX) {
            return Err(Error::input(
                format!("`{name}`"),
                "this name is reserved for the entry's own records; refused",
            ));
        }
    }
    safe::check_tree(files.keys(), links)
}

/// Parse and validate an entry record (`entry.json`) read from the store.
pub fn parse_entry_record(bytes: &[u8]) -> Result<EntryInfo> {
    let info: EntryInfo = serde_json::from_slice(bytes)
        .map_err(|e| Error::input(ENTRY_RECORD, format!("store entry record unreadable: {e}")))?;
    validate_listing(&info.files, &info.links)?;
    let id = identity(&info.files, &info.links);
    if id != info.digest {
        return Err(Error::input(
            ENTRY_RECORD,
            format!(
                "the record's listing has digest {id}, not the {} it claims",
                info.digest
            ),
        ));
    }
    Ok(info)
}

/// One layer's entry in a generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Slot {
    /// Output digest.
    pub digest: Sha256,
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
}

/// A generation: the whole visible state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

    /// Every entry this generation needs: layers and the rollback stack.
    fn referenced(&self) -> BTreeSet<Sha256> {
        self.layers
            .values()
            .chain(&self.live_history)
            .map(|s| s.digest)
            .collect()
    }
}

/// Parse and validate `gens/<gen>/state.json`: its number must be the folder's, and
/// `current` must name a layer it holds.
pub fn parse_state(bytes: &[u8], gen: u64) -> Result<GenState> {
    let gs: GenState = serde_json::from_slice(bytes)
        .map_err(|e| Error::input("state.json", format!("generation state unreadable: {e}")))?;
    if gs.gen != gen {
        return Err(Error::input(
            "state.json",
            format!("says generation {}, but it is in gens/{gen}", gs.gen),
        ));
    }
    if let Some(c) = gs.current {
        if !gs.layers.contains_key(&c) {
            return Err(Error::input(
                "state.json",
                format!("`current` is {c}, a layer it does not hold"),
            ));
        }
    }
    Ok(gs)
}

/// Verification of an entry through a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verification {
    /// Everything matched.
    pub ok: bool,
    /// Path checked through (e.g. `rollback/current`).
    pub through: String,
    /// Files checked.
    pub files: usize,
    /// Differences.
    pub mismatches: Vec<crate::artifact::manifest::Mismatch>,
}

/// A receipt: what a transaction did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    /// Sequence number.
    pub seq: u64,
    /// install | rollback.
    pub op: Op,
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
    /// when it was installed (every file's SHA-256, size and mode, every link).
    pub restoration_matches_recorded: Option<bool>,
    /// True when the state already was the requested one (nothing swapped).
    pub unchanged: bool,
    /// Installs: a damaged store entry was replaced by a fresh copy of the build.
    #[serde(default)]
    pub repaired: bool,
    /// Timings in microseconds: stage, verify, commit (the rename), total.
    pub timings_us: BTreeMap<String, u64>,
    /// Generation committed.
    pub gen: u64,
}

/// Parse a receipt read back from `receipts/`.
pub fn parse_receipt(bytes: &[u8]) -> Result<Receipt> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::input("receipt", format!("receipt unreadable: {e}")))
}

/// A receipt's file name, `<seq:06>-<op>.json`, parsed strictly: anything else in
/// `receipts/` is a stray and is ignored (it can neither move nor wrap the sequence).
pub fn parse_receipt_name(name: &str) -> Option<(u64, Op)> {
    let stem = name.strip_suffix(".json")?;
    let (digits, op) = stem.split_once('-')?;
    let op = match op {
        "install" => Op::Install,
        "rollback" => Op::Rollback,
        _ => return None,
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq: u64 = digits.parse().ok()?;
    (seq > 0 && format!("{seq:06}") == digits).then_some((seq, op))
}

fn crash_point(op: &str, step: u32) {
    crate::base::hooks::crash_point(op, step)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StageMode {
    /// Hard links into the build folder (no data copied): only files whose mode already is
    /// the sealed one, because sealing must never change a file pinforge did not create.
    Link,
    /// Copies.
    Copy,
}

/// Where `current` (or a layer's stable link) leads right now, resolved once.
enum Resolved {
    /// The generation read and the entry its link names.
    At { gen: u64, digest: Sha256 },
    /// The chain of links is not the one pinforge writes.
    Broken(String),
    /// Nothing is installed there.
    Empty,
}

/// A damaged-root error (exit 2) with the hint every such refusal carries.
fn damaged(subject: impl fmt::Display, why: impl fmt::Display) -> Error {
    Error::input(subject, format!("damaged install root: {why}")).with_hint(
        "pinforge does not guess and deletes nothing from a damaged root; inspect it (or \
         restore it from a backup), then run the command again",
    )
}

impl Root {
    /// Open the install root for a command that may create it (install), probing that the
    /// filesystem has what the commit protocol needs.
    pub fn open(path: &Path) -> Result<Root> {
        let path = fsx::absolute(path)?;
        fsx::create_dir_all(&path)?;
        let root = Root { path };
        if safe::kind(&root.path.join("state"))? == Kind::Missing {
            // The test hook (feature `test-hooks` only) is read here, once, and handed down:
            // unit tests call the probe with the flag directly.
            let simulate = crate::base::hooks::fs_probe_nosymlink();
            root.probe_fs(simulate)?;
        }
        for d in ["store", "gens", "receipts"] {
            let p = root.path.join(d);
            match safe::kind(&p)? {
                Kind::Missing => fsx::create_dir_all(&p)?,
                Kind::Dir => {}
                _ => return Err(damaged(p.display(), "not a folder")),
            }
        }
        Ok(root)
    }

    /// Open an existing install root without creating anything: `status`, `verify
    /// --installed`, `gc` and `rollback` on a mistyped path must not leave a root there.
    pub fn open_existing(path: &Path) -> Result<Root> {
        let path = fsx::absolute(path)?;
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::input(
                    path.display(),
                    "is not a folder, so not an install root",
                ))
            }
            Err(_) => {
                return Err(
                    Error::input(path.display(), "no install root here").with_hint(
                        "check --root / PINFORGE_ROOT; `pinforge install` creates the root",
                    ),
                )
            }
        }
        let root = Root { path };
        for d in ["store", "gens", "receipts"] {
            let p = root.path.join(d);
            match safe::kind(&p)? {
                Kind::Missing | Kind::Dir => {}
                _ => return Err(damaged(p.display(), "not a folder")),
            }
        }
        Ok(root)
    }

    /// The root folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Refuse filesystems without symlinks or atomic rename over an existing link;
    /// `simulate_no_symlinks` makes it refuse as such a filesystem would (a test hook).
    fn probe_fs(&self, simulate_no_symlinks: bool) -> Result<()> {
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
        if simulate_no_symlinks {
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

    /// The lock: a regular file, opened without following a link and without blocking on a
    /// FIFO (flock itself still waits for the holder).
    fn lock(&self) -> Result<std::fs::File> {
        use fs4::fs_std::FileExt;
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.path.join("lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&p)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENXIO) | Some(libc::EISDIR) => {
                    damaged(p.display(), format!("`lock` is not a regular file ({e})"))
                }
                _ => Error::io("open", &p, e),
            })?;
        let m = f.metadata().at("stat", &p)?;
        if !m.is_file() {
            return Err(damaged(p.display(), "`lock` is not a regular file"));
        }
        f.lock_exclusive().at("lock", &p)?;
        Ok(f)
    }

    /// The names in one of the root's folders (empty when the folder is missing); names that
    /// are not UTF-8 are strays pinforge never wrote and are left alone.
    fn names(&self, sub: &str) -> Result<Vec<String>> {
        let dir = self.path.join(sub);
        if safe::kind(&dir)? != Kind::Dir {
            return Ok(Vec::new());
        }
        let mut out: Vec<String> = std::fs::read_dir(&dir)
            .at("read directory", &dir)?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }

    /// A root nothing was ever committed to: no entries, no receipts, at most an interrupted
    /// initialisation (`gens/0`).
    fn is_fresh(&self) -> Result<bool> {
        Ok(self.names("store")?.is_empty()
            && self.names("receipts")?.is_empty()
            && self.names("gens")?.iter().all(|n| n == "0"))
    }

    /// Give a fresh root its generation 0 (empty) and its `state` link, so that from the first
    /// transaction on a missing `state` always means damage.
    fn init_if_fresh(&self) -> Result<()> {
        if safe::kind(&self.path.join("state"))? != Kind::Missing {
            return Ok(());
        }
        if !self.is_fresh()? {
            return Err(damaged(
                self.path.join("state").display(),
                "the `state` link is missing, but generations, entries or receipts exist",
            ));
        }
        safe::remove_tree(&self.gen_dir(0))?;
        self.write_gen(&GenState::default())?;
        let tmp = self.prepare_swap(0)?;
        self.swap(&tmp)?;
        Ok(())
    }

    /// The generation `state` points at: 0 for a fresh root; an error (never "empty") when
    /// the link is missing from a used root or points anywhere but at a generation folder.
    fn committed_gen(&self) -> Result<u64> {
        let link = self.path.join("state");
        match safe::kind(&link)? {
            Kind::Missing => {
                if self.is_fresh()? {
                    Ok(0)
                } else {
                    Err(damaged(
                        link.display(),
                        "the `state` link is missing, but generations, entries or receipts \
                         exist (this is not an empty root)",
                    ))
                }
            }
            Kind::Link => {
                let t = std::fs::read_link(&link).at("read link", &link)?;
                let n = parse_gen(&t).ok_or_else(|| {
                    damaged(
                        link.display(),
                        format!("`state` points at {}, not at gens/<n>", t.display()),
                    )
                })?;
                let dir = self.gen_dir(n);
                if safe::kind(&dir)? != Kind::Dir {
                    return Err(damaged(
                        dir.display(),
                        "the committed generation is not a folder",
                    ));
                }
                Ok(n)
            }
            _ => Err(damaged(link.display(), "`state` is not a link")),
        }
    }

    fn read_gen(&self, gen: u64) -> Result<GenState> {
        let dir = self.gen_dir(gen);
        match safe::kind(&dir)? {
            Kind::Missing if gen == 0 => return Ok(GenState::default()),
            Kind::Dir => {}
            _ => {
                return Err(damaged(
                    dir.display(),
                    format!("generation {gen} is not a folder"),
                ))
            }
        }
        let p = dir.join("state.json");
        let bytes = safe::read_limited(&p, RECORD_LIMIT).map_err(|e| damaged(p.display(), e))?;
        parse_state(&bytes, gen).map_err(|e| damaged(p.display(), e))
    }

    fn gen_dir(&self, gen: u64) -> PathBuf {
        self.path.join("gens").join(gen.to_string())
    }

    fn entry_dir(&self, digest: &Sha256) -> PathBuf {
        self.path.join("store").join(digest.to_hex())
    }

    fn staging_dir(&self, txid: u64) -> PathBuf {
        self.path.join("store").join(staging_name(txid))
    }

    /// Read an entry's record, believed only when its listing hashes to the entry's name.
    pub fn read_entry(&self, digest: &Sha256) -> Result<EntryInfo> {
        let p = self.entry_dir(digest).join(ENTRY_RECORD);
        if safe::kind(&self.entry_dir(digest))? != Kind::Dir {
            return Err(damaged(
                self.entry_dir(digest).display(),
                "store entry is not a folder",
            ));
        }
        let bytes = safe::read_limited(&p, RECORD_LIMIT)?;
        let info = parse_entry_record(&bytes).map_err(|e| damaged(p.display(), e))?;
        if info.digest != *digest {
            return Err(damaged(p.display(), "the record describes another entry"));
        }
        Ok(info)
    }

    /// Write generation `gs.gen`: its link farm and state.json, fsynced. Only a generation
    /// newer than the committed one is ever (re)written.
    fn write_gen(&self, gs: &GenState) -> Result<()> {
        let dir = self.gen_dir(gs.gen);
        if safe::kind(&self.path.join("state"))? != Kind::Missing {
            let committed = self.committed_gen()?;
            if gs.gen <= committed {
                return Err(Error::Internal(format!(
                    "refusing to rewrite generation {} (committed: {committed})",
                    gs.gen
                )));
            }
        }
        safe::remove_tree(&dir)?;
        std::fs::create_dir(&dir).at("create directory", &dir)?;
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
            if safe::kind(&link)? == Kind::Missing {
                std::os::unix::fs::symlink(PathBuf::from("state").join(name), &link)
                    .at("create link", &link)?;
            }
        }
        fsx::sync_dir(&self.path)
    }

    /// Prepare `state.tmp` pointing at `gen` (not yet the commit).
    fn prepare_swap(&self, gen: u64) -> Result<PathBuf> {
        let tmp = self.path.join("state.tmp");
        safe::remove_tree(&tmp)?;
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

    /// Swap back to `from_gen` after a failed post-swap check, and drop the generation that
    /// failed (so no generation newer than the committed one outlives its journal).
    fn revert(&self, from_gen: u64, to_gen: u64) -> Result<()> {
        let tmp = self.prepare_swap(from_gen)?;
        self.swap(&tmp)?;
        safe::remove_tree(&self.gen_dir(to_gen))?;
        fsx::sync_dir(&self.path.join("gens"))
    }

    /// The next receipt number: one past the largest well-formed receipt name (strays are
    /// ignored), refusing rather than wrapping at the end of the range.
    fn next_seq(&self) -> Result<u64> {
        let max = self
            .names("receipts")?
            .iter()
            .filter_map(|n| parse_receipt_name(n))
            .map(|(n, _)| n)
            .max()
            .unwrap_or(0);
        max.checked_add(1).ok_or_else(|| {
            Error::input(
                self.path.join("receipts").display(),
                "receipt numbers are exhausted (a receipt is numbered 18446744073709551615)",
            )
            .with_hint("move the stray receipt out of receipts/, then run the command again")
        })
    }

    /// Write a receipt under its own number, never over an existing file.
    fn write_receipt(&self, r: &Receipt) -> Result<PathBuf> {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = self.path.join("receipts");
        let p = dir.join(format!("{:06}-{}.json", r.seq, r.op.as_str()));
        let bytes = serde_json::to_vec_pretty(r).map_err(|e| Error::Internal(e.to_string()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(TMP_PREFIX)
            .tempfile_in(&dir)
            .at("create temp file in", &dir)?;
        tmp.write_all(&bytes).at("write", tmp.path())?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .at("chmod", tmp.path())?;
        tmp.as_file().sync_all().at("fsync", tmp.path())?;
        tmp.persist_noclobber(&p).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                Error::input(
                    p.display(),
                    "a receipt with this number already exists; not overwriting it",
                )
                .with_hint("a file in receipts/ was not written by pinforge; move it away")
            } else {
                Error::io("rename into", &p, e.error)
            }
        })?;
        fsx::sync_dir(&dir)?;
        Ok(p)
    }

    /// Recovery's receipt: a crash after the receipt was written leaves it in place, and the
    /// existing one (same transaction) is kept.
    fn write_receipt_recovered(&self, r: &Receipt) -> Result<PathBuf> {
        let p = self
            .path
            .join("receipts")
            .join(format!("{:06}-{}.json", r.seq, r.op.as_str()));
        if safe::kind(&p)? == Kind::File {
            let same = safe::read_limited(&p, RECORD_LIMIT)
                .ok()
                .and_then(|b| parse_receipt(&b).ok())
                .is_some_and(|old| old.seq == r.seq && old.op == r.op);
            if same {
                return Ok(p);
            }
        }
        self.write_receipt(r)
    }

    /// Remove temp files a killed run left (`.pinforge-tmp-*`) in the folders pinforge writes
    /// atomically into. Called with the lock held, so no live writer owns them.
    fn clean_temp_files(&self) -> Result<()> {
        let mut dirs = vec![self.path.clone(), self.path.join("receipts")];
        for n in self.names("gens")? {
            if parse_gen_number(&n).is_some() {
                dirs.push(self.path.join("gens").join(n));
            }
        }
        for d in dirs {
            if safe::kind(&d)? != Kind::Dir {
                continue;
            }
            for e in std::fs::read_dir(&d).at("read directory", &d)?.flatten() {
                let name = e.file_name();
                if name.to_str().is_some_and(|n| n.starts_with(TMP_PREFIX)) {
                    let p = e.path();
                    if !matches!(safe::kind(&p)?, Kind::Dir | Kind::Missing) {
                        std::fs::remove_file(&p).at("remove", &p)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Inspect the entry folder `dir` against the identity `digest`: recompute every file's
    /// digest, size and mode and every link, and compare with the entry's record, which is
    /// believed only when its own listing hashes to `digest`. `shown` names the path the
    /// caller checks through. Special files are refused (an error, exit 2).
    fn check_entry(&self, dir: &Path, digest: &Sha256, shown: &Path) -> Result<Verification> {
        check_entry(dir, digest, shown)
    }

    /// Where `name` (`current` or a layer) leads, resolved once: the committed generation is
    /// read one time, its record names the entry, and the link chain consumers follow must
    /// be exactly the one pinforge wrote.
    fn resolve(&self, name: &str) -> Result<Resolved> {
        let gen = self.committed_gen()?;
        let gs = self.read_gen(gen)?;
        let slot = if name == "current" {
            gs.current_slot().map(|(_, s)| s)
        } else {
            gs.layers.get(&Layer::parse(name)?)
        };
        let Some(slot) = slot else {
            return Ok(Resolved::Empty);
        };
        let stable = self.path.join(name);
        let want = PathBuf::from("state").join(name);
        match std::fs::read_link(&stable) {
            Ok(t) if t == want => {}
            Ok(t) => {
                return Ok(Resolved::Broken(format!(
                    "{} points at {}, not at {}",
                    stable.display(),
                    t.display(),
                    want.display()
                )))
            }
            Err(_) => {
                return Ok(Resolved::Broken(format!(
                    "{} is not a link",
                    stable.display()
                )))
            }
        }
        let link = self.gen_dir(gen).join(name);
        let want = PathBuf::from("../../store").join(slot.digest.to_hex());
        match std::fs::read_link(&link) {
            Ok(t) if t == want => Ok(Resolved::At {
                gen,
                digest: slot.digest,
            }),
            Ok(t) => Ok(Resolved::Broken(format!(
                "{} points at {}, but generation {gen} records {}",
                link.display(),
                t.display(),
                want.display()
            ))),
            Err(_) => Ok(Resolved::Broken(format!(
                "{} is not a link",
                link.display()
            ))),
        }
    }

    /// Verify what `name` shows now (resolved once), through its stable path.
    fn verify_name(&self, name: &str, expect_gen: Option<u64>) -> Result<Option<Verification>> {
        let through = self.path.join(name);
        let broken = |why: String| Verification {
            ok: false,
            through: through.display().to_string(),
            files: 0,
            mismatches: vec![crate::artifact::manifest::Mismatch {
                path: through.display().to_string(),
                expected: "the link chain pinforge wrote".into(),
                actual: why,
                role: "installed".into(),
            }],
        };
        match self.resolve(name)? {
            Resolved::Empty => Ok(None),
            Resolved::Broken(why) => Ok(Some(broken(why))),
            Resolved::At { gen, .. } if expect_gen.is_some_and(|g| g != gen) => Ok(Some(broken(
                format!("`state` shows generation {gen}, not the one just committed"),
            ))),
            Resolved::At { digest, .. } => self
                .check_entry(&self.entry_dir(&digest), &digest, &through)
                .map(Some),
        }
    }

    /// Every entry any generation references, or `None` when some generation (or the
    /// committed one) cannot be read: then what it references is unknown.
    fn referenced_everywhere(&self) -> Result<Option<BTreeSet<Sha256>>> {
        let committed = self.committed_gen()?;
        let mut keep = self.read_gen(committed)?.referenced();
        for name in self.names("gens")? {
            if let Some(n) = parse_gen_number(&name) {
                match self.read_gen(n) {
                    Ok(gs) => keep.extend(gs.referenced()),
                    Err(_) => return Ok(None),
                }
            }
        }
        Ok(Some(keep))
    }

    /// Verify the entry a layer holds, through the path consumers of that layer use: `current`
    /// when the layer is the current one, its own stable link otherwise.
    fn verify_layer(&self, gs: &GenState, layer: Layer) -> Result<Verification> {
        let name = if !gs.layers.contains_key(&layer) || gs.current == Some(layer) {
            "current"
        } else {
            layer.as_str()
        };
        Ok(self
            .verify_name(name, Some(gs.gen))?
            .unwrap_or_else(|| Verification {
                ok: true,
                through: self.path.join(name).display().to_string(),
                files: 0,
                mismatches: vec![],
            }))
    }

    // -----------------------------------------------------------------------------------------
    // Operations.

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
        let info = &plan.info;
        let _lock = self.lock()?;
        self.init_if_fresh()?;
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

        let entry_dir = self.entry_dir(&info.digest);
        let entry_kind = safe::kind(&entry_dir)?;
        // An existing entry is reused only when it still is what its name says; a damaged
        // one (special files included) is replaced from the build, never left in place.
        let entry_ok = entry_kind == Kind::Dir
            && match check_entry(&entry_dir, &info.digest, &entry_dir) {
                Ok(v) => v.ok,
                Err(e) if e.exit_code() == crate::base::error::exit::INPUT => false,
                Err(e) => return Err(e),
            };

        if entry_ok && after.layers == before.layers && after.current == before.current {
            // Already installed: verify and record, no swap.
            let v = self.verify_layer(&before, layer)?;
            let r = Receipt {
                seq,
                op: Op::Install,
                layer,
                from: before.layers.get(&layer).cloned(),
                to: Some(slot),
                current_before: before.current,
                current_after: before.current,
                time: crate::base::time::now_rfc3339(),
                verification: v.clone(),
                reverted: false,
                restoration_matches_recorded: None,
                unchanged: true,
                repaired: false,
                timings_us: BTreeMap::from([(
                    "total".into(),
                    t_total.elapsed().as_micros() as u64,
                )]),
                gen: from_gen,
            };
            let receipt = self.write_receipt(&r)?;
            if !v.ok {
                return Err(mismatch_error(
                    Path::new(&v.through),
                    &format!(
                        "already installed, but what consumers see is not the entry (receipt {})",
                        receipt.display()
                    ),
                    &v,
                ));
            }
            return Ok(InstallOutcome {
                receipt,
                recovered,
                verification: v,
                stage_mode: None,
                entry: entry_dir,
                repaired: false,
                left: r.from,
                reached: r.to,
                unchanged: true,
                gen: r.gen,
            });
        }

        let staging = self.staging_dir(seq);
        let mut journal = Journal {
            txid: seq,
            op: Op::Install,
            from_gen,
            to_gen: after.gen,
            staging: Some(format!("store/{}", staging_name(seq))),
            entry: Some(info.digest),
            entry_preexisted: entry_kind != Kind::Missing,
            phase: Phase::Staging,
            layer,
        };
        self.write_journal(&journal)?;
        crash_point("install", 1);

        let mut timings = BTreeMap::new();
        // Everything between the journal and the new generation either completes or is undone
        // here (a crash in between is undone by recovery from the journal instead).
        let placed = self.place_entry(
            &plan,
            &entry_dir,
            entry_kind,
            entry_ok,
            &staging,
            mode,
            &mut timings,
        );
        let (used_mode, repaired) = match placed {
            Ok(m) => m,
            Err(e) => {
                self.abort_install(seq)?;
                return Err(e);
            }
        };
        crash_point("install", 4);

        self.write_gen(&after)?;
        crash_point("install", 5);
        let tmp = self.prepare_swap(after.gen)?;
        journal.phase = Phase::Commit;
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
            op: Op::Install,
            layer,
            from: before.layers.get(&layer).cloned(),
            to: Some(slot),
            current_before: before.current,
            current_after: if reverted {
                before.current
            } else {
                after.current
            },
            time: crate::base::time::now_rfc3339(),
            verification: v.clone(),
            reverted,
            restoration_matches_recorded: None,
            unchanged: false,
            repaired,
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
            repaired,
            left: r.from,
            reached: r.to,
            unchanged: false,
            gen: r.gen,
        })
    }

    /// Put the entry into the store: reuse an intact existing entry, or stage the build's
    /// files (links or copies), seal, verify them against the manifest and rename into place;
    /// a damaged existing entry trades places with the fresh copy in one `renameat2`.
    #[allow(clippy::too_many_arguments)]
    fn place_entry(
        &self,
        plan: &Plan,
        entry_dir: &Path,
        entry_kind: Kind,
        entry_ok: bool,
        staging: &Path,
        mode: Option<StageMode>,
        timings: &mut BTreeMap<String, u64>,
    ) -> Result<(Option<StageMode>, bool)> {
        if entry_ok {
            crash_point("install", 2);
            crash_point("install", 3);
            return Ok((None, false));
        }
        let t = Instant::now();
        let m = stage(plan, staging, mode)?;
        timings.insert("stage".to_string(), t.elapsed().as_micros() as u64);
        crash_point("install", 2);
        let t = Instant::now();
        let v = check_entry(staging, &plan.info.digest, staging)?;
        timings.insert("verify_staged".to_string(), t.elapsed().as_micros() as u64);
        if !v.ok {
            return Err(mismatch_error(
                &plan.manifest_path,
                "build outputs do not match the manifest; nothing installed",
                &v,
            ));
        }
        crash_point("install", 3);
        let repaired = entry_kind != Kind::Missing;
        if repaired {
            fsx::exchange(staging, entry_dir, "exchange with")?;
            safe::remove_tree(staging)?;
        } else {
            std::fs::rename(staging, entry_dir).at("rename into", entry_dir)?;
        }
        fsx::sync_dir(&self.path.join("store"))?;
        Ok((Some(m), repaired))
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
            self.revert(from_gen, after.gen)?;
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

    fn abort_install(&self, txid: u64) -> Result<()> {
        safe::remove_tree(&self.staging_dir(txid))?;
        self.remove_journal()
    }

    /// Point `current` at another layer (`to`), or with `None` restore the previous live entry
    /// (pop the rollback stack).
    pub fn rollback(&self, to: Option<Layer>) -> Result<RollbackOutcome> {
        self.rollback_to(match to {
            Some(l) => RollbackTo::Layer(l),
            None => RollbackTo::PreviousLive,
        })
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
        let from_gen = self.committed_gen()?;
        let before = self.read_gen(from_gen)?;
        let mut after = before.clone();
        after.gen = from_gen + 1;
        let layer = match to {
            RollbackTo::Generation(n) => {
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
                // Every entry the restored state names must still be intact, not only the
                // one `current` shows.
                for (l, slot) in &after.layers {
                    let dir = self.entry_dir(&slot.digest);
                    let v = check_entry(&dir, &slot.digest, &dir)?;
                    if !v.ok {
                        return Err(mismatch_error(
                            &dir,
                            &format!("generation {n}'s {l} entry is damaged; not restoring it"),
                            &v,
                        ));
                    }
                }
                layer
            }
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
        let target = after
            .layers
            .get(&layer)
            .cloned()
            .ok_or_else(|| Error::Internal("rollback target vanished".into()))?;
        // The restored entry must still be what was recorded when it was installed.
        let dir = self.entry_dir(&target.digest);
        let pre = check_entry(&dir, &target.digest, &dir)?;
        if !pre.ok {
            return Err(mismatch_error(
                &dir,
                &format!("the {layer} entry is damaged; not switching to it"),
                &pre,
            ));
        }
        let mut timings = BTreeMap::new();
        let unchanged = after.layers == before.layers && after.current == before.current;
        let (v, reverted, gen) = if unchanged {
            (self.verify_layer(&before, layer)?, false, from_gen)
        } else {
            let mut journal = Journal {
                txid: seq,
                op: Op::Rollback,
                from_gen,
                to_gen: after.gen,
                staging: None,
                entry: None,
                entry_preexisted: true,
                phase: Phase::Staging,
                layer,
            };
            self.write_journal(&journal)?;
            crash_point("rollback", 1);
            self.write_gen(&after)?;
            crash_point("rollback", 2);
            let tmp = self.prepare_swap(after.gen)?;
            journal.phase = Phase::Commit;
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
            op: Op::Rollback,
            layer,
            from: before.current_slot().map(|(_, s)| s.clone()),
            to: Some(target),
            current_before: before.current,
            current_after: if reverted {
                before.current
            } else {
                after.current
            },
            time: crate::base::time::now_rfc3339(),
            restoration_matches_recorded: Some(v.ok),
            verification: v.clone(),
            reverted,
            unchanged,
            repaired: false,
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
        if !v.ok {
            return Err(mismatch_error(
                Path::new(&v.through),
                &format!(
                    "nothing to switch, but what consumers see is not the entry (receipt {})",
                    receipt.display()
                ),
                &v,
            ));
        }
        Ok(RollbackOutcome {
            receipt,
            recovered,
            verification: v,
            layer,
            left: r.from,
            reached: r.to,
            unchanged,
            gen: r.gen,
        })
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
    /// What the layer showed before.
    pub left: Option<Slot>,
    /// What it shows now.
    pub reached: Option<Slot>,
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
    pub left: Option<Slot>,
    /// What it shows now.
    pub reached: Option<Slot>,
    /// Nothing changed (the state already was the requested one).
    pub unchanged: bool,
    /// The generation committed (the one before, when unchanged).
    pub gen: u64,
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

/// A generation number as pinforge writes it: canonical decimal (no sign, no leading zero).
fn parse_gen_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// The target of `state`: exactly `gens/<n>`.
fn parse_gen(target: &Path) -> Option<u64> {
    let s = target.to_str()?;
    parse_gen_number(s.strip_prefix("gens/")?)
}

/// An install's input, checked before the lock is taken: the manifest, its artifact root
/// (relative, below the manifest's folder, through no link), every source file (a regular
/// file reached through real folders only) and the entry it makes.
struct Plan {
    manifest_path: PathBuf,
    manifest_bytes: Vec<u8>,
    info: EntryInfo,
    sources: BTreeMap<String, (PathBuf, std::fs::Metadata)>,
}

impl Plan {
    fn read(manifest_path: &Path) -> Result<Plan> {
        // The manifest itself is the user's own path (links followed), but never a FIFO or
        // device: refused before it is opened. Its bytes are read once: the statement parsed
        // is the one whose bytes the entry stores, so the two cannot differ.
        let file = fsx::open_regular(manifest_path, "manifest", true).map_err(|e| match e {
            Error::Input { .. } if !manifest_path.exists() => {
                e.with_hint("`pinforge build` prints the path of the manifest it writes")
            }
            other => other,
        })?;
        let mut manifest_bytes = Vec::new();
        {
            use std::io::Read;
            file.take(RECORD_LIMIT + 1)
                .read_to_end(&mut manifest_bytes)
                .at("read", manifest_path)?;
        }
        if manifest_bytes.len() as u64 > RECORD_LIMIT {
            return Err(Error::input(
                manifest_path.display(),
                format!("larger than {RECORD_LIMIT} bytes: not a pinforge manifest"),
            ));
        }
        let statement = Statement::parse(&manifest_bytes, manifest_path)?;
        let subject =
            |name: &str| format!("{}: `{}`", manifest_path.display(), name.escape_debug());
        let ar = &statement
            .predicate
            .build_definition
            .internal_parameters
            .artifact_root;
        safe::check_rel(ar, "manifest artifact_root").map_err(|e| {
            Error::input(subject(ar), format!("{e}"))
                .with_hint("artifact_root is relative to the manifest's folder and stays below it")
        })?;
        let mut root = fsx::parent_of(manifest_path);
        for c in ar.split('/') {
            root.push(c);
            match safe::kind(&root)? {
                Kind::Dir => {}
                Kind::Link => {
                    return Err(Error::input(
                        subject(ar),
                        format!(
                            "artifact_root runs through the symbolic link {}",
                            root.display()
                        ),
                    ))
                }
                Kind::Missing => {
                    return Err(Error::check(
                        root.display(),
                        "artifact root of the manifest is missing; rebuild, then install",
                    ))
                }
                _ => return Err(Error::input(subject(ar), "artifact_root is not a folder")),
            }
        }
        let mut files = BTreeMap::new();
        let mut sources = BTreeMap::new();
        for s in &statement.subject {
            safe::check_rel(&s.name, "manifest subject")?;
            let sha = s
                .sha256()
                .ok_or_else(|| Error::input(subject(&s.name), "manifest subject without sha256"))?;
            let size = s
                .annotations
                .get("size")
                .and_then(|v| v.as_u64())
                .ok_or_else(|| Error::input(subject(&s.name), "manifest subject without size"))?;
            if files.contains_key(&s.name) {
                return Err(Error::input(
                    subject(&s.name),
                    "the manifest lists this subject twice; refused (which one is meant?)",
                ));
            }
            let (path, meta) = source_file(&root, &s.name)?;
            use std::os::unix::fs::PermissionsExt;
            let executable = meta.permissions().mode() & 0o111 != 0;
            files.insert(
                s.name.clone(),
                FileRec {
                    sha256: sha,
                    size,
                    executable,
                },
            );
            sources.insert(s.name.clone(), (path, meta));
        }
        let mut links = BTreeMap::new();
        for b in &statement.predicate.run_details.byproducts {
            let Some(t) = b.annotations.get("link_target") else {
                continue;
            };
            let t = t
                .as_str()
                .ok_or_else(|| Error::input(subject(&b.name), "link_target is not a string"))?;
            safe::check_rel(&b.name, "manifest link")?;
            if links.insert(b.name.clone(), t.to_string()).is_some() {
                return Err(Error::input(
                    subject(&b.name),
                    "the manifest lists this link twice; refused",
                ));
            }
        }
        validate_listing(&files, &links)?;
        let params = &statement.predicate.build_definition.external_parameters;
        let info = EntryInfo {
            digest: identity(&files, &links),
            recipe: params.recipe.clone(),
            variant: params.variant.clone(),
            input_digest: statement.input_digest(),
            files,
            links,
        };
        Ok(Plan {
            manifest_path: manifest_path.to_path_buf(),
            manifest_bytes,
            info,
            sources,
        })
    }
}

/// A build output, reached from the artifact root through real folders only.
fn source_file(root: &Path, name: &str) -> Result<(PathBuf, std::fs::Metadata)> {
    let mut p = root.to_path_buf();
    let comps: Vec<&str> = name.split('/').collect();
    for (i, c) in comps.iter().enumerate() {
        p.push(c);
        let last = i + 1 == comps.len();
        match safe::kind(&p)? {
            Kind::Dir if !last => {}
            Kind::File if last => {
                let m = std::fs::symlink_metadata(&p).at("stat", &p)?;
                return Ok((p, m));
            }
            Kind::Missing => {
                return Err(Error::check(
                    p.display(),
                    "build output listed in the manifest is missing; rebuild, then install",
                ))
            }
            Kind::Link => {
                return Err(Error::input(
                    p.display(),
                    "build output is (or runs through) a symbolic link; refused",
                )
                .with_hint("links among the outputs are listed as links, not as subjects"))
            }
            Kind::Special(what) => return Err(safe::special_error(&p, what)),
            _ => {
                return Err(Error::input(
                    p.display(),
                    "build output is not a regular file",
                ))
            }
        }
    }
    Err(Error::input(name, "empty build output path"))
}

/// Place the entry's files in `staging` (a folder created fresh): hard links only for files
/// whose mode already is the sealed one (sealing must never change a file pinforge did not
/// create), copies otherwise; then the links, the records, and the folders sealed 0555.
fn stage(plan: &Plan, staging: &Path, mode: Option<StageMode>) -> Result<StageMode> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(staging).at("create directory", staging)?;
    let want_link = mode.unwrap_or(StageMode::Link) == StageMode::Link;
    let mut used = if want_link {
        StageMode::Link
    } else {
        StageMode::Copy
    };
    let fail_after = crate::base::hooks::fail_write_after();
    let mut written = 0u64;
    for (name, rec) in &plan.info.files {
        let (from, meta) = plan
            .sources
            .get(name)
            .ok_or_else(|| Error::Internal(format!("no source for {name}")))?;
        let to = staging.join(name);
        fsx::create_dir_all(&fsx::parent_of(&to))?;
        let src = fsx::open_regular(from, "build output", false)?;
        let now = src.metadata().at("stat", from)?;
        if !safe::same_file(meta, &now) {
            return Err(Error::input(
                from.display(),
                "build output changed while it was being installed",
            ));
        }
        let linked = want_link
            && now.permissions().mode() & 0o7777 == rec.mode()
            && std::fs::hard_link(from, &to).is_ok();
        if !linked {
            used = StageMode::Copy;
            copy_file(src, from, &to, rec.mode(), fail_after, &mut written)?;
        }
        fsx::open_regular(&to, "staged file", false)?
            .sync_all()
            .at("fsync", &to)?;
    }
    for (name, target) in &plan.info.links {
        let to = staging.join(name);
        fsx::create_dir_all(&fsx::parent_of(&to))?;
        std::os::unix::fs::symlink(target, &to).at("create link", &to)?;
    }
    let json = serde_json::to_vec_pretty(&plan.info).map_err(|e| Error::Internal(e.to_string()))?;
    fsx::write_atomic_mode(&staging.join(ENTRY_RECORD), &json, FILE_MODE)?;
    fsx::write_atomic_mode(
        &staging.join(ENTRY_MANIFEST),
        &plan.manifest_bytes,
        FILE_MODE,
    )?;
    seal_dirs(staging)?;
    Ok(used)
}

/// Copy an opened build output into a file created here, then give that file (ours) its
/// sealed mode.
fn copy_file(
    mut src: std::fs::File,
    from: &Path,
    to: &Path,
    mode: u32,
    fail_after: Option<u64>,
    written: &mut u64,
) -> Result<()> {
    use std::io::{Read, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
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
    dst.set_permissions(std::fs::Permissions::from_mode(mode))
        .at("chmod", to)
}

/// Seal the folders of a staging tree (all created here) 0555, deepest first, fsyncing each.
fn seal_dirs(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).at("read directory", dir)?.flatten() {
        let p = e.path();
        if safe::kind(&p)? == Kind::Dir {
            seal_dirs(&p)?;
        }
    }
    let d = std::fs::File::open(dir).at("open", dir)?;
    d.sync_all().at("fsync directory", dir)?;
    d.set_permissions(std::fs::Permissions::from_mode(EXEC_MODE))
        .at("chmod", dir)
}

/// What an entry folder holds, read without following any link.
#[derive(Default)]
struct Observed {
    files: BTreeMap<String, (FileRec, u32)>,
    links: BTreeMap<String, String>,
    /// (path, expected, found) for folders and records in the wrong shape.
    bad: Vec<(String, String, String)>,
    record: Option<std::result::Result<Vec<u8>, String>>,
}

fn observe(dir: &Path, rel: &str, depth: u32, o: &mut Observed) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if depth > 64 {
        o.bad.push((
            rel.into(),
            "a shallower tree".into(),
            "more than 64 levels".into(),
        ));
        return Ok(());
    }
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
        .at("read directory", dir)?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let raw = e.file_name();
        let p = e.path();
        let Some(name) = raw.to_str() else {
            o.bad.push((
                format!("{rel}/{}", raw.to_string_lossy()),
                "a UTF-8 name".into(),
                "a name that is not UTF-8".into(),
            ));
            continue;
        };
        let r = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("stat", &p, e)),
        };
        let mode = m.permissions().mode() & 0o7777;
        match safe::kind_of(&m) {
            Kind::Dir => {
                if mode != EXEC_MODE {
                    o.bad.push((
                        r.clone(),
                        "folder mode 555".into(),
                        format!("mode {mode:o}"),
                    ));
                }
                observe(&p, &r, depth + 1, o)?;
            }
            Kind::File if rel.is_empty() && (name == ENTRY_RECORD || name == ENTRY_MANIFEST) => {
                if mode != FILE_MODE {
                    o.bad
                        .push((r.clone(), "mode 444".into(), format!("mode {mode:o}")));
                }
                if name == ENTRY_RECORD {
                    o.record =
                        Some(safe::read_limited(&p, RECORD_LIMIT).map_err(|e| e.to_string()));
                }
            }
            Kind::File => {
                let f = fsx::open_regular(&p, "file", false)?;
                let now = f.metadata().at("stat", &p)?;
                if !safe::same_file(&m, &now) {
                    o.bad
                        .push((r, "a stable file".into(), "changed while read".into()));
                    continue;
                }
                let (sha256, size) = Sha256::of_reader(f, &p)?;
                let rec = FileRec {
                    sha256,
                    size,
                    executable: mode & 0o111 != 0,
                };
                o.files.insert(r, (rec, mode));
            }
            Kind::Link => {
                let t = std::fs::read_link(&p).at("read link", &p)?;
                match t.to_str() {
                    Some(t) => {
                        o.links.insert(r, t.to_string());
                    }
                    None => o
                        .bad
                        .push((r, "a UTF-8 link target".into(), "not UTF-8".into())),
                }
            }
            Kind::Special(what) => return Err(safe::special_error(&p, what)),
            Kind::Missing => {}
        }
    }
    Ok(())
}

/// See [`Root::check_entry`].
fn check_entry(dir: &Path, digest: &Sha256, shown: &Path) -> Result<Verification> {
    use std::os::unix::fs::PermissionsExt;
    let mut mm = Vec::new();
    let mut push = |path: String, expected: String, actual: String| {
        mm.push(crate::artifact::manifest::Mismatch {
            path,
            expected,
            actual,
            role: "installed".into(),
        })
    };
    let at = |rel: &str| shown.join(rel).display().to_string();
    let whole = |mm: Vec<crate::artifact::manifest::Mismatch>| Verification {
        ok: mm.is_empty(),
        through: shown.display().to_string(),
        files: 0,
        mismatches: mm,
    };
    match safe::kind(dir)? {
        Kind::Dir => {}
        Kind::Special(what) => return Err(safe::special_error(dir, what)),
        k => {
            let found = match k {
                Kind::Missing => "missing".to_string(),
                Kind::Link => "a symbolic link (refused: entries are folders)".to_string(),
                _ => "not a folder".to_string(),
            };
            push(
                shown.display().to_string(),
                format!("store entry {digest}"),
                found,
            );
            return Ok(whole(mm));
        }
    }
    let mut o = Observed::default();
    let top = std::fs::symlink_metadata(dir).at("stat", dir)?;
    let top_mode = top.permissions().mode() & 0o7777;
    if top_mode != EXEC_MODE {
        o.bad.push((
            String::new(),
            "folder mode 555".into(),
            format!("mode {top_mode:o}"),
        ));
    }
    observe(dir, "", 0, &mut o)?;
    if safe::kind(&dir.join(ENTRY_MANIFEST))? != Kind::File {
        o.bad.push((
            ENTRY_MANIFEST.into(),
            "the build's manifest".into(),
            "missing".into(),
        ));
    }
    for (rel, expected, found) in &o.bad {
        push(at(rel), expected.clone(), found.clone());
    }
    // The record is believed only when its listing hashes to the entry's name.
    let record = match &o.record {
        None => Err("missing".to_string()),
        Some(Err(e)) => Err(e.clone()),
        Some(Ok(bytes)) => parse_entry_record(bytes)
            .map_err(|e| e.to_string())
            .and_then(|i| {
                if i.digest == *digest {
                    Ok(i)
                } else {
                    Err(format!("a record of entry {}", i.digest))
                }
            }),
    };
    let info = match record {
        Ok(i) => i,
        Err(why) => {
            push(
                at(ENTRY_RECORD),
                format!("a record whose listing hashes to {digest}"),
                why,
            );
            let files: BTreeMap<String, FileRec> =
                o.files.iter().map(|(k, (r, _))| (k.clone(), *r)).collect();
            let found = identity(&files, &o.links);
            if found != *digest {
                push(
                    shown.display().to_string(),
                    format!("content with identity {digest}"),
                    format!("content with identity {found}"),
                );
            }
            let mut v = whole(mm);
            v.files = o.files.len();
            return Ok(v);
        }
    };
    for (name, want) in &info.files {
        match o.files.get(name) {
            None if o.links.contains_key(name) => push(
                at(name),
                want.sha256.to_string(),
                "a symbolic link (refused: files are files)".into(),
            ),
            None => push(at(name), want.sha256.to_string(), "missing".into()),
            Some((got, _)) if got.sha256 != want.sha256 || got.size != want.size => push(
                at(name),
                format!("{} ({} bytes)", want.sha256, want.size),
                format!("{} ({} bytes)", got.sha256, got.size),
            ),
            Some((_, mode)) if *mode != want.mode() => push(
                at(name),
                format!("mode {:o}", want.mode()),
                format!("mode {mode:o}"),
            ),
            Some(_) => {}
        }
    }
    for (name, target) in &info.links {
        match o.links.get(name) {
            Some(t) if t == target => {}
            Some(t) => push(
                at(name),
                format!("link to {target}"),
                format!("link to {t}"),
            ),
            None => push(at(name), format!("link to {target}"), "missing".into()),
        }
    }
    for name in o.files.keys() {
        if !info.files.contains_key(name) {
            push(
                at(name),
                "nothing (not in the entry)".into(),
                "an extra file".into(),
            );
        }
    }
    for (name, t) in &o.links {
        if !info.links.contains_key(name) && !info.files.contains_key(name) {
            push(
                at(name),
                "nothing (not in the entry)".into(),
                format!("an extra link to {t}"),
            );
        }
    }
    let mut v = whole(mm);
    v.files = info.files.len();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layer_names_round_trip() {
        for l in Layer::ALL {
            assert_eq!(Layer::parse(l.as_str()).expect("parse"), l);
        }
        assert!(Layer::parse("staging").is_err());
    }

    #[test]
    fn gen_links_parse_strictly() {
        assert_eq!(parse_gen(Path::new("gens/12")), Some(12));
        assert_eq!(parse_gen(Path::new("/elsewhere/12")), None);
        assert_eq!(parse_gen(Path::new("gens/x")), None);
        assert_eq!(parse_gen(Path::new("gens/012")), None);
        assert_eq!(parse_gen(Path::new("gens/12/../../..")), None);
        assert_eq!(parse_gen(Path::new("gens/+1")), None);
    }

    #[test]
    fn receipt_names_parse_strictly_and_never_wrap() {
        // issue #7 class 10: a stray name must not move or wrap the sequence.
        assert_eq!(
            parse_receipt_name("000007-install.json"),
            Some((7, Op::Install))
        );
        assert_eq!(
            parse_receipt_name("1234567-rollback.json"),
            Some((1_234_567, Op::Rollback))
        );
        for stray in [
            "18446744073709551616-install.json",
            "7-install.json",
            "000007-recover.json",
            "000007-install.json.bak",
            "+00007-install.json",
            "000000-install.json",
            "x-install.json",
        ] {
            assert_eq!(parse_receipt_name(stray), None, "{stray}");
        }
    }

    fn journal(from: u64, to: u64, staging: Option<&str>) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "txid": 3, "op": "install", "from_gen": from, "to_gen": to,
            "staging": staging, "entry": null, "entry_preexisted": false,
            "phase": "staging", "layer": "live"
        }))
        .expect("json")
    }

    #[test]
    fn journal_paths_and_generations_are_checked() {
        // issue #7 class 1: the staging value and the generations are data, not paths.
        assert!(parse_journal(&journal(4, 5, Some("store/.stage-3"))).is_ok());
        assert!(parse_journal(&journal(4, 5, None)).is_ok());
        for bad in [
            journal(4, 5, Some("/etc")),
            journal(4, 5, Some("../../outside")),
            journal(4, 5, Some("store/.stage-4")),
            journal(5, 5, None),
            journal(u64::MAX, 0, None),
            journal(4, 7, None),
        ] {
            assert!(parse_journal(&bad).is_err());
        }
    }

    #[test]
    fn state_must_name_its_own_generation() {
        let gs = GenState {
            gen: 3,
            ..GenState::default()
        };
        let bytes = serde_json::to_vec(&gs).expect("json");
        assert!(parse_state(&bytes, 3).is_ok());
        assert!(parse_state(&bytes, 4).is_err());
        let bad = br#"{"gen":1,"layers":{},"current":"live","live_history":[]}"#;
        assert!(parse_state(bad, 1).is_err(), "current names an empty layer");
    }

    fn record(files: &[(&str, &str)], links: &[(&str, &str)]) -> Vec<u8> {
        let files: BTreeMap<String, FileRec> = files
            .iter()
            .map(|(p, c)| {
                (
                    p.to_string(),
                    FileRec {
                        sha256: Sha256::of_bytes(c.as_bytes()),
                        size: c.len() as u64,
                        executable: false,
                    },
                )
            })
            .collect();
        let links: BTreeMap<String, String> = links
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let info = EntryInfo {
            digest: identity(&files, &links),
            recipe: "r".into(),
            variant: "v".into(),
            input_digest: Sha256::of_bytes(b""),
            files,
            links,
        };
        serde_json::to_vec(&info).expect("json")
    }

    #[test]
    fn entry_records_are_believed_only_when_they_hash_to_their_name() {
        let good = record(&[("lib/a.so", "x")], &[("lib/b.so", "a.so")]);
        assert!(parse_entry_record(&good).is_ok());
        // issue #7 class 1: escaping links and paths through links are refused on read too.
        assert!(parse_entry_record(&record(&[("a", "x")], &[("l", "../out")])).is_err());
        assert!(parse_entry_record(&record(&[("zz/f", "x")], &[("zz", "d")])).is_err());
        assert!(parse_entry_record(&record(&[("entry.json", "x")], &[])).is_err());
        // issue #7 class 2: a record edited to agree with an edited file no longer hashes
        // to the name it claims.
        let mut v: serde_json::Value = serde_json::from_slice(&good).expect("json");
        v["files"]["lib/a.so"]["size"] = serde_json::json!(2);
        let edited = serde_json::to_vec(&v).expect("json");
        assert!(parse_entry_record(&edited).is_err());
    }

    #[test]
    fn probe_refuses_simulated_filesystem_without_symlinks() {
        // No set_var here: the unit tests run in threads, and another test opening a root
        // would see the variable.
        let dir = tempfile::tempdir().expect("tempdir");
        let root = Root {
            path: dir.path().to_path_buf(),
        };
        root.probe_fs(false)
            .expect("a real filesystem passes the probe");
        let e = root.probe_fs(true).expect_err("refused");
        assert!(e.to_string().contains("symbolic links"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    /// Valid documents with a few bytes changed: closer to real damage than random bytes.
    fn mutated(seed: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6).prop_map(move |edits| {
            let mut b = seed.clone();
            for (i, x) in edits {
                if b.is_empty() {
                    break;
                }
                let i = i % b.len();
                if x % 3 == 0 {
                    b.truncate(i);
                } else {
                    b[i] = x;
                }
            }
            b
        })
    }

    fn sample_receipt() -> Vec<u8> {
        let slot = Slot {
            digest: Sha256::of_bytes(b"e"),
            recipe: "r".into(),
            variant: "v".into(),
        };
        let r = Receipt {
            seq: 4,
            op: Op::Install,
            layer: Layer::Live,
            from: None,
            to: Some(slot),
            current_before: None,
            current_after: Some(Layer::Live),
            time: "2026-12-01T00:00:00Z".into(),
            verification: Verification {
                ok: true,
                through: "/r/current".into(),
                files: 1,
                mismatches: vec![],
            },
            reverted: false,
            restoration_matches_recorded: None,
            unchanged: false,
            repaired: false,
            timings_us: BTreeMap::new(),
            gen: 1,
        };
        serde_json::to_vec_pretty(&r).expect("json")
    }

    fn sample_state() -> Vec<u8> {
        let slot = Slot {
            digest: Sha256::of_bytes(b"e"),
            recipe: "r".into(),
            variant: "v".into(),
        };
        let gs = GenState {
            gen: 2,
            layers: BTreeMap::from([(Layer::Live, slot.clone())]),
            current: Some(Layer::Live),
            live_history: vec![slot],
        };
        serde_json::to_vec_pretty(&gs).expect("json")
    }

    // DESIGN §5: arbitrary bytes into every install-root parser, never a panic. 10,000 cases
    // of raw bytes and 10,000 of damaged valid documents per parser.
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        #[test]
        fn journal_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_journal(&b);
        }

        #[test]
        fn damaged_journals_never_panic(b in mutated(journal(4, 5, Some("store/.stage-3")))) {
            if let Ok(j) = parse_journal(&b) {
                prop_assert_eq!(j.from_gen + 1, j.to_gen);
            }
        }

        #[test]
        fn state_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512), g in any::<u64>()) {
            let _ = parse_state(&b, g);
        }

        #[test]
        fn damaged_states_never_panic(b in mutated(sample_state())) {
            if let Ok(gs) = parse_state(&b, 2) {
                prop_assert_eq!(gs.gen, 2);
            }
        }

        #[test]
        fn receipt_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512), name in ".{0,40}") {
            let _ = parse_receipt(&b);
            let _ = parse_receipt_name(&name);
        }

        #[test]
        fn damaged_receipts_never_panic(b in mutated(sample_receipt())) {
            let _ = parse_receipt(&b);
        }

        #[test]
        fn entry_record_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_entry_record(&b);
        }

        #[test]
        fn damaged_entry_records_never_panic(b in mutated(record(&[("lib/a.so", "x"), ("include/a.h", "y")], &[("lib/b.so", "a.so")]))) {
            if let Ok(i) = parse_entry_record(&b) {
                prop_assert_eq!(identity(&i.files, &i.links), i.digest);
            }
        }

        #[test]
        fn link_resolution_never_panics(t in "[a-z./]{0,24}", n in "[a-z]{1,3}(/[a-z]{1,3}){0,2}") {
            let links = BTreeMap::from([("l".to_string(), ".".to_string()), ("u".to_string(), "..".to_string())]);
            if let Ok(end) = safe::resolve_inside(&links, &n, &t) {
                prop_assert!(!end.iter().any(|c| c == ".."));
            }
        }
    }
}
