//! Putting a build into the store: the install plan read from an untrusted manifest
//! (`Plan::read`) and the staging copies (hard links or copies, sealed, fsynced) that become
//! a store entry.

use super::*;
use pinforge_record::manifest::Statement;

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

/// An install's input, checked before the lock is taken: the manifest, its artifact root
/// (relative, below the manifest's folder, through no link), every source file (a regular
/// file reached through real folders only) and the entry it makes.
pub(super) struct Plan {
    pub(super) manifest_path: PathBuf,
    pub(super) manifest_bytes: Vec<u8>,
    pub(super) info: EntryInfo,
    pub(super) sources: BTreeMap<String, (PathBuf, std::fs::Metadata)>,
}

/// The files of a plan: the entry's listing, and where each one is read from (with the
/// metadata it had when checked, so a file swapped before staging is noticed).
type Files = (
    BTreeMap<String, FileRec>,
    BTreeMap<String, (PathBuf, std::fs::Metadata)>,
);

impl Plan {
    pub(super) fn read(manifest_path: &Path) -> Result<Plan> {
        let manifest_bytes = read_manifest(manifest_path)?;
        let statement = Statement::parse(&manifest_bytes, manifest_path)?;
        let root = artifact_root(manifest_path, &statement)?;
        let (files, sources) = subject_files(manifest_path, &statement, &root)?;
        let links = subject_links(manifest_path, &statement)?;
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

/// A name from the manifest as an error subject: the manifest, then the name escaped.
fn subject(manifest_path: &Path, name: &str) -> String {
    format!("{}: `{}`", manifest_path.display(), name.escape_debug())
}

/// The manifest's bytes. The manifest itself is the user's own path (links followed), but
/// never a FIFO or device: refused before it is opened. Its bytes are read once: the
/// statement parsed is the one whose bytes the entry stores, so the two cannot differ.
fn read_manifest(manifest_path: &Path) -> Result<Vec<u8>> {
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
    Ok(manifest_bytes)
}

/// The statement's artifact root: relative, below the manifest's folder, and reached
/// through real folders only.
fn artifact_root(manifest_path: &Path, statement: &Statement) -> Result<PathBuf> {
    let ar = &statement
        .predicate
        .build_definition
        .internal_parameters
        .artifact_root;
    safe::check_rel(ar, "manifest artifact_root").map_err(|e| {
        Error::input(subject(manifest_path, ar), format!("{e}"))
            .with_hint("artifact_root is relative to the manifest's folder and stays below it")
    })?;
    let mut root = fsx::parent_of(manifest_path);
    for c in ar.split('/') {
        root.push(c);
        match safe::kind(&root)? {
            Kind::Dir => {}
            Kind::Link => {
                return Err(Error::input(
                    subject(manifest_path, ar),
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
            _ => {
                return Err(Error::input(
                    subject(manifest_path, ar),
                    "artifact_root is not a folder",
                ))
            }
        }
    }
    Ok(root)
}

/// The manifest's subjects as entry files, each found below `root` as a regular file.
fn subject_files(manifest_path: &Path, statement: &Statement, root: &Path) -> Result<Files> {
    let subject = |name: &str| subject(manifest_path, name);
    let mut files = BTreeMap::new();
    let mut sources = BTreeMap::new();
    for s in &statement.subject {
        safe::check_rel(&s.name, "manifest subject")?;
        let sha = s
            .sha256()
            .ok_or_else(|| Error::input(subject(&s.name), "manifest subject without sha256"))?;
        let size = s
            .annotations
            .get(pinforge_record::manifest::annotation::SIZE)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| Error::input(subject(&s.name), "manifest subject without size"))?;
        if files.contains_key(&s.name) {
            return Err(Error::input(
                subject(&s.name),
                "the manifest lists this subject twice; refused (which one is meant?)",
            ));
        }
        let (path, meta) = source_file(root, &s.name)?;
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
    Ok((files, sources))
}

/// The links among the outputs: byproducts annotated with a `link_target`.
fn subject_links(manifest_path: &Path, statement: &Statement) -> Result<BTreeMap<String, String>> {
    let subject = |name: &str| subject(manifest_path, name);
    let mut links = BTreeMap::new();
    for b in &statement.predicate.run_details.byproducts {
        let Some(t) = b
            .annotations
            .get(pinforge_record::manifest::annotation::LINK_TARGET)
        else {
            continue;
        };
        let t = t
            .as_str()
            .ok_or_else(|| Error::input(subject(&b.name), "link_target is not a string"))?;
        safe::check_rel(&b.name, "manifest link")?;
        // The target becomes a link in the store (a path): the shared rule for values that
        // become paths, naming the manifest.
        pinforge_base::text::refuse_control(
            &format!("{}: target of link `{}`", manifest_path.display(), b.name),
            t,
        )?;
        if links.insert(b.name.clone(), t.to_string()).is_some() {
            return Err(Error::input(
                subject(&b.name),
                "the manifest lists this link twice; refused",
            ));
        }
    }
    Ok(links)
}

/// What placing an entry did: how the files were staged and what that did in the object
/// store (both none when an intact entry was reused), and whether a damaged entry was
/// replaced.
#[derive(Default)]
pub(super) struct Placed {
    pub(super) mode: Option<StageMode>,
    pub(super) store: Option<StoreUse>,
    pub(super) repaired: bool,
}

/// The store entry an install would fill, as found before the transaction.
pub(super) struct Existing {
    pub(super) key: EntryKey,
    pub(super) dir: PathBuf,
    pub(super) kind: Kind,
    /// It is a folder that still is what its name says.
    pub(super) ok: bool,
}

impl Root {
    /// The store entry `digest` as it is now. An existing entry is reused only when it still
    /// is what its name says; a damaged one (special files included) is replaced from the
    /// build, never left in place.
    pub(super) fn existing_entry(&self, key: &EntryKey) -> Result<Existing> {
        let dir = self.entry_dir(key);
        let kind = safe::kind(&dir)?;
        let ok = kind == Kind::Dir
            && match check_key(&dir, key, &dir) {
                Ok(v) => v.ok,
                Err(e) if e.exit_code() == pinforge_base::error::ExitCode::Input => false,
                Err(e) => return Err(e),
            };
        Ok(Existing {
            key: *key,
            dir,
            kind,
            ok,
        })
    }

    /// Put the entry into the store (steps staged and staged-verified of `txn`): reuse an
    /// intact existing entry, or stage the build's files (links to objects, writing the ones
    /// the store lacks), seal, verify them against the manifest and rename into place; a
    /// damaged existing entry trades places with the fresh copy in one `renameat2`.
    pub(super) fn place_entry(
        &self,
        txn: &mut Txn<'_, InstallStep>,
        plan: &Plan,
        entry: &Existing,
        mode: Option<StageMode>,
        timings: &mut BTreeMap<String, u64>,
    ) -> Result<Placed> {
        if entry.ok {
            txn.reach(InstallStep::Staged)?;
            txn.reach(InstallStep::StagedVerified)?;
            return Ok(Placed::default());
        }
        let staging = txn.staging_dir();
        let objects = self.objects_dir()?;
        let mut opts = StageOpts {
            objects: &objects,
            mode,
            reuse: true,
            txid: txn.txid(),
            sharing: entry.key.sharing,
        };
        let t = Instant::now();
        let (mut m, mut store) = stage(plan, &staging, &opts)?;
        timings.insert("stage".to_string(), t.elapsed().as_micros() as u64);
        txn.reach(InstallStep::Staged)?;
        let t = Instant::now();
        let mut v = check_entry(&staging, &plan.info.digest, &staging)?;
        if !v.ok && store.objects_reused > 0 {
            // An object that looked intact (type, mode, size) holds other bytes: stage again
            // from the build, every object written afresh.
            safe::remove_tree(&staging)?;
            opts.reuse = false;
            (m, store) = stage(plan, &staging, &opts)?;
            v = check_entry(&staging, &plan.info.digest, &staging)?;
        }
        timings.insert("verify_staged".to_string(), t.elapsed().as_micros() as u64);
        if !v.ok {
            return Err(mismatch_error(
                &plan.manifest_path,
                "build outputs do not match the manifest; nothing installed",
                &v,
            ));
        }
        txn.reach(InstallStep::StagedVerified)?;
        let repaired = entry.kind != Kind::Missing;
        if repaired {
            fsx::exchange(&staging, &entry.dir, "exchange with")?;
            safe::remove_tree(&staging)?;
        } else {
            std::fs::rename(&staging, &entry.dir).at("rename into", &entry.dir)?;
        }
        fsx::sync_dir(&self.path.join("store"))?;
        Ok(Placed {
            mode: Some(m),
            store: Some(store),
            repaired,
        })
    }
}

/// A build output, reached from the artifact root through real folders only.
pub(super) fn source_file(root: &Path, name: &str) -> Result<(PathBuf, std::fs::Metadata)> {
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

/// How [`stage`] runs: where the objects are, whether objects that look intact may be
/// linked (a repair writes every object afresh), and the transaction id temp names carry.
pub(super) struct StageOpts<'a> {
    pub(super) objects: &'a Path,
    pub(super) mode: Option<StageMode>,
    pub(super) reuse: bool,
    pub(super) txid: u64,
    /// `Own`: every file made here from the build output (a reflink or a copy), no object.
    pub(super) sharing: Sharing,
}

/// Place the entry's files in `staging` (a folder created fresh), each a hard link to its
/// object, writing the objects the store lacks: an object is a hard link to the build output
/// only when the output's mode already is the sealed one (sealing must never change a file
/// pinforge did not create), a copy otherwise; then the links, the records, and the folders
/// sealed 0555.
pub(super) fn stage(
    plan: &Plan,
    staging: &Path,
    opts: &StageOpts<'_>,
) -> Result<(StageMode, StoreUse)> {
    std::fs::create_dir(staging).at("create directory", staging)?;
    let mut ctx = StageCtx {
        opts,
        want_link: opts.mode.unwrap_or(StageMode::Link) == StageMode::Link,
        used: opts.mode.unwrap_or(StageMode::Link),
        store: StoreUse::default(),
        fail_after: pinforge_base::hooks::fail_write_after(),
        written: 0,
        temp_seq: 0,
    };
    for (name, rec) in &plan.info.files {
        let (from, meta) = plan
            .sources
            .get(name)
            .ok_or_else(|| Error::Internal(format!("no source for {name}")))?;
        let to = staging.join(name);
        fsx::create_dir_all(&fsx::parent_of(&to))?;
        match opts.sharing {
            Sharing::Linked => ctx.stage_file(name, rec, from, meta, &to)?,
            Sharing::Own => ctx.stage_own_file(rec, from, meta, &to)?,
        }
        fsx::open_regular(&to, "staged file", false)?
            .sync_all()
            .at("fsync", &to)?;
    }
    // The objects' names (their data is fsynced one by one): a crash before this loses
    // only names, which the next install writes again.
    fsx::sync_dir(opts.objects)?;
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
    Ok((ctx.used, ctx.store))
}

/// The running state of one [`stage`].
struct StageCtx<'a> {
    opts: &'a StageOpts<'a>,
    want_link: bool,
    used: StageMode,
    store: StoreUse,
    fail_after: Option<u64>,
    written: u64,
    temp_seq: u64,
}

impl StageCtx<'_> {
    /// One entry file: link it to its object, writing the object first when the store has
    /// none that looks intact (or when reuse is off).
    fn stage_file(
        &mut self,
        name: &str,
        rec: &FileRec,
        from: &Path,
        meta: &std::fs::Metadata,
        to: &Path,
    ) -> Result<()> {
        let obj = self.opts.objects.join(object_name(rec));
        if self.opts.reuse && looks_intact(&obj, rec) {
            self.store.objects_reused += 1;
        } else {
            let replacing = safe::kind(&obj)? != Kind::Missing;
            self.store.objects_replaced += usize::from(replacing);
            self.write_object(rec, from, meta, &obj, replacing)?;
        }
        let linked = if pinforge_base::hooks::object_link_emlink() {
            Err(std::io::Error::from_raw_os_error(libc::EMLINK))
        } else {
            std::fs::hard_link(&obj, to)
        };
        match linked {
            Ok(()) => Ok(()),
            Err(e) if link_fallback(&e) => {
                self.store.copied_not_linked.push(format!("{name}: {e}"));
                let src = fsx::open_regular(&obj, "object", false)?;
                copy_file(
                    src,
                    &obj,
                    to,
                    rec.mode(),
                    self.fail_after,
                    &mut self.written,
                )
            }
            Err(e) => Err(Error::io("link", to, e)),
        }
    }

    /// One file of an own entry: made from the build output (a reflink, else a copy),
    /// never linked to an object or to the output, so it shares no inode.
    fn stage_own_file(
        &mut self,
        rec: &FileRec,
        from: &Path,
        meta: &std::fs::Metadata,
        to: &Path,
    ) -> Result<()> {
        let src = open_unchanged(from, meta)?;
        self.used = StageMode::Copy;
        let made = own::reflink_or_copy(
            src,
            from,
            to,
            rec.mode(),
            self.fail_after,
            &mut self.written,
        )?;
        self.store.own_files += 1;
        self.store.own_reflinked += usize::from(made == own::Made::Reflink);
        self.store.bytes_written += rec.size;
        Ok(())
    }

    /// Write `obj` from the build output `from`: a temp file in `objects/` (a hard link to
    /// the output when its mode is the sealed one, else a sealed copy), fsynced, then renamed
    /// over the object's name (a damaged object's inode stays with the entries that hold it).
    /// A new name is checked with the whole entry before the entry is placed; `replacing` an
    /// existing name (a repair) hashes the new bytes first.
    fn write_object(
        &mut self,
        rec: &FileRec,
        from: &Path,
        meta: &std::fs::Metadata,
        obj: &Path,
        replacing: bool,
    ) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let src = open_unchanged(from, meta)?;
        let now = src.metadata().at("stat", from)?;
        let tmp = self
            .opts
            .objects
            .join(format!("{TMP_PREFIX}{}-{}", self.opts.txid, self.temp_seq));
        self.temp_seq += 1;
        safe::remove_tree(&tmp)?;
        let linked = self.want_link
            && now.permissions().mode() & 0o7777 == rec.mode()
            && std::fs::hard_link(from, &tmp).is_ok();
        if !linked {
            self.used = StageMode::Copy;
            copy_file(
                src,
                from,
                &tmp,
                rec.mode(),
                self.fail_after,
                &mut self.written,
            )?;
        }
        fsx::open_regular(&tmp, "object", false)?
            .sync_all()
            .at("fsync", &tmp)?;
        if replacing {
            // A name is replaced only by the bytes it names: a build output that changed
            // since its manifest must not take over an object other entries' installs reuse.
            let f = fsx::open_regular(&tmp, "object", false)?;
            let (sha, size) = Sha256::of_reader(f, &tmp)?;
            if sha != rec.sha256 || size != rec.size {
                safe::remove_tree(&tmp)?;
                return Err(Error::check(
                    from.display(),
                    "build output does not match its digest in the manifest; nothing installed",
                ));
            }
        }
        pinforge_base::hooks::crash_named("install-object:written");
        std::fs::rename(&tmp, obj).at("rename into", obj)?;
        pinforge_base::hooks::crash_named("install-object:named");
        self.store.objects_written += 1;
        self.store.bytes_written += rec.size;
        Ok(())
    }
}

/// Open the build output `from`, refused when it is no longer the file checked as `meta`.
fn open_unchanged(from: &Path, meta: &std::fs::Metadata) -> Result<std::fs::File> {
    let src = fsx::open_regular(from, "build output", false)?;
    let now = src.metadata().at("stat", from)?;
    if !safe::same_file(meta, &now) {
        return Err(Error::input(
            from.display(),
            "build output changed while it was being installed",
        ));
    }
    Ok(src)
}

/// Copy an opened build output into a file created here, then give that file (ours) its
/// sealed mode.
pub(super) fn copy_file(
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
pub(super) fn seal_dirs(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).at("read directory", dir)?.flatten() {
        let p = e.path();
        if safe::kind(&p)? == Kind::Dir {
            seal_dirs(&p)?;
        }
    }
    let d = pinforge_base::fsx::open_dir(dir, "open")?;
    d.sync_all().at("fsync directory", dir)?;
    d.set_permissions(std::fs::Permissions::from_mode(EXEC_MODE))
        .at("chmod", dir)
}
