//! Signed records (issue #24): a DSSE envelope beside a record (`FILE.dsse.json`) and a
//! detached SSHSIG over the record's own bytes (`FILE.sig`, namespace `pinforge`), both made
//! with one OpenSSH key, so that stock tools verify them with no pinforge code:
//! `ssh-keygen -Y verify -f allowed_signers -I ID -n pinforge -s FILE.sig < FILE`, and
//! `openssl pkeyutl -verify -rawin` over the envelope's PAE for an Ed25519 key.
//!
//! Payload types: the envelope's payload is always FILE's bytes, unchanged (so "the payload
//! is the file" is a byte comparison). A file that is an in-toto Statement (a build
//! manifest) gets `application/vnd.in-toto+json`; any other record (flip and ablation
//! records, validation evidence, install receipts) gets [`PINFORGE_PAYLOAD_TYPE`]. The type
//! verify expects is derived from the file the same way, and any other type is refused: a
//! manifest in a pinforge-typed envelope (or a receipt posing as a statement) fails.
//!
//! Writing (`sign FILE`, a transaction): the folder is locked, FILE is read once through a
//! descriptor checked to be a regular file, both sidecars are staged as synced temp files,
//! then renamed: the SSHSIG, then the envelope, whose rename is the commit point. Verify
//! needs both and reads the envelope first, so before the commit FILE is as signed as it was
//! (a pair by another key, or a missing envelope, is refused: the envelope's key id must be
//! the SSHSIG's); after it, FILE is signed by the new key. Both are derived from FILE and the
//! key alone, so signing again repairs any crash. Crash points `sign:1` (staged), `sign:2`
//! (SSHSIG renamed), `sign:3` (both renamed, folder not yet synced). Records signed as a
//! command writes them: [`record`].

mod keygen;
mod policy;
pub mod record;

pub use keygen::{write_pair, KeyStep};
pub use policy::{Policy, NAMESPACE};

use base64::Engine as _;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::txn::Step;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The DSSE payload type of an in-toto Statement.
pub(crate) const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The DSSE payload type of a pinforge record that is not a Statement.
pub(crate) const PINFORGE_PAYLOAD_TYPE: &str = "application/vnd.pinforge.record+json";
/// The environment variable an encrypted key's passphrase is read from.
pub(crate) const PASSPHRASE_VAR: &str = "PINFORGE_KEY_PASSPHRASE";
/// Envelopes and signatures larger than this are refused before parsing.
const MAX_SIDECAR: usize = 1 << 20;
/// A private key file larger than this is not an Ed25519 or P-256 key.
const MAX_KEY_FILE: u64 = 64 << 10;

const P256: ssh_key::EcdsaCurve = ssh_key::EcdsaCurve::NistP256;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A DSSE envelope.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Envelope {
    pub(crate) payload_type: String,
    pub(crate) payload: String,
    pub(crate) signatures: Vec<EnvelopeSignature>,
}

/// One signature of an envelope: the key id is the key's SSH fingerprint (`SHA256:…`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnvelopeSignature {
    pub(crate) keyid: String,
    pub(crate) sig: String,
}

/// DSSE's pre-authentication encoding: `"DSSEv1" SP len(type) SP type SP len(body) SP body`.
pub(crate) fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The payload type a record's bytes call for (see the module comment).
pub(crate) fn payload_type_for(bytes: &[u8]) -> &'static str {
    let is_statement = serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("_type").and_then(|t| t.as_str().map(str::to_string)))
        .is_some_and(|t| t == crate::manifest::STATEMENT_TYPE);
    if is_statement {
        IN_TOTO_PAYLOAD_TYPE
    } else {
        PINFORGE_PAYLOAD_TYPE
    }
}

/// A private key to sign with, decrypted.
pub struct SigningKey {
    key: ssh_key::PrivateKey,
    path: PathBuf,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({}, {})", self.path.display(), self.keyid())
    }
}

impl SigningKey {
    /// Load an OpenSSH private key; an encrypted one is decrypted with the passphrase from
    /// [`PASSPHRASE_VAR`], or, when that is unset and both stdin and stderr are a terminal,
    /// one typed at a prompt on the terminal (see [`passphrase_for`]).
    pub fn load(path: &Path) -> Result<SigningKey> {
        // The text, the passphrase and the decrypted key are wiped when dropped: the text
        // and the passphrase are `Zeroizing`, and ssh-key wipes a private key's bytes in its
        // own `Drop` (Ed25519 and ECDSA key data) and decrypts through a `Zeroizing` buffer.
        let bytes = fsx::read_secret(path, MAX_KEY_FILE)?;
        let key = ssh_key::PrivateKey::from_openssh(bytes.as_slice()).map_err(|e| {
            Error::input(path.display(), format!("not an OpenSSH private key: {e}"))
                .with_hint("make one with `pinforge key generate` or `ssh-keygen -t ed25519`")
        })?;
        let key = if key.is_encrypted() {
            let pass = passphrase_for(path)?;
            key.decrypt(pass.as_bytes()).map_err(|e| {
                Error::input(path.display(), format!("cannot decrypt the key: {e}")).with_hint(
                    format!("check the passphrase ({PASSPHRASE_VAR} or the prompt)"),
                )
            })?
        } else {
            key
        };
        match key.algorithm() {
            ssh_key::Algorithm::Ed25519 | ssh_key::Algorithm::Ecdsa { curve: P256 } => {}
            other => {
                return Err(Error::input(
                    path.display(),
                    format!(
                        "key type {other} is not supported for signing; use ssh-ed25519 \
                         or ecdsa-sha2-nistp256"
                    ),
                ))
            }
        }
        Ok(SigningKey {
            key,
            path: path.to_path_buf(),
        })
    }

    /// The key id: its SSH fingerprint, as `ssh-keygen -l` prints it (`SHA256:…`).
    pub(crate) fn keyid(&self) -> String {
        self.key
            .public_key()
            .fingerprint(ssh_key::HashAlg::Sha256)
            .to_string()
    }

    /// The DSSE signature over `message` (the PAE): Ed25519's 64 raw bytes, or for a P-256
    /// key ECDSA over SHA-256 in ASN.1 DER, the form cosign and `openssl pkeyutl` read
    /// (not SSH's mpint pair).
    fn dsse_sig(&self, message: &[u8]) -> Result<Vec<u8>> {
        if let ssh_key::private::KeypairData::Ecdsa(ssh_key::private::EcdsaKeypair::NistP256 {
            private,
            ..
        }) = self.key.key_data()
        {
            let sk = p256::ecdsa::SigningKey::from_slice(private.as_slice())
                .map_err(|e| Error::Internal(format!("P-256 key: {e}")))?;
            let sig: p256::ecdsa::Signature = signature::Signer::try_sign(&sk, message)
                .map_err(|e| Error::Internal(format!("signing failed: {e}")))?;
            return Ok(sig.to_der().as_bytes().to_vec());
        }
        let sig: ssh_key::Signature = signature::Signer::try_sign(&self.key, message)
            .map_err(|e| Error::Internal(format!("signing failed: {e}")))?;
        Ok(sig.as_bytes().to_vec())
    }
}

/// The passphrase of the encrypted key at `path`: [`PASSPHRASE_VAR`] when set (even empty:
/// a script that sets it means it); otherwise a prompt on `/dev/tty` with echo off, but only
/// when stdin and stderr are both terminals, so that a pipeline or a CI job never hangs
/// waiting for a person; otherwise an input error (exit 2) before anything is written.
fn passphrase_for(path: &Path) -> Result<Secret> {
    use std::io::IsTerminal;
    if let Some(p) = passphrase_from_env()? {
        return Ok(p);
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(Error::input(
            path.display(),
            "the key is encrypted, no passphrase was given and there is no terminal to ask on",
        )
        .with_hint(format!(
            "set {PASSPHRASE_VAR} to the key's passphrase, or run from a terminal"
        )));
    }
    rpassword::prompt_password(format!("passphrase for {}: ", path.display()))
        .map(Secret::new)
        .map_err(|e| Error::io("read a passphrase from", Path::new("/dev/tty"), e))
}

/// [`PASSPHRASE_VAR`] when it is set (even empty), wiped when dropped. (The process's own
/// copy of its environment is not ours to wipe; use the prompt where that matters.)
pub fn passphrase_from_env() -> Result<Option<Secret>> {
    match std::env::var_os(PASSPHRASE_VAR) {
        None => Ok(None),
        Some(p) => p.into_string().map(|s| Some(Secret::new(s))).map_err(|_| {
            Error::input(PASSPHRASE_VAR, "is not UTF-8")
                .with_hint("set it to the key's passphrase as text")
        }),
    }
}

/// What a signing wrote.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Signed {
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub file: PathBuf,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub envelope: PathBuf,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub sig: PathBuf,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub keyid: String,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub payload_type: String,
}

/// Who signed a verified record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Verified {
    /// The principals the policy line names for the key.
    pub principals: Vec<String>,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub keyid: String,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub payload_type: String,
    /// `allowed_signers` file and line that trusted the key.
    pub policy_line: String,
}

/// `FILE.dsse.json` and `FILE.sig`.
pub(crate) fn sidecars(file: &Path) -> (PathBuf, PathBuf) {
    let with = |ext: &str| {
        let mut s = file.as_os_str().to_os_string();
        s.push(ext);
        PathBuf::from(s)
    };
    (with(".dsse.json"), with(".sig"))
}

/// The envelope and the SSHSIG of `bytes` (in memory).
pub(crate) fn sign_bytes(bytes: &[u8], key: &SigningKey) -> Result<(Envelope, String)> {
    let payload_type = payload_type_for(bytes);
    let envelope = Envelope {
        payload_type: payload_type.to_string(),
        payload: B64.encode(bytes),
        signatures: vec![EnvelopeSignature {
            keyid: key.keyid(),
            sig: B64.encode(key.dsse_sig(&pae(payload_type, bytes))?),
        }],
    };
    let sshsig = key
        .key
        .sign(NAMESPACE, ssh_key::HashAlg::Sha512, bytes)
        .and_then(|s| s.to_pem(ssh_key::LineEnding::LF))
        .map_err(|e| Error::Internal(format!("SSHSIG signing failed: {e}")))?;
    Ok((envelope, sshsig))
}

/// `sign FILE`: write `FILE.dsse.json` and `FILE.sig` as one transaction (see the module
/// comment). FILE must be a regular file (a symlink, FIFO or folder is refused, exit 2, with
/// nothing written); its bytes are read once, through the descriptor that was checked.
pub fn sign_file(file: &Path, key: &SigningKey) -> Result<Signed> {
    let dir = fsx::parent_of(file);
    // Two signers of one folder's records take turns: neither sees the other's half pair.
    let _lock = fsx::DirLock::acquire(&dir)?;
    let bytes = {
        let mut f = fsx::open_regular(file, "the record to sign", false)?;
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut b).map_err(|e| Error::io("read", file, e))?;
        b
    };
    let staged = record::stage_sidecars(file, &bytes, key)?;
    SignStep::Staged.reached();
    staged.persist_stepwise(|| SignStep::SigRenamed.reached())?;
    SignStep::EnvelopeRenamed.reached();
    fsx::sync_dir(&dir)?;
    let (envelope, sig) = sidecars(file);
    Ok(Signed {
        file: file.to_path_buf(),
        envelope,
        sig,
        keyid: key.keyid(),
        payload_type: payload_type_for(&bytes).to_string(),
    })
}

fn refused(subject: &Path, why: impl std::fmt::Display) -> Error {
    Error::check(subject.display(), why)
}

/// Verify `file` against `policy`: its envelope (payload = the file's bytes, the expected
/// payload type, a good signature by an allowed key) and its SSHSIG (same key, namespace
/// `pinforge`). Any failure is a check error (exit 1) naming why.
pub fn verify_signed(file: &Path, policy: &Policy) -> Result<Verified> {
    let bytes = fsx::read(file)?;
    let (env_path, sig_path) = sidecars(file);
    let env_bytes = read_sidecar(&env_path, "envelope")?;
    let v = verify_envelope_bytes(&env_bytes, &bytes, policy).map_err(|e| match e {
        Error::Check { message, hint, .. } => Error::Check {
            subject: env_path.display().to_string(),
            message,
            hint,
        },
        other => other,
    })?;
    let sig_bytes = read_sidecar(&sig_path, "SSH signature")?;
    verify_sshsig_bytes(&sig_bytes, &bytes, &v, policy, &sig_path)?;
    Ok(v)
}

/// The SSHSIG half of a signed record: `sig` must be a good SSHSIG over `bytes` in namespace
/// `pinforge`, by a key `policy` allows, and the same key as the envelope's (`v`). Errors are
/// check errors about `subject`.
pub fn verify_sshsig_bytes(
    sig: &[u8],
    bytes: &[u8],
    v: &Verified,
    policy: &Policy,
    subject: &Path,
) -> Result<()> {
    let sshsig = ssh_key::SshSig::from_pem(sig)
        .map_err(|e| refused(subject, format!("not an SSH signature: {e}")))?;
    let allowed = policy.allows(sshsig.public_key()).ok_or_else(|| {
        refused(
            subject,
            format!(
                "signed by key {}, which is not in {} for namespace {NAMESPACE}",
                sshsig.public_key().fingerprint(ssh_key::HashAlg::Sha256),
                policy.path.display()
            ),
        )
    })?;
    allowed
        .key
        .verify(NAMESPACE, bytes, &sshsig)
        .map_err(|e| refused(subject, format!("bad SSH signature: {e}")))?;
    let keyid = allowed
        .key
        .fingerprint(ssh_key::HashAlg::Sha256)
        .to_string();
    if keyid != v.keyid {
        return Err(refused(
            subject,
            format!("signed by {keyid}, the envelope by {}", v.keyid),
        ));
    }
    Ok(())
}

fn read_sidecar(path: &Path, what: &str) -> Result<Vec<u8>> {
    let bytes = match fsx::read_if_present(path)? {
        Some(b) => b,
        None => {
            return Err(refused(path, format!("unsigned: no {what}"))
                .with_hint("sign it with `pinforge sign FILE --key KEY`"))
        }
    };
    if bytes.len() > MAX_SIDECAR {
        return Err(refused(
            path,
            format!("{what} of {} bytes is too large", bytes.len()),
        ));
    }
    Ok(bytes)
}

/// Verify a DSSE envelope whose payload must be `payload_expected` (the file beside it, or
/// a blob fetched by digest) against `policy`.
pub fn verify_envelope_bytes(
    envelope: &[u8],
    payload_expected: &[u8],
    policy: &Policy,
) -> Result<Verified> {
    let subject = Path::new("envelope");
    let env: Envelope = serde_json::from_slice(envelope)
        .map_err(|e| refused(subject, format!("not a DSSE envelope: {e}")))?;
    let want = payload_type_for(payload_expected);
    if env.payload_type != want {
        return Err(refused(
            subject,
            format!(
                "payloadType {:?}, expected {want:?} for this record",
                env.payload_type
            ),
        ));
    }
    let payload = B64
        .decode(env.payload.as_bytes())
        .map_err(|e| refused(subject, format!("payload is not base64: {e}")))?;
    if payload != payload_expected {
        return Err(refused(
            subject,
            "payload does not match the file beside it (the record changed after signing)",
        ));
    }
    let message = pae(&env.payload_type, &payload);
    let mut why = vec![];
    for s in &env.signatures {
        match check_one(s, &message, &env.payload_type, policy) {
            Ok(v) => return Ok(v),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(refused(
        subject,
        if why.is_empty() {
            "unsigned: the envelope has no signature".to_string()
        } else {
            why.join("; ")
        },
    ))
}

/// Why one signature of an envelope was not accepted (an envelope with several lists each).
#[derive(Debug, thiserror::Error)]
enum SigRefusal {
    #[error("key {keyid} is unknown: it is not in {} for namespace {NAMESPACE}", .policy.display())]
    UnknownKey { keyid: String, policy: PathBuf },
    #[error("signature is not base64: {0}")]
    NotBase64(base64::DecodeError),
    #[error("bad signature by {keyid}{}", .why.as_ref().map(|w| format!(": {w}")).unwrap_or_default())]
    Bad {
        keyid: String,
        /// Why the bytes could not even be checked; `None` when they were and do not match.
        why: Option<String>,
    },
}

fn check_one(
    s: &EnvelopeSignature,
    message: &[u8],
    payload_type: &str,
    policy: &Policy,
) -> std::result::Result<Verified, SigRefusal> {
    let allowed = policy
        .entries
        .iter()
        .filter(|e| e.key.fingerprint(ssh_key::HashAlg::Sha256).to_string() == s.keyid)
        .find_map(|e| policy.allows(e.key.key_data()))
        .ok_or_else(|| SigRefusal::UnknownKey {
            keyid: s.keyid.clone(),
            policy: policy.path.clone(),
        })?;
    let raw = B64
        .decode(s.sig.as_bytes())
        .map_err(SigRefusal::NotBase64)?;
    verify_dsse_sig(&allowed.key, message, raw).map_err(|why| SigRefusal::Bad {
        keyid: s.keyid.clone(),
        why,
    })?;
    Ok(Verified {
        principals: allowed.principals.clone(),
        keyid: s.keyid.clone(),
        payload_type: payload_type.to_string(),
        policy_line: format!("{}:{}", policy.path.display(), allowed.line),
    })
}

/// One DSSE signature (`raw`, as [`SigningKey::dsse_sig`] makes it) by `key` over `message`.
/// `Err(None)`: checked and wrong; `Err(Some(why))`: the key or the bytes cannot be read.
fn verify_dsse_sig(
    key: &ssh_key::PublicKey,
    message: &[u8],
    raw: Vec<u8>,
) -> std::result::Result<(), Option<String>> {
    if let ssh_key::public::KeyData::Ecdsa(ssh_key::public::EcdsaPublicKey::NistP256(point)) =
        key.key_data()
    {
        let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(point.as_bytes())
            .map_err(|e| Some(format!("the P-256 key: {e}")))?;
        let sig = p256::ecdsa::Signature::from_der(&raw)
            .map_err(|e| Some(format!("not a DER ECDSA signature: {e}")))?;
        return signature::Verifier::verify(&vk, message, &sig).map_err(|_| None);
    }
    let sig = ssh_key::Signature::new(key.algorithm(), raw).map_err(|e| Some(e.to_string()))?;
    signature::Verifier::verify(key, message, &sig).map_err(|_| None)
}

/// A fresh key pair (Ed25519, or ECDSA P-256 with `p256`): the private key in OpenSSH format (encrypted when `passphrase`
/// is given) and the public key line.
pub fn generate(comment: &str, passphrase: Option<&str>, p256: bool) -> Result<(Secret, String)> {
    let mut rng = ssh_key::rand_core::OsRng;
    let algorithm = if p256 {
        ssh_key::Algorithm::Ecdsa { curve: P256 }
    } else {
        ssh_key::Algorithm::Ed25519
    };
    let mut key = ssh_key::PrivateKey::random(&mut rng, algorithm)
        .map_err(|e| Error::Internal(format!("key generation failed: {e}")))?;
    key.set_comment(comment);
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| Error::Internal(e.to_string()))?;
    let key = match passphrase {
        Some(p) => key
            .encrypt(&mut rng, p.as_bytes())
            .map_err(|e| Error::Internal(format!("key encryption failed: {e}")))?,
        None => key,
    };
    // ssh-key returns the text as `Zeroizing<String>` already: kept as it is, never copied.
    let private = key
        .to_openssh(ssh_key::LineEnding::LF)
        .map_err(|e| Error::Internal(e.to_string()))?;
    Ok((private, public))
}

/// A private key's OpenSSH text (or a passphrase): wiped from memory when dropped.
pub(crate) type Secret = zeroize::Zeroizing<String>;

#[cfg(test)]
mod tests;

pinforge_base::steps! {
    /// The steps of `sign FILE`; each is the crash point `sign:<index>`.
    pub enum SignStep for "sign" {
        /// Both sidecars are staged.
        Staged = 1,
        /// `FILE.sig` is renamed into place.
        SigRenamed = 2,
        /// `FILE.dsse.json` is renamed into place: FILE is signed by the new key.
        EnvelopeRenamed = 3,
    }
}
