//! `push`: a verified build as an OCI artifact, its signatures as an attached attestation.

use super::client::{Access, Client};
use super::{
    layer, Descriptor, ImageIndex, ImageManifest, Reference, MT_BUILD, MT_DSSE, MT_EMPTY, MT_INDEX,
    MT_LAYER, MT_MANIFEST, MT_SIGNATURES, MT_SSHSIG,
};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_record::manifest::{self, Statement};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a push did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PushOutcome {
    /// The artifact by digest: `HOST/REPO@sha256:…`, the reference to install.
    pub reference: String,
    /// The artifact manifest's digest.
    pub digest: Sha256,
    /// The layer's digest and size.
    pub layer_digest: Sha256,
    #[allow(
        missing_docs,
        reason = "serialized: a doc comment would become the JSON Schema's description, and schemas/ is a contract kept byte for byte"
    )]
    pub layer_size: u64,
    /// The attestation manifest's digest, when signatures were beside the manifest.
    pub attestation: Option<Sha256>,
    /// How the attestation is found: `referrers-api` or `tag-schema:<tag>`.
    pub attestation_via: Option<String>,
}

/// The signature files beside a manifest, as `sign` writes them.
pub(crate) fn signature_paths(manifest_path: &Path) -> (PathBuf, PathBuf) {
    let name = manifest_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = fsx::parent_of(manifest_path);
    (
        dir.join(format!("{name}.dsse.json")),
        dir.join(format!("{name}.sig")),
    )
}

/// Push the build of `manifest_path` to `r` (a tag, or none: by digest only).
pub fn push(manifest_path: &Path, r: &Reference, access: Access) -> Result<PushOutcome> {
    if r.digest.is_some() {
        return Err(Error::input(
            r.shown(),
            "a push names a tag (or only a repository), not a digest",
        )
        .with_hint("the registry computes the digest; push prints it"));
    }
    // Only a build whose every recorded byte is still there is shipped.
    let report = manifest::verify(manifest_path, None)?;
    let bad: Vec<_> = report
        .mismatches
        .iter()
        .filter(|m| m.role == "output")
        .collect();
    if let Some(m) = bad.first() {
        return Err(Error::check(
            manifest_path.display(),
            format!(
                "{} output(s) differ from the manifest (first: {}); nothing was pushed",
                bad.len(),
                m.path
            ),
        )
        .with_hint("`pinforge verify` shows every mismatch; rebuild the variant"));
    }
    let config = fsx::read(manifest_path)?;
    let statement = Statement::parse(&config, manifest_path)?;
    let root = statement.checked_artifact_root(manifest_path)?;
    let tmp =
        tempfile::tempdir().map_err(|e| Error::io("create temp folder", Path::new("."), e))?;
    let layer_path = tmp.path().join("layer.tar");
    let (layer_digest, layer_size) = layer::write(&statement, &root, &layer_path)?;

    let mut c = Client::new(r, access)?;
    let config_digest = c.put_blob_bytes(&config)?;
    c.put_blob_file(&layer_path, &layer_digest, layer_size)?;
    let mut layer_desc = Descriptor::new(MT_LAYER, &layer_digest, layer_size);
    layer_desc
        .annotations
        .insert("org.opencontainers.image.title".into(), "prefix.tar".into());
    let m = ImageManifest {
        schema_version: 2,
        media_type: MT_MANIFEST.into(),
        artifact_type: Some(MT_BUILD.into()),
        config: Descriptor::new(MT_BUILD, &config_digest, config.len() as u64),
        layers: vec![layer_desc],
        subject: None,
        annotations: Default::default(),
    };
    let bytes = serde_json::to_vec(&m).map_err(|e| Error::Internal(e.to_string()))?;
    let digest = Sha256::of_bytes(&bytes);
    let target = r
        .tag
        .clone()
        .unwrap_or_else(|| format!("sha256:{}", digest.to_hex()));
    c.put_manifest(&target, MT_MANIFEST, &bytes)?;
    let subject = Descriptor::new(MT_MANIFEST, &digest, bytes.len() as u64);
    let (attestation, attestation_via) = match attest(&mut c, manifest_path, subject)? {
        Some((a, via)) => (Some(a), Some(via)),
        None => (None, None),
    };
    Ok(PushOutcome {
        reference: format!("{}/{}@sha256:{}", r.registry, r.repository, digest.to_hex()),
        digest,
        layer_digest,
        layer_size,
        attestation,
        attestation_via,
    })
}

/// Attach the signatures beside the manifest (if any) to `subject`.
fn attest(
    c: &mut Client,
    manifest_path: &Path,
    subject: Descriptor,
) -> Result<Option<(Sha256, String)>> {
    let (dsse, sig) = signature_paths(manifest_path);
    let mut layers = Vec::new();
    for (path, mt) in [(dsse, MT_DSSE), (sig, MT_SSHSIG)] {
        if let Some(b) = fsx::read_if_present(&path)? {
            if b.len() as u64 > super::client::DOC_LIMIT {
                return Err(Error::input(
                    path.display(),
                    "too large for a signature file",
                ));
            }
            let d = c.put_blob_bytes(&b)?;
            let mut desc = Descriptor::new(mt, &d, b.len() as u64);
            let title = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            desc.annotations
                .insert("org.opencontainers.image.title".into(), title);
            layers.push(desc);
        }
    }
    if layers.is_empty() {
        return Ok(None);
    }
    let empty = c.put_blob_bytes(b"{}")?;
    let subject_digest = subject
        .sha256()
        .expect("invariant: the subject descriptor was made from a typed digest");
    let m = ImageManifest {
        schema_version: 2,
        media_type: MT_MANIFEST.into(),
        artifact_type: Some(MT_SIGNATURES.into()),
        config: Descriptor::new(MT_EMPTY, &empty, 2),
        layers,
        subject: Some(subject),
        annotations: Default::default(),
    };
    let bytes = serde_json::to_vec(&m).map_err(|e| Error::Internal(e.to_string()))?;
    let digest = Sha256::of_bytes(&bytes);
    c.put_manifest(&format!("sha256:{}", digest.to_hex()), MT_MANIFEST, &bytes)?;
    if c.referrers(&subject_digest)?.is_some() {
        return Ok(Some((digest, "referrers-api".into())));
    }
    // The tag-schema fallback: one index per subject, merged with what it already lists.
    let tag = format!("sha256-{}", subject_digest.to_hex());
    let mut index = match c.get_manifest(&tag, None)? {
        Some(f) => serde_json::from_slice::<ImageIndex>(&f.bytes).unwrap_or(ImageIndex {
            schema_version: 2,
            media_type: MT_INDEX.into(),
            manifests: Vec::new(),
        }),
        None => ImageIndex {
            schema_version: 2,
            media_type: MT_INDEX.into(),
            manifests: Vec::new(),
        },
    };
    let mut desc = Descriptor::new(MT_MANIFEST, &digest, bytes.len() as u64);
    desc.artifact_type = Some(MT_SIGNATURES.into());
    index.manifests.retain(|d| d.digest != desc.digest);
    index.manifests.push(desc);
    let ib = serde_json::to_vec(&index).map_err(|e| Error::Internal(e.to_string()))?;
    c.put_manifest(&tag, MT_INDEX, &ib)?;
    Ok(Some((digest, format!("tag-schema:{tag}"))))
}
