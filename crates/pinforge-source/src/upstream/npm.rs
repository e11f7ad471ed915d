//! `npm` pins: an npm package tarball that carries the upstream tree as a git bundle
//! (`node-llama-cpp` ships llama.cpp, `tools/server` included, as `llama/gitRelease.bundle`).
//!
//! The tarball comes from `npm pack NAME@VERSION --ignore-scripts` (never `npm install`, whose
//! postinstall downloads binaries) into `vendor/cache/npm/`, or from a local copy the pin names;
//! once it is cached nothing reaches the network. Two digests guard it: the tarball's, checked
//! before anything is read from it, and the bundle's, checked before the bundle is parsed. The
//! bundle is read out of the tarball with the refusals of every archive pin (`read_member`),
//! loaded into a throw-away bare repository (`bundle::load`) and its one commit exported with
//! the refusals of every git pin (`export_commit`).

use super::bundle;
use super::extract;
use super::fetch::verify_file;
use crate::git::GitContext;
use pinforge_base::archive::{self, Written};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The verified bundle of an npm pin, ready to export.
pub(super) struct Bundle {
    /// The bundle's bytes (its digest matched the pin).
    bytes: Vec<u8>,
    /// The one commit its refs name.
    pub(super) tip: git2::Oid,
    /// Names the bundle in errors (`TARBALL:MEMBER`).
    subject: String,
}

// Not derived: the bundle's bytes (tens of MB) have no place in a debug line.
impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("subject", &self.subject)
            .field("tip", &self.tip)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// The pin's package tarball, verified: the local copy it names, else the cached one, else a
/// fresh `npm pack` into the cache.
pub(super) fn tarball(
    ws: &Workspace,
    package: &str,
    version: &str,
    want: Sha256,
    local: Option<&Path>,
) -> Result<PathBuf> {
    if let Some(path) = local {
        verify_file(path, want, "npm tarball")?;
        return Ok(path.to_path_buf());
    }
    let cache = ws.npm_cache();
    let cached = cache.join(format!("{}-{version}.tgz", file_stem(package)));
    if cached.is_file() {
        verify_file(&cached, want, "cached npm tarball")?;
        return Ok(cached);
    }
    fsx::create_dir_all(&cache)?;
    // `npm pack` writes into its working folder; a temp folder beside the cache makes the
    // rename into place atomic, and a failed or wrong tarball is removed with it.
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-npm-")
        .tempdir_in(&cache)
        .at("create temp dir in", &cache)?;
    npm_pack(package, version, tmp.path())?;
    let packed = only_tgz(tmp.path(), package, version)?;
    verify_file(&packed, want, "npm tarball").map_err(|e| {
        e.with_hint(format!(
            "`npm pack {package}@{version}` gave another tarball than the pin names; nothing was extracted. Fix `sha256` only if the package is the one intended"
        ))
    })?;
    std::fs::rename(&packed, &cached).at("rename into", &cached)?;
    fsx::sync_dir(&cache)?;
    Ok(cached)
}

/// `@scope/name` as a file name (`scope-name`), the way `npm pack` names its tarball.
fn file_stem(package: &str) -> String {
    package.trim_start_matches('@').replace('/', "-")
}

fn npm_pack(package: &str, version: &str, dir: &Path) -> Result<()> {
    let npm = std::env::var_os("PINFORGE_NPM").unwrap_or_else(|| "npm".into());
    let mut cmd = Command::new(npm);
    cmd.arg("pack")
        .arg(format!("{package}@{version}"))
        .arg("--ignore-scripts")
        .current_dir(dir);
    pinforge_base::process::run(&mut cmd, "install Node.js's npm: it fetches npm packages").map_err(
        |e| match e {
            Error::Tool {
                command, detail, ..
            } => Error::input(
                format!("npm package {package}@{version}"),
                format!("npm could not fetch it ({command})"),
            )
            .with_detail(detail.unwrap_or_default())
            .with_hint(
                "check the package name and version and that the registry is reachable, or give the pin a `path` to a local copy",
            ),
            other => other,
        },
    )?;
    Ok(())
}

/// The one `.tgz` `npm pack` left in `dir`.
fn only_tgz(dir: &Path, package: &str, version: &str) -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .at("read directory", dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tgz"))
        .collect();
    found.sort();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Error::input(
            format!("npm package {package}@{version}"),
            format!("`npm pack` left {} tarballs, not one", found.len()),
        )),
    }
}

/// Read `member` out of the verified `tarball`, check it against `want` and parse its header.
pub(super) fn bundle(tarball: &Path, member: &str, want: Sha256) -> Result<Bundle> {
    let bytes = archive::read_member(tarball, member)?;
    let subject = format!("{}:{member}", tarball.display());
    let actual = Sha256::of_bytes(&bytes);
    if actual != want {
        return Err(Error::input(
            &subject,
            format!(
                "SHA-256 mismatch: the pin's `bundle-sha256` is {want}, the bundle is {actual}"
            ),
        )
        .with_hint("the bundle is not the one that was pinned; nothing was extracted"));
    }
    let tip = bundle::parse_header(&bytes, &subject)?.tip(&subject)?;
    Ok(Bundle {
        bytes,
        tip,
        subject,
    })
}

impl Bundle {
    /// Load the bundle into a bare repository in a temp folder beside `dest` and write its
    /// commit's tree (or `subdir` of it) into `dest`.
    pub(super) fn export(&self, dest: &Path, subdir: Option<&str>) -> Result<Written> {
        let parent = fsx::parent_of(dest);
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-bundle-")
            .tempdir_in(&parent)
            .at("create temp dir in", &parent)?;
        let repo_path = tmp.path().join("bundle.git");
        let repo = git2::Repository::init_bare(&repo_path).git_at(&repo_path.display())?;
        let tip = bundle::load(&repo, &self.bytes, &self.subject)?;
        extract::export_commit(&repo_path, tip, subdir, dest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package tarball as `npm pack` writes it (`package/…`), holding a real git bundle.
    fn package_with_bundle(dir: &Path) -> Option<(PathBuf, Sha256, Sha256)> {
        let src = dir.join("src");
        std::fs::create_dir(&src).ok()?;
        let git = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(&src)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
                .output()
                .ok()
                .filter(|o| o.status.success())
        };
        git(&["init", "-q", "-b", "main"])?;
        std::fs::create_dir(src.join("tools")).ok()?;
        std::fs::write(src.join("tools/server.cpp"), b"int main(){}\n").ok()?;
        git(&["add", "."])?;
        git(&["commit", "-q", "-m", "one"])?;
        git(&["bundle", "create", "../b.bundle", "HEAD"])?;
        let bundle = std::fs::read(dir.join("b.bundle")).ok()?;
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        let mut h = tar::Header::new_gnu();
        h.set_size(bundle.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "package/llama/gitRelease.bundle", bundle.as_slice())
            .ok()?;
        let tgz = b.into_inner().ok()?.finish().ok()?;
        let path = dir.join("p-1.0.0.tgz");
        std::fs::write(&path, &tgz).ok()?;
        Some((path, Sha256::of_bytes(&tgz), Sha256::of_bytes(&bundle)))
    }

    #[test]
    fn a_local_package_tarball_exports_its_bundle_commit_and_wrong_digests_are_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let Some((tgz, tgz_sha, bundle_sha)) = package_with_bundle(d.path()) else {
            eprintln!("ignored at run time: git is not installed");
            return;
        };
        let ws = Workspace::new(d.path()).expect("ws");
        let member = "package/llama/gitRelease.bundle";
        let path = tarball(&ws, "p", "1.0.0", tgz_sha, Some(&tgz)).expect("tarball");
        let b = bundle(&path, member, bundle_sha).expect("bundle");
        let dest = d.path().join("out/tree");
        fsx::create_dir_all(&dest).expect("mkdir");
        let w = b.export(&dest, None).expect("export");
        assert_eq!(w.files, 1);
        assert!(dest.join("tools/server.cpp").is_file());
        assert!(!dest.join(".git").exists());

        let e = tarball(&ws, "p", "1.0.0", bundle_sha, Some(&tgz)).expect_err("tgz digest");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("SHA-256 mismatch"), "{e}");
        let e = bundle(&path, member, tgz_sha).expect_err("bundle digest");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("bundle-sha256"), "{e}");
    }

    #[test]
    fn a_scoped_package_is_named_as_npm_pack_names_it() {
        assert_eq!(file_stem("@scope/name"), "scope-name");
        assert_eq!(file_stem("node-llama-cpp"), "node-llama-cpp");
    }
}
