//! The staged prefix: what the project's own install rules install (`cmake --install` with
//! `DESTDIR`, as distribution packagers do), made relocatable, collected as the artifacts, and
//! cross-checked against the code model so that every library the requested targets built is
//! covered by an artifact.
//!
//! Reproducibility: the project is configured with the fixed prefix [`PREFIX`] (a path that
//! never exists on the build machine), so nothing configured or compiled from
//! `CMAKE_INSTALL_PREFIX` depends on the workspace. The install writes into
//! `DESTDIR/pinforge/prefix`, which is then moved to `stage/`. pkg-config and CMake package
//! files that name [`PREFIX`] are rewritten to `${pcfiledir}` / `${CMAKE_CURRENT_LIST_DIR}`
//! relative paths, so an installed layer is a relocatable standard prefix. Finally no staged
//! file may contain the workspace's own paths: such a file would differ between workspaces.

use super::fileapi::CodeModel;
use super::{Artifact, Links};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::tree::TreeModel;
use pinforge_record::normalize::{self, Normalized};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path};

/// The install prefix the project is configured with.
pub(crate) const PREFIX: &str = "/pinforge/prefix";

/// How the artifacts were staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Staging {
    /// `cmake --install` of the build folder.
    CmakeInstall,
    /// The project has no install rules at all: the library files the code model names for
    /// the requested targets were copied into `lib/` (links as links).
    BuiltLibraries,
}

impl Staging {
    /// The manifest's spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Staging::CmakeInstall => "cmake-install",
            Staging::BuiltLibraries => "built-libraries",
        }
    }
}

/// A built library and the artifact that covers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Coverage {
    /// CMake target.
    pub target: String,
    /// The built file, relative to the build folder (absolute when outside it).
    pub built: String,
    /// SHA-256 of the built file.
    pub built_sha256: Sha256,
    /// The artifact (path relative to the artifact root) that installs it.
    pub artifact: String,
}

/// Remove a folder left by an earlier run, whatever it holds.
pub(crate) fn clear(dir: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("stat", dir, e)),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir).at("remove", dir),
        Ok(_) => std::fs::remove_file(dir).at("remove", dir),
    }
}

/// After `cmake --install` into `destdir`: refuse anything installed outside the prefix, then
/// move the prefix to `stage`. Returns false when the install rules installed nothing.
pub(crate) fn take_prefix(destdir: &Path, stage: &Path) -> Result<bool> {
    let prefix = destdir.join(PREFIX.trim_start_matches('/'));
    let mut outside = Vec::new();
    find_outside(destdir, &prefix, &mut outside)?;
    if !outside.is_empty() {
        outside.sort();
        return Err(Error::check(
            destdir.display(),
            format!(
                "the install rules write outside the install prefix: {}",
                outside.join(", ")
            ),
        ));
    }
    clear(stage)?;
    let installed = prefix.is_dir()
        && std::fs::read_dir(&prefix)
            .at("read directory", &prefix)?
            .next()
            .is_some();
    if installed {
        std::fs::rename(&prefix, stage).at("move into place", stage)?;
    }
    clear(destdir)?;
    Ok(installed)
}

/// Every entry under `dir` that is neither the prefix, inside it, nor a folder on the way to it.
fn find_outside(dir: &Path, prefix: &Path, out: &mut Vec<String>) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd {
        let e = e.at("read directory", dir)?;
        let p = e.path();
        if p == prefix {
            continue;
        }
        let is_dir = e.file_type().at("stat", &p)?.is_dir();
        if is_dir && prefix.starts_with(&p) {
            find_outside(&p, prefix, out)?;
        } else {
            out.push(p.display().to_string());
        }
    }
    Ok(())
}

/// Rewrite the fixed prefix in pkg-config and CMake package files to paths relative to the
/// file itself, so the installed layer works wherever it is (`rollback/current`).
pub(crate) fn relocate(stage: &Path) -> Result<Vec<String>> {
    let mut rewritten = Vec::new();
    let mut files = Vec::new();
    list_files(stage, stage, &mut files)?;
    for rel in files {
        let path = stage.join(&rel);
        let var = if rel.ends_with(".pc") {
            "${pcfiledir}"
        } else if rel.ends_with(".cmake") {
            "${CMAKE_CURRENT_LIST_DIR}"
        } else {
            continue;
        };
        let bytes = pinforge_base::fsx::read(&path)?;
        if find(&bytes, PREFIX.as_bytes()).is_none() {
            continue;
        }
        let depth = rel.matches('/').count();
        let up = vec![".."; depth].join("/");
        let replacement = if up.is_empty() {
            var.to_string()
        } else {
            format!("{var}/{up}")
        };
        let new = replace_all(&bytes, PREFIX.as_bytes(), replacement.as_bytes());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::symlink_metadata(&path)
            .at("stat", &path)?
            .permissions()
            .mode()
            & 0o7777;
        pinforge_base::fsx::write_atomic_mode(&path, &new, mode)?;
        rewritten.push(rel);
    }
    Ok(rewritten)
}

/// Staged files that carry a machine path (the workspace's folders), with the path found:
/// they will differ between two workspaces. Not a refusal: some toolchains write paths that no
/// flag remaps (GCC's AddressSanitizer records each object's source file name as given on the
/// command line), and a sanitizer build is still the evidence an operator needs. The build
/// says so and the manifest marks those subjects, so the record stays honest.
pub(crate) fn find_machine_paths(stage: &Path, paths: &[&Path]) -> Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    list_files(stage, stage, &mut files)?;
    let needles: Vec<String> = paths
        .iter()
        .map(|p| p.display().to_string())
        .filter(|s| s.len() > 1)
        .collect();
    let mut found = Vec::new();
    for rel in files {
        let bytes = pinforge_base::fsx::read(&stage.join(&rel))?;
        if let Some(n) = needles
            .iter()
            .find(|n| find(&bytes, n.as_bytes()).is_some())
        {
            found.push((rel, n.clone()));
        }
    }
    Ok(found)
}

/// Regular files under `dir`, relative to `root`, sorted.
fn list_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .at("read directory", dir)?
        .collect::<std::io::Result<Vec<_>>>()
        .at("read directory", dir)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let ft = e.file_type().at("stat", &p)?;
        if ft.is_dir() {
            list_files(root, &p, out)?;
        } else if ft.is_file() {
            out.push(rel_str(root, &p)?);
        }
    }
    Ok(())
}

fn rel_str(root: &Path, p: &Path) -> Result<String> {
    let rel = p
        .strip_prefix(root)
        .map_err(|_| Error::Internal(format!("{} outside {}", p.display(), root.display())))?;
    rel.to_str().map(str::to_string).ok_or_else(|| {
        Error::check(
            p.display(),
            "an installed file name is not UTF-8; manifests name artifacts in UTF-8",
        )
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// For a project without install rules: copy each library file of the closure into
/// `stage/lib/`, with the links beside it that lead to it (`libx.so -> libx.so.1`).
pub(crate) fn stage_built_libraries(
    model: &CodeModel,
    requested: &[String],
    stage: &Path,
) -> Result<()> {
    let lib = stage.join("lib");
    pinforge_base::fsx::create_dir_all(&lib)?;
    for t in model.closure(requested)? {
        if !t.is_library() {
            continue;
        }
        for a in &t.artifacts {
            let Some(a) = built_file(a) else { continue };
            let a = &a;
            let Some(name) = a.file_name() else { continue };
            pinforge_base::fsx::copy_file(a, &lib.join(name))?;
            let dir = pinforge_base::fsx::parent_of(a);
            for e in std::fs::read_dir(&dir)
                .at("read directory", &dir)?
                .flatten()
            {
                let p = e.path();
                if leads_to(&dir, &p, name) {
                    let target = std::fs::read_link(&p).at("read link", &p)?;
                    let to = lib.join(e.file_name());
                    clear(&to)?;
                    std::os::unix::fs::symlink(&target, &to).at("create link", &to)?;
                }
            }
        }
    }
    Ok(())
}

/// The run-path entry a staged `bin/` program finds the staged libraries through (the configure
/// arguments give installed files `$ORIGIN;$ORIGIN/../lib`).
const BIN_TO_LIB: &str = "$ORIGIN/../lib";

/// Copy each requested executable target the install rules did not install into `stage/bin/`
/// (llama.cpp installs its tools only with `LLAMA_TOOLS_INSTALL`, which would install every tool
/// whether built or not). The copy is the build tree's file, so its run path must already reach
/// `lib/` from `bin/`: a recipe gets that with `CMAKE_BUILD_WITH_INSTALL_RPATH`. Returns the
/// staged paths.
pub(crate) fn stage_executables(
    model: &CodeModel,
    requested: &[String],
    stage: &Path,
) -> Result<Vec<String>> {
    let bin = stage.join("bin");
    let mut staged = Vec::new();
    for t in model.closure(requested)? {
        if t.kind != "EXECUTABLE" || !requested.contains(&t.name) {
            continue;
        }
        for a in &t.artifacts {
            let Some(real) = built_file(a) else {
                return Err(Error::check(
                    a.display(),
                    format!(
                        "target `{}` was requested but its program was not built",
                        t.name
                    ),
                ));
            };
            let Some(name) = a.file_name() else { continue };
            let to = bin.join(name);
            if std::fs::symlink_metadata(&to).is_ok() {
                continue; // the install rules installed it (with the install run path)
            }
            let bytes = pinforge_base::fsx::read(&real)?;
            let path = pinforge_base::elf::run_path(&bytes).unwrap_or_default();
            if !path.iter().any(|p| p == BIN_TO_LIB) {
                return Err(Error::check(
                    real.display(),
                    format!(
                        "the built program's run path is `{}`; staged in bin/ it would not find lib/",
                        path.join(":")
                    ),
                )
                .with_hint(format!(
                    "set `CMAKE_BUILD_WITH_INSTALL_RPATH = true` in the recipe so that built programs carry `{BIN_TO_LIB}`"
                )));
            }
            pinforge_base::fsx::create_dir_all(&bin)?;
            pinforge_base::fsx::write_atomic_mode(&to, &bytes, 0o755)?;
            staged.push(format!("bin/{}", name.to_string_lossy()));
        }
    }
    Ok(staged)
}

/// The file a code-model artifact names: the file API names a versioned shared library by its
/// link (`bin/libx.so -> libx.so.1 -> libx.so.1.0.0`); the build folder is pinforge's own, so
/// the links are followed.
fn built_file(a: &Path) -> Option<std::path::PathBuf> {
    let real = std::fs::canonicalize(a).ok()?;
    std::fs::symlink_metadata(&real)
        .ok()
        .filter(|m| m.is_file())
        .map(|_| real)
}

/// Whether `p` is a link that, through links in the same folder, ends at `name`.
fn leads_to(dir: &Path, p: &Path, name: &std::ffi::OsStr) -> bool {
    let mut cur = p.to_path_buf();
    for _ in 0..8 {
        let Ok(t) = std::fs::read_link(&cur) else {
            return false;
        };
        // Only plain names: a link that leaves the folder is not a sibling name of the file.
        if t.components().count() != 1
            || !matches!(t.components().next(), Some(Component::Normal(_)))
        {
            return false;
        }
        if t.as_os_str() == name {
            return true;
        }
        cur = dir.join(t);
    }
    false
}

/// What the one read of a staged file found besides its digest: the normalization rule's
/// result and whether it holds nvcc's path-hashed `_INTERNAL_` names (see `normalize`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Examined {
    /// The normalized digest, when the rule applies.
    pub normalized: Option<Normalized>,
    /// Whether the file holds `_INTERNAL_…` names hashed from the source's real path.
    pub path_hashed: bool,
}

/// Regular files under `root` are the artifacts; links are recorded as links and must stay
/// inside the stage. Anything else (a FIFO, a socket, a device) is refused.
#[cfg(test)]
pub(crate) fn collect(root: &Path) -> Result<(Vec<Artifact>, Links)> {
    let (files, links, _) = collect_examined(root, &[])?;
    Ok((files, links))
}

/// A shipped artifact path, with the digest and size its toolkit's assembly record holds when
/// it was linked from a sealed file checked unchanged (see `runtime::ship`).
pub(crate) type KnownDigest = (String, Option<(Sha256, u64)>);

/// [`collect`], examining each file that is not `shipped` (the toolkit's bytes, not ours) in
/// the same read that hashes it: a file is read once for its digest, its normalized digest and
/// the `_INTERNAL_` check (55 MB for `libggml-cuda`, read twice before). Shipped files are
/// hashed streaming, unread otherwise; one linked from a sealed toolkit file is named by the
/// digest its record holds, without reading it (~557 MB for a CUDA build's runtime).
pub(crate) fn collect_examined(
    root: &Path,
    shipped: &[KnownDigest],
) -> Result<(Vec<Artifact>, Links, BTreeMap<String, Examined>)> {
    let mut files = Vec::new();
    let mut links = Vec::new();
    let mut model = TreeModel::default();
    let mut seen = Seen {
        shipped,
        examined: BTreeMap::new(),
    };
    if root.is_dir() {
        walk(root, root, &mut files, &mut links, &mut model, &mut seen)?;
    }
    // Every link resolved through the others, once all are known: `l -> .` then
    // `x -> l/l/../../etc` leaves the stage although each text alone looks local, and install
    // refuses such a tree, so the build must not write a manifest for it.
    model.check_links().map_err(|(rel, why)| {
        let target = links
            .iter()
            .find(|(l, _)| Path::new(l) == rel)
            .map(|(_, t)| t.as_str())
            .unwrap_or_default();
        Error::check(
            root.join(&rel).display(),
            format!("installed link points outside the prefix: -> {target} ({why})"),
        )
        .with_hint("links the install rules create must resolve inside the installed prefix")
    })?;
    files.sort_by(|a: &Artifact, b| a.path.cmp(&b.path));
    links.sort();
    Ok((files, links, seen.examined))
}

/// The shipped paths to leave unexamined, and what the others' reads found.
struct Seen<'a> {
    shipped: &'a [KnownDigest],
    examined: BTreeMap<String, Examined>,
}

impl Seen<'_> {
    /// Hash the file at `path` (artifact path `rel`), examining it in the same read unless
    /// it was shipped.
    fn hash(&mut self, rel: &str, path: &Path) -> Result<(Sha256, u64)> {
        if let Some((_, known)) = self.shipped.iter().find(|(s, _)| s == rel) {
            return match known {
                // The stage's name still is the sealed inode that was checked: same size too.
                Some((sha, size))
                    if std::fs::symlink_metadata(path).at("stat", path)?.len() == *size =>
                {
                    Ok((*sha, *size))
                }
                _ => Sha256::of_file(path),
            };
        }
        let bytes = pinforge_base::fsx::read(path)?;
        let examined = Examined {
            normalized: normalize::normalize(&bytes),
            path_hashed: normalize::has_path_hashed_names(&bytes),
        };
        self.examined.insert(rel.to_string(), examined);
        Ok((Sha256::of_bytes(&bytes), bytes.len() as u64))
    }
}

fn walk(
    root: &Path,
    dir: &Path,
    files: &mut Vec<Artifact>,
    links: &mut Links,
    model: &mut TreeModel,
    seen: &mut Seen,
) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .at("read directory", dir)?
        .collect::<std::io::Result<Vec<_>>>()
        .at("read directory", dir)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let rel = rel_str(root, &path)?;
        let meta = std::fs::symlink_metadata(&path).at("stat", &path)?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).at("read link", &path)?;
            let Some(target_str) = target.to_str().map(str::to_string) else {
                return Err(Error::check(path.display(), "link target is not UTF-8"));
            };
            model.add_link(Path::new(&rel), &target).map_err(|why| {
                Error::check(
                    path.display(),
                    format!("installed link points outside the prefix: -> {target_str} ({why})"),
                )
            })?;
            links.push((rel, target_str));
        } else if meta.is_dir() {
            model
                .add_dir(Path::new(&rel))
                .map_err(|why| Error::check(path.display(), why))?;
            walk(root, &path, files, links, model, seen)?;
        } else if meta.is_file() {
            model
                .add_file(Path::new(&rel))
                .map_err(|why| Error::check(path.display(), why))?;
            let (sha256, size) = seen.hash(&rel, &path)?;
            files.push(Artifact {
                path: rel,
                sha256,
                size,
            });
        } else {
            return Err(Error::check(
                path.display(),
                "the install rules installed something that is neither a file, a folder nor a link",
            ));
        }
    }
    Ok(())
}

/// Check that every library file the requested targets (and their in-project dependencies)
/// built is covered by an artifact: same file name (installed copies get their run path
/// rewritten, so their bytes may differ) or same content.
pub(crate) fn cover(
    model: &CodeModel,
    requested: &[String],
    cmake_dir: &Path,
    artifacts: &[Artifact],
    links: &Links,
) -> Result<Vec<Coverage>> {
    let mut by_name: BTreeMap<&str, &str> = BTreeMap::new();
    for a in artifacts {
        by_name.entry(file_name(&a.path)).or_insert(&a.path);
    }
    for (l, _) in links {
        by_name.entry(file_name(l)).or_insert(l);
    }
    let by_digest: BTreeMap<Sha256, &str> = artifacts
        .iter()
        .map(|a| (a.sha256, a.path.as_str()))
        .collect();
    let mut covered = Vec::new();
    let mut missing = Vec::new();
    // A static library a requested program links (llama-server's libcommon.a) lives inside
    // that program: it is covered by the staged program, not by a file of its own.
    let programs = model
        .closure(requested)?
        .iter()
        .any(|t| t.kind == "EXECUTABLE" && requested.contains(&t.name));
    for t in model.closure(requested)? {
        if !t.is_library() || (programs && t.kind == "STATIC_LIBRARY") {
            continue;
        }
        let cmake_real = std::fs::canonicalize(cmake_dir).unwrap_or_else(|_| cmake_dir.into());
        for a in &t.artifacts {
            let Some(a) = built_file(a) else {
                // Not built (or not a file): nothing to cover, but say so rather than pass.
                missing.push(format!(
                    "{} (target `{}`, not found after the build)",
                    a.display(),
                    t.name
                ));
                continue;
            };
            let a = &a;
            let shown = a
                .strip_prefix(&cmake_real)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| a.display().to_string());
            let (digest, _) = Sha256::of_file(a)?;
            let name = a.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            match by_name.get(name).or_else(|| by_digest.get(&digest)) {
                Some(art) => covered.push(Coverage {
                    target: t.name.clone(),
                    built: shown,
                    built_sha256: digest,
                    artifact: art.to_string(),
                }),
                None => missing.push(format!("{shown} (target `{}`)", t.name)),
            }
        }
    }
    if !missing.is_empty() {
        return Err(Error::check(
            format!("{}", cmake_dir.display()),
            format!(
                "built libraries that no artifact covers (the install rules do not install them): {}",
                missing.join(", ")
            ),
        ));
    }
    covered.sort_by(|a, b| a.built.cmp(&b.built));
    Ok(covered)
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(links: &[(&str, &str)]) -> (tempfile::TempDir, Result<(Vec<Artifact>, Links)>) {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join("lib/a")).expect("mkdir");
        std::fs::write(d.path().join("lib/libx.so.1"), b"x").expect("write");
        for (l, t) in links {
            std::os::unix::fs::symlink(t, d.path().join(l)).expect("link");
        }
        let r = collect(d.path());
        (d, r)
    }

    #[test]
    fn links_are_checked_lexically_against_the_root() {
        let (_d, r) = staged(&[("lib/libx.so", "libx.so.1"), ("lib/a/x", "../y")]);
        let (files, links) = r.expect("inside");
        assert_eq!(files.len(), 1);
        assert_eq!(links.len(), 2);
        for escaping in [("lib/x", "../../etc/passwd"), ("x", "/etc/passwd")] {
            let (_d, r) = staged(&[escaping]);
            let e = r.expect_err("outside");
            assert_eq!(e.exit_code(), 1, "{e}");
            assert!(e.to_string().contains("outside the prefix"), "{e}");
        }
    }

    // issue #7 class 1: `l -> .` then `x -> l/l/../../etc` escapes through the earlier link
    // although its depth count alone stays inside; install refuses such a tree, so the build
    // must not stage it.
    #[test]
    fn a_link_escaping_through_an_earlier_link_is_refused() {
        let (_d, r) = staged(&[("l", "."), ("x", "l/l/../../etc")]);
        let e = r.expect_err("escapes through l");
        assert_eq!(e.exit_code(), 1, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("x") && msg.contains("outside the prefix"),
            "{msg}"
        );
        let (_d, r) = staged(&[("l", "."), ("x", "l/l/lib/libx.so.1")]);
        r.expect("through the link, still inside");
    }

    #[test]
    fn prefix_is_rewritten_relative_to_each_package_file() {
        let d = tempfile::tempdir().expect("tempdir");
        let pc = d.path().join("lib/pkgconfig/x.pc");
        let cm = d.path().join("lib/cmake/x/x-config.cmake");
        pinforge_base::fsx::write_atomic(&pc, b"prefix=/pinforge/prefix\nlibdir=${prefix}/lib\n")
            .expect("pc");
        pinforge_base::fsx::write_atomic(&cm, b"set(X \"/pinforge/prefix/include\")\n")
            .expect("cmake");
        pinforge_base::fsx::write_atomic(&d.path().join("include/x.h"), b"/pinforge/prefix")
            .expect("h");
        let r = relocate(d.path()).expect("relocate");
        assert_eq!(r, vec!["lib/cmake/x/x-config.cmake", "lib/pkgconfig/x.pc"]);
        assert_eq!(
            std::fs::read_to_string(&pc).expect("pc"),
            "prefix=${pcfiledir}/../..\nlibdir=${prefix}/lib\n"
        );
        assert_eq!(
            std::fs::read_to_string(&cm).expect("cmake"),
            "set(X \"${CMAKE_CURRENT_LIST_DIR}/../../../include\")\n"
        );
        // Only package files are rewritten.
        assert_eq!(
            std::fs::read(d.path().join("include/x.h")).expect("h"),
            b"/pinforge/prefix"
        );
    }

    #[test]
    fn staged_files_naming_the_workspace_are_found() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = d.path().join("ws");
        pinforge_base::fsx::write_atomic(
            &d.path().join("stage/lib/cmake/x.cmake"),
            format!("set(X {}/src)", ws.display()).as_bytes(),
        )
        .expect("write");
        let found = find_machine_paths(&d.path().join("stage"), &[&ws]).expect("scan");
        assert_eq!(
            found,
            vec![("lib/cmake/x.cmake".to_string(), ws.display().to_string())]
        );
    }

    #[test]
    fn installs_outside_the_prefix_are_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let dest = d.path().join("dest");
        pinforge_base::fsx::write_atomic(&dest.join("pinforge/prefix/lib/x"), b"x").expect("write");
        pinforge_base::fsx::write_atomic(&dest.join("etc/x.conf"), b"x").expect("write");
        let e = take_prefix(&dest, &d.path().join("stage")).expect_err("outside");
        assert!(e.to_string().contains("etc"), "{e}");
        std::fs::remove_dir_all(dest.join("etc")).expect("rm");
        assert!(take_prefix(&dest, &d.path().join("stage")).expect("take"));
        assert!(d.path().join("stage/lib/x").is_file());
        assert!(!dest.exists());
    }

    #[test]
    fn each_file_is_examined_in_the_read_that_hashes_it_and_shipped_files_are_not() {
        let d = tempfile::tempdir().expect("tempdir");
        let lib = d.path().join("lib");
        std::fs::create_dir_all(&lib).expect("mkdir");
        let ours = b"x _INTERNAL_0123abcd_12_x.cu y".to_vec();
        std::fs::write(lib.join("libggml-cuda.so"), &ours).expect("write");
        std::fs::write(lib.join("libcudart.so.13"), b"_INTERNAL_0123abcd_ theirs").expect("write");
        let shipped = vec![("lib/libcudart.so.13".to_string(), None)];
        let (files, _, examined) = collect_examined(d.path(), &shipped).expect("collect");
        assert_eq!(files.len(), 2);
        let cuda = files
            .iter()
            .find(|a| a.path == "lib/libggml-cuda.so")
            .expect("ours");
        assert_eq!(cuda.sha256, Sha256::of_bytes(&ours));
        assert_eq!(cuda.size, ours.len() as u64);
        let seen = examined.get("lib/libggml-cuda.so").expect("examined");
        assert!(seen.path_hashed);
        assert_eq!(seen.normalized, normalize::normalize(&ours));
        // The shipped file is hashed like any other but is not ours to examine.
        assert!(!examined.contains_key("lib/libcudart.so.13"));
        let (plain, _) = collect(d.path()).expect("collect");
        assert_eq!(
            plain, files,
            "the digests do not depend on what was examined"
        );
    }
}
