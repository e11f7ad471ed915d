//! The no-op fast path: a stamp of file metadata that lets a build that has nothing to do say
//! `cached` without re-probing tools, re-verifying the pin, re-hashing inputs, running
//! `cmake --install`, reading the file API reply or re-hashing the stage (issue #8: a no-op
//! `build` at most 2× a plain `cmake --build` no-op).
//!
//! After every successful build, `build/RECIPE/VARIANT/pinforge-stamp.json` records:
//! - a key: pinforge's version and its own executable's metadata (the embedded recipe and
//!   bundle, and the code that derives the configure arguments, live in it), the stamp scheme,
//!   the recipe's digest and path, the whole resolved variant (its patches, toolchain, build
//!   type, targets and CMake entries, not only its name), and the tool search path
//!   (`PINFORGE_TOOL_PATH`, `.tools/bin`, `PATH`). An input that changes the build and comes
//!   from none of these nor the files below (a new command-line option, an environment
//!   variable) must join [`key`], or the fast path would not see it change;
//! - the metadata (size, mtime and ctime in ns, inode, device, mode) of every input the
//!   manifest lists (the pin's archive, every patch file, the recipe, every tool binary as
//!   invoked and as resolved), every folder of the tool search path (a tool that appears
//!   earlier on the path changes its folder), the manifest, the configure stamp and the
//!   CMake cache;
//! - one digest over the metadata of every entry of the source tree (its `.git` included)
//!   and one over the stage (the artifacts and links);
//! - the resolved tools, the source tree's path and the outcome to report. (Nothing in the
//!   stamp is a git object id: parsing one initializes libgit2, whose TLS setup alone costs
//!   more than the whole fast path.)
//!
//! A later build whose key and metadata all match, and for which `ninja -n` over the same
//! targets has no work to do (Ninja stats every file the build reads, and knows when CMake
//! must re-run), returns the recorded outcome as `cached`. Anything else, including an
//! unreadable stamp, takes the full path, which re-checks everything and writes a new stamp.
//!
//! What a metadata stamp can miss, and why that is accepted: a file rewritten with the same
//! size and the same mtime *and* ctime and inode. ctime cannot be set from user space (only a
//! clock change or raw device access can fake it), so this is the same trust Ninja, make and
//! cargo place in timestamps. `pinforge verify` never uses the stamp: it re-hashes every
//! output and every input. Metadata taken before the build is compared with metadata taken
//! after it; a file that changed while the build ran leaves no stamp.
//!
//! Trust: the stamp sits in the build folder beside the manifest and is trusted no more than
//! it is. Whoever can write the build folder can already rewrite the manifest; `verify`,
//! `install` and `smoke` never read the stamp and re-hash what they use.

use super::{BuildOutcome, ARTIFACT_ROOT, CONFIGURE_SCHEME, SCRUBBED_ENV};
use crate::toolchain::ResolvedToolchain;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::workspace::Workspace;
use pinforge_source::patch::PatchFile;
use pinforge_source::recipe::{Recipe, Variant};
use pinforge_source::upstream::Tree;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Bumped whenever what the stamp records changes: older stamps are then ignored.
const SCHEME: u32 = 5;
const FILE: &str = "pinforge-stamp.json";

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    dev: u64,
    mode: u32,
}

impl Meta {
    fn of(m: &std::fs::Metadata) -> Meta {
        Meta {
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
            mode: m.mode(),
        }
    }

    /// The entry itself (a link is not followed); `None` when it does not exist.
    fn lstat(p: &Path) -> Option<Meta> {
        std::fs::symlink_metadata(p).ok().map(|m| Meta::of(&m))
    }
}

/// The metadata of a set of paths (`None`: absent, so that its appearance is noticed too).
type Files = BTreeMap<PathBuf, Option<Meta>>;

fn measure(paths: &[PathBuf]) -> Files {
    paths.iter().map(|p| (p.clone(), Meta::lstat(p))).collect()
}

/// One digest over the metadata of every entry below `root` (names as raw bytes, sorted).
fn listing(root: &Path) -> Sha256 {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    fn walk(dir: &Path, rel: &Path, h: &mut sha2::Sha256) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            h.update(b"\0unreadable\0");
            return;
        };
        let mut names: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
        names.sort();
        for n in names {
            let p = dir.join(&n);
            let r = rel.join(&n);
            // libgit2 may rewrite the index while checking the tree clean (it caches stat
            // data, not content); objects are content-addressed and immutable, and the build
            // reads the work tree, which is listed itself (HEAD and refs are listed too).
            if r == Path::new(".git/index")
                || r == Path::new(".git/objects")
                || r == Path::new(".git/logs")
            {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).ok();
            h.update(r.as_os_str().as_bytes());
            h.update([0]);
            match m.as_ref().map(Meta::of) {
                Some(x) => {
                    h.update([1]);
                    h.update(x.len.to_le_bytes());
                    h.update(x.mtime_ns.to_le_bytes());
                    h.update(x.ctime_ns.to_le_bytes());
                    h.update(x.ino.to_le_bytes());
                    h.update(x.dev.to_le_bytes());
                    h.update(x.mode.to_le_bytes());
                }
                None => h.update([0]),
            }
            if m.is_some_and(|m| m.is_dir()) {
                walk(&p, &r, h);
            }
        }
    }
    let mut h = sha2::Sha256::new();
    h.update(format!("{:?}", Meta::lstat(root)).as_bytes());
    walk(root, Path::new(""), &mut h);
    Sha256::of_bytes(&h.finalize())
}

#[derive(Debug, Serialize, Deserialize)]
struct Stamp {
    scheme: u32,
    key: Sha256,
    files: Files,
    tree_listing: Sha256,
    stage_listing: Sha256,
    tools: ResolvedToolchain,
    tree_path: PathBuf,
    /// A `dir` pin's folder and its listing.
    #[serde(default)]
    pin_dir: Option<(PathBuf, Sha256)>,
    /// The notes the full build reported (a moved hunk, skipped `.git` entries, embedded
    /// machine paths): the fast path says them again, since nothing that caused them changed.
    notes: Vec<String>,
    outcome: BuildOutcome,
    /// Where the build's processes saw the tree and the variant folder.
    build_path: super::fixed::BuildPaths,
}

/// A reporter that passes everything on and keeps the notes, for the stamp.
pub(super) struct Recorder<'a> {
    inner: &'a dyn pinforge_base::progress::Reporter,
    notes: std::sync::Mutex<Vec<String>>,
}

impl<'a> Recorder<'a> {
    pub(super) fn new(inner: &'a dyn pinforge_base::progress::Reporter) -> Recorder<'a> {
        Recorder {
            inner,
            notes: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|n| n.clone()).unwrap_or_default()
    }
}

impl pinforge_base::progress::Reporter for Recorder<'_> {
    fn stage(&self, name: &str, detail: &str) {
        if name == "note" {
            if let Ok(mut n) = self.notes.lock() {
                n.push(detail.to_string());
            }
        }
        self.inner.stage(name, detail)
    }
    fn progress(&self, done: u64, total: u64, message: &str) {
        self.inner.progress(done, total, message)
    }
    fn finish(&self) {
        self.inner.finish()
    }
}

/// The key: everything besides file contents that decides what a build does.
fn key(
    ws: &Workspace,
    cache: &super::cache::Settings,
    recipe: &Recipe,
    variant: &Variant,
) -> Result<Sha256> {
    let exe = std::env::current_exe().ok();
    let body = serde_json::to_vec(&(
        SCHEME,
        CONFIGURE_SCHEME,
        SCRUBBED_ENV,
        env!("CARGO_PKG_VERSION"),
        exe.as_deref()
            .and_then(|e| std::fs::metadata(e).ok().map(|m| Meta::of(&m))),
        recipe.sha256,
        &recipe.path,
        recipe.embedded,
        // The whole resolved variant, not only its name: a variant derived at run time
        // (ablate's subsets) or another configuration under the same name must never be
        // answered from a folder built with other patches, flags, toolchain or targets.
        variant,
        search_dirs(ws),
        // The compile cache's settings: a no-op reports them, so another setting (--no-cache,
        // another folder or backend) takes the full path and reports what it was asked for.
        (cache.enabled, &cache.dir, &cache.remote, &cache.dist),
        // A provisioned CUDA toolkit lives in this cache: another one is another build.
        crate::cudakit::default_cache_dir().ok(),
        // Turning the fixed build path off (or on) changes every path the build names.
        std::env::var_os(super::fixed::ENV),
    ))
    .map_err(|e| Error::Internal(e.to_string()))?;
    Ok(Sha256::of_bytes(&body))
}

/// Where tools are looked up, in order (as `toolchain::resolve` searches).
fn search_dirs(ws: &Workspace) -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ws.tool_dirs()
        .into_iter()
        .chain(std::env::split_paths(&path))
        .collect()
}

/// Metadata taken before the build reads its inputs: the stamp is written only when the
/// same files still look the same after it.
pub(super) struct Before {
    tools: ResolvedToolchain,
    tree_path: PathBuf,
    paths: Vec<PathBuf>,
    files: Files,
    tree_listing: Sha256,
    pin_dir: Option<(PathBuf, Sha256)>,
}

/// A `dir` pin's folder is an input itself (no archive stands for it): its listing is in the
/// stamp, so an edit there sends the build down the full path, which re-checks its digest.
fn pin_dir(recipe: &Recipe) -> Option<(PathBuf, Sha256)> {
    match &recipe.pin.source {
        pinforge_source::recipe::PinSource::Dir { path, .. } => Some((path.clone(), listing(path))),
        _ => None,
    }
}

impl Before {
    /// Measure every input of the build about to run.
    pub(super) fn take(
        ws: &Workspace,
        recipe: &Recipe,
        patches: &[&PatchFile],
        tools: &ResolvedToolchain,
        tree: &Tree,
    ) -> Before {
        let mut paths: Vec<PathBuf> = search_dirs(ws);
        if !recipe.embedded {
            paths.push(recipe.path.clone());
        }
        paths.extend(patches.iter().map(|p| p.origin.clone()));
        paths.extend(tree.pin.archive.iter().cloned());
        for t in tools.tools.values() {
            paths.push(t.path.clone());
            paths.push(t.real_path.clone());
        }
        paths.sort();
        paths.dedup();
        Before {
            tools: tools.clone(),
            tree_path: tree.path.clone(),
            files: measure(&paths),
            paths,
            tree_listing: listing(&tree.path),
            pin_dir: pin_dir(recipe),
        }
    }
}

/// The outputs and build-folder files the stamp also covers.
fn outputs(vdir: &Path) -> Vec<PathBuf> {
    let cmake = vdir.join("cmake");
    vec![
        vdir.join("manifest.json"),
        vdir.join("pinforge-git"),
        cmake.join("pinforge-configure.json"),
        cmake.join("CMakeCache.txt"),
        cmake.join("build.ninja"),
    ]
}

/// After a successful full build: record the stamp, or remove a stale one when an input
/// changed while the build ran (the next build then takes the full path again).
pub(super) fn write(
    job: &super::Job,
    cache: &super::cache::Settings,
    before: Before,
    outcome: &BuildOutcome,
    notes: &Recorder,
    build_path: &super::fixed::BuildPaths,
) -> Result<()> {
    let (ws, recipe, variant) = (job.ws, job.recipe, job.variant);
    let vdir = &job.vdir;
    let path = vdir.join(FILE);
    let _ = std::fs::remove_file(&path);
    if measure(&before.paths) != before.files
        || listing(&before.tree_path) != before.tree_listing
        || pin_dir(recipe) != before.pin_dir
    {
        return Ok(());
    }
    let mut files = before.files;
    files.extend(measure(&outputs(vdir)));
    let stamp = Stamp {
        scheme: SCHEME,
        key: key(ws, cache, recipe, variant)?,
        files,
        tree_listing: before.tree_listing,
        stage_listing: listing(&vdir.join(ARTIFACT_ROOT)),
        tools: before.tools,
        tree_path: before.tree_path,
        pin_dir: before.pin_dir,
        notes: notes.notes(),
        outcome: outcome.clone(),
        build_path: build_path.clone(),
    };
    let body = serde_json::to_vec(&stamp).map_err(|e| Error::Internal(e.to_string()))?;
    pinforge_base::fsx::write_atomic(&path, &body)
}

/// The recorded outcome, as `cached`, when nothing the build depends on changed; `None`
/// sends the build down the full path (which decides everything again).
pub(super) fn fresh(
    ws: &Workspace,
    cache: &super::cache::Settings,
    recipe: &Recipe,
    variant: &Variant,
    reporter: &dyn pinforge_base::progress::Reporter,
) -> Option<BuildOutcome> {
    let vdir = ws.variant_dir(&recipe.name, variant.name.as_str());
    let bytes = pinforge_base::fsx::read(&vdir.join(FILE)).ok()?;
    let stamp: Stamp = serde_json::from_slice(&bytes).ok()?;
    if stamp.scheme != SCHEME
        || stamp.outcome.recipe != recipe.name
        || stamp.outcome.variant != variant.name.as_str()
    {
        return None;
    }
    let paths: Vec<PathBuf> = stamp.files.keys().cloned().collect();
    if measure(&paths) != stamp.files
        || key(ws, cache, recipe, variant).ok()? != stamp.key
        || listing(&vdir.join(ARTIFACT_ROOT)) != stamp.stage_listing
        || listing(&stamp.tree_path) != stamp.tree_listing
        || pin_dir(recipe) != stamp.pin_dir
    {
        return None;
    }
    // Ninja is the authority on the build folder: it stats every file the build reads and
    // knows when CMake must re-run. A dry run changes nothing.
    let ninja = &stamp.tools.get(crate::toolchain::Role::Ninja)?.path;
    // Where the build ran: at the fixed path the build files name it, so the dry run must
    // see the same binds (or every source would look missing).
    if stamp.build_path.real_variant != vdir {
        return None;
    }
    let mut cmd = stamp.build_path.command(ninja).ok()?;
    for v in SCRUBBED_ENV {
        cmd.env_remove(v);
    }
    cmd.arg("-n")
        .arg("-C")
        .arg(stamp.build_path.cmake_dir())
        .args(&variant.targets)
        .args(&stamp.outcome.install_targets)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let out = cmd.output().ok()?;
    let idle = out.status.success()
        && String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == "ninja: no work to do.");
    if !idle {
        return None;
    }
    for n in &stamp.notes {
        reporter.stage("note", n);
    }
    // Nothing was compiled: the recorded build's cache counts are not this run's.
    let compile_cache = crate::build::cache::Stats {
        hits: 0,
        remote_hits: 0,
        misses: 0,
        uncacheable: 0,
        ..stamp.outcome.compile_cache.clone()
    };
    Some(BuildOutcome {
        cached: true,
        steps_run: 0,
        compile_cache,
        ..stamp.outcome
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #19 class 10: two configurations under one variant name (a recipe's variant and
    /// a subset ablate derives with that name) have different keys, so the fast path of one
    /// is never the other's; the same configuration keeps its key (the fast path stays).
    #[test]
    fn the_key_covers_the_whole_variant_not_only_its_name() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::new(d.path()).expect("ws");
        let cache = super::super::cache::Settings {
            enabled: true,
            dir: None,
            remote: None,
            dist: None,
        };
        let recipe = Recipe::embedded_default().expect("recipe");
        let v = recipe.variant("patched").expect("variant").clone();
        let k = key(&ws, &cache, &recipe, &v).expect("key");
        assert_eq!(key(&ws, &cache, &recipe, &v.clone()).expect("key"), k);
        let mut flags = v.clone();
        flags.cmake.insert("GGML_NATIVE".into(), "true".into());
        let mut patches = v.clone();
        patches.patches = pinforge_source::recipe::PatchSelection::List(Vec::new());
        let mut build_type = v.clone();
        build_type.build_type = "Debug".into();
        let mut targets = v.clone();
        targets.targets.push("ggml".into());
        for other in [flags, patches, build_type, targets] {
            assert_eq!(other.name, v.name);
            assert_ne!(
                key(&ws, &cache, &recipe, &other).expect("key"),
                k,
                "{other:?}"
            );
        }
    }

    #[test]
    fn metadata_changes_are_seen_and_a_listing_notices_a_new_entry() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("a");
        std::fs::write(&f, b"one").expect("write");
        let before = measure(std::slice::from_ref(&f));
        let l1 = listing(d.path());
        assert_eq!(measure(std::slice::from_ref(&f)), before);
        assert_eq!(listing(d.path()), l1);
        // Same size, new content: mtime/ctime move (and a rename-over gives a new inode).
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&f, b"two").expect("write");
        assert_ne!(measure(std::slice::from_ref(&f)), before);
        assert_ne!(listing(d.path()), l1);
        let l2 = listing(d.path());
        std::fs::create_dir(d.path().join("sub")).expect("mkdir");
        std::fs::write(d.path().join("sub/x"), b"").expect("write");
        assert_ne!(listing(d.path()), l2);
        // An absent path is recorded, so that its appearance is noticed.
        let g = d.path().join("later");
        let absent = measure(std::slice::from_ref(&g));
        assert_eq!(absent.get(&g), Some(&None));
        std::fs::write(&g, b"").expect("write");
        assert_ne!(measure(std::slice::from_ref(&g)), absent);
    }
}
