//! The lock file beside a recipe with a git pin: the full commit its tag or abbreviated id
//! resolved to, so that later runs refuse drift.

use pinforge_base::digest::GitOid;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
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

/// The lock beside a recipe, None when there is none yet. It is read through the open that
/// refuses special files (issue #19 class 8): a lock that is a FIFO hung `audit`, `build` and
/// `rebase`; a FIFO, device, socket or folder is an input error naming it, and a link is
/// followed as for the recipe itself (a lock kept elsewhere and linked in is a layout people use).
pub(super) fn read_lock(path: &Path) -> Result<Option<GitLock>> {
    if !path.exists() {
        return Ok(None);
    }
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut fsx::open_regular(path, "the pin's lock file", true)?,
        &mut text,
    )
    .at("read", path)?;
    let lock: LockFile = toml::from_str(&text).map_err(|e| {
        Error::input(
            path.display(),
            format!("malformed lock file: {}", e.message()),
        )
        .with_hint("the lock is written by pinforge; remove it to resolve the pin again")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_that_is_a_fifo_or_a_folder_is_refused_at_once_and_a_missing_one_is_none() {
        // Issue #19 class 8: the lock was read with std::fs::read_to_string, which blocks on a
        // FIFO until a writer comes.
        let d = tempfile::tempdir().expect("tempdir");
        let fifo = d.path().join("r.lock");
        assert_eq!(pinforge_sys::mkfifo(fifo.as_path(), 0o600), 0, "mkfifo");
        let e = read_lock(&fifo).expect_err("a FIFO is refused");
        assert_eq!(e.exit_code(), 2, "{e}");
        let s = e.to_string();
        assert!(s.contains("r.lock") && s.contains("FIFO"), "{s}");
        let dir = d.path().join("d.lock");
        std::fs::create_dir(&dir).expect("mkdir");
        assert_eq!(read_lock(&dir).expect_err("folder").exit_code(), 2);
        assert!(read_lock(&d.path().join("none.lock"))
            .expect("missing")
            .is_none());
        let bad = d.path().join("bad.lock");
        std::fs::write(&bad, "version = 1\n[pin]\nurl = 3\n").expect("write");
        let e = read_lock(&bad).expect_err("malformed");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("malformed lock file"), "{e}");
    }
}
