//! The root's on-disk records and their parsers: store-entry records (`entry.json`) and
//! their identity, generation state (`gens/<n>/state.json`) and receipts. Every parser
//! checks what it reads; nothing here touches the file system.

use super::*;

/// Largest state, journal, receipt or entry record pinforge reads back (it writes far less).
pub(super) const RECORD_LIMIT: u64 = 16 << 20;
/// Sealed modes: installed trees are readable by everyone and writable by none.
pub(super) const FILE_MODE: u32 = 0o444;
/// See [`FILE_MODE`]: executables and folders.
pub(super) const EXEC_MODE: u32 = 0o555;
/// Metadata files every entry carries beside its artifacts (not part of its identity).
pub(super) const ENTRY_RECORD: &str = "entry.json";
/// See [`ENTRY_RECORD`].
pub(super) const ENTRY_MANIFEST: &str = "manifest.json";
/// Prefix of `fsx::write_atomic`'s temp files: a killed run can leave one behind.
pub(super) const TMP_PREFIX: &str = ".pinforge-tmp-";

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
    pub(super) fn mode(&self) -> u32 {
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
pub(super) fn validate_listing(
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

// Named `GenSlot` beside validate's engine `Slot`; the schema keeps the name `Slot` (and this
// doc line, its description), so the published JSON schemas do not change.
/// One layer's entry in a generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "Slot")]
pub struct GenSlot {
    /// Output digest.
    pub digest: Sha256,
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
    /// How the entry holds its files: `own` for the known-good layers (absent: `linked`, and
    /// every slot a root written before issue #36 holds).
    #[serde(default, skip_serializing_if = "Sharing::is_linked")]
    pub sharing: Sharing,
}

impl GenSlot {
    /// The store entry this slot names.
    pub fn key(&self) -> EntryKey {
        EntryKey {
            digest: self.digest,
            sharing: self.sharing,
        }
    }
}

/// How a store entry holds its files (issue #36). Hard links let entries share unchanged
/// files, and so also share damage: a write through one link is a write to every entry that
/// holds the inode. The layers an operator falls back to therefore never share.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// Every file a hard link to its object in `objects/`: live and its rollback stack, whose
    /// generations share unchanged files (`store/<digest>`).
    #[default]
    Linked,
    /// Files of its own, copies or reflinks (which share blocks copy-on-write, never an
    /// inode): the control and original layers (`store/<digest>.own`).
    Own,
}

impl Sharing {
    /// The sharing an install into `layer` gives its entry.
    pub fn for_layer(layer: Layer) -> Sharing {
        match layer {
            Layer::Live => Sharing::Linked,
            Layer::Control | Layer::Original => Sharing::Own,
        }
    }

    /// `linked` (the default, not written into state.json).
    pub fn is_linked(&self) -> bool {
        *self == Sharing::Linked
    }

    /// The name used in messages and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Sharing::Linked => "linked",
            Sharing::Own => "own",
        }
    }
}

/// A store entry's name: its digest and how it holds its files. The same build installed
/// into live and into control is two entries, so damage to one is never damage to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryKey {
    /// The entry's identity (its content, modes and links).
    pub digest: Sha256,
    /// Linked to the objects or its own files.
    pub sharing: Sharing,
}

/// The suffix of an [`Sharing::Own`] entry's folder name.
const OWN_SUFFIX: &str = ".own";

impl EntryKey {
    /// The folder name below `store/`: the digest, plus `.own` for an own entry.
    pub fn dir_name(&self) -> String {
        match self.sharing {
            Sharing::Linked => self.digest.to_hex(),
            Sharing::Own => format!("{}{OWN_SUFFIX}", self.digest.to_hex()),
        }
    }

    /// A folder name as [`EntryKey::dir_name`] writes it; anything else in `store/` is not
    /// an entry (a staging folder, a stray).
    pub fn parse(name: &str) -> Option<EntryKey> {
        let (hex, sharing) = match name.strip_suffix(OWN_SUFFIX) {
            Some(h) => (h, Sharing::Own),
            None => (name, Sharing::Linked),
        };
        let digest: Sha256 = hex.parse().ok()?;
        (digest.to_hex() == hex).then_some(EntryKey { digest, sharing })
    }
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store/{}", self.dir_name())
    }
}

/// A generation: the whole visible state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GenState {
    /// Generation number.
    pub gen: u64,
    /// Layers.
    pub layers: BTreeMap<Layer, GenSlot>,
    /// Which layer `current` shows.
    pub current: Option<Layer>,
    /// Earlier live entries, most recent last: what `rollback` returns to.
    pub live_history: Vec<GenSlot>,
}

impl GenState {
    pub(super) fn current_slot(&self) -> Option<(Layer, &GenSlot)> {
        let l = self.current?;
        self.layers.get(&l).map(|s| (l, s))
    }

    /// Every entry this generation needs: layers and the rollback stack.
    pub(super) fn referenced(&self) -> BTreeSet<EntryKey> {
        self.layers
            .values()
            .chain(&self.live_history)
            .map(GenSlot::key)
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
    // Only the known-good layers are given entries of their own; live and its stack link.
    let mut live = gs
        .layers
        .get(&Layer::Live)
        .into_iter()
        .chain(&gs.live_history);
    if live.any(|s| s.sharing != Sharing::Linked) {
        return Err(Error::input(
            "state.json",
            "a live entry is marked `own`: live and its rollback stack link to the objects",
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
    /// Bytes re-hashed (receipts written before this field read as 0).
    #[serde(default)]
    pub bytes_hashed: u64,
    /// Differences.
    pub mismatches: Vec<pinforge_record::manifest::Mismatch>,
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
    pub from: Option<GenSlot>,
    /// What it shows now.
    pub to: Option<GenSlot>,
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
    /// Installs that staged an entry: objects reused and written, and the entry files that
    /// had to be copies instead of links (absent in receipts older than the object store).
    #[serde(default)]
    pub store: Option<StoreUse>,
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
