//! One arm's managed router: its own `bin/llama-server` started in router mode over the run's
//! preset file, on 127.0.0.1 and a free port, in its own process group (stopped with every
//! child on drop), its output written to the arm's log in the run folder; and the identity
//! checks an operator makes before and after a round.

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_deploy::serve::client::Server;
use pinforge_deploy::serve::group::Group;
use pinforge_deploy::serve::preset;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a router may take to answer `/health` (an ASan build starts slowly).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// What a managed arm runs.
pub(super) struct ArmServer {
    /// The arm's `bin/llama-server`.
    pub bin: PathBuf,
    /// Its sha256 as the arm's manifest records it.
    pub recorded: Sha256,
    /// The folder the manifest's subjects are relative to (the entry the arm serves).
    pub root: PathBuf,
    /// The shared objects the manifest records (`lib/libllama.so.0.0.7709`), by name: what
    /// the arm's processes may map from its build, and must map for its libllama.
    pub libs: BTreeMap<String, Sha256>,
}

/// Whether a file name is a shared object (`libx.so`, `libx.so.0.0.1`).
fn is_shared_object(name: &str) -> bool {
    name.ends_with(".so") || name.contains(".so.")
}

/// Whether a file name is one of the engine's own libraries, wherever it was loaded from: a
/// `libllama` from `/usr/lib` answering for an arm is the case the check exists for.
fn is_engine_library(name: &str) -> bool {
    ["libllama", "libggml", "libmtmd"]
        .iter()
        .any(|p| name.starts_with(p))
        && is_shared_object(name)
}

/// The identity of a running arm, taken before and after each round.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Identity {
    /// sha256 of every running process's binary (`/proc/PID/exe`), router and children, by
    /// role (`router`, `child`): every child must run the arm's binary too.
    pub exe: BTreeMap<String, String>,
    /// sha256 of every shared object the running processes map (`/proc/PID/maps`) that is
    /// the arm's or the engine's: those inside the arm's entry, by their path there
    /// (`lib/libllama.so.0.0.7709`), and any `libllama`/`libggml`/`libmtmd` loaded from
    /// elsewhere, by absolute path. Two processes mapping different bytes under one name read
    /// `A != B`; a file replaced on disk since it was mapped reads `replaced on disk`. The
    /// patched and unpatched builds differ here (their `bin/llama-server` is the same bytes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mapped: BTreeMap<String, String>,
    /// sha256 of the model file.
    pub model_sha256: String,
    /// sha256 of the preset file.
    pub preset_sha256: String,
    /// `build_info` the server reports in `/props` (of a child).
    pub build: String,
}

/// Find the arm's `bin/llama-server` and the digest its manifest records.
pub(super) fn server_of(root: &Path, manifest: &Path) -> Result<ArmServer> {
    let st = pinforge_record::manifest::Statement::read(manifest)?;
    let recorded = st
        .subject
        .iter()
        .find(|r| r.name == "bin/llama-server")
        .and_then(|r| r.sha256())
        .ok_or_else(|| {
            Error::input(
                manifest.display(),
                "the build has no bin/llama-server: validate --serve needs a server build",
            )
            .with_hint("build a server recipe (recipes/mrope-server.toml) and install it")
        })?;
    let libs = st
        .subject
        .iter()
        .filter(|r| {
            Path::new(&r.name)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_shared_object)
        })
        .filter_map(|r| Some((r.name.clone(), r.sha256()?)))
        .collect();
    Ok(ArmServer {
        bin: root.join("bin").join("llama-server"),
        recorded,
        root: root.to_path_buf(),
        libs,
    })
}

/// A started router.
pub(super) struct Router {
    /// Its process group (stopped on drop).
    pub group: Group,
    /// Its HTTP side.
    pub server: Server,
    /// The log its output goes to.
    pub log: PathBuf,
    /// The empty folder the router's `LLAMA_CACHE` names (removed with the router).
    _cache: tempfile::TempDir,
}

/// Start `arm`'s router on a free port with `preset_file`, output to `log`, and wait for
/// `/health` 200.
pub(super) fn start(
    arm: &ArmServer,
    preset_file: &Path,
    presets: &[&str],
    log: &Path,
    row_timeout: Duration,
) -> Result<Router> {
    // The binary the process will run must be the recorded one before it is started.
    let (now, _) = Sha256::of_file(&arm.bin)?;
    if now != arm.recorded {
        return Err(Error::check(
            arm.bin.display(),
            format!(
                "sha256 {} is not the recorded {}",
                now.short(16),
                arm.recorded.short(16)
            ),
        ));
    }
    let port = preset::free_port()?;
    // Appended to: a resumed arm's new round continues its log (the run folder was checked
    // to hold only regular files, and a link in its place is refused here too).
    let out = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            // O_NONBLOCK: a FIFO swapped in after the folder's check fails the open (ENXIO)
            // instead of blocking it; on a regular file the flag changes nothing.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(log)
            .map_err(|e| Error::io("open", log, e))?
    };
    if !out.metadata().is_ok_and(|m| m.is_file()) {
        return Err(Error::input(
            log.display(),
            "not a regular file (a router log must be one); not written",
        ));
    }
    let err = out.try_clone().map_err(|e| Error::io("reopen", log, e))?;
    // The router's model cache: an empty folder of its own, so that models an operator has
    // cached (`~/.cache/llama.cpp`, which the router turns into presets) are not served
    // beside the run's.
    let cache = tempfile::Builder::new()
        .prefix("pinforge-router-cache-")
        .tempdir()
        .map_err(|e| Error::io("create", &std::env::temp_dir(), e))?;
    let mut cmd = Command::new(&arm.bin);
    cmd.args(preset::router_args(preset_file, port, 1))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // A fixed environment, as the single server has (serve::launch): an operator's
        // `LLAMA_ARG_*` (llama-server reads options from those), `LD_PRELOAD` or `HOME`
        // cannot change what the router and its children run.
        .env_clear()
        // The sanitizer report must land in the log and the process must end with it, so
        // that the router sees the child die and the row is a crash.
        .env(
            "ASAN_OPTIONS",
            "abort_on_error=0:halt_on_error=1:detect_leaks=0",
        )
        // A failed ggml assertion would fork gdb onto the dying child; where ptrace is
        // restricted that never returns and a death reads as a hang.
        .env("GGML_NO_BACKTRACE", "1")
        .env("LLAMA_CACHE", cache.path());
    if let Some(path) = std::env::var_os("PATH") {
        // The sanitizer's symbolizer is looked up there.
        cmd.env("PATH", path);
    }
    if let Some(lib) = arm.bin.parent().and_then(Path::parent) {
        cmd.env("LD_LIBRARY_PATH", lib.join("lib"));
    }
    pinforge_sys::signal::kill_with_parent(&mut cmd);
    let mut group = Group::spawn(cmd, &arm.bin)?;
    let server = Server::new(&format!("http://127.0.0.1:{port}"), None, row_timeout);
    let interrupted = pinforge_sys::signal::interrupted;
    let waited = server.wait_healthy(START_TIMEOUT, &mut || {
        !group.leader_exited() && !interrupted()
    });
    if interrupted() {
        return Err(Error::check(
            arm.bin.display(),
            "interrupted before the router answered /health; it was stopped",
        ));
    }
    waited?;
    // The router serves the run's presets and nothing else: a preset no arm asked for (the
    // `default` an INI key outside every section makes, a cached model) would be a child
    // the rows never meant, in the router's list and its `--models-max` budget.
    let served: Vec<String> = server.models()?.into_iter().map(|m| m.id).collect();
    if let Some(why) = preset_mismatch(&served, presets) {
        return Err(Error::check(arm.bin.display(), why)
            .with_hint("the router's log in the run folder shows where it found them"));
    }
    Ok(Router {
        group,
        server,
        log: log.to_path_buf(),
        _cache: cache,
    })
}

/// Why the presets a router lists are not exactly `asked` (None when they are).
fn preset_mismatch(served: &[String], asked: &[&str]) -> Option<String> {
    let extra: Vec<&str> = served
        .iter()
        .map(String::as_str)
        .filter(|s| !asked.contains(s))
        .collect();
    let missing: Vec<&str> = asked
        .iter()
        .copied()
        .filter(|a| !served.iter().any(|s| s == a))
        .collect();
    match (extra.is_empty(), missing.is_empty()) {
        (true, true) => None,
        _ => Some(format!(
            "the router serves presets {served:?}, not the run's {asked:?} (extra {extra:?}, missing {missing:?})"
        )),
    }
}

/// sha256 of the binary process `pid` runs (through `/proc/PID/exe`, so a file replaced on
/// disk after the start shows as the old one it really runs).
fn exe_sha(pid: u32) -> Result<Sha256> {
    Ok(Sha256::of_file(Path::new(&format!("/proc/{pid}/exe")))?.0)
}

/// Merge one process's digest for `key` into `map`: the first one stands, another one is
/// appended as `A != B` (the drift check names it).
fn merge_digest(map: &mut BTreeMap<String, String>, key: String, sha: String) {
    map.entry(key)
        .and_modify(|v: &mut String| {
            if !v.split(" != ").any(|x| x == sha) {
                v.push_str(" != ");
                v.push_str(&sha);
            }
        })
        .or_insert(sha);
}

/// The arm's and the engine's shared objects process `pid` maps, hashed: the file opened by
/// the path the kernel shows and checked by device and inode to be the mapped one (a file
/// replaced on disk since reads `replaced on disk`). None when the process is gone.
/// `seen` holds the digests taken so far in this identity by (device, inode): the router and
/// its child map the same libllama, which is hashed once.
fn mapped_libs(
    pid: u32,
    arm: &ArmServer,
    seen: &mut BTreeMap<(u64, u64, u64), String>,
) -> Result<Option<Vec<(String, String)>>> {
    use std::os::unix::fs::MetadataExt;
    let maps = match pinforge_sys::maps::mapped_files(pid) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                "read",
                Path::new(&format!("/proc/{pid}/maps")),
                e,
            ))
        }
    };
    let root = std::fs::canonicalize(&arm.root).unwrap_or_else(|_| arm.root.clone());
    let mut out = Vec::new();
    for m in maps {
        let name = m.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let inside = m.path.strip_prefix(&root).ok();
        let key = match inside {
            Some(rel) if is_shared_object(name) => rel.display().to_string(),
            None if is_engine_library(name) => m.path.display().to_string(),
            _ => continue,
        };
        if let Some(sha) = seen.get(&(m.major, m.minor, m.inode)) {
            out.push((key, sha.clone()));
            continue;
        }
        let file = if m.deleted {
            None
        } else {
            pinforge_base::fsx::open_regular(&m.path, "mapped library", true).ok()
        };
        let same = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .is_some_and(|md| m.is(md.dev(), md.ino()));
        let sha = match file {
            Some(f) if same => {
                let sha = Sha256::of_reader(f, &m.path)?.0.to_string();
                seen.insert((m.major, m.minor, m.inode), sha.clone());
                sha
            }
            _ => "replaced on disk".to_string(),
        };
        out.push((key, sha));
    }
    Ok(Some(out))
}

/// The running identity of a managed arm: every group member's binary and the arm's shared
/// objects it maps, the model, the preset file and the child's reported build (None when no
/// child is loaded).
pub(super) fn identity(
    r: &Router,
    arm: &ArmServer,
    model: &Path,
    preset_file: &Path,
    preset: &str,
) -> Result<Identity> {
    // Load a child if none is (so its binary and build are part of the check).
    let props = r.server.props(Some(preset)).unwrap_or_default();
    let mut exe = BTreeMap::new();
    let mut mapped = BTreeMap::new();
    let mut seen = BTreeMap::new();
    let leader = r.group.pid();
    for pid in r.group.members() {
        let role = if pid == leader { "router" } else { "child" };
        let sha = match exe_sha(pid) {
            Ok(s) => s.to_string(),
            // A child that exited between the listing and the open (an eviction, a killed
            // child) is not a process of this arm any more: gone from /proc, or still there
            // while it exits, when the kernel has already dropped its `exe` link.
            Err(_) if std::fs::read_link(format!("/proc/{pid}/exe")).is_err() => continue,
            Err(e) => return Err(e),
        };
        merge_digest(&mut exe, role.to_string(), sha);
        // A child that exits between the two reads maps nothing any more: its binary was
        // taken above, and the libraries of the processes left are the round's.
        for (key, sha) in mapped_libs(pid, arm, &mut seen)?.unwrap_or_default() {
            merge_digest(&mut mapped, key, sha);
        }
    }
    Ok(Identity {
        exe,
        mapped,
        model_sha256: Sha256::of_file(model)?.0.to_string(),
        preset_sha256: Sha256::of_file(preset_file)?.0.to_string(),
        build: props["build_info"].as_str().unwrap_or_default().to_string(),
    })
}

/// What differs between two identities, or between either and the arm's record (empty:
/// none), in words: a binary or a mapped library that is not the recorded one, a library of
/// the engine loaded from outside the arm's entry, a build that records a libllama no process
/// maps, a model, preset file or reported build that changed.
pub(crate) fn drift(before: &Identity, after: &Identity, arm: &ArmServer) -> Vec<String> {
    let mut out = Vec::new();
    let want = arm.recorded.to_string();
    for (role, sha) in after.exe.iter().chain(before.exe.iter()) {
        if *sha != want {
            let line = format!("the {role} runs {sha}, not the recorded binary {want}");
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    for (name, sha) in after.mapped.iter().chain(before.mapped.iter()) {
        let line = match arm.libs.get(name) {
            Some(rec) if *sha == rec.to_string() => continue,
            Some(rec) => format!("the arm's processes map {name} as {sha}, not the recorded {rec}"),
            None if Path::new(name).is_absolute() => format!(
                "the arm's processes map {name} ({sha}), an engine library from outside its \
                 entry {}",
                arm.root.display()
            ),
            None => {
                format!("the arm's processes map {name} ({sha}), which its build does not record")
            }
        };
        if !out.contains(&line) {
            out.push(line);
        }
    }
    let recorded_llama = arm.libs.keys().find(|n| {
        Path::new(n)
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with("libllama"))
    });
    for (when, id) in [("before", before), ("after", after)] {
        if let Some(lib) = recorded_llama.filter(|l| !id.mapped.contains_key(*l)) {
            let line = format!(
                "no process of the arm maps the build's {lib} ({when} the round): the server \
                 does not run the arm's library"
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    for (what, b, a) in [
        ("model", &before.model_sha256, &after.model_sha256),
        ("preset file", &before.preset_sha256, &after.preset_sha256),
    ] {
        if b != a {
            out.push(format!("the {what} changed: {b} -> {a}"));
        }
    }
    if !before.build.is_empty() && !after.build.is_empty() && before.build != after.build {
        out.push(format!(
            "/props build changed: {} -> {}",
            before.build, after.build
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(exe: &str, model: &str) -> Identity {
        Identity {
            exe: [("router".to_string(), exe.to_string())].into(),
            mapped: [(LIB.to_string(), Sha256::of_bytes(b"libllama").to_string())].into(),
            model_sha256: model.into(),
            preset_sha256: "p".into(),
            build: "b7698-79efbb1".into(),
        }
    }

    const LIB: &str = "lib/libllama.so.0.0.7709";

    fn arm(rec: Sha256) -> ArmServer {
        ArmServer {
            bin: "/e/bin/llama-server".into(),
            recorded: rec,
            root: "/e".into(),
            libs: [
                (LIB.to_string(), Sha256::of_bytes(b"libllama")),
                ("lib/libggml.so".to_string(), Sha256::of_bytes(b"libggml")),
            ]
            .into(),
        }
    }

    #[test]
    fn a_router_serving_another_preset_than_the_runs_is_named() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            preset_mismatch(&s(&["tiny-a", "tiny-b"]), &["tiny-a", "tiny-b"]),
            None
        );
        let why = preset_mismatch(&s(&["default", "tiny-a", "tiny-b"]), &["tiny-a", "tiny-b"])
            .expect("mismatch");
        assert!(why.contains(r#"extra ["default"]"#), "{why}");
        let why = preset_mismatch(&s(&["tiny-a"]), &["tiny-a", "tiny-b"]).expect("mismatch");
        assert!(why.contains(r#"missing ["tiny-b"]"#), "{why}");
    }

    #[test]
    fn drift_names_what_changed() {
        let rec = Sha256::of_bytes(b"server");
        let a = arm(rec);
        let good = id(&rec.to_string(), "m");
        assert!(drift(&good, &good.clone(), &a).is_empty());
        let d = drift(&good, &id(&rec.to_string(), "m2"), &a);
        assert_eq!(d, ["the model changed: m -> m2"]);
        let other = Sha256::of_bytes(b"other").to_string();
        let d = drift(&good, &id(&other, "m"), &a);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].contains("the router runs") && d[0].contains(&other),
            "{d:?}"
        );
        let mut b = good.clone();
        b.build = "b7699".into();
        assert!(drift(&good, &b, &a)[0].contains("/props build changed"));
    }

    #[test]
    fn a_mapped_library_that_is_not_the_arms_is_drift() {
        let rec = Sha256::of_bytes(b"server");
        let a = arm(rec);
        let good = id(&rec.to_string(), "m");
        // The other arm's libllama under the same name (the patched build's bytes).
        let mut other = good.clone();
        let patched = Sha256::of_bytes(b"patched libllama").to_string();
        other.mapped.insert(LIB.into(), patched.clone());
        let d = drift(&good, &other, &a);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains(LIB) && d[0].contains(&patched), "{d:?}");
        // A libllama from outside the entry, the arm's own missing.
        let mut system = good.clone();
        system.mapped.clear();
        system
            .mapped
            .insert("/usr/lib/libllama.so".into(), patched.clone());
        let d = drift(&good, &system, &a);
        assert!(
            d.iter()
                .any(|l| l.contains("/usr/lib/libllama.so") && l.contains("outside")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|l| l.contains("no process of the arm maps") && l.contains("after")),
            "{d:?}"
        );
        // A library the build does not record, two processes that disagree, one replaced.
        let mut extra = good.clone();
        extra
            .mapped
            .insert("lib/libextra.so".into(), patched.clone());
        extra
            .mapped
            .insert("lib/libggml.so".into(), "replaced on disk".into());
        let d = drift(&good, &extra, &a);
        assert!(d.iter().any(|l| l.contains("does not record")), "{d:?}");
        assert!(d.iter().any(|l| l.contains("replaced on disk")), "{d:?}");
    }

    #[test]
    fn digests_of_one_name_merge_once_each() {
        let mut m = BTreeMap::new();
        merge_digest(&mut m, "k".into(), "a".into());
        merge_digest(&mut m, "k".into(), "a".into());
        merge_digest(&mut m, "k".into(), "b".into());
        merge_digest(&mut m, "k".into(), "a".into());
        assert_eq!(m["k"], "a != b");
    }

    #[test]
    fn shared_objects_and_engine_libraries_are_named_by_file_name() {
        assert!(is_shared_object("libllama.so.0.0.7709"));
        assert!(is_shared_object("libggml.so"));
        assert!(!is_shared_object("llama-server"));
        assert!(!is_shared_object("model.gguf"));
        assert!(is_engine_library("libggml-cpu.so"));
        assert!(!is_engine_library("libc.so.6"));
    }

    #[test]
    fn this_process_maps_no_engine_library_and_reads_none() {
        let a = arm(Sha256::of_bytes(b"x"));
        let mut seen = BTreeMap::new();
        let libs = mapped_libs(std::process::id(), &a, &mut seen).expect("maps");
        assert_eq!(libs, Some(Vec::new()));
        assert_eq!(mapped_libs(u32::MAX, &a, &mut seen).expect("gone"), None);
    }

    #[test]
    fn a_shared_object_inside_the_entry_is_hashed_by_its_path_there() {
        // This process maps libc: taken as an arm whose entry is libc's folder, libc is named
        // by its path there and hashed as the file it is.
        let maps = pinforge_sys::maps::mapped_files(std::process::id()).expect("maps");
        let Some(libc) = maps.iter().find(|m| {
            m.path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libc.so"))
        }) else {
            return; // a static test binary maps no libc: nothing to check here
        };
        let mut a = arm(Sha256::of_bytes(b"x"));
        a.root = libc.path.parent().expect("folder").to_path_buf();
        let mut seen = BTreeMap::new();
        let libs = mapped_libs(std::process::id(), &a, &mut seen)
            .expect("maps")
            .expect("alive");
        let name = libc.path.file_name().expect("name").to_string_lossy();
        let (_, sha) = libs
            .iter()
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("{name} in {libs:?}"));
        let (want, _) = Sha256::of_file(&libc.path).expect("hash");
        assert_eq!(*sha, want.to_string());
    }
}
