//! Fetch and verify a pin's source: registry crates through cargo's own client, one commit of
//! a git repository through libgit2, local tarballs and folders, each checked against its
//! pinned digest before anything is extracted.

use super::extract;
use super::lock::{read_lock, write_lock, GitLock};
use super::ResolvedPin;
use crate::git::GitContext;
use crate::recipe::{Pin, PinSource, Recipe};
use git2::Repository;
use pinforge_base::archive::{self, Written};
use pinforge_base::digest::{tree_digest, Sha256};
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx::{self, open_regular};
use pinforge_base::workspace::Workspace;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a prepared pin extracts from.
enum Payload {
    Archive(PathBuf),
    Dir(PathBuf),
    Git { repo: PathBuf, commit: git2::Oid },
    Bundle(super::npm::Bundle),
}

/// A pin fetched and verified: what it resolved to, and where its files come from.
pub(super) struct Prepared {
    pub(super) resolved: ResolvedPin,
    payload: Payload,
}

impl Prepared {
    pub(super) fn extract(&self, dest: &Path) -> Result<Written> {
        let sub = self.resolved.subdir.as_deref();
        match &self.payload {
            Payload::Archive(path) => archive::extract_archive(path, dest, sub),
            Payload::Dir(path) => archive::copy_dir(&archive::real_subdir(path, sub)?, dest),
            Payload::Git { repo, commit } => extract::export_commit(repo, *commit, sub, dest),
            Payload::Bundle(bundle) => bundle.export(dest, sub),
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
            bundle_sha256: None,
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

pub(super) fn prepare(ws: &Workspace, recipe: &Recipe) -> Result<Prepared> {
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
        PinSource::Npm {
            package,
            version,
            sha256,
            path,
            bundle,
            bundle_sha256,
        } => {
            let tgz = super::npm::tarball(ws, package, version, *sha256, path.as_deref())?;
            let payload = super::npm::bundle(&tgz, bundle, *bundle_sha256)?;
            let full = crate::git::git_oid(payload.tip);
            let uri = format!("npm:{package}@{version}");
            let mut resolved = ResolvedPin::by_digest(pin, "npm", uri, *sha256, Some(tgz));
            // The bundle's commit is the tree's identity, as a git pin's is.
            if pin.build_commit.is_none() {
                resolved.build_commit = full.short(9);
            }
            resolved.git_commit = Some(full);
            resolved.bundle_sha256 = Some(*bundle_sha256);
            Ok(Prepared {
                resolved,
                payload: Payload::Bundle(payload),
            })
        }
        PinSource::Dir { path, tree_sha256 } => {
            let root = path.join(pin.subdir.as_deref().unwrap_or(""));
            if !root.is_dir() {
                return Err(Error::input(root.display(), "pinned folder does not exist"));
            }
            archive::real_subdir(path, pin.subdir.as_deref())?;
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
            let full = crate::git::git_oid(oid);
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
                    bundle_sha256: None,
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
pub(crate) fn verify_file(path: &Path, want: Sha256, what: &str) -> Result<()> {
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
pub(super) fn fetch_crate(
    ws: &Workspace,
    name: &str,
    version: &str,
    want: Sha256,
) -> Result<PathBuf> {
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

pub(super) fn cargo_home() -> PathBuf {
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

/// A temp folder holding a throw-away cargo package that depends on exactly
/// `name = "=version"`: cargo then fetches that crate, or resolves it in the registry index,
/// the way it would for a real project.
fn throwaway_manifest(name: &str, version: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir().at("create temp dir", &std::env::temp_dir())?;
    let manifest = format!(
        "[package]\nname = \"pinforge-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         [lib]\npath = \"lib.rs\"\n[dependencies]\n{name} = \"={version}\"\n"
    );
    fsx::write_atomic(&dir.path().join("Cargo.toml"), manifest.as_bytes())?;
    fsx::write_atomic(&dir.path().join("lib.rs"), b"")?;
    Ok(dir)
}

/// `cargo fetch` of a throw-away manifest that depends on exactly `name = "=version"`.
fn cargo_fetch(name: &str, version: &str) -> Result<()> {
    let dir = throwaway_manifest(name, version)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("fetch")
        .arg("--manifest-path")
        .arg(dir.path().join("Cargo.toml"));
    pinforge_base::process::run(&mut cmd, "install Rust's cargo: it fetches registry crates")
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
    let lock = match recipe.lock_path() {
        Some(p) => Some((read_lock(&p)?, p)),
        None => None,
    };
    let locked: Option<String> = match &lock {
        Some((Some(l), _)) if l.url == url && l.tag.as_deref() == tag => {
            if !l.commit.starts_with(commit) {
                None // the recipe moved the pin: resolve again and rewrite the lock
            } else {
                Some(l.commit.clone())
            }
        }
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
        fetch_refs(&repo, url, tag, full_known.as_deref())?;
    }
    let resolved = resolve_fetched(&repo, recipe, url, tag, commit, full_known.as_deref())?;
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

/// Fetch the pinned tag, or the one full commit known, into the bare cache repository
/// (shallow for a remote URL).
fn fetch_refs(
    repo: &Repository,
    url: &str,
    tag: Option<&str>,
    full_known: Option<&str>,
) -> Result<()> {
    let mut refspecs: Vec<String> = Vec::new();
    if let Some(t) = tag {
        refspecs.push(format!("+refs/tags/{t}:refs/tags/{t}"));
    } else if let Some(c) = full_known {
        refspecs.push(c.to_string());
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
    Ok(())
}

/// The commit the pin resolves to after the fetch: the tag's, which must match the pinned
/// (or locked) commit, or the full commit itself, which must have arrived.
fn resolve_fetched(
    repo: &Repository,
    recipe: &Recipe,
    url: &str,
    tag: Option<&str>,
    commit: &str,
    full_known: Option<&str>,
) -> Result<git2::Oid> {
    let oid = match tag {
        Some(t) => {
            let oid = repo
                .find_reference(&format!("refs/tags/{t}"))
                .and_then(|r| r.peel_to_commit())
                .map(|c| c.id())
                .map_err(|_| Error::input(format!("{url} tag {t}"), "tag not found after fetch"))?;
            let want = full_known.unwrap_or(commit);
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
            let c = full_known.ok_or_else(|| {
                Error::input(recipe.path.display(), "abbreviated commit without a tag")
            })?;
            let oid = git2::Oid::from_str(c).git_at(&c)?;
            repo.find_commit(oid).map_err(|_| {
                Error::input(format!("{url} commit {c}"), "commit not found after fetch")
            })?;
            oid
        }
    };
    Ok(oid)
}

/// The bare cache repository that holds what was fetched of the git repository at `url`
/// (the whole history for a local repository, one commit for a remote one).
pub fn git_cache_repo(ws: &Workspace, url: &str) -> PathBuf {
    ws.git_cache().join(format!(
        "{}.git",
        Sha256::of_bytes(url.as_bytes()).short(16)
    ))
}

/// The registry index's checksum of crate `name` `version`, taken the way cargo takes it: cargo
/// resolves a throw-away manifest that depends on exactly that version and writes the index's
/// `cksum` into the lock file as `checksum`.
pub fn registry_cksum(name: &str, version: &str) -> Result<Sha256> {
    let dir = throwaway_manifest(name, version)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("generate-lockfile")
        .arg("--manifest-path")
        .arg(dir.path().join("Cargo.toml"));
    pinforge_base::process::run(
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
