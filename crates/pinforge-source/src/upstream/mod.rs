//! Pinned upstream sources: fetch (cargo for registry crates, libgit2 for one shallow commit,
//! npm for a package tarball carrying a git bundle, local tarballs and folders), verify before use, extract safely, and materialize as a git
//! repository whose first commit is the pristine upstream. Patched trees are clones of that
//! repository with one commit per patch. Every tree is built in a temp folder and renamed into
//! place, and a second run re-verifies and reuses it.

use crate::git::GitContext;
use crate::git::OidExt;
use crate::patch::{apply, PatchFile};
use crate::recipe::{PinSource, Recipe};
use git2::{IndexAddOption, Repository, Time};
use pinforge_base::digest::{GitOid, Sha256};
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod bundle;
mod extract;
mod fetch;
pub mod index;
mod lock;
mod npm;
pub use fetch::{git_cache_repo, pin_digest, registry_cksum};
pub(crate) use lock::git_lock_text;
// `pull` unpacks a registry layer with the same refusals as a pin (deploy::ship).
// Their home is base::git (a plain git check); kept here for the callers outside source/.
use crate::git::{check_clean, PRISTINE_TAG};

const STATE_FILE: &str = "pinforge-tree.json";

/// The pin after resolution and verification (what the manifest records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResolvedPin {
    /// crate | git | tarball | dir | npm.
    pub kind: String,
    /// `crate:NAME@VERSION`, `npm:NAME@VERSION`, the git URL, or the local path.
    pub uri: String,
    /// SHA-256 of the archive (crate, tarball) or the tree digest (dir).
    pub sha256: Option<Sha256>,
    /// Full upstream commit (git pins; the bundle's commit for npm pins).
    pub git_commit: Option<GitOid>,
    /// Tag (git pins).
    pub tag: Option<String>,
    /// Folder of the source used as the tree root.
    pub subdir: Option<String>,
    /// Build number given to llama.cpp's build info.
    pub build_number: u64,
    /// Commit string given to llama.cpp's build info.
    pub build_commit: String,
    /// Where the verified archive is kept (crate, tarball, npm), for later re-verification.
    pub archive: Option<PathBuf>,
    /// SHA-256 of the git bundle read out of the archive (npm pins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_sha256: Option<Sha256>,
    /// `.git` entries (files, folders, links at or below a `.git` component) the source
    /// carried and that were left out of the tree: never extracted, never fatal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_git_entries: u64,
    /// The `.git` paths those entries were under, relative to the tree root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_git_paths: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ResolvedPin {
    /// The note to show when the source carried `.git` entries that were left out.
    pub fn skipped_git_note(&self) -> Option<String> {
        (self.skipped_git_entries > 0).then(|| {
            format!(
                "skipped {} .git entr{} of the upstream source (never extracted): {}",
                self.skipped_git_entries,
                if self.skipped_git_entries == 1 {
                    "y"
                } else {
                    "ies"
                },
                self.skipped_git_paths
                    .iter()
                    .map(|p| match &self.subdir {
                        // Name them as they are in the source, not in the tree.
                        Some(s) => format!("{s}/{p}"),
                        None => p.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }
}

/// A materialized tree: a git repository and the commit its work tree must be at.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tree {
    /// The repository (work tree root = upstream tree root).
    pub path: PathBuf,
    /// Pristine upstream commit.
    pub base_commit: GitOid,
    /// HEAD: the base, or the last patch commit.
    pub head: GitOid,
    /// Patches applied, in order: (file, sha256, commit).
    pub patches: Vec<AppliedRecord>,
    /// The verified pin.
    pub pin: ResolvedPin,
    /// Whether this run reused an existing tree.
    #[serde(skip)]
    pub reused: bool,
}

/// One applied patch as recorded in a tree's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppliedRecord {
    /// Patch file name.
    pub file: String,
    /// SHA-256 of the patch file.
    pub sha256: Sha256,
    /// Commit it became.
    pub commit: GitOid,
    /// Hunks that applied at another line than stated (`FILE#N ±K`); empty when none moved.
    #[serde(default)]
    pub hunk_offsets: Vec<apply::HunkOffset>,
}

/// Resolve, verify and materialize the pristine tree of `recipe`'s pin.
pub fn pristine(ws: &Workspace, recipe: &Recipe) -> Result<Tree> {
    let pin = &recipe.pin;
    let key = Sha256::of_bytes(
        serde_json::to_string(pin)
            .map_err(|e| Error::Internal(e.to_string()))?
            .as_bytes(),
    );
    let slug = format!("{}-{}", human_name(&pin.source), key.short(12));
    let dest = ws.vendor().join(&slug);

    // Verify the archive (or resolve the commit) first: a reused tree is only trusted when the
    // input it came from still checks out.
    let prepared = fetch::prepare(ws, recipe)?;
    if dest.exists() {
        let tree = reuse(&dest)?;
        if tree.pin.sha256 != prepared.resolved.sha256
            || tree.pin.git_commit != prepared.resolved.git_commit
        {
            return Err(Error::input(
                dest.display(),
                "vendor tree was made from a different source than the pin now resolves to",
            )
            .with_hint(format!("remove {} to materialize it again", dest.display())));
        }
        return Ok(tree);
    }

    let vendor = ws.vendor();
    fsx::create_dir_all(&vendor)?;
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempdir_in(&vendor)
        .at("create temp dir in", &vendor)?;
    let work = tmp.path().join("tree");
    fsx::create_dir_all(&work)?;
    let written = prepared.extract(&work)?;
    let mut resolved = prepared.resolved;
    resolved.skipped_git_entries = written.skipped_git.entries;
    resolved.skipped_git_paths = written.skipped_git.roots.into_iter().collect();
    let repo = Repository::init(&work).git_at(&work.display())?;
    let base = commit_all(&repo, &format!("pristine upstream: {}", resolved.uri))?;
    repo.reference(PRISTINE_TAG, base.to_git(), true, "pinforge pristine")
        .git_at(&work.display())?;
    let tree = Tree {
        path: dest.clone(),
        base_commit: base,
        head: base,
        patches: Vec::new(),
        pin: resolved,
        reused: false,
    };
    write_state(&work, &tree)?;
    commit_dir(&work, &dest)?;
    Ok(tree)
}

/// The pristine tree plus `patches`, applied as commits. An empty list is the pristine tree.
pub fn patched(ws: &Workspace, base: &Tree, patches: &[&PatchFile]) -> Result<Tree> {
    if patches.is_empty() {
        return Ok(base.clone());
    }
    let mut series_key = String::new();
    for p in patches {
        series_key.push_str(&format!("{} {}\n", p.id, p.sha256));
    }
    let digest = Sha256::of_bytes(series_key.as_bytes());
    let name = base
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dest = ws.vendor().join(format!("{name}+{}", digest.short(12)));
    if dest.exists() {
        let tree = reuse(&dest)?;
        let want: Vec<(String, Sha256)> = patches
            .iter()
            .map(|p| (p.id.to_string(), p.sha256))
            .collect();
        let have: Vec<(String, Sha256)> = tree
            .patches
            .iter()
            .map(|r| (r.file.clone(), r.sha256))
            .collect();
        if want != have || tree.base_commit != base.base_commit {
            return Err(Error::input(
                dest.display(),
                "patched tree does not hold the expected series",
            )
            .with_hint(format!(
                "remove {} to apply the series again",
                dest.display()
            )));
        }
        return Ok(tree);
    }

    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempdir_in(ws.vendor())
        .at("create temp dir in", &ws.vendor())?;
    let work = tmp.path().join("tree");
    let url = base.path.to_string_lossy().into_owned();
    let repo = Repository::clone(&url, &work).git_at(&base.path.display())?;
    let applied = apply::apply_series(&repo, patches)?;
    let head = applied.last().map(|a| a.commit).unwrap_or(base.base_commit);
    let tree = Tree {
        path: dest.clone(),
        base_commit: base.base_commit,
        head,
        patches: patches
            .iter()
            .zip(&applied)
            .map(|(p, a)| AppliedRecord {
                file: p.id.to_string(),
                sha256: p.sha256,
                commit: a.commit,
                hunk_offsets: a.offsets.clone(),
            })
            .collect(),
        pin: base.pin.clone(),
        reused: false,
    };
    write_state(&work, &tree)?;
    commit_dir(&work, &dest)?;
    Ok(tree)
}

fn reuse(dest: &Path) -> Result<Tree> {
    let state = dest.join(".git").join(STATE_FILE);
    let text = fsx::read_to_string(&state).map_err(|_| {
        Error::input(
            dest.display(),
            "vendor folder is not a pinforge tree (no state)",
        )
        .with_hint(format!("remove {} and run again", dest.display()))
    })?;
    let mut tree: Tree = serde_json::from_str(&text)
        .map_err(|e| Error::input(state.display(), format!("unreadable state: {e}")))?;
    check_clean(dest, tree.head).map_err(|e| {
        Error::input(dest.display(), format!("vendor tree was modified: {e}")).with_hint(format!(
            "pinforge never builds a modified vendor tree; remove {} to materialize it again",
            dest.display()
        ))
    })?;
    let repo = Repository::open(dest).git_at(&dest.display())?;
    let tagged = repo
        .find_reference(PRISTINE_TAG)
        .and_then(|r| r.peel_to_commit())
        .map(|c| c.id());
    if tagged.ok() != Some(tree.base_commit.to_git()) {
        return Err(Error::input(
            dest.display(),
            "pristine tag does not point at the recorded base commit",
        )
        .with_hint(format!("remove {} to materialize it again", dest.display())));
    }
    tree.path = dest.to_path_buf();
    tree.reused = true;
    Ok(tree)
}

fn write_state(work: &Path, tree: &Tree) -> Result<()> {
    let json = serde_json::to_vec_pretty(tree).map_err(|e| Error::Internal(e.to_string()))?;
    fsx::write_atomic(&work.join(".git").join(STATE_FILE), &json)
}

/// Rename a finished temp tree into place (the commit point of materialization).
fn commit_dir(work: &Path, dest: &Path) -> Result<()> {
    std::fs::rename(work, dest).at("rename into", dest)?;
    fsx::sync_dir(&fsx::parent_of(dest))
}

/// Commit the whole work tree as the first commit, with a fixed identity and time so that
/// the pristine commit id depends on content only.
fn commit_all(repo: &Repository, message: &str) -> Result<GitOid> {
    let subject = repo
        .workdir()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut index = repo.index().git_at(&subject)?;
    // FORCE: upstream .gitignore files must not hide upstream files from the pristine commit.
    index
        .add_all(["*"], IndexAddOption::FORCE, None)
        .git_at(&subject)?;
    index.write().git_at(&subject)?;
    let tree_oid = index.write_tree().git_at(&subject)?;
    let tree = repo.find_tree(tree_oid).git_at(&subject)?;
    let sig = crate::git::tool_signature(&Time::new(0, 0))?;
    let oid = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &[])
        .git_at(&subject)?;
    Ok(crate::git::git_oid(oid))
}

fn human_name(source: &PinSource) -> String {
    let raw = match source {
        PinSource::Crate { name, version, .. } => format!("{name}-{version}"),
        PinSource::Git { url, commit, .. } => {
            let repo = url.trim_end_matches('/').trim_end_matches(".git");
            let base = repo.rsplit('/').next().unwrap_or("git");
            format!("{base}-{}", &commit[..commit.len().min(9)])
        }
        PinSource::Npm {
            package, version, ..
        } => format!("{package}-{version}"),
        PinSource::Tarball { path, .. } | PinSource::Dir { path, .. } => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "source".into()),
    };
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // issue #7 class 4: a tarball pin (or `vendor digest`) naming a FIFO or /dev/zero is
    // refused at once (the extractor's own refusal is tested in base::archive).
    #[test]
    fn a_fifo_or_dev_zero_as_a_pin_is_refused_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("pipe.tar.gz");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("path");
        assert_eq!(pinforge_sys::mkfifo(c.as_c_str(), 0o644), 0, "mkfifo");
        for p in [fifo.as_path(), Path::new("/dev/zero")] {
            let e = pin_digest(p).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{e}");
        }
    }

    #[test]
    fn the_skip_note_names_git_paths_as_they_are_in_the_source() {
        let pin = ResolvedPin {
            kind: "tarball".into(),
            uri: "x.tar.gz".into(),
            sha256: None,
            git_commit: None,
            tag: None,
            subdir: Some("vendor/llama.cpp".into()),
            build_number: 0,
            build_commit: String::new(),
            archive: None,
            skipped_git_entries: 1,
            bundle_sha256: None,
            skipped_git_paths: vec![".git".into()],
        };
        assert_eq!(
            pin.skipped_git_note().as_deref(),
            Some(
                "skipped 1 .git entry of the upstream source (never extracted): vendor/llama.cpp/.git"
            )
        );
    }
}
