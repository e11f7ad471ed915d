//! The CUDA toolkit of one build: the toolchain with a provisioned toolkit's nvcc, root and
//! exact version put in (or a system toolkit's root checked), and the manifest's record of a
//! provisioned toolkit. Provisioning itself is [`crate::cudakit`]'s.

use crate::cudakit::{
    check_system_root, default_cache_dir, load_lock, provision, Note, Toolkit, ROOT_TEMPLATE,
};
use crate::toolchain::Role;
use pinforge_base::error::{Error, Result};
use pinforge_record::manifest::Resource;
use pinforge_source::recipe::Toolchain;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The toolchain a build resolves: for `cuda-toolkit`, the provisioned toolkit's nvcc and
/// root with nvcc's exact version required; for a system `cuda-root`, the root checked to
/// exist; otherwise the toolchain as written.
pub(super) fn for_build(
    tc: &Toolchain,
    tool_dirs: &[PathBuf],
    note: Note,
) -> Result<(Toolchain, Option<Toolkit>)> {
    let mut tc = tc.clone();
    if let Some(lock_path) = tc.cuda_toolkit.clone() {
        let lock = load_lock(&lock_path)?;
        let kit = provision(&lock, &default_cache_dir()?, tool_dirs, note)?;
        note(
            "toolkit",
            &format!(
                "{} {} ({}, tree {})",
                lock.name,
                if kit.assembled {
                    "assembled"
                } else {
                    "verified"
                },
                kit.root.display(),
                kit.record.tree_sha256.short(12)
            ),
        );
        let exact = semver::VersionReq::parse(&format!("={}", lock.nvcc_version))
            .map_err(|e| Error::input(lock.path.display(), format!("nvcc-version: {e}")))?;
        tc.nvcc = Some(kit.nvcc().display().to_string());
        tc.cuda_root = Some(ROOT_TEMPLATE.to_string());
        tc.requirements.insert(Role::Nvcc.as_str().into(), exact);
        return Ok((tc, Some(kit)));
    }
    if let Some(root) = &tc.cuda_root {
        check_system_root(root, &tc.name, tc.nvcc.as_deref())?;
    }
    Ok((tc, None))
}

/// The manifest's record of a provisioned toolkit: its tree digest, the lock's digest and every
/// wheel (name, version, SHA-256), so that a reader can fetch the same bytes again.
pub(super) fn resource(kit: &Toolkit) -> Resource {
    let wheels: Vec<Value> = kit
        .record
        .wheels
        .iter()
        .map(|w| {
            serde_json::json!({
                "name": w.name, "version": w.version, "file": w.file, "sha256": w.sha256,
            })
        })
        .collect();
    Resource {
        name: format!("toolkit:{}", kit.record.name),
        uri: None,
        digest: BTreeMap::from([("sha256".to_string(), kit.record.tree_sha256.to_string())]),
        annotations: BTreeMap::from([
            (
                "lock_sha256".to_string(),
                Value::from(kit.record.lock_sha256.to_string()),
            ),
            (
                "nvcc_version_line".to_string(),
                Value::from(kit.record.nvcc_version_line.clone()),
            ),
            ("wheels".to_string(), Value::from(wheels)),
        ]),
    }
}
