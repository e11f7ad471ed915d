//! Shipping builds through an OCI registry: `push` uploads a verified build as an OCI
//! artifact with its signatures attached, `pull` fetches one by digest into the workspace's
//! `pulled/<digest>/` after checking every digest and the signature policy, leaving a manifest
//! that `verify` and `install` accept.
//!
//! What a pushed build is in the registry (the media types are the contract):
//!
//! ```text
//! artifact manifest   application/vnd.oci.image.manifest.v1+json
//!   artifactType      application/vnd.pinforge.build.v1+json
//!   config            application/vnd.pinforge.build.v1+json  the manifest.json bytes (the
//!                                                             in-toto statement), unchanged
//!   layers[0]         application/vnd.oci.image.layer.v1.tar  the staged prefix (layer.rs)
//! attestation         application/vnd.oci.image.manifest.v1+json
//!   artifactType      application/vnd.pinforge.signatures.v1
//!   config            application/vnd.oci.empty.v1+json       `{}`
//!   layers            application/vnd.dsse.envelope.v1+json   FILE.dsse.json, when present
//!                     application/vnd.pinforge.sshsig.v1      FILE.sig (SSHSIG, namespace
//!                                                             `pinforge`), when present
//!   subject           the artifact manifest's descriptor
//! ```
//!
//! The attestation is found through the referrers API where the registry has one
//! (`GET /v2/<repo>/referrers/<digest>`); otherwise (distribution 2.8 has none) through the
//! OCI 1.1 tag-schema fallback: the tag `sha256-<hex of the artifact digest>` names an image
//! index listing the referrers. Push writes that tag only when the referrers API is missing.

mod client;
mod layer;
mod pull;
mod push;
mod reference;

pub use client::Access;
pub use pull::{pull, PullOptions, PullOutcome, PullStep};
pub use push::{push, PushOutcome};
pub use reference::Reference;

use pinforge_base::digest::Sha256;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The artifact type and config media type of a pushed build.
pub(crate) const MT_BUILD: &str = "application/vnd.pinforge.build.v1+json";
/// The attestation's artifact type.
pub(crate) const MT_SIGNATURES: &str = "application/vnd.pinforge.signatures.v1";
/// A DSSE envelope layer.
pub(crate) const MT_DSSE: &str = "application/vnd.dsse.envelope.v1+json";
/// An SSHSIG (armored) layer.
pub(crate) const MT_SSHSIG: &str = "application/vnd.pinforge.sshsig.v1";
/// The uncompressed tar layer.
pub(crate) const MT_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
/// An OCI image manifest.
pub(crate) const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index.
pub(crate) const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The empty config blob's media type.
pub(crate) const MT_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// What a manifest GET accepts.
pub(crate) const ACCEPT_MANIFESTS: &str =
    "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";

/// An OCI content descriptor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    fn new(media_type: &str, digest: &Sha256, size: u64) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: format!("sha256:{}", digest.to_hex()),
            size,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }

    /// The digest, typed; None for another algorithm or malformed hex.
    fn sha256(&self) -> Option<Sha256> {
        self.digest.strip_prefix("sha256:")?.parse().ok()
    }
}

/// An OCI image manifest (the fields pinforge writes and reads).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ImageManifest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI image index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ImageIndex {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}
