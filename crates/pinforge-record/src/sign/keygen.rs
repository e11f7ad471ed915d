//! `key generate`: a fresh key pair written as one transaction, so that a kill at any point
//! leaves either nothing or the whole pair, and never a private key without its `.pub`.
//!
//! Protocol (under the lock of the target folder, from the first check to the last rename):
//! 1. the temp files of dead writers are recovered ([`recover`], below);
//! 2. PATH and PATH.pub are examined without following links: anything there (a file, a
//!    symlink, a FIFO, a dangling link) is refused, exit 2, before anything is written;
//! 3. both files are staged as synced temp files in the target folder, named
//!    `.pinforge-tmp-key-PID-…` (PID: this process): the private key created 0600 with
//!    `O_EXCL` (it is never readable by others, not even for the moment before a chmod), the
//!    public one 0644 — crash point `key:1`;
//! 4. the `.pub` is renamed onto PATH.pub with `RENAME_NOREPLACE` (nothing is overwritten,
//!    not even by a writer that raced the check) — crash point `key:2`;
//! 5. **commit point**: the private key is renamed onto PATH with `RENAME_NOREPLACE` —
//!    crash point `key:3`; then the folder is synced.
//!
//! The public half goes first because a private key without its public half is the state a
//! reader must never see (a signer would have nothing to put in `allowed_signers`), while a
//! `.pub` without its private key is harmless to read and recoverable: after a kill at step
//! 4 the dead writer's staged private key is still there, and the next run (for any PATH in
//! that folder) removes a `.pub` whose private key is missing *and* whose key is exactly the
//! one staged by that dead writer, then the temp file. A `.pub` that no dead writer's staged
//! key explains is the user's, and is never touched.

use super::Secret;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::txn::Step;
use std::path::{Path, PathBuf};

/// The prefix of the temp files `key generate` stages.
const TEMP_PREFIX: &str = ".pinforge-tmp-key-";
/// What ends the name of a staged private key (the public one ends in `.pub`).
const PRIVATE_SUFFIX: &str = "-private";
/// A `.pub` larger than this is not one `key generate` wrote.
const MAX_PUB: u64 = 16 << 10;

/// `PATH.pub`.
pub(crate) fn pub_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".pub");
    PathBuf::from(s)
}

/// Write a generated pair as one transaction (see the module comment): the private key 0600
/// at `path`, `path.pub` 0644, refusing anything already at either name.
pub fn write_pair(path: &Path, private: &Secret, public: &str) -> Result<()> {
    let dir = fsx::parent_of(path);
    if path.file_name().is_none() {
        return Err(Error::input(path.display(), "is not a file name")
            .with_hint("give the private key's path with -o, e.g. -o keys/pinforge_ed25519"));
    }
    let _lock = fsx::DirLock::acquire(&dir)?;
    let pub_path = pub_path(path);
    // Recovery first: a `.pub` a killed run published is not "already there".
    recover(&dir)?;
    for p in [path, pub_path.as_path()] {
        refuse_existing(p)?;
    }
    let staged_private = stage(&dir, PRIVATE_SUFFIX, private.as_bytes(), 0o600)?;
    let public_line = format!("{public}\n");
    let staged_public = match stage(&dir, "-public", public_line.as_bytes(), 0o644) {
        Ok(p) => p,
        Err(e) => {
            let _ = std::fs::remove_file(&staged_private);
            return Err(e);
        }
    };
    let cleanup = || {
        let _ = std::fs::remove_file(&staged_private);
        let _ = std::fs::remove_file(&staged_public);
    };
    KeyStep::Staged.reached();
    if let Err(e) = fsx::rename_noreplace(&staged_public, &pub_path) {
        cleanup();
        return Err(e);
    }
    KeyStep::PublicRenamed.reached();
    if let Err(e) = fsx::rename_noreplace(&staged_private, path) {
        // Undo the published half: a `.pub` alone is what this protocol never leaves behind
        // when it can help it.
        let _ = std::fs::remove_file(&pub_path);
        cleanup();
        return Err(e);
    }
    KeyStep::PrivateRenamed.reached();
    fsx::sync_dir(&dir)
}

/// Anything at `p` (not followed: a dangling link counts) is refused, naming what it is.
fn refuse_existing(p: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("stat", p, e)),
    };
    let ft = meta.file_type();
    let kind = fsx::special_kind(&ft)
        .or(ft.is_symlink().then_some("a symlink"))
        .or(ft.is_dir().then_some("a folder"))
        .unwrap_or("a file");
    Err(Error::input(
        p.display(),
        format!("already exists ({kind}); nothing was written"),
    )
    .with_hint("choose another path with -o, or move the old key away first"))
}

/// Stage `bytes` as `TEMP_PREFIX<PID>-<random><suffix>` in `dir`, created with `O_EXCL` and
/// `mode` (so a private key is 0600 from its first byte), written and synced. Returns its
/// path.
fn stage(dir: &Path, suffix: &str, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    let p = dir.join(format!(
        "{TEMP_PREFIX}{}-{:016x}{suffix}",
        std::process::id(),
        rand_u64()
    ));
    fsx::create_new_synced(&p, bytes, mode)?;
    Ok(p)
}

/// A random number for temp names (not a secret: only uniqueness matters).
fn rand_u64() -> u64 {
    use ssh_key::rand_core::RngCore;
    ssh_key::rand_core::OsRng.next_u64()
}

/// What killed writers left in `dir`: their staged private keys, with any `.pub` they had
/// already published and no private key beside it (see the module comment); a staged key of
/// a live writer, or a file that does not parse, is left alone. Returns how many temp files
/// were removed.
pub(crate) fn recover(dir: &Path) -> Result<usize> {
    let dead = fsx::dead_writer_entries(dir, TEMP_PREFIX)?;
    let mut removed = 0;
    for temp in &dead {
        let name = temp.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.as_deref().is_some_and(|n| n.ends_with(PRIVATE_SUFFIX)) {
            if let Some(public) = staged_public_key(temp) {
                remove_orphan_pubs(dir, &public)?;
            }
        }
        match std::fs::remove_file(temp) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove stale temp file", temp, e)),
        }
    }
    Ok(removed)
}

/// The public key of a staged private key (readable without its passphrase: OpenSSH keeps it
/// in the clear), or None when the file is not a key.
fn staged_public_key(temp: &Path) -> Option<ssh_key::PublicKey> {
    let text = fsx::read_secret(temp, 64 << 10).ok()?;
    let key = ssh_key::PrivateKey::from_openssh(text.as_slice()).ok()?;
    Some(key.public_key().clone())
}

/// Remove every `X.pub` in `dir` that holds exactly `public` while `X` is missing: the half a
/// killed `key generate` published before its commit point.
fn remove_orphan_pubs(dir: &Path, public: &ssh_key::PublicKey) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let p = entry.path();
        let is_pub = p.extension().is_some_and(|e| e == "pub");
        if !is_pub || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let private = p.with_extension("");
        if std::fs::symlink_metadata(&private).is_ok() {
            continue;
        }
        let Ok(f) = fsx::open_regular(&p, "a public key", false) else {
            continue;
        };
        let mut text = String::new();
        if std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_PUB), &mut text).is_err() {
            continue;
        }
        let same = ssh_key::PublicKey::from_openssh(text.trim())
            .is_ok_and(|k| k.key_data() == public.key_data());
        if same {
            std::fs::remove_file(&p).map_err(|e| Error::io("remove orphan public key", &p, e))?;
        }
    }
    Ok(())
}

pinforge_base::steps! {
    /// The steps of `key generate`; each is the crash point `key:<index>`.
    pub enum KeyStep for "key" {
        /// Both halves are staged (synced temp files beside their names).
        Staged = 1,
        /// The public half is renamed into place (never over a file).
        PublicRenamed = 2,
        /// The private half is renamed into place: the pair exists.
        PrivateRenamed = 3,
    }
}
