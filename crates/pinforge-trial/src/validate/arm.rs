//! The two arms of a validation: where each build comes from, how it is verified (as smoke
//! verifies it) before anything is loaded, what the settings record about it, and the file
//! identities an engine restart re-checks.

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_deploy::install::{Layer, Root};
use pinforge_deploy::smoke::{self, SmokeTarget};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where an arm's build comes from.
#[derive(Debug, Clone)]
pub enum ArmSource {
    /// A layer of an install root.
    Installed {
        /// The install root.
        root: PathBuf,
        /// The layer.
        layer: Layer,
    },
    /// A manifest written by `pinforge build`.
    Manifest(PathBuf),
}

/// An arm as recorded in the settings and the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ArmRecord {
    /// Layer name or manifest variant (made unique).
    pub name: String,
    /// `installed:LAYER` or `manifest`.
    pub source: String,
    /// Store entry digest (installed) or the manifest's sha256.
    pub digest: Sha256,
    /// The manifest this arm's build is described by.
    pub manifest: PathBuf,
    /// Its sha256.
    pub manifest_sha256: Sha256,
    /// The verified libllama's sha256.
    pub libllama_sha256: Sha256,
    /// `recipe/variant`.
    pub build: String,
}

/// A recorded arm for unit tests of what reads settings and rows (row checks, merge): the
/// paths and digests are stand-ins, never opened.
#[cfg(test)]
pub(crate) fn test_record(name: &str) -> ArmRecord {
    ArmRecord {
        name: name.into(),
        source: format!("installed:{name}"),
        digest: Sha256::of_bytes(name.as_bytes()),
        manifest: PathBuf::from(format!("/nonexistent/{name}/manifest.json")),
        manifest_sha256: Sha256::of_bytes(b"manifest"),
        libllama_sha256: Sha256::of_bytes(b"lib"),
        build: format!("mrope-cpu/{name}"),
    }
}

/// One arm resolved and verified.
pub(super) struct ResolvedArm {
    /// What the settings and the evidence record.
    pub(super) record: ArmRecord,
    /// The verified build.
    pub(super) target: SmokeTarget,
    /// Its libraries' identities at verification.
    pub(super) identity: Vec<FileId>,
}

/// What a restart re-checks: the verified libraries are still the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileId {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

pub(super) fn file_ids(target: &SmokeTarget) -> Result<Vec<FileId>> {
    use std::os::unix::fs::MetadataExt;
    let lib = target.root.join("lib");
    let mut out = Vec::new();
    let rd = std::fs::read_dir(&lib).at("list", &lib)?;
    let mut names: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".so"))
        .collect();
    names.sort();
    for p in names {
        let m = std::fs::symlink_metadata(&p).at("stat", &p)?;
        out.push(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            path: p,
        });
    }
    Ok(out)
}

fn resolve_arm(src: &ArmSource) -> Result<ResolvedArm> {
    let (target, source, digest, manifest) = match src {
        ArmSource::Installed { root, layer } => {
            let r = Root::open_existing(root)?;
            let target = smoke::target_from_installed(&r, Some(*layer))?;
            // `<digest>` or, for control and original, `<digest>.own` (issue #36).
            let digest: Sha256 = target
                .root
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(pinforge_deploy::install::EntryKey::parse)
                .map(|k| k.digest)
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "invariant: store entry {} is named by its digest",
                        target.root.display()
                    ))
                })?;
            let m = target.root.join("manifest.json");
            (target, format!("installed:{layer}"), Some(digest), m)
        }
        ArmSource::Manifest(p) => {
            let target = smoke::target_from_manifest(p)?;
            (target, "manifest".to_string(), None, fsx::absolute(p)?)
        }
    };
    let bytes = fsx::read(&manifest)?;
    let manifest_sha256 = Sha256::of_bytes(&bytes);
    let st = pinforge_record::manifest::Statement::parse(&bytes, &manifest)?;
    let name = match src {
        ArmSource::Installed { layer, .. } => layer.to_string(),
        ArmSource::Manifest(_) => st
            .predicate
            .build_definition
            .external_parameters
            .variant
            .clone(),
    };
    let identity = file_ids(&target)?;
    Ok(ResolvedArm {
        record: ArmRecord {
            name,
            source,
            digest: digest.unwrap_or(manifest_sha256),
            manifest,
            manifest_sha256,
            libllama_sha256: target.libllama_sha256,
            build: target.name.clone(),
        },
        target,
        identity,
    })
}

/// The arms resolved and verified, baseline then candidate (or one arm alone, a soak side).
/// Two arms of one name (the same layer twice, two manifests of one variant) are told apart
/// as `NAME#1` and `NAME#2`.
pub(super) fn resolve_arms(sources: &[ArmSource]) -> Result<Vec<ResolvedArm>> {
    let mut arms: Vec<ResolvedArm> = sources.iter().map(resolve_arm).collect::<Result<_>>()?;
    if arms.len() == 2 && arms[0].record.name == arms[1].record.name {
        arms[0].record.name.push_str("#1");
        arms[1].record.name.push_str("#2");
    }
    Ok(arms)
}
