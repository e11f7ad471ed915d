//! Verification: where `current` or a layer leads (resolved once), and the check of an entry
//! folder against its identity (every file re-hashed, every mode and link compared with the
//! entry's record, which is believed only when its listing hashes to the entry's name).

use super::*;

/// Where `current` (or a layer's stable link) leads right now, resolved once.
pub(super) enum Resolved {
    /// The generation read and the entry its link names.
    At { gen: u64, key: EntryKey },
    /// The chain of links is not the one pinforge writes.
    Broken(String),
    /// Nothing is installed there.
    Empty,
}

impl Root {
    /// Where `name` (`current` or a layer) leads, resolved once: the committed generation is
    /// read one time, its record names the entry, and the link chain consumers follow must
    /// be exactly the one pinforge wrote.
    pub(super) fn resolve(&self, name: &str) -> Result<Resolved> {
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
        let want = entry_link(&slot.key());
        match std::fs::read_link(&link) {
            Ok(t) if t == want => Ok(Resolved::At {
                gen,
                key: slot.key(),
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
    pub(super) fn verify_name(
        &self,
        name: &str,
        expect_gen: Option<u64>,
    ) -> Result<Option<Verification>> {
        let through = self.path.join(name);
        let broken = |why: String| Verification {
            ok: false,
            through: through.display().to_string(),
            files: 0,
            bytes_hashed: 0,
            mismatches: vec![pinforge_record::manifest::Mismatch {
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
            Resolved::At { key, .. } => check_key(&self.entry_dir(&key), &key, &through).map(Some),
        }
    }

    /// Verify the entry a layer holds, through the path consumers of that layer use: `current`
    /// when the layer is the current one, its own stable link otherwise.
    pub(super) fn verify_layer(&self, gs: &GenState, layer: Layer) -> Result<Verification> {
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
                bytes_hashed: 0,
                mismatches: vec![],
            }))
    }
}

/// A failed verification as an error naming the first differing files (a few: a folder mode
/// found first must not hide the FIFO found next), shown escaped.
pub(super) fn mismatch_error(subject: &Path, what: &str, v: &Verification) -> Error {
    const NAMED: usize = 4;
    let mut named: Vec<String> = v
        .mismatches
        .iter()
        .take(NAMED)
        .map(|m| pinforge_base::text::shown(&m.path).into_owned())
        .collect();
    if v.mismatches.len() > NAMED {
        named.push("…".into());
    }
    if named.is_empty() {
        named.push("?".into());
    }
    Error::check(
        subject.display(),
        format!(
            "{what} ({} mismatch(es): {})",
            v.mismatches.len(),
            named.join(", ")
        ),
    )
}

/// What an entry folder holds, read without following any link.
#[derive(Default)]
pub(super) struct ObservedEntry {
    files: BTreeMap<String, (FileRec, u32)>,
    links: BTreeMap<String, String>,
    /// (path, expected, found) for folders and records in the wrong shape.
    bad: Vec<(String, String, String)>,
    /// Paths that are FIFOs, sockets or devices (never opened; already in `bad`).
    specials: BTreeSet<String>,
    record: Option<std::result::Result<Vec<u8>, String>>,
    /// Files found by the walk, hashed afterwards on all cores: (path in the entry, path,
    /// `lstat`, mode).
    pending: Vec<(String, PathBuf, std::fs::Metadata, u32)>,
    /// Bytes hashed.
    bytes: u64,
}

/// What hashing one pending file found.
enum Hashed {
    Rec(FileRec),
    /// Not a regular file any more (swapped since the walk): what stands there.
    Special(String),
    /// Replaced since the walk.
    Changed,
}

/// Hash one file the walk found: opened without following and without blocking, tied to the
/// walk's `lstat`, read once.
fn hash_pending(p: &Path, m: &std::fs::Metadata, mode: u32) -> Result<Hashed> {
    // Swapped for a FIFO or a link since the `lstat`: a failed check like any other
    // (open_regular refuses it without blocking), not an error.
    let f = match fsx::open_regular(p, "file", false) {
        Ok(f) => f,
        Err(e) if e.exit_code() == pinforge_base::error::ExitCode::Input => {
            return Ok(Hashed::Special(e.to_string()))
        }
        Err(e) => return Err(e),
    };
    let now = f.metadata().at("stat", p)?;
    if !safe::same_file(m, &now) {
        return Ok(Hashed::Changed);
    }
    let (sha256, size) = Sha256::of_reader(f, p)?;
    Ok(Hashed::Rec(FileRec {
        sha256,
        size,
        executable: mode & 0o111 != 0,
    }))
}

/// Hash every file the walk found, in parallel, and file the results.
fn hash_all(o: &mut ObservedEntry) -> Result<()> {
    let pending = std::mem::take(&mut o.pending);
    let hashed = pinforge_base::hashing::par_map(
        &pending,
        |(_, _, m, _)| m.len(),
        |(_, p, m, mode)| hash_pending(p, m, *mode),
    );
    for ((r, _, _, mode), h) in pending.into_iter().zip(hashed) {
        match h? {
            Hashed::Rec(rec) => {
                o.bytes += rec.size;
                o.files.insert(r, (rec, mode));
            }
            Hashed::Special(why) => {
                o.bad.push((r.clone(), "a regular file".into(), why));
                o.specials.insert(r);
            }
            Hashed::Changed => {
                o.bad
                    .push((r, "a stable file".into(), "changed while read".into()));
            }
        }
    }
    Ok(())
}

pub(super) fn observe(dir: &Path, rel: &str, depth: u32, o: &mut ObservedEntry) -> Result<()> {
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
            Kind::File => o.pending.push((r, p, m, mode)),
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
            // A FIFO, socket or device where the entry holds a file is what `sha256sum -c`
            // calls an unreadable file: a failed check (exit 1) naming it, never opened.
            Kind::Special(what) => {
                o.bad.push((
                    r.clone(),
                    "a regular file, folder or link".into(),
                    format!("{what} (not opened)"),
                ));
                o.specials.insert(r);
            }
            Kind::Missing => {}
        }
    }
    Ok(())
}

/// A transaction's final check, after its receipt (at `receipt`) is written: a failed one is
/// an error naming the receipt, either because the swap was reverted or, when nothing was
/// swapped, because what consumers see is not the entry (`kept` says why nothing changed).
pub(super) fn check_result(
    v: &Verification,
    reverted: bool,
    receipt: &Path,
    kept: &str,
) -> Result<()> {
    if v.ok {
        return Ok(());
    }
    let what = if reverted {
        format!(
            "verification after the swap failed, so the swap was reverted (receipt {})",
            receipt.display()
        )
    } else {
        format!(
            "{kept}, but what consumers see is not the entry (receipt {})",
            receipt.display()
        )
    };
    Err(mismatch_error(Path::new(&v.through), &what, v))
}

impl Root {
    /// Refuse (a check failure naming `what`) unless store entry `digest` is intact.
    pub(super) fn require_intact(&self, key: &EntryKey, what: &str) -> Result<()> {
        let dir = self.entry_dir(key);
        let v = check_key(&dir, key, &dir)?;
        if !v.ok {
            return Err(mismatch_error(&dir, what, &v).with_hint(
                "`pinforge repair --dry-run` shows where each damaged file can come from; \
                 `pinforge repair` re-materializes it from a verified copy",
            ));
        }
        Ok(())
    }
}

/// The differences found while checking an entry through the path `shown`, in the order
/// they were found.
struct Findings<'a> {
    shown: &'a Path,
    mismatches: Vec<pinforge_record::manifest::Mismatch>,
}

impl Findings<'_> {
    fn push(&mut self, path: String, expected: String, actual: String) {
        self.mismatches.push(pinforge_record::manifest::Mismatch {
            path,
            expected,
            actual,
            role: "installed".into(),
        })
    }

    /// A path inside the entry, as seen through `shown`.
    fn at(&self, rel: &str) -> String {
        self.shown.join(rel).display().to_string()
    }

    fn done(self, files: usize, bytes_hashed: u64) -> Verification {
        Verification {
            ok: self.mismatches.is_empty(),
            through: self.shown.display().to_string(),
            files,
            bytes_hashed,
            mismatches: self.mismatches,
        }
    }
}

/// [`check_entry`] for the store entry `key`, and for an own entry its independence too: a
/// file with a second name (link count above 1) shares its inode, so a write through the
/// other name would damage this known-good entry; that is a mismatch before it happens.
pub(super) fn check_key(dir: &Path, key: &EntryKey, shown: &Path) -> Result<Verification> {
    let mut v = check_entry(dir, &key.digest, shown)?;
    if key.sharing == Sharing::Own && safe::kind(dir)? == Kind::Dir {
        for rel in own::shared_files(dir)? {
            v.mismatches.push(pinforge_record::manifest::Mismatch {
                path: shown.join(&rel).display().to_string(),
                expected: "a file of its own (link count 1)".into(),
                actual: "a file with another name: it shares its inode".into(),
                role: "installed".into(),
            });
        }
        v.ok = v.mismatches.is_empty();
    }
    Ok(v)
}

/// Inspect the entry folder `dir` against the identity `digest`: recompute every file's
/// digest, size and mode and every link, and compare with the entry's record, which is
/// believed only when its own listing hashes to `digest`. `shown` names the path the
/// caller checks through. A special file (FIFO, socket, device) is a mismatch naming it,
/// never opened: the entry is not what was recorded.
pub(super) fn check_entry(dir: &Path, digest: &Sha256, shown: &Path) -> Result<Verification> {
    let mut f = Findings {
        shown,
        mismatches: Vec::new(),
    };
    if let Some(found) = not_a_folder(dir)? {
        f.push(
            shown.display().to_string(),
            format!("store entry {digest}"),
            found,
        );
        return Ok(f.done(0, 0));
    }
    let o = observe_entry(dir)?;
    for (rel, expected, found) in &o.bad {
        let at = f.at(rel);
        f.push(at, expected.clone(), found.clone());
    }
    let info = match believed_record(&o, digest) {
        Ok(i) => i,
        Err(why) => {
            f.push(
                f.at(ENTRY_RECORD),
                format!("a record whose listing hashes to {digest}"),
                why,
            );
            let files: BTreeMap<String, FileRec> =
                o.files.iter().map(|(k, (r, _))| (k.clone(), *r)).collect();
            let found = identity(&files, &o.links);
            if found != *digest {
                f.push(
                    shown.display().to_string(),
                    format!("content with identity {digest}"),
                    format!("content with identity {found}"),
                );
            }
            return Ok(f.done(o.files.len(), o.bytes));
        }
    };
    compare(&info, &o, &mut f);
    Ok(f.done(info.files.len(), o.bytes))
}

/// What stands at `dir` when it is not a real folder (`None` when it is); a special file is
/// named, never opened.
fn not_a_folder(dir: &Path) -> Result<Option<String>> {
    Ok(match safe::kind(dir)? {
        Kind::Dir => None,
        Kind::Special(what) => Some(format!("{what} (not opened)")),
        Kind::Missing => Some("missing".to_string()),
        Kind::Link => Some("a symbolic link (refused: entries are folders)".to_string()),
        _ => Some("not a folder".to_string()),
    })
}

/// Everything in the entry folder `dir`, the folder's own mode and its manifest included.
fn observe_entry(dir: &Path) -> Result<ObservedEntry> {
    use std::os::unix::fs::PermissionsExt;
    let mut o = ObservedEntry::default();
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
    hash_all(&mut o)?;
    if safe::kind(&dir.join(ENTRY_MANIFEST))? != Kind::File && !o.specials.contains(ENTRY_MANIFEST)
    {
        o.bad.push((
            ENTRY_MANIFEST.into(),
            "the build's manifest".into(),
            "missing".into(),
        ));
    }
    Ok(o)
}

/// The entry's record, believed only when its listing hashes to the entry's name; otherwise
/// why not.
fn believed_record(o: &ObservedEntry, digest: &Sha256) -> std::result::Result<EntryInfo, String> {
    match &o.record {
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
    }
}

/// Compare what the folder holds with the believed record: every recorded file and link,
/// then anything extra.
fn compare(info: &EntryInfo, o: &ObservedEntry, f: &mut Findings<'_>) {
    for (name, want) in &info.files {
        match o.files.get(name) {
            // Already reported as what stands there instead.
            None if o.specials.contains(name) => {}
            None if o.links.contains_key(name) => f.push(
                f.at(name),
                want.sha256.to_string(),
                "a symbolic link (refused: files are files)".into(),
            ),
            None => f.push(f.at(name), want.sha256.to_string(), "missing".into()),
            Some((got, _)) if got.sha256 != want.sha256 || got.size != want.size => f.push(
                f.at(name),
                format!("{} ({} bytes)", want.sha256, want.size),
                format!("{} ({} bytes)", got.sha256, got.size),
            ),
            Some((_, mode)) if *mode != want.mode() => f.push(
                f.at(name),
                format!("mode {:o}", want.mode()),
                format!("mode {mode:o}"),
            ),
            Some(_) => {}
        }
    }
    for (name, target) in &info.links {
        match o.links.get(name) {
            Some(t) if t == target => {}
            Some(t) => f.push(
                f.at(name),
                format!("link to {target}"),
                format!("link to {t}"),
            ),
            None if o.specials.contains(name) => {}
            None => f.push(f.at(name), format!("link to {target}"), "missing".into()),
        }
    }
    for name in o.files.keys() {
        if !info.files.contains_key(name) {
            f.push(
                f.at(name),
                "nothing (not in the entry)".into(),
                "an extra file".into(),
            );
        }
    }
    for (name, t) in &o.links {
        if !info.links.contains_key(name) && !info.files.contains_key(name) {
            f.push(
                f.at(name),
                "nothing (not in the entry)".into(),
                format!("an extra link to {t}"),
            );
        }
    }
}
