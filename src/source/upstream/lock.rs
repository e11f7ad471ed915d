//! The lock file beside a recipe with a git pin: the full commit its tag or abbreviated id
//! resolved to, so that later runs refuse drift.

use crate::base::digest::GitOid;
use crate::base::error::{Error, Result};
use crate::base::fsx;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The lock file's content: the resolved full commit of a git pin.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GitLock {
    pub(super) url: String,
    pub(super) tag: Option<String>,
    pub(super) commit: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct LockFile {
    version: u32,
    pin: GitLock,
}

pub(super) fn read_lock(path: &Path) -> std::result::Result<Option<GitLock>, (String, String)> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| (path.display().to_string(), format!("cannot read lock: {e}")))?;
    let lock: LockFile = toml::from_str(&text).map_err(|e| {
        (
            path.display().to_string(),
            format!("malformed lock file: {}", e.message()),
        )
    })?;
    Ok(Some(lock.pin))
}

/// The text [`write_git_lock`] writes: the rebase stages it beside the lock before its commit
/// point, so that only a rename is left once the bundle is swapped in.
pub(crate) fn git_lock_text(
    path: &Path,
    url: &str,
    tag: Option<&str>,
    commit: GitOid,
) -> Result<String> {
    lock_text(
        path,
        &GitLock {
            url: url.to_string(),
            tag: tag.map(str::to_string),
            commit: commit.to_string(),
        },
    )
}

pub(super) fn write_lock(path: &Path, lock: &GitLock) -> Result<()> {
    fsx::write_atomic(path, lock_text(path, lock)?.as_bytes())
}

fn lock_text(path: &Path, lock: &GitLock) -> Result<String> {
    let body = toml::to_string(&LockFile {
        version: 1,
        pin: lock.clone(),
    })
    .map_err(|e| Error::Internal(e.to_string()))?;
    let text = format!(
        "# Written by pinforge: the resolved upstream pin of {}. Commit this file.\n{body}",
        path.with_extension("toml")
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    Ok(text)
}
