//! The root's layout: opening a root (the file-system probe), the lock, the folders, and
//! generation, entry and receipt I/O. Every path is built from a typed id (`gens/<u64>`,
//! `store/<Sha256>`, `store/.stage-<txid>`), never taken from a file.

use super::*;
use pinforge_record::sign::record::Signer;

/// An install root.
pub struct Root {
    pub(super) path: PathBuf,
    /// Who signs the receipts this root writes (`install --sign`); nobody by default.
    pub(super) signer: Signer,
}

/// A damaged-root error (exit 2) with the hint every such refusal carries.
pub(super) fn damaged(subject: impl fmt::Display, why: impl fmt::Display) -> Error {
    Error::input(subject, format!("damaged install root: {why}")).with_hint(
        "pinforge does not guess and deletes nothing from a damaged root; inspect it (or \
         restore it from a backup), then run the command again",
    )
}

impl Root {
    /// The same root, with every receipt it writes from now on signed by `signer`.
    pub fn signed_by(self, signer: Signer) -> Root {
        Root { signer, ..self }
    }

    /// Open the install root for a command that may create it (install), probing that the
    /// filesystem has what the commit protocol needs.
    pub fn open(path: &Path) -> Result<Root> {
        let path = fsx::absolute(path)?;
        fsx::create_dir_all(&path)?;
        let root = Root {
            path,
            signer: Signer::none(),
        };
        if safe::kind(&root.path.join("state"))? == Kind::Missing {
            // The test hook (feature `test-hooks` only) is read here, once, and handed down:
            // unit tests call the probe with the flag directly.
            let simulate = pinforge_base::hooks::fs_probe_nosymlink();
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
        let root = Root {
            path,
            signer: Signer::none(),
        };
        for d in ["store", "gens", "receipts"] {
            let p = root.path.join(d);
            match safe::kind(&p)? {
                Kind::Missing | Kind::Dir => {}
                _ => return Err(damaged(p.display(), "not a folder")),
            }
        }
        Ok(root)
    }

    /// Refuse filesystems without symlinks or atomic rename over an existing link;
    /// `simulate_no_symlinks` makes it refuse as such a filesystem would (a test hook).
    pub(super) fn probe_fs(&self, simulate_no_symlinks: bool) -> Result<()> {
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
    pub(super) fn lock(&self) -> Result<std::fs::File> {
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
        pinforge_base::fs::lock::lock_exclusive(&f, &p, "the install root's lock")?;
        Ok(f)
    }

    /// The names in one of the root's folders (empty when the folder is missing); names that
    /// are not UTF-8 are strays pinforge never wrote and are left alone.
    pub(super) fn names(&self, sub: &str) -> Result<Vec<String>> {
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
    pub(super) fn is_fresh(&self) -> Result<bool> {
        Ok(self.names("store")?.is_empty()
            && self.names("receipts")?.is_empty()
            && self.names("gens")?.iter().all(|n| n == "0"))
    }

    /// Give a fresh root its generation 0 (empty) and its `state` link, so that from the first
    /// transaction on a missing `state` always means damage.
    pub(super) fn init_if_fresh(&self) -> Result<()> {
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
    pub(super) fn committed_gen(&self) -> Result<u64> {
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

    pub(super) fn read_gen(&self, gen: u64) -> Result<GenState> {
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

    pub(super) fn gen_dir(&self, gen: u64) -> PathBuf {
        self.path.join("gens").join(gen.to_string())
    }

    pub(super) fn entry_dir(&self, key: &EntryKey) -> PathBuf {
        self.path.join("store").join(key.dir_name())
    }

    pub(super) fn staging_dir(&self, txid: u64) -> PathBuf {
        self.path.join("store").join(staging_name(txid))
    }

    /// Read an entry's record, believed only when its listing hashes to the entry's name.
    pub(crate) fn read_entry(&self, key: &EntryKey) -> Result<EntryInfo> {
        let dir = self.entry_dir(key);
        let p = dir.join(ENTRY_RECORD);
        if safe::kind(&dir)? != Kind::Dir {
            return Err(damaged(dir.display(), "store entry is not a folder"));
        }
        let bytes = safe::read_limited(&p, RECORD_LIMIT)?;
        let info = parse_entry_record(&bytes).map_err(|e| damaged(p.display(), e))?;
        if info.digest != key.digest {
            return Err(damaged(p.display(), "the record describes another entry"));
        }
        Ok(info)
    }

    /// Write generation `gs.gen`: its link farm and state.json, fsynced. Only a generation
    /// newer than the committed one is ever (re)written.
    pub(super) fn write_gen(&self, gs: &GenState) -> Result<()> {
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
            let target = entry_link(&slot.key());
            let link = dir.join(layer.as_str());
            std::os::unix::fs::symlink(&target, &link).at("create link", &link)?;
        }
        if let Some((_, slot)) = gs.current_slot() {
            let target = entry_link(&slot.key());
            let link = dir.join("current");
            std::os::unix::fs::symlink(&target, &link).at("create link", &link)?;
        }
        let bytes = serde_json::to_vec_pretty(gs).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic(&dir.join("state.json"), &bytes)?;
        fsx::sync_dir(&dir)?;
        fsx::sync_dir(&self.path.join("gens"))
    }

    /// Make sure the stable consumer paths exist (`current`, `live`, ... -> state/...).
    pub(super) fn ensure_stable_links(&self) -> Result<()> {
        for name in ["current", "live", "control", "original"] {
            let link = self.path.join(name);
            if safe::kind(&link)? == Kind::Missing {
                std::os::unix::fs::symlink(PathBuf::from("state").join(name), &link)
                    .at("create link", &link)?;
            }
        }
        fsx::sync_dir(&self.path)
    }

    /// Every entry any generation references, or `None` when some generation (or the
    /// committed one) cannot be read: then what it references is unknown.
    pub(super) fn referenced_everywhere(&self) -> Result<Option<BTreeSet<EntryKey>>> {
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

    /// The next receipt number: one past the largest well-formed receipt name (strays are
    /// ignored), refusing rather than wrapping at the end of the range.
    pub(super) fn next_seq(&self) -> Result<u64> {
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
    pub(super) fn write_receipt(&self, r: &Receipt) -> Result<PathBuf> {
        let dir = self.path.join("receipts");
        let p = dir.join(format!("{:06}-{}.json", r.seq, r.op.as_str()));
        let bytes = serde_json::to_vec_pretty(r).map_err(|e| Error::Internal(e.to_string()))?;
        // fsx's staged write (its temp files carry TMP_PREFIX, which cleanup knows), renamed
        // without clobbering: a receipt is never replaced.
        let tmp = fsx::stage_atomic_mode(&p, &bytes, 0o644)?;
        // `--sign`: the receipt's sidecars go first, so the receipt never appears unsigned.
        self.signer.before_commit(&p, &bytes)?;
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
    pub(super) fn write_receipt_recovered(&self, r: &Receipt) -> Result<PathBuf> {
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
    pub(super) fn clean_temp_files(&self) -> Result<()> {
        let mut dirs = vec![
            self.path.clone(),
            self.path.join("receipts"),
            self.path.join(super::objects::OBJECTS),
        ];
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
}

/// A generation number as pinforge writes it: canonical decimal (no sign, no leading zero).
pub(super) fn parse_gen_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// The target of `state`: exactly `gens/<n>`.
pub(super) fn parse_gen(target: &Path) -> Option<u64> {
    let s = target.to_str()?;
    parse_gen_number(s.strip_prefix("gens/")?)
}

/// The link a generation holds for an entry (relative to `gens/<n>/`): what it writes and
/// what verification expects to read back.
pub(super) fn entry_link(key: &EntryKey) -> PathBuf {
    PathBuf::from("../../store").join(key.dir_name())
}
