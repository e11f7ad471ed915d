//! Pinned upstream sources: fetch (cargo for registry crates, libgit2 for one shallow commit,
//! local tarballs and folders), verify before use, extract safely, and materialize as a git
//! repository whose first commit is the pristine upstream. Patched trees are clones of that
//! repository with one commit per patch. Every tree is built in a temp folder and renamed into
//! place, and a second run re-verifies and reuses it.

use crate::base::digest::{tree_digest, GitOid, Sha256};
use crate::base::error::{Error, GitContext, IoContext, Result};
use crate::base::fsx;
use crate::base::workspace::Workspace;
use crate::source::patch::{apply, PatchFile};
use crate::source::recipe::{Pin, PinSource, Recipe};
use git2::{IndexAddOption, Repository, Time};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

mod extract;
use crate::base::fsx::open_regular;
pub use extract::{is_git, GitSkips, TreeModel, Written};

/// The tag every pristine repository carries on its base commit.
pub const PRISTINE_TAG: &str = "refs/tags/pinforge/pristine";
const STATE_FILE: &str = "pinforge-tree.json";

/// The pin after resolution and verification (what the manifest records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResolvedPin {
    /// crate | git | tarball | dir.
    pub kind: String,
    /// `crate:NAME@VERSION`, the git URL, or the local path.
    pub uri: String,
    /// SHA-256 of the archive (crate, tarball) or the tree digest (dir).
    pub sha256: Option<Sha256>,
    /// Full upstream commit (git pins).
    pub git_commit: Option<GitOid>,
    /// Tag (git pins).
    pub tag: Option<String>,
    /// Folder of the source used as the tree root.
    pub subdir: Option<String>,
    /// Build number given to llama.cpp's build info.
    pub build_number: u64,
    /// Commit string given to llama.cpp's build info.
    pub build_commit: String,
    /// Where the verified archive is kept (crate, tarball), for later re-verification.
    pub archive: Option<PathBuf>,
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
    let prepared = prepare(ws, recipe)?;
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
    repo.reference(PRISTINE_TAG, base.raw(), true, "pinforge pristine")
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

/// Check that a work tree is exactly at `head` with no modified, added or deleted files.
pub fn check_clean(path: &Path, head: GitOid) -> Result<()> {
    let repo = Repository::open(path).git_at(&path.display())?;
    let actual = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&path.display())?
        .id();
    if actual != head.raw() {
        return Err(Error::check(
            path.display(),
            format!("HEAD is {actual}, expected {head}"),
        ));
    }
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .include_ignored(false)
        .recurse_untracked_dirs(true);
    let statuses = repo.statuses(Some(&mut opts)).git_at(&path.display())?;
    let dirty: Vec<String> = statuses
        .iter()
        .filter(|s| s.status() != git2::Status::CURRENT)
        .filter_map(|s| s.path().map(str::to_string))
        .take(10)
        .collect();
    if !dirty.is_empty() {
        return Err(Error::check(
            path.display(),
            format!("work tree differs from its commit: {}", dirty.join(", ")),
        ));
    }
    Ok(())
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
    if tagged.ok() != Some(tree.base_commit.raw()) {
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
    let sig = crate::base::git::tool_signature(&Time::new(0, 0))?;
    let oid = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &[])
        .git_at(&subject)?;
    Ok(GitOid::new(oid))
}

fn human_name(source: &PinSource) -> String {
    let raw = match source {
        PinSource::Crate { name, version, .. } => format!("{name}-{version}"),
        PinSource::Git { url, commit, .. } => {
            let repo = url.trim_end_matches('/').trim_end_matches(".git");
            let base = repo.rsplit('/').next().unwrap_or("git");
            format!("{base}-{}", &commit[..commit.len().min(9)])
        }
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

// ---------------------------------------------------------------------------------------------
// Fetch and verify.

enum Payload {
    Archive(PathBuf),
    Dir(PathBuf),
    Git { repo: PathBuf, commit: git2::Oid },
}

struct Prepared {
    resolved: ResolvedPin,
    payload: Payload,
}

impl Prepared {
    fn extract(&self, dest: &Path) -> Result<Written> {
        let sub = self.resolved.subdir.as_deref();
        match &self.payload {
            Payload::Archive(path) => extract::extract_archive(path, dest, sub),
            Payload::Dir(path) => extract::copy_dir(&extract::real_subdir(path, sub)?, dest),
            Payload::Git { repo, commit } => extract::export_commit(repo, *commit, sub, dest),
        }
    }
}

impl ResolvedPin {
    /// A resolved pin whose identity is a file or tree digest (crate, tarball, dir).
    fn by_digest(
        pin: &Pin,
        kind: &str,
        uri: String,
        sha256: Sha256,
        archive: Option<PathBuf>,
    ) -> Self {
        let default_commit = match kind {
            "crate" => uri.trim_start_matches("crate:").replace('@', "-"),
            _ => format!("{kind}-{}", sha256.short(12)),
        };
        let (build_number, build_commit) = build_info(pin, None, default_commit);
        ResolvedPin {
            kind: kind.into(),
            uri,
            sha256: Some(sha256),
            git_commit: None,
            tag: None,
            subdir: pin.subdir.clone(),
            build_number,
            build_commit,
            archive,
            skipped_git_entries: 0,
            skipped_git_paths: Vec::new(),
        }
    }
}

fn build_info(pin: &Pin, tag: Option<&str>, default_commit: String) -> (u64, String) {
    let number = pin
        .build_number
        .or_else(|| {
            tag.and_then(|t| t.strip_prefix('b'))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0);
    let commit = pin.build_commit.clone().unwrap_or(default_commit);
    (number, commit)
}

fn prepare(ws: &Workspace, recipe: &Recipe) -> Result<Prepared> {
    let pin = &recipe.pin;
    match &pin.source {
        PinSource::Crate {
            name,
            version,
            sha256,
        } => {
            let path = fetch_crate(ws, name, version, *sha256)?;
            let uri = format!("crate:{name}@{version}");
            Ok(Prepared {
                resolved: ResolvedPin::by_digest(pin, "crate", uri, *sha256, Some(path.clone())),
                payload: Payload::Archive(path),
            })
        }
        PinSource::Tarball { path, sha256 } => {
            verify_file(path, *sha256, "tarball")?;
            let uri = path.display().to_string();
            Ok(Prepared {
                resolved: ResolvedPin::by_digest(pin, "tarball", uri, *sha256, Some(path.clone())),
                payload: Payload::Archive(path.clone()),
            })
        }
        PinSource::Dir { path, tree_sha256 } => {
            let root = path.join(pin.subdir.as_deref().unwrap_or(""));
            if !root.is_dir() {
                return Err(Error::input(root.display(), "pinned folder does not exist"));
            }
            extract::real_subdir(path, pin.subdir.as_deref())?;
            let actual = tree_digest(path)?;
            if actual != *tree_sha256 {
                return Err(Error::input(
                    path.display(),
                    format!("tree digest mismatch: recipe pins {tree_sha256}, folder has {actual}"),
                )
                .with_hint("the folder changed since it was pinned; re-pin it only if the change is intended"));
            }
            let uri = path.display().to_string();
            Ok(Prepared {
                resolved: ResolvedPin::by_digest(pin, "dir", uri, *tree_sha256, None),
                payload: Payload::Dir(path.clone()),
            })
        }
        PinSource::Git { url, tag, commit } => {
            let (repo, oid) = fetch_git(ws, recipe, url, tag.as_deref(), commit)?;
            let full = GitOid::new(oid);
            let (build_number, build_commit) = build_info(pin, tag.as_deref(), full.short(9));
            Ok(Prepared {
                resolved: ResolvedPin {
                    kind: "git".into(),
                    uri: url.clone(),
                    sha256: None,
                    git_commit: Some(full),
                    tag: tag.clone(),
                    subdir: pin.subdir.clone(),
                    build_number,
                    build_commit,
                    archive: None,
                    skipped_git_entries: 0,
                    skipped_git_paths: Vec::new(),
                },
                payload: Payload::Git { repo, commit: oid },
            })
        }
    }
}

/// The digest a `tarball` (`sha256`) or `dir` (`tree-sha256`) pin of `path` needs. A FIFO or
/// a device is refused before it is opened for reading (`/dev/zero` never ends).
pub fn pin_digest(path: &Path) -> Result<(&'static str, Sha256)> {
    if path.is_dir() {
        Ok(("tree-sha256", tree_digest(path)?))
    } else if std::fs::metadata(path).is_ok() {
        Ok((
            "sha256",
            Sha256::of_reader(open_regular(path, "source", true)?, path)?.0,
        ))
    } else {
        Err(Error::input(path.display(), "no such file or folder"))
    }
}

/// Re-hash a file against its pinned digest.
pub fn verify_file(path: &Path, want: Sha256, what: &str) -> Result<()> {
    let file = open_regular(path, what, true)?;
    let (actual, _) = Sha256::of_reader(file, path)?;
    if actual != want {
        return Err(Error::input(
            path.display(),
            format!("SHA-256 mismatch: the pin says {want}, the {what} is {actual}"),
        )
        .with_hint("the source is not the one that was pinned; nothing was extracted"));
    }
    Ok(())
}

/// Fetch a registry crate through cargo's own client and verify it. The verified archive is
/// kept in `vendor/cache/crates/` so that later runs (and `verify`) re-hash a local file.
fn fetch_crate(ws: &Workspace, name: &str, version: &str, want: Sha256) -> Result<PathBuf> {
    let file = format!("{name}-{version}.crate");
    let cached = ws.crate_cache().join(&file);
    if cached.is_file() {
        verify_file(&cached, want, "cached crate")?;
        return Ok(cached);
    }
    let found = match find_in_cargo_cache(&file) {
        Some(p) => p,
        None => {
            cargo_fetch(name, version)?;
            find_in_cargo_cache(&file).ok_or_else(|| {
                Error::input(
                    format!("crate {name} {version}"),
                    "cargo fetched the crate but its archive is not in cargo's cache",
                )
                .with_hint("check CARGO_HOME")
            })?
        }
    };
    let (actual, _) = Sha256::of_file(&found)?;
    if actual != want {
        return Err(Error::input(
            format!("crate {name} {version}"),
            format!("SHA-256 mismatch: the recipe pins {want}, the registry's crate is {actual}"),
        )
        .with_hint("fix `sha256` in the recipe's [pin] (the registry index's `cksum`) or the version; nothing was extracted"));
    }
    let bytes = fsx::read(&found)?;
    fsx::write_atomic(&cached, &bytes)?;
    Ok(cached)
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"))
}

fn find_in_cargo_cache(file: &str) -> Option<PathBuf> {
    let cache = cargo_home().join("registry").join("cache");
    let mut hits: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(file))
        .filter(|p| p.is_file())
        .collect();
    hits.sort();
    hits.into_iter().next()
}

/// `cargo fetch` of a throw-away manifest that depends on exactly `name = "=version"`.
fn cargo_fetch(name: &str, version: &str) -> Result<()> {
    let dir = tempfile::tempdir().at("create temp dir", &std::env::temp_dir())?;
    let manifest = format!(
        "[package]\nname = \"pinforge-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         [lib]\npath = \"lib.rs\"\n[dependencies]\n{name} = \"={version}\"\n"
    );
    fsx::write_atomic(&dir.path().join("Cargo.toml"), manifest.as_bytes())?;
    fsx::write_atomic(&dir.path().join("lib.rs"), b"")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("fetch")
        .arg("--manifest-path")
        .arg(dir.path().join("Cargo.toml"));
    crate::base::process::run(&mut cmd, "install Rust's cargo: it fetches registry crates")
        .map_err(|e| match e {
            Error::Tool {
                command, detail, ..
            } => Error::input(
                format!("crate {name} {version}"),
                format!("cargo could not fetch it ({command})"),
            )
            .with_detail(detail.unwrap_or_default())
            .with_hint("check the crate name and version, and that the registry is reachable"),
            other => other,
        })?;
    Ok(())
}

/// Fetch one commit of a git repository (shallow for remote URLs) into a bare cache repository
/// and resolve the pin: a tag must peel to the pinned commit, and an abbreviated commit is
/// resolved once and recorded in the recipe's lock file, after which drift is refused.
fn fetch_git(
    ws: &Workspace,
    recipe: &Recipe,
    url: &str,
    tag: Option<&str>,
    commit: &str,
) -> Result<(PathBuf, git2::Oid)> {
    let lock = recipe.lock_path().map(|p| (read_lock(&p), p));
    let locked: Option<String> = match &lock {
        Some((Ok(Some(l)), _)) if l.url == url && l.tag.as_deref() == tag => {
            if !l.commit.starts_with(commit) {
                None // the recipe moved the pin: resolve again and rewrite the lock
            } else {
                Some(l.commit.clone())
            }
        }
        Some((Err(e), _)) => return Err(Error::input(e.0.clone(), e.1.clone())),
        _ => None,
    };

    let cache_dir = ws.git_cache();
    let repo_path = git_cache_repo(ws, url);
    let repo = if repo_path.exists() {
        Repository::open_bare(&repo_path).git_at(&repo_path.display())?
    } else {
        fsx::create_dir_all(&cache_dir)?;
        Repository::init_bare(&repo_path).git_at(&repo_path.display())?
    };

    let full_known = locked
        .clone()
        .or_else(|| (commit.len() == 40).then(|| commit.to_string()));
    let have_commit = full_known
        .as_deref()
        .and_then(|c| git2::Oid::from_str(c).ok())
        .filter(|oid| repo.find_commit(*oid).is_ok());
    let need_fetch = have_commit.is_none() || tag.is_some();
    if need_fetch {
        let mut refspecs: Vec<String> = Vec::new();
        if let Some(t) = tag {
            refspecs.push(format!("+refs/tags/{t}:refs/tags/{t}"));
        } else if let Some(c) = &full_known {
            refspecs.push(c.clone());
        }
        let mut remote = repo.remote_anonymous(url).git_at(&url)?;
        let mut opts = git2::FetchOptions::new();
        let local = !url.contains("://") || url.starts_with("file://");
        if !local {
            // The real llama.cpp history is over 1 GB: fetch only the pinned commit.
            opts.depth(1);
        }
        opts.download_tags(git2::AutotagOption::None);
        remote
            .fetch(&refspecs, Some(&mut opts), None)
            .map_err(|e| {
                Error::input(
                    url,
                    format!("cannot fetch {}: {}", refspecs.join(" "), e.message()),
                )
                .with_hint("check the URL and tag, and that the repository is reachable")
            })?;
    }

    let resolved = match tag {
        Some(t) => {
            let oid = repo
                .find_reference(&format!("refs/tags/{t}"))
                .and_then(|r| r.peel_to_commit())
                .map(|c| c.id())
                .map_err(|_| Error::input(format!("{url} tag {t}"), "tag not found after fetch"))?;
            let want = full_known.as_deref().unwrap_or(commit);
            if !oid.to_string().starts_with(want) {
                return Err(Error::input(
                    format!("{}: tag `{t}`", recipe.path.display()),
                    format!("resolves to {oid}, but the pin says {want}"),
                )
                .with_hint("the tag moved or the pin is wrong; pinforge refuses drift. Fix the recipe's commit (and remove the lock) only if the new commit is intended"));
            }
            oid
        }
        None => {
            let c = full_known.clone().ok_or_else(|| {
                Error::input(recipe.path.display(), "abbreviated commit without a tag")
            })?;
            let oid = git2::Oid::from_str(&c).git_at(&c)?;
            repo.find_commit(oid).map_err(|_| {
                Error::input(format!("{url} commit {c}"), "commit not found after fetch")
            })?;
            oid
        }
    };
    if let Some((_, lock_path)) = &lock {
        if locked.as_deref() != Some(resolved.to_string().as_str()) {
            write_lock(
                lock_path,
                &GitLock {
                    url: url.to_string(),
                    tag: tag.map(str::to_string),
                    commit: resolved.to_string(),
                },
            )?;
        }
    }
    Ok((repo_path, resolved))
}

/// The bare cache repository that holds what was fetched of the git repository at `url`
/// (the whole history for a local repository, one commit for a remote one).
pub fn git_cache_repo(ws: &Workspace, url: &str) -> PathBuf {
    ws.git_cache().join(format!(
        "{}.git",
        Sha256::of_bytes(url.as_bytes()).short(16)
    ))
}

/// Write the lock file of a git pin (the rebase moves it with the recipe's pin).
pub fn write_git_lock(path: &Path, url: &str, tag: Option<&str>, commit: GitOid) -> Result<()> {
    write_lock(
        path,
        &GitLock {
            url: url.to_string(),
            tag: tag.map(str::to_string),
            commit: commit.to_string(),
        },
    )
}

/// The registry index's checksum of crate `name` `version`, taken the way cargo takes it: cargo
/// resolves a throw-away manifest that depends on exactly that version and writes the index's
/// `cksum` into the lock file as `checksum`.
pub fn registry_cksum(name: &str, version: &str) -> Result<Sha256> {
    let dir = tempfile::tempdir().at("create temp dir", &std::env::temp_dir())?;
    let manifest = format!(
        "[package]\nname = \"pinforge-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         [lib]\npath = \"lib.rs\"\n[dependencies]\n{name} = \"={version}\"\n"
    );
    fsx::write_atomic(&dir.path().join("Cargo.toml"), manifest.as_bytes())?;
    fsx::write_atomic(&dir.path().join("lib.rs"), b"")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("generate-lockfile")
        .arg("--manifest-path")
        .arg(dir.path().join("Cargo.toml"));
    crate::base::process::run(
        &mut cmd,
        "install Rust's cargo: it reads the registry index",
    )
    .map_err(|e| match e {
        Error::Tool {
            command, detail, ..
        } => Error::input(
            format!("crate:{name}@{version}"),
            format!("cargo could not resolve it in the registry index ({command})"),
        )
        .with_detail(detail.unwrap_or_default())
        .with_hint("check the crate name and version, and that the registry is reachable"),
        other => other,
    })?;
    #[derive(Deserialize)]
    struct Lock {
        #[serde(default)]
        package: Vec<LockPackage>,
    }
    #[derive(Deserialize)]
    struct LockPackage {
        name: String,
        version: String,
        checksum: Option<String>,
    }
    let lock_path = dir.path().join("Cargo.lock");
    let text = fsx::read_to_string(&lock_path)?;
    let lock: Lock = toml::from_str(&text)
        .map_err(|e| Error::Internal(format!("{}: {}", lock_path.display(), e.message())))?;
    let sum = lock
        .package
        .iter()
        .find(|p| p.name == name && p.version == version)
        .and_then(|p| p.checksum.clone())
        .ok_or_else(|| {
            Error::input(
                format!("crate:{name}@{version}"),
                "the registry index lists no checksum for this version",
            )
        })?;
    sum.parse().map_err(|e| {
        Error::input(
            format!("crate:{name}@{version}"),
            format!("the index's checksum `{sum}` is not a SHA-256: {e}"),
        )
    })
}

/// The lock file's content: the resolved full commit of a git pin.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct GitLock {
    url: String,
    tag: Option<String>,
    commit: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct LockFile {
    version: u32,
    pin: GitLock,
}

fn read_lock(path: &Path) -> std::result::Result<Option<GitLock>, (String, String)> {
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
pub fn git_lock_text(path: &Path, url: &str, tag: Option<&str>, commit: GitOid) -> Result<String> {
    lock_text(
        path,
        &GitLock {
            url: url.to_string(),
            tag: tag.map(str::to_string),
            commit: commit.to_string(),
        },
    )
}

fn write_lock(path: &Path, lock: &GitLock) -> Result<()> {
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
