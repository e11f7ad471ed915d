//! Signing records as they are written (`--sign KEY` on build, flip, ablate, validate and
//! install; issue #24). The command line loads the key once, before anything is written, into
//! a [`Signer`] that it passes down in the command's options (no process-wide key: a library
//! caller, or a test, signs two records with two keys in one process); every record writer
//! then goes through [`Signer::write_record`] (or [`Signer::before_commit`] when it renames
//! the record itself), which signs the bytes it is about to commit. [`Signer::none`] writes
//! exactly what a command without `--sign` wrote before.
//!
//! Order, so that a signature appears with its record or the record does not appear: the
//! envelope and the SSHSIG are derived from the record's bytes in memory, all three files are
//! staged (synced temp files beside their targets), the two sidecars are renamed, and the
//! record's own rename comes last: it is the commit point. A kill before it leaves the old
//! record (or none) with sidecars over bytes that are not there, which `verify
//! --allowed-signers` refuses ("payload does not match"), and never a new record without
//! its signature. The crash points are [`SignRecordStep`]'s (sidecars staged; sidecars renamed,
//! record not yet): the integration tests kill a real run at each.
//!
//! Leftovers: a killed signer leaves its staged temp files (a kill skips their cleanup).
//! Signing stages under its own name, `.pinforge-tmp-sign-PID-…` (PID: the writer's process
//! id), and every signing in a folder first removes the ones whose writer is gone
//! ([`remove_stale_temps`]): a live writer's files (another signer mid-way, in this
//! process or another) are never touched, and other writers' temp files are not ours.

use super::{sidecars, sign_bytes, SigningKey};
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::txn::Step;
use std::path::Path;
use std::sync::Arc;

/// Who signs the records a command writes: a loaded key, or nobody. Cheap to clone (the key
/// is shared), so every options struct that leads to a record writer carries one.
#[derive(Debug, Clone, Default)]
pub struct Signer(Option<Arc<SigningKey>>);

impl Signer {
    /// No signing: records are written plainly, with no sidecars.
    pub fn none() -> Self {
        Self(None)
    }

    /// Sign every record with `key`.
    pub fn with_key(key: SigningKey) -> Self {
        Self(Some(Arc::new(key)))
    }

    /// Whether records are signed.
    pub fn is_signing(&self) -> bool {
        self.0.is_some()
    }

    fn key(&self) -> Option<&SigningKey> {
        self.0.as_deref()
    }

    /// Write a record atomically (mode 0644, as `fsx::write_atomic`), signed when there is a
    /// key (see the module comment for the order).
    pub fn write_record(&self, file: &Path, bytes: &[u8]) -> Result<()> {
        write_record_with(file, bytes, self.key())
    }

    /// For a writer that renames `file` itself (an install receipt, never clobbered): with a
    /// key, stage and rename the sidecars for `bytes` now, right before the caller's own
    /// rename of the record (its commit point). Without a key, nothing.
    pub fn before_commit(&self, file: &Path, bytes: &[u8]) -> Result<()> {
        before_commit_with(file, bytes, self.key())
    }

    /// With a key, sign a record that is already on disk and is kept as it is (a cached build
    /// keeps its manifest byte for byte): its sidecars are rewritten for its current bytes.
    pub fn sign_kept(&self, file: &Path) -> Result<()> {
        let Some(key) = self.key() else { return Ok(()) };
        let bytes = fsx::read(file)?;
        before_commit_with(file, &bytes, Some(key))?;
        fsx::sync_dir(&fsx::parent_of(file))
    }
}

/// The two sidecars of one record, staged and not yet renamed; dropping them deletes the
/// temp files.
pub(crate) struct Staged {
    envelope: (tempfile::TempPath, std::path::PathBuf),
    sig: (tempfile::TempPath, std::path::PathBuf),
}

impl Staged {
    /// Rename both sidecars into place (the SSHSIG first, then the envelope).
    pub(crate) fn persist(self) -> Result<()> {
        self.persist_stepwise(|| {})
    }

    /// [`Staged::persist`], calling `between` after the first rename (a crash point).
    pub(crate) fn persist_stepwise(self, between: impl FnOnce()) -> Result<()> {
        let rename = |(tmp, to): (tempfile::TempPath, std::path::PathBuf)| {
            tmp.persist(&to)
                .map_err(|e| Error::io("rename into", &to, e.error))
        };
        rename(self.sig)?;
        between();
        rename(self.envelope)
    }
}

/// Stage `FILE.dsse.json` and `FILE.sig` for `bytes`, the content `file` is about to have.
pub(crate) fn stage_sidecars(file: &Path, bytes: &[u8], key: &SigningKey) -> Result<Staged> {
    let (envelope, sshsig) = sign_bytes(bytes, key)?;
    let (env_path, sig_path) = sidecars(file);
    remove_stale_temps(&fsx::parent_of(file))?;
    let mut env_json =
        serde_json::to_vec_pretty(&envelope).map_err(|e| Error::Internal(e.to_string()))?;
    env_json.push(b'\n');
    Ok(Staged {
        envelope: (stage(&env_path, &env_json)?, env_path),
        sig: (stage(&sig_path, sshsig.as_bytes())?, sig_path),
    })
}

/// The prefix of the temp files signing stages (see the module comment).
const TEMP_PREFIX: &str = ".pinforge-tmp-sign-";

/// Stage `bytes` for `path` (mode 0644) under this process's signing temp name.
fn stage(path: &Path, bytes: &[u8]) -> Result<tempfile::TempPath> {
    let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
    fsx::stage_atomic_prefixed(path, bytes, 0o644, &prefix)
}

/// Remove the signing temp files in `dir` whose writer (the PID in the name) is no longer
/// running: what a killed `sign` or `--sign` left. A name that does not parse, or a writer
/// that is alive (signal 0 reaches it, or it exists under another account), is kept.
pub(crate) fn remove_stale_temps(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    for path in fsx::dead_writer_entries(dir, TEMP_PREFIX)? {
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            // Another signer cleaned it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove stale temp file", &path, e)),
        }
    }
    Ok(removed)
}

fn before_commit_with(file: &Path, bytes: &[u8], key: Option<&SigningKey>) -> Result<()> {
    let Some(key) = key else { return Ok(()) };
    let staged = stage_sidecars(file, bytes, key)?;
    SignRecordStep::Staged.reached();
    staged.persist()?;
    SignRecordStep::SidecarsRenamed.reached();
    Ok(())
}

/// [`Signer::write_record`], with the key as an argument.
pub(crate) fn write_record_with(file: &Path, bytes: &[u8], key: Option<&SigningKey>) -> Result<()> {
    let Some(key) = key else {
        return fsx::write_atomic(file, bytes);
    };
    let dir = fsx::parent_of(file);
    fsx::create_dir_all(&dir)?;
    let record = stage(file, bytes)?;
    before_commit_with(file, bytes, Some(key))?;
    record
        .persist(file)
        .map_err(|e| Error::io("rename into", file, e.error))?;
    fsx::sync_dir(&dir)
}

pinforge_base::steps! {
    /// The steps of signing a record as it is written; each is the crash point
    /// `sign-record:<index>`. The record's own rename (its writer's commit point) follows.
    pub enum SignRecordStep for "sign-record" {
        /// Both sidecars are staged.
        Staged = 1,
        /// Both sidecars are renamed into place; the record is not yet.
        SidecarsRenamed = 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::{verify_signed, Policy};

    fn key_and_policy(dir: &Path) -> (SigningKey, Policy) {
        let (private, public) =
            super::super::generate("t@example.org", None, false).expect("generate");
        let key_path = dir.join("k");
        super::super::write_pair(&key_path, &private, &public).expect("pair");
        let signers = dir.join("allowed_signers");
        std::fs::write(
            &signers,
            format!("t@example.org namespaces=\"pinforge\" {public}\n"),
        )
        .expect("signers");
        (
            SigningKey::load(&key_path).expect("load"),
            Policy::load(&signers).expect("policy"),
        )
    }

    #[test]
    fn two_signers_in_one_process_sign_with_their_own_keys_and_none_signs_nothing() {
        // The key is the caller's, not the process's: two commands run from one library user
        // (or two tests in one binary) never sign with each other's key.
        let (a, b) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let (key_a, policy_a) = key_and_policy(a.path());
        let (key_b, policy_b) = key_and_policy(b.path());
        let (signer_a, signer_b) = (Signer::with_key(key_a), Signer::with_key(key_b));
        assert!(signer_a.is_signing() && !Signer::none().is_signing());
        let (rec_a, rec_b) = (a.path().join("r.json"), b.path().join("r.json"));
        signer_a.write_record(&rec_a, b"{}\n").expect("a");
        signer_b.write_record(&rec_b, b"{}\n").expect("b");
        verify_signed(&rec_a, &policy_a).expect("a's record, a's key");
        verify_signed(&rec_b, &policy_b).expect("b's record, b's key");
        let e = verify_signed(&rec_a, &policy_b).expect_err("b's policy refuses a's key");
        assert!(!e.to_string().is_empty());
        let plain = a.path().join("plain.json");
        Signer::none().write_record(&plain, b"{}\n").expect("plain");
        Signer::none().sign_kept(&plain).expect("nothing to sign");
        assert!(!sidecars(&plain).0.exists() && !sidecars(&plain).1.exists());
    }

    #[test]
    fn a_signed_record_verifies_and_a_rewrite_signs_the_new_bytes() {
        let d = tempfile::tempdir().expect("tempdir");
        let (key, policy) = key_and_policy(d.path());
        let rec = d.path().join("sub/record.json");
        write_record_with(&rec, b"{\"a\":1}\n", Some(&key)).expect("write");
        let v = verify_signed(&rec, &policy).expect("verified");
        assert_eq!(v.principals, vec!["t@example.org".to_string()]);
        assert_eq!(v.payload_type, super::super::PINFORGE_PAYLOAD_TYPE);
        write_record_with(&rec, b"{\"a\":2}\n", Some(&key)).expect("rewrite");
        assert_eq!(std::fs::read(&rec).expect("read"), b"{\"a\":2}\n");
        verify_signed(&rec, &policy).expect("the new bytes are signed");
    }

    #[test]
    fn without_a_key_the_record_is_written_plainly_and_verify_calls_it_unsigned() {
        let d = tempfile::tempdir().expect("tempdir");
        let (_key, policy) = key_and_policy(d.path());
        let rec = d.path().join("record.json");
        write_record_with(&rec, b"{}\n", None).expect("write");
        assert!(!sidecars(&rec).0.exists() && !sidecars(&rec).1.exists());
        let e = verify_signed(&rec, &policy).expect_err("unsigned");
        assert!(e.to_string().contains("unsigned"), "{e}");
    }

    #[test]
    fn signing_removes_the_temp_files_of_dead_signers_only() {
        let d = tempfile::tempdir().expect("tempdir");
        let (key, _policy) = key_and_policy(d.path());
        // A process that has exited: its PID names a writer that is gone.
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = child.id();
        child.wait().expect("wait");
        let stale = d.path().join(format!("{TEMP_PREFIX}{dead}-abc"));
        let live = d
            .path()
            .join(format!("{TEMP_PREFIX}{}-abc", std::process::id()));
        let foreign = d.path().join(".pinforge-tmp-abc");
        for p in [&stale, &live, &foreign] {
            std::fs::write(p, b"x").expect("write");
        }
        write_record_with(&d.path().join("r.json"), b"{}\n", Some(&key)).expect("write");
        assert!(!stale.exists(), "a dead signer's temp file is removed");
        assert!(live.exists(), "a live signer's temp file is kept");
        assert!(
            foreign.exists(),
            "another writer's temp file is not signing's"
        );
        let mut names: Vec<String> = std::fs::read_dir(d.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".pinforge-tmp"))
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "nothing of this signing is left: {names:?}");
    }

    #[test]
    fn sidecars_ahead_of_their_record_are_refused_as_not_matching_it() {
        // The state a kill at sign-record:2 leaves when a record is replaced.
        let d = tempfile::tempdir().expect("tempdir");
        let (key, policy) = key_and_policy(d.path());
        let rec = d.path().join("record.json");
        write_record_with(&rec, b"{\"old\":true}\n", Some(&key)).expect("write");
        before_commit_with(&rec, b"{\"new\":true}\n", Some(&key)).expect("sidecars");
        let e = verify_signed(&rec, &policy).expect_err("mismatch");
        assert!(e.to_string().contains("payload does not match"), "{e}");
    }
}
