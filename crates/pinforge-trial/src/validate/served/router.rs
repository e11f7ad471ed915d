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
}

/// The identity of a running arm, taken before and after each round.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Identity {
    /// sha256 of every running process's binary (`/proc/PID/exe`), router and children, by
    /// role (`router`, `child`): every child must run the arm's binary too.
    pub exe: BTreeMap<String, String>,
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
    Ok(ArmServer {
        bin: root.join("bin").join("llama-server"),
        recorded,
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
}

/// Start `arm`'s router on a free port with `preset_file`, output to `log`, and wait for
/// `/health` 200.
pub(super) fn start(
    arm: &ArmServer,
    preset_file: &Path,
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
    let mut cmd = Command::new(&arm.bin);
    cmd.args(preset::router_args(preset_file, port, 1))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // The sanitizer report must land in the log and the process must end with it, so
        // that the router sees the child die and the row is a crash.
        .env(
            "ASAN_OPTIONS",
            "abort_on_error=0:halt_on_error=1:detect_leaks=0",
        );
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
    Ok(Router {
        group,
        server,
        log: log.to_path_buf(),
    })
}

/// sha256 of the binary process `pid` runs (through `/proc/PID/exe`, so a file replaced on
/// disk after the start shows as the old one it really runs).
fn exe_sha(pid: u32) -> Result<Sha256> {
    Ok(Sha256::of_file(Path::new(&format!("/proc/{pid}/exe")))?.0)
}

/// The running identity of a managed arm: every group member's binary, the model, the preset
/// file and the child's reported build (None when no child is loaded).
pub(super) fn identity(
    r: &Router,
    model: &Path,
    preset_file: &Path,
    preset: &str,
) -> Result<Identity> {
    // Load a child if none is (so its binary and build are part of the check).
    let props = r.server.props(Some(preset)).unwrap_or_default();
    let mut exe = BTreeMap::new();
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
        exe.entry(role.to_string())
            .and_modify(|v: &mut String| {
                if *v != sha {
                    v.push_str(" != ");
                    v.push_str(&sha);
                }
            })
            .or_insert(sha);
    }
    Ok(Identity {
        exe,
        model_sha256: Sha256::of_file(model)?.0.to_string(),
        preset_sha256: Sha256::of_file(preset_file)?.0.to_string(),
        build: props["build_info"].as_str().unwrap_or_default().to_string(),
    })
}

/// What differs between two identities (empty: none), in words.
pub(crate) fn drift(before: &Identity, after: &Identity, recorded: &Sha256) -> Vec<String> {
    let mut out = Vec::new();
    let want = recorded.to_string();
    for (role, sha) in after.exe.iter().chain(before.exe.iter()) {
        if *sha != want {
            let line = format!("the {role} runs {sha}, not the recorded binary {want}");
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
            model_sha256: model.into(),
            preset_sha256: "p".into(),
            build: "b7698-79efbb1".into(),
        }
    }

    #[test]
    fn drift_names_what_changed() {
        let rec = Sha256::of_bytes(b"server");
        let good = id(&rec.to_string(), "m");
        assert!(drift(&good, &good.clone(), &rec).is_empty());
        let d = drift(&good, &id(&rec.to_string(), "m2"), &rec);
        assert_eq!(d, ["the model changed: m -> m2"]);
        let other = Sha256::of_bytes(b"other").to_string();
        let d = drift(&good, &id(&other, "m"), &rec);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].contains("the router runs") && d[0].contains(&other),
            "{d:?}"
        );
        let mut b = good.clone();
        b.build = "b7699".into();
        assert!(drift(&good, &b, &rec)[0].contains("/props build changed"));
    }
}
