//! The compile cache: ccache is the compiler launcher of every build, with a configuration
//! pinforge writes itself (no user or system ccache.conf, no `CCACHE_*` variable from the
//! environment), so that a cache hit gives exactly the bytes a compile would.
//!
//! Why ccache always runs, even with the cache off: the compile command must be the same
//! whether the cache is used or not, and ccache rewrites it (below). With the cache off ccache
//! runs with `recache` into a throwaway folder in the variant folder, removed after the build:
//! every unit compiles, nothing is read or kept. (`read_only` is not used for this: on a miss it
//! runs the compiler with the command as given, not as rewritten, and gcc then spells some
//! `__FILE__` of a header differently, `ggml-cuda/../ggml-cuda/common.cuh`: measured.)
//!
//! Paths: `base_dir` rewrites the absolute paths under it into paths relative to the build
//! folder before the compiler sees them, so that every workspace's compiles look alike and a
//! sanitizer's record of the source file name holds no path. At the fixed build path (see
//! [`super::fixed`]) `base_dir` is the fixed folder: compiles name `../src/...` from
//! `<fixed>/build`, and nvcc's `-Xcompiler=` prefix maps are the same everywhere. nvcc hashes the
//! real path of each `.cu` file into its objects, so for a CUDA toolchain the fixed folder joins
//! the key (`namespace`): a hit always carries the hash a compile here would give. At the real
//! folder (no mount namespace here) `base_dir` is the workspace, and nvcc's prefix maps, whose
//! left side names the variant folder, go into `ignore_options`; there one exception is stated
//! in the manifest: a CUDA hit gives the bytes the compile in the tree that stored it gave
//! (`nvcc_path_hashed_names`, `embeds_machine_path`).
//!
//! Why the source is also reached through `build/RECIPE/VARIANT/src` (a link to the vendor
//! tree): at the real folder every variant's compiles then name their sources `../src/...`,
//! the same in every variant folder and every workspace.
//!
//! Keys: ccache hashes the compiler binary's content (`compiler_check = content`, so two
//! machines with the same compiler share and a replaced compiler never does), and the local
//! cache folder is namespaced by the toolchain's compiler identity (versions and SHA-256 of
//! cc, cxx and nvcc): a gcc and a clang build never share an entry, even locally.
//!
//! Counts are per build: ccache's `stats_log` is a file in the variant folder, emptied before
//! Ninja runs, so concurrent builds sharing one cache never mix their counters.

use crate::toolchain::{ResolvedToolchain, Role, ToolRecord};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Cache folder override (the `--cache-dir` flag wins).
pub(crate) const DIR_ENV: &str = "PINFORGE_CACHE_DIR";
/// Remote backend URL (`redis://HOST:PORT`, `http://…`, `file:…`; `--cache-remote` wins).
pub(crate) const REMOTE_ENV: &str = "PINFORGE_CACHE_REMOTE";
/// Set to `0`/`off`/`false` to turn the cache off (`--no-cache` does the same).
pub(crate) const ENABLE_ENV: &str = "PINFORGE_CACHE";
/// Where the source link lives, relative to the variant folder, and how compiles name it.
pub(crate) const SOURCE_LINK: &str = "src";
/// With the cache off: the throwaway cache folder, in the variant folder.
pub(crate) const OFF_DIR: &str = "compile-cache.off";
/// The source link as seen from the CMake build folder (`build/RECIPE/VARIANT/cmake`).
pub(crate) const SOURCE_FROM_BUILD: &str = "../src";

/// What the user asked for: on or off, the local folder, an optional shared backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Whether cached results are read and written.
    pub enabled: bool,
    /// Local cache folder (namespaced per toolchain inside); None: the user's cache folder.
    pub dir: Option<PathBuf>,
    /// Remote backend, as ccache's `remote_storage` takes it.
    pub remote: Option<String>,
    /// The sccache-dist scheduler a build distributes its compiles to (`--dist`,
    /// `PINFORGE_DIST`; see [`super::dist`]); None: every compile runs here.
    pub dist: Option<String>,
}

impl Settings {
    /// The settings from `PINFORGE_CACHE`, `PINFORGE_CACHE_DIR` and `PINFORGE_CACHE_REMOTE`.
    pub fn from_env() -> Settings {
        let enabled = !matches!(
            std::env::var(ENABLE_ENV).ok().as_deref().map(str::trim),
            Some("0" | "off" | "false" | "no")
        );
        Settings {
            enabled,
            dir: std::env::var_os(DIR_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            remote: std::env::var(REMOTE_ENV).ok().filter(|v| !v.is_empty()),
            dist: std::env::var(super::dist::DIST_ENV)
                .ok()
                .filter(|v| !v.is_empty()),
        }
    }

    /// Refuse what can be refused before anything is built: a bad remote, no cache folder.
    pub fn check(&self) -> Result<()> {
        if let Some(r) = &self.remote {
            check_remote(r)?;
        }
        if let Some(d) = &self.dist {
            super::dist::check_url(d)?;
        }
        config_value(&self.local_dir()?, "compile cache folder")
    }

    /// The local cache folder: the setting, else `$XDG_CACHE_HOME/pinforge/ccache`, else
    /// `$HOME/.cache/pinforge/ccache` (where cargo and sccache users look for caches).
    pub fn local_dir(&self) -> Result<PathBuf> {
        if let Some(d) = &self.dir {
            return pinforge_base::fsx::absolute(d);
        }
        let base = pinforge_base::fsx::user_cache_dir("compile cache")
            .map_err(|e| e.with_hint(format!("pass --cache-dir DIR or set {DIR_ENV}")))?;
        Ok(base.join("ccache"))
    }
}

/// The compile cache of one build, ready to be attached to CMake and Ninja.
#[derive(Debug, Clone)]
pub(crate) struct CompileCache {
    tool: ToolRecord,
    enabled: bool,
    dir: PathBuf,
    remote: Option<String>,
    config: PathBuf,
    stats_log: PathBuf,
}

/// What the cache did for one build (the `compile_cache` field of `build --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Stats {
    /// `ccache`.
    pub tool: String,
    /// Its version.
    pub version: String,
    /// Whether cached results were read and written (`--no-cache`: false).
    pub enabled: bool,
    /// Translation units served from the cache (local or remote).
    pub hits: u64,
    /// Of those, served by the remote backend.
    pub remote_hits: u64,
    /// Translation units compiled (and, with the cache on, stored).
    pub misses: u64,
    /// Compiler calls ccache does not cache (links, preprocessing only, unsupported options).
    pub uncacheable: u64,
    /// The local folder (this toolchain's namespace).
    pub dir: PathBuf,
    /// The remote backend, without credentials; None when there is none.
    pub remote: Option<String>,
}

impl CompileCache {
    /// Prepare the cache for one build of `vdir`: check the settings, create the namespaced
    /// folder and write the configuration ccache will read.
    ///
    /// `base_dir`: the folder under which ccache makes paths relative (the fixed build folder,
    /// or the workspace at the real folder). `hashed_path`: a folder nvcc hashes into its
    /// objects, made part of the key (the fixed build folder for a CUDA toolchain).
    ///
    /// `ignore` lists exact compiler arguments the key leaves out (ccache's `ignore_options`):
    /// pinforge's own prefix maps for nvcc, whose left side names the variant folder. ccache
    /// already leaves a host compiler's `-ffile-prefix-map=` out of its key, but it cannot see
    /// the one inside nvcc's `-Xcompiler=`, so without this every variant (and workspace)
    /// would recompile every CUDA unit. The maps' right sides are fixed (`/pinforge/src`,
    /// `/pinforge/build`), so the object does not depend on what they leave out.
    pub(crate) fn prepare(
        settings: &Settings,
        tools: &ResolvedToolchain,
        base_dir: &Path,
        hashed_path: Option<&Path>,
        vdir: &Path,
        ignore: &[String],
        prefix: Option<&Path>,
    ) -> Result<CompileCache> {
        let tool = tools.tool(Role::Ccache)?.clone();
        let root = settings.local_dir()?;
        if let Some(r) = &settings.remote {
            check_remote(r)?;
        }
        let ns = namespace(tools);
        let dir = root.join(&ns);
        // ccache's configuration is line based: a value with a line break would add settings.
        for p in [&dir, &vdir.to_path_buf(), &base_dir.to_path_buf()] {
            config_value(p, "compile cache path")?;
        }
        check_folder(&root)?;
        pinforge_base::fsx::create_dir_all(&dir)?;
        let base_dirs = base_dirs(base_dir);
        // With the cache off, ccache still runs the same way (see the module's notes) but
        // into a throwaway folder of this variant's: `read_only` would make it run the
        // compiler with the command as given, not as it rewrites it for base_dir.
        let off_dir = vdir.join(OFF_DIR);
        remove_folder(&off_dir)?;
        let store = if settings.enabled { &dir } else { &off_dir };
        let stats_log = vdir.join("compile-cache.stats");
        let config = vdir.join("ccache.conf");
        let mut lines = vec![
            format!("cache_dir = {}", store.display()),
            // The prefix maps put the build folder at /pinforge/build: the folder name never
            // reaches the object, so it must not split the cache either.
            "hash_dir = false".to_string(),
            "compiler_check = content".to_string(),
            // The same namespace in every key: a shared remote keeps toolchains apart too. A
            // folder nvcc hashes into its objects (the fixed build path, which has the uid in
            // it) joins the key, so that a hit never carries another folder's hash.
            match hashed_path {
                Some(p) => format!(
                    "namespace = {ns}-{}",
                    Sha256::of_bytes(p.as_os_str().as_encoded_bytes()).short(12)
                ),
                None => format!("namespace = {ns}"),
            },
            // No sloppiness: every input that can change the object stays in the key.
            "sloppiness =".to_string(),
            format!("stats_log = {}", stats_log.display()),
            "absolute_paths_in_stderr = true".to_string(),
        ];
        lines.extend(optional_lines(&base_dirs, ignore, settings));
        if let Some(p) = prefix {
            // A miss compiles through sccache-dist (see `super::dist`); hits and the key are
            // ccache's as in a local build.
            config_value(p, "distributed compile launcher")?;
            lines.push(format!("prefix_command = {}", p.display()));
        }
        let mut body = lines.join("\n");
        body.push('\n');
        pinforge_base::fsx::write_atomic(&config, body.as_bytes())?;
        Ok(CompileCache {
            tool,
            enabled: settings.enabled,
            dir,
            remote: settings.remote.as_deref().map(redact),
            config,
            stats_log,
        })
    }

    /// Point a CMake or Ninja run at this configuration, and only at it.
    pub(crate) fn apply(&self, cmd: &mut Command) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("CCACHE_") {
                cmd.env_remove(&k);
            }
        }
        cmd.env("CCACHE_CONFIGPATH", &self.config);
    }

    /// Empty the per-build counters (before Ninja runs: configure's compiler checks and any
    /// earlier build are not this build's).
    pub(crate) fn reset(&self) -> Result<()> {
        match std::fs::remove_file(&self.stats_log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("remove", &self.stats_log, e))
            }
            _ => Ok(()),
        }
    }

    /// This build's counts, from its stats log.
    pub(crate) fn stats(&self) -> Result<Stats> {
        if !self.enabled {
            // The throwaway store of a --no-cache build: nothing in it is ever read again.
            let _ = std::fs::remove_dir_all(self.config.with_file_name(OFF_DIR));
        }
        let text = match pinforge_base::fsx::read_if_present(&self.stats_log)? {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => String::new(),
        };
        let c = count(&text);
        Ok(Stats {
            tool: Role::Ccache.as_str().into(),
            version: self.tool.version.clone(),
            enabled: self.enabled,
            hits: c.hits,
            remote_hits: c.remote_hits,
            misses: c.misses,
            uncacheable: c.uncacheable,
            dir: self.dir.clone(),
            remote: self.remote.clone(),
        })
    }
}

impl Stats {
    /// The manifest's run-details record: counts and the launcher, no machine path and no
    /// remote address (neither is part of what was built, and an address may carry a secret).
    pub(crate) fn byproduct(&self, tool: &ToolRecord) -> pinforge_record::manifest::Resource {
        pinforge_record::manifest::Resource {
            name: "compile-cache".into(),
            uri: None,
            digest: BTreeMap::from([("sha256".to_string(), tool.sha256.to_string())]),
            annotations: BTreeMap::from([
                ("tool".to_string(), Value::from(self.tool.clone())),
                ("version".to_string(), Value::from(self.version.clone())),
                ("enabled".to_string(), Value::from(self.enabled)),
                ("hits".to_string(), Value::from(self.hits)),
                ("remote_hits".to_string(), Value::from(self.remote_hits)),
                ("misses".to_string(), Value::from(self.misses)),
                ("uncacheable".to_string(), Value::from(self.uncacheable)),
                ("remote".to_string(), Value::from(self.remote.is_some())),
            ]),
        }
    }

    /// One line for people: `42 hits (40 remote), 3 misses`.
    pub fn summary(&self) -> String {
        if !self.enabled {
            return format!("off ({} compiled)", self.misses);
        }
        let total = self.hits + self.misses;
        if total == 0 {
            return "nothing compiled".into();
        }
        let rate = format!(" ({:.0}% hits)", 100.0 * self.hits as f64 / total as f64);
        let remote = if self.remote_hits > 0 {
            format!(", {} from remote", self.remote_hits)
        } else {
            String::new()
        };
        format!("{} hits{remote}, {} misses{rate}", self.hits, self.misses)
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    hits: u64,
    remote_hits: u64,
    misses: u64,
    uncacheable: u64,
}

/// Count the stats log: one `# FILE` comment per compiler call, then its counter names.
fn count(text: &str) -> Counts {
    let mut c = Counts::default();
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, c: &mut Counts| {
        if block.is_empty() {
            return;
        }
        let has = |n: &str| block.contains(&n);
        if has("direct_cache_hit") || has("preprocessed_cache_hit") {
            c.hits += 1;
            if has("remote_storage_hit") {
                c.remote_hits += 1;
            }
        } else if has("cache_miss") || has("recache") {
            // `recache` (the cache off): compiled without a lookup.
            c.misses += 1;
        } else {
            c.uncacheable += 1;
        }
        block.clear();
    };
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            flush(&mut block, &mut c);
        } else if !line.is_empty() {
            block.push(line);
        }
    }
    flush(&mut block, &mut c);
    c
}

/// Refuse a compile cache folder that exists and is not a folder (a file, a device).
fn check_folder(root: &Path) -> Result<()> {
    match std::fs::symlink_metadata(root) {
        Ok(m) if !m.is_dir() && !m.file_type().is_symlink() => Err(Error::input(
            root.display(),
            "the compile cache folder exists and is not a folder",
        )
        .with_hint(format!("pass --cache-dir DIR or set {DIR_ENV}"))),
        _ => Ok(()),
    }
}

/// ccache's `base_dir` entries for `base_dir`: the folder, and its real path when another.
fn base_dirs(base_dir: &Path) -> Vec<PathBuf> {
    let mut base_dirs = vec![base_dir.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(base_dir) {
        if real != base_dir {
            base_dirs.push(real);
        }
    }
    // A path with a space cannot be one entry of ccache's space-separated base_dir list:
    // such a workspace compiles with absolute paths (correct, fewer shared hits).
    base_dirs.retain(|p| !p.to_string_lossy().contains(char::is_whitespace));
    base_dirs
}

/// Remove a folder and everything in it; an absent one is fine.
fn remove_folder(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", dir, e)),
        _ => Ok(()),
    }
}

/// The configuration lines that depend on what is set: base_dir, ignore_options, and recache
/// (cache off) or the remote backend.
fn optional_lines(base_dirs: &[PathBuf], ignore: &[String], settings: &Settings) -> Vec<String> {
    let mut lines = Vec::new();
    // An empty value would make ccache read the next lines as its continuation.
    if !base_dirs.is_empty() {
        let list: Vec<String> = base_dirs.iter().map(|p| p.display().to_string()).collect();
        lines.push(format!("base_dir = {}", list.join(" ")));
    }
    // Space-separated like base_dir: an argument with whitespace stays in the key (correct,
    // fewer shared hits), as does anything that could add a configuration line.
    let ignored: Vec<&str> = ignore
        .iter()
        .map(String::as_str)
        .filter(|o| !o.is_empty() && !o.contains(char::is_whitespace))
        .collect();
    if !ignored.is_empty() {
        lines.push(format!("ignore_options = {}", ignored.join(" ")));
    }
    if !settings.enabled {
        lines.push("recache = true".into());
    } else if let Some(r) = &settings.remote {
        // A distributed build reads the shared cache but never writes to it: an object a
        // build server returned must not reach other machines' builds (`super::dist`).
        match settings.dist {
            Some(_) => lines.push(format!("remote_storage = {r}|read-only")),
            None => lines.push(format!("remote_storage = {r}")),
        }
    }
    lines
}

/// The toolchain's compiler identity as a folder name: the same compilers give the same
/// folder on every machine; any other compiler, another.
pub(crate) fn namespace(tools: &ResolvedToolchain) -> String {
    let mut id = String::new();
    for role in Role::COMPILERS {
        if let Some(t) = tools.get(role) {
            id.push_str(&format!("{role} {} {}\n", t.version, t.sha256));
        }
    }
    if tools.has(Role::Nvcc) {
        // CUDA objects compiled before the launcher fixed cicc's heap (ASLR and jemalloc
        // purging off, issue #25) are one of several forms: never a hit for a build now. Where
        // ASLR cannot be turned off, objects are compiled without that half of the fix: they
        // get a namespace of their own, so a shared cache never hands them to a build that has
        // it (nor the other way round).
        if super::configure::aslr_off_works() {
            id.push_str("cuda-launcher stable-heap/v1\n");
        } else {
            id.push_str("cuda-launcher stable-heap/v1 aslr-on\n");
        }
    }
    let cc = tools
        .get(Role::Cc)
        .and_then(|t| t.path.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cc: String = cc
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.+".contains(*c))
        .collect();
    format!("{cc}-{}", Sha256::of_bytes(id.as_bytes()).short(16))
}

/// A value ccache's line-based configuration can hold as given.
fn config_value(p: &Path, what: &str) -> Result<()> {
    let s = p.to_str().ok_or_else(|| {
        Error::input(p.display(), format!("the {what} is not UTF-8")).with_hint(format!(
            "pass --cache-dir DIR or set {DIR_ENV} to another folder"
        ))
    })?;
    if s.chars().any(|c| c == '\n' || c == '\r' || c.is_control()) {
        return Err(Error::input(
            p.display(),
            format!("the {what} holds a line break or control character"),
        )
        .with_hint("use a folder whose name is plain text"));
    }
    Ok(())
}

/// The remote backends ccache 4 speaks, one URL, no attributes or spaces (which would add
/// backends or options to ccache's configuration).
fn check_remote(url: &str) -> Result<()> {
    let ok_scheme = ["redis://", "redis+unix:", "http://", "https://", "file:"]
        .iter()
        .any(|s| url.starts_with(s));
    if !ok_scheme
        || url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '|')
    {
        return Err(Error::input(
            format!("compile cache remote `{url}`"),
            "not a single redis://, redis+unix:, http(s):// or file: URL",
        )
        .with_hint("e.g. --cache-remote redis://127.0.0.1:6379"));
    }
    Ok(())
}

/// A URL without its user and password (`redis://user:secret@host` → `redis://host`).
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

/// Point `vdir/src` at the vendor tree (replacing an older link atomically) and return it.
/// When the link moves, Ninja's log in `cmake_dir` is removed: the compile commands name the
/// link, not the tree, so without it Ninja could take an older tree's files for up to date.
pub(crate) fn source_link(vdir: &Path, tree: &Path, cmake_dir: &Path) -> Result<PathBuf> {
    let link = vdir.join(SOURCE_LINK);
    if std::fs::read_link(&link).ok().as_deref() == Some(tree) {
        return Ok(link);
    }
    let ninja_log = cmake_dir.join(".ninja_log");
    match std::fs::remove_file(&ninja_log) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove", &ninja_log, e))
        }
        _ => {}
    }
    if let Ok(m) = std::fs::symlink_metadata(&link) {
        if !m.file_type().is_symlink() {
            return Err(Error::input(
                link.display(),
                "pinforge keeps a link to the vendor tree here, but this is not a link",
            )
            .with_hint("remove it; pinforge recreates it"));
        }
    }
    let tmp = vdir.join(".src.link.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(tree, &tmp).at("create link", &tmp)?;
    std::fs::rename(&tmp, &link).at("rename link", &link)?;
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_log_counts_hits_misses_and_uncacheable_calls_per_compile() {
        let log = "# /w/a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\n\
                   # /w/a.c\ndirect_cache_hit\nlocal_storage_hit\n\
                   # /w/b.c\npreprocessed_cache_hit\nremote_storage_hit\n\
                   # /w/c.c\ncalled_for_link\n\
                   # /w/d.c\nlocal_storage_write\nrecache\n";
        assert_eq!(
            count(log),
            Counts {
                hits: 2,
                remote_hits: 1,
                misses: 2,
                uncacheable: 1
            }
        );
        assert_eq!(count(""), Counts::default());
    }

    #[test]
    fn remote_urls_are_single_known_backends_and_lose_their_credentials() {
        assert!(check_remote("redis://127.0.0.1:6379").is_ok());
        assert!(check_remote("file:/shared/cache").is_ok());
        for bad in [
            "redis://a b",
            "redis://a|read-only",
            "ftp://x",
            "redis://x\nbase_dir = /",
            "",
        ] {
            let e = check_remote(bad).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn a_path_with_a_line_break_cannot_reach_ccaches_configuration() {
        let e = config_value(Path::new("/tmp/x\nsloppiness = time_macros"), "cache")
            .expect_err("line break");
        assert_eq!(e.exit_code(), 2);
        assert!(config_value(Path::new("/tmp/my cache"), "cache").is_ok());
    }

    fn tools(cc_sha: &[u8], version: &str) -> ResolvedToolchain {
        let t = |p: &str, sha: &[u8]| ToolRecord {
            path: PathBuf::from(p),
            real_path: PathBuf::from(p),
            version: version.into(),
            version_line: version.into(),
            sha256: Sha256::of_bytes(sha),
        };
        ResolvedToolchain {
            name: "t".into(),
            tools: BTreeMap::from([
                (Role::Cc, t("/usr/bin/gcc", cc_sha)),
                (Role::Cxx, t("/usr/bin/g++", b"g++")),
                (Role::Cmake, t("/x/cmake", b"cmake")),
            ]),
            cuda_root: None,
            cuda_architectures: None,
        }
    }

    // issue #10: different compilers never share a local cache folder; CMake's version does
    // not split it (it does not reach the objects' key).
    #[test]
    fn the_namespace_follows_the_compilers_and_nothing_else() {
        let a = namespace(&tools(b"gcc-12", "12.2.0"));
        assert!(a.starts_with("gcc-"), "{a}");
        assert_ne!(a, namespace(&tools(b"gcc-13", "12.2.0")));
        assert_ne!(a, namespace(&tools(b"gcc-12", "12.3.0")));
        let mut other_cmake = tools(b"gcc-12", "12.2.0");
        // Not `if let`: a fixture without the cmake role would make the check below vacuous.
        let c = other_cmake
            .tools
            .get_mut(&Role::Cmake)
            .expect("the fixture has a cmake");
        c.sha256 = Sha256::of_bytes(b"another cmake");
        assert_eq!(a, namespace(&other_cmake));
    }

    #[test]
    fn the_default_folder_is_the_users_cache_folder_and_the_setting_wins() {
        let s = Settings {
            enabled: true,
            dir: Some(PathBuf::from("/c")),
            remote: None,
            dist: None,
        };
        assert_eq!(s.local_dir().expect("dir"), PathBuf::from("/c"));
    }

    #[test]
    fn the_source_link_is_replaced_not_followed_and_a_real_folder_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::create_dir(&a).expect("a");
        std::fs::create_dir(&b).expect("b");
        let cm = d.path().join("cmake");
        std::fs::create_dir(&cm).expect("cmake");
        let l = source_link(d.path(), &a, &cm).expect("link a");
        assert_eq!(std::fs::read_link(&l).expect("read"), a);
        std::fs::write(cm.join(".ninja_log"), "x").expect("log");
        source_link(d.path(), &a, &cm).expect("same target");
        assert!(
            cm.join(".ninja_log").exists(),
            "an unchanged link keeps Ninja's log"
        );
        source_link(d.path(), &b, &cm).expect("link b");
        assert_eq!(std::fs::read_link(&l).expect("read"), b);
        assert!(
            !cm.join(".ninja_log").exists(),
            "a moved link forgets what Ninja built"
        );
        assert!(a.is_dir(), "the old target is untouched");
        std::fs::remove_file(&l).expect("rm");
        std::fs::create_dir(&l).expect("dir in its place");
        assert_eq!(
            source_link(d.path(), &a, &cm).expect_err("dir").exit_code(),
            2
        );
    }
}
