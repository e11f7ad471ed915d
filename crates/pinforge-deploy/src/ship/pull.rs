//! `pull`: an artifact by digest into `pulled/<digest>/` of the workspace, as one transaction.
//!
//! Order (nothing is unpacked before every check that can run without unpacking passed):
//! 1. resolve: the digest given (a tag given with it must still name it: a moved tag is
//!    refused), the manifest fetched by digest and re-hashed, its shape checked;
//! 2. the config (the in-toto statement) fetched and re-hashed, parsed and checked;
//! 3. the attestation found (referrers API, else the `sha256-<hex>` tag), each referrer
//!    fetched by digest, its subject required to be this artifact; with `--allowed-signers`
//!    the DSSE envelope and the SSHSIG over the statement's exact bytes verified by
//!    `artifact::sign` (the verifier of `verify --allowed-signers`) for a key of that file (an
//!    unsigned artifact, an unknown key, a bad signature: refused);
//! 4. under the lock of `pulled/`: the layer streamed into a fresh stage folder and re-hashed,
//!    then unpacked by the pins' extractor (escapes, hard links, devices, FIFOs refused; links
//!    only inside the tree), the statement, its signatures and the `pulled.json` marker
//!    written beside it, every output re-hashed against the statement and nothing extra
//!    allowed (the statement's inputs are another machine's paths: never read, see
//!    `manifest::inputs`);
//! 5. commit: one rename of the stage onto `pulled/<digest>` (an exchange with a damaged old
//!    copy), through `txn::DirCommit`, at the steps of [`PullStep`]. A crash leaves a
//!    `.stage-*` folder the next pull removes under the lock.

use super::client::{Access, Client};
use super::push::signature_paths;
use super::{ImageIndex, ImageManifest, Reference, MT_BUILD, MT_DSSE, MT_LAYER, MT_SSHSIG};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::txn::{DirCommit, Step};
use pinforge_record::manifest::{self, annotation, Statement};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How to pull.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// How the registry is reached (plain HTTP to loopback only, credentials).
    pub access: Access,
    /// The signature policy: an OpenSSH `allowed_signers` file.
    pub allowed_signers: Option<PathBuf>,
    /// Refuse a reference without a digest (install pins by digest only).
    pub require_digest: bool,
}

/// What a pull did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PullOutcome {
    /// The artifact manifest's digest.
    pub digest: Sha256,
    /// The folder it is in and the manifest that `verify` and `install` take.
    pub dir: PathBuf,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub manifest: PathBuf,
    /// The folder was already there, complete and verified.
    pub unchanged: bool,
    /// The principal of `allowed_signers` whose signature was verified (None: no policy).
    pub signer: Option<String>,
    /// Output files and their total size.
    pub files: usize,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub bytes: u64,
}

/// The DSSE envelope and SSHSIG bytes attached to an artifact, each when present.
type Signatures = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What the registry holds for an artifact, all of it checked.
struct Fetched {
    digest: Sha256,
    statement: Statement,
    config: Vec<u8>,
    layer: super::Descriptor,
    dsse: Option<Vec<u8>>,
    sshsig: Option<Vec<u8>>,
}

/// Pull `r` into `ws_root/pulled/`.
pub fn pull(ws_root: &Path, r: &Reference, opts: &PullOptions) -> Result<PullOutcome> {
    let mut c = Client::new(r, opts.access)?;
    let digest = resolve(&mut c, r, opts.require_digest)?;
    let f = fetch(&mut c, r, digest)?;
    let signer = match &opts.allowed_signers {
        Some(allowed) => Some(policy(allowed, r, &f)?),
        None => None,
    };
    let pulled = ws_root.join("pulled");
    fsx::create_dir_all(&pulled)?;
    let _lock = fsx::DirLock::acquire(&pulled)?;
    remove_stale_stages(&pulled)?;
    let dir = pulled.join(f.digest.to_hex());
    let manifest_path = dir.join("manifest.json");
    let files = f.statement.subject.len();
    let bytes = f
        .statement
        .subject
        .iter()
        .filter_map(|s| s.annotations.get(annotation::SIZE).and_then(|v| v.as_u64()))
        .sum();
    let out = |unchanged| PullOutcome {
        digest: f.digest,
        dir: dir.clone(),
        manifest: manifest_path.clone(),
        unchanged,
        signer: signer.clone(),
        files,
        bytes,
    };
    if dir.is_dir() && existing_ok(&manifest_path, &f.config) {
        return Ok(out(true));
    }
    // The stage is `pulled/.stage-<pid>-<digest>`; dropped on any error before the swap.
    let commit = DirCommit::begin(&dir, STAGE_PREFIX)?;
    fill_stage(&mut c, commit.stage(), &f)?;
    commit.commit(PullStep::Staged, PullStep::Committed)?;
    Ok(out(false))
}

/// The digest to pull: given (and, with a tag beside it, still what the tag names), or,
/// when allowed, the tag's current one.
fn resolve(c: &mut Client, r: &Reference, require_digest: bool) -> Result<Sha256> {
    let tag_now = |c: &mut Client, tag: &str| -> Result<Sha256> {
        c.get_manifest(tag, None)?.map(|f| f.digest).ok_or_else(|| {
            Error::check(
                format!("{}/{}:{tag}", r.registry, r.repository),
                "the registry has no such tag",
            )
        })
    };
    match (&r.tag, r.digest) {
        (Some(tag), Some(d)) => {
            let now = tag_now(c, tag)?;
            if now != d {
                return Err(Error::check(
                    r.shown(),
                    format!(
                        "the tag `{tag}` moved: it now names sha256:{}, not the pinned digest; refused",
                        now.to_hex()
                    ),
                )
                .with_hint("install by digest only: drop the tag to install the pinned artifact, or pin the new digest after checking it"));
            }
            Ok(d)
        }
        (_, Some(d)) => Ok(d),
        (Some(tag), None) => {
            let now = tag_now(c, tag)?;
            if require_digest {
                return Err(Error::input(
                    r.shown(),
                    "a tag is not a pin: install takes an artifact by digest only",
                )
                .with_hint(format!(
                    "the tag names it now: oci://{}/{}@sha256:{}",
                    r.registry,
                    r.repository,
                    now.to_hex()
                )));
            }
            Ok(now)
        }
        (None, None) => Err(Error::input(r.shown(), "no tag and no digest")
            .with_hint("add @sha256:<digest> (push prints it)")),
    }
}

/// A registry document that is not what a pinforge artifact is.
fn not_ours(r: &Reference, why: &str) -> Error {
    Error::check(r.shown(), format!("not a pinforge build artifact: {why}"))
}

/// Manifest, config and attestation of `digest`, each fetched by digest and re-hashed.
fn fetch(c: &mut Client, r: &Reference, digest: Sha256) -> Result<Fetched> {
    let hex = digest.to_hex();
    let m = c
        .get_manifest(&format!("sha256:{hex}"), Some(&digest))?
        .ok_or_else(|| {
            Error::check(
                format!("{}/{}@sha256:{hex}", r.registry, r.repository),
                "the registry has no such manifest",
            )
        })?;
    let m: ImageManifest =
        serde_json::from_slice(&m.bytes).map_err(|e| not_ours(r, &e.to_string()))?;
    if m.config.media_type != MT_BUILD || m.artifact_type.as_deref().is_some_and(|t| t != MT_BUILD)
    {
        return Err(not_ours(
            r,
            &format!("config media type `{}`", m.config.media_type.escape_debug()),
        ));
    }
    let [layer] = m.layers.as_slice() else {
        return Err(not_ours(r, &format!("{} layers, not one", m.layers.len())));
    };
    if layer.media_type != MT_LAYER || layer.sha256().is_none() {
        return Err(not_ours(r, "the layer is not an uncompressed sha256 tar"));
    }
    let cd = m
        .config
        .sha256()
        .ok_or_else(|| not_ours(r, "config digest is not sha256"))?;
    let config = c.get_blob_bytes(&cd, m.config.size)?;
    let label = PathBuf::from(format!("{} (config)", r.shown()));
    let statement = Statement::parse(&config, &label).map_err(|e| Error::check(r.shown(), e))?;
    let (dsse, sshsig) = attestation(c, r, &digest)?;
    Ok(Fetched {
        digest,
        statement,
        config,
        layer: layer.clone(),
        dsse,
        sshsig,
    })
}

/// The signatures attached to `digest`: the DSSE envelope and SSHSIG layers of the referrers
/// whose subject is this artifact.
fn attestation(c: &mut Client, r: &Reference, digest: &Sha256) -> Result<Signatures> {
    let index = match c.referrers(digest)? {
        Some(b) => Some(b),
        None => c
            .get_manifest(&format!("sha256-{}", digest.to_hex()), None)?
            .map(|f| f.bytes),
    };
    let Some(index) = index else {
        return Ok((None, None));
    };
    let index: ImageIndex = serde_json::from_slice(&index)
        .map_err(|e| Error::check(r.shown(), format!("referrers index: {e}")))?;
    let (mut dsse, mut sshsig) = (None, None);
    for d in &index.manifests {
        let Some(ad) = d.sha256() else { continue };
        let Some(f) = c.get_manifest(&format!("sha256:{}", ad.to_hex()), Some(&ad))? else {
            continue;
        };
        let Ok(am) = serde_json::from_slice::<ImageManifest>(&f.bytes) else {
            continue;
        };
        // A referrer of another artifact (the index is not pinned) is ignored.
        if am.subject.as_ref().and_then(|s| s.sha256()) != Some(*digest) {
            continue;
        }
        for l in &am.layers {
            let Some(ld) = l.sha256() else { continue };
            let slot = match l.media_type.as_str() {
                MT_DSSE => &mut dsse,
                MT_SSHSIG => &mut sshsig,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(c.get_blob_bytes(&ld, l.size)?);
            }
        }
    }
    Ok((dsse, sshsig))
}

/// The signature policy, checked by the same verifier as `verify FILE --allowed-signers`
/// (`artifact::sign`): the DSSE envelope's payload must be the statement's exact bytes with a
/// good signature by a key of `allowed`, and the SSHSIG over those bytes must be good and by
/// the same key. Returns the principals, comma separated.
fn policy(allowed: &Path, r: &Reference, f: &Fetched) -> Result<String> {
    // The policy file is the user's: a FIFO or a missing file is an input error (exit 2).
    let policy = pinforge_record::sign::Policy::load(allowed)?;
    let (Some(envelope), Some(sig)) = (&f.dsse, &f.sshsig) else {
        return Err(Error::check(
            r.shown(),
            "unsigned: no signature is attached to this artifact, and --allowed-signers requires one",
        )
        .with_hint("sign the manifest (`pinforge sign`) and push it again"));
    };
    let about_artifact = |e: Error| match e {
        Error::Check { message, hint, .. } => Error::Check {
            subject: r.shown().to_string(),
            message: format!("attestation refused: {message}"),
            hint,
        },
        other => other,
    };
    let v = pinforge_record::sign::verify_envelope_bytes(envelope, &f.config, &policy)
        .map_err(about_artifact)?;
    pinforge_record::sign::verify_sshsig_bytes(sig, &f.config, &v, &policy, Path::new("sshsig"))
        .map_err(about_artifact)?;
    Ok(v.principals.join(","))
}

pinforge_base::steps! {
    /// The steps of a pull, in order; each is the crash point `pull:<index>`.
    pub enum PullStep for "pull" {
        /// The layer is downloaded into the stage.
        Fetched = 1,
        /// It is unpacked, and its tree and manifest checked and synced.
        Checked = 2,
        /// The stage is synced: the swap is next.
        Staged = 3,
        /// The stage is `pulled/<digest>` (the commit point), the old copy removed next.
        Committed = 4,
    }
}

/// The prefix of a pull's stage folder in `pulled/`.
const STAGE_PREFIX: &str = ".stage-";

/// Download, unpack and check into `stage`.
fn fill_stage(c: &mut Client, stage: &Path, f: &Fetched) -> Result<()> {
    let ld = f.layer.sha256().expect("invariant: checked in fetch");
    let tar_path = stage.join(".layer.tar");
    {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tar_path)
            .at("create", &tar_path)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        c.get_blob(&ld, f.layer.size, &mut w)?;
        use std::io::Write;
        w.flush().at("write", &tar_path)?;
    }
    PullStep::Fetched.reached();
    let ar = &f
        .statement
        .predicate
        .build_definition
        .internal_parameters
        .artifact_root;
    let dest = stage.join(ar);
    fsx::create_dir_all(&dest)?;
    let subject = format!("registry {}: layer sha256:{}", c.registry(), ld.to_hex());
    pinforge_base::archive::extract_archive(&tar_path, &dest, None).map_err(|e| match e {
        Error::Input { message, .. } => {
            Error::check(&subject, format!("unpacking refused: {message}"))
        }
        other => other,
    })?;
    std::fs::remove_file(&tar_path).at("remove", &tar_path)?;
    let m = stage.join("manifest.json");
    // The marker first: the verify below, and every later one, must see a pulled manifest
    // (its inputs are the registry's data, never read here; `manifest::inputs`).
    let marker = serde_json::json!({
        "registry": c.registry(),
        "digest": format!("sha256:{}", f.digest.to_hex()),
    });
    let mut marker_text = marker.to_string();
    marker_text.push('\n');
    fsx::write_atomic(
        &stage.join(manifest::inputs::PULLED_MARKER),
        marker_text.as_bytes(),
    )?;
    fsx::write_atomic(&m, &f.config)?;
    let (dsse_path, sig_path) = signature_paths(&m);
    if let Some(b) = &f.dsse {
        fsx::write_atomic(&dsse_path, b)?;
    }
    if let Some(b) = &f.sshsig {
        fsx::write_atomic(&sig_path, b)?;
    }
    check_tree(&dest, &f.statement, &subject)?;
    let report = manifest::verify(&m, None)?;
    if let Some(bad) = report.mismatches.iter().find(|x| x.role == "output") {
        return Err(Error::check(
            &subject,
            format!(
                "unpacked output {} is {}, the statement says {}; refused",
                bad.path, bad.actual, bad.expected
            ),
        ));
    }
    sync_tree(stage)?;
    PullStep::Checked.reached();
    Ok(())
}

/// The unpacked tree holds exactly the statement's files and links, nothing else.
fn check_tree(dest: &Path, st: &Statement, subject: &str) -> Result<()> {
    let mut expected: std::collections::BTreeSet<String> =
        st.subject.iter().map(|s| s.name.clone()).collect();
    for b in &st.predicate.run_details.byproducts {
        if b.annotations.contains_key(annotation::LINK_TARGET) {
            expected.insert(b.name.clone());
        }
    }
    let mut found = std::collections::BTreeSet::new();
    walk(dest, dest, &mut found)?;
    if let Some(extra) = found.difference(&expected).next() {
        return Err(Error::check(
            subject,
            format!(
                "the layer holds `{}`, which the statement does not name; refused",
                extra.escape_debug()
            ),
        ));
    }
    Ok(())
}

fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeSet<String>) -> Result<()> {
    for e in std::fs::read_dir(dir).at("read directory", dir)? {
        let e = e.at("read directory", dir)?;
        let p = e.path();
        let ft = e.file_type().at("stat", &p)?;
        if ft.is_dir() {
            walk(root, &p, out)?;
        } else {
            let rel = p
                .strip_prefix(root)
                .map_err(|e| Error::Internal(e.to_string()))?;
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// fsync every file and folder of the stage before the rename that commits it.
fn sync_tree(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).at("read directory", dir)? {
        let e = e.at("read directory", dir)?;
        let p = e.path();
        let ft = e.file_type().at("stat", &p)?;
        if ft.is_dir() {
            sync_tree(&p)?;
        } else if ft.is_file() {
            fsx::open_regular(&p, "staged file", false)?
                .sync_all()
                .at("fsync", &p)?;
        }
    }
    fsx::sync_dir(dir)
}

/// An existing pull is reused only when its statement is the same bytes and every output
/// still verifies.
fn existing_ok(manifest_path: &Path, config: &[u8]) -> bool {
    fsx::read(manifest_path).is_ok_and(|b| b == config)
        && manifest::verify(manifest_path, None)
            .is_ok_and(|r| !r.mismatches.iter().any(|m| m.role == "output"))
}

/// Stages a killed pull left (only our own `.stage-` names; the lock is held).
fn remove_stale_stages(pulled: &Path) -> Result<()> {
    for e in std::fs::read_dir(pulled).at("read directory", pulled)? {
        let e = e.at("read directory", pulled)?;
        if e.file_name().to_string_lossy().starts_with(STAGE_PREFIX)
            && e.file_type().is_ok_and(|t| t.is_dir())
        {
            std::fs::remove_dir_all(e.path()).at("remove", &e.path())?;
        }
    }
    Ok(())
}
