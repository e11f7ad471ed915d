//! Starting one `llama-server` that pinforge owns: the recorded binary, re-hashed right before
//! the start and again through the running process (`/proc/PID/exe`) once it answers, in a
//! process group of its own ([`Group`]: stopped with every child on drop, and told to die
//! with pinforge by `PR_SET_PDEATHSIG`) on 127.0.0.1 and a free port, in a fixed environment,
//! its output written to a log; ready once `/health` answers 200 from a listener that is the
//! process's own.
//!
//! Used by the `install --smoke` server check ([`super::gate`]) with a plain server over one
//! model, and written so a router start (`validate --serve`) can use it too: the caller gives
//! the arguments for the port chosen here.

use super::client::Server;
use super::group::Group;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to start.
pub(crate) struct Launch<'a> {
    /// The server binary.
    pub bin: &'a Path,
    /// Its sha256 as the record names it.
    pub recorded: Sha256,
    /// The arguments for a port (they must make it listen on 127.0.0.1 at that port).
    pub args: &'a dyn Fn(u16) -> Vec<OsString>,
    /// The folder of the libraries it loads (`LD_LIBRARY_PATH`); None leaves it to the run
    /// path.
    pub lib: Option<PathBuf>,
    /// Where its stdout and stderr go: created here, refused if it exists.
    pub log: &'a Path,
    /// Its working folder.
    pub cwd: &'a Path,
    /// `ASAN_OPTIONS` (an instrumented build reads it; any other ignores it).
    pub asan_options: String,
    /// How long it may take to answer `/health` 200.
    pub start_timeout: Duration,
    /// The bound on every read of a request to it (a hung server is a cut, not a hang).
    pub read_timeout: Duration,
}

/// A started server.
pub(crate) struct Running {
    /// Its process group (stopped on drop).
    pub group: Group,
    /// Its HTTP side.
    pub server: Server,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// sha256 of what the process runs (`/proc/PID/exe`), equal to the record.
    pub exe_sha256: Sha256,
    /// Time spent re-hashing the binary before the start and after.
    pub hash_ms: f64,
    /// From the spawn to `/health` 200.
    pub start_ms: f64,
}

/// Re-hash `bin` (a regular file, never a link, FIFO or device) against `recorded`; whether
/// it is an interpreter script (`#!`), which the kernel runs through another binary.
pub(crate) fn check_binary(bin: &Path, recorded: Sha256) -> Result<bool> {
    use std::io::Read;
    let mut f = pinforge_base::fsx::open_regular(bin, "the server binary", false)?;
    let mut head = [0u8; 2];
    let script = f.read_exact(&mut head).is_ok() && head == *b"#!";
    let f = pinforge_base::fsx::open_regular(bin, "the server binary", false)?;
    let (now, _) = Sha256::of_reader(f, bin)?;
    if now != recorded {
        return Err(Error::check(
            bin.display(),
            format!(
                "sha256 {now} is not the recorded {recorded}; it was not started (the file \
                 changed since it was recorded: rebuild or reinstall the variant)"
            ),
        ));
    }
    Ok(script)
}

/// The command: a fixed environment, so an operator's `LLAMA_ARG_*` (llama-server reads its
/// options from those too), `LD_PRELOAD` or `LD_LIBRARY_PATH` cannot change what runs. Only
/// `PATH` is kept (the sanitizer's symbolizer is looked up there).
fn command(l: &Launch<'_>, port: u16, out: std::fs::File) -> Result<Command> {
    let err = out.try_clone().map_err(|e| Error::io("reopen", l.log, e))?;
    let mut cmd = Command::new(l.bin);
    cmd.args((l.args)(port))
        .current_dir(l.cwd)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("ASAN_OPTIONS", &l.asan_options)
        // A failed ggml assertion forks gdb to attach to the dying server (gdb is on the kept
        // PATH); where ptrace is restricted the attach never returns and the death reads as a
        // hang. The assertion's own line is the evidence (as in smoke).
        .env("GGML_NO_BACKTRACE", "1");
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    if let Some(lib) = &l.lib {
        cmd.env("LD_LIBRARY_PATH", lib);
    }
    pinforge_sys::signal::kill_with_parent(&mut cmd);
    Ok(cmd)
}

/// Start `l` and wait until it answers `/health` 200; an error (the server named, what
/// happened) when it exits first, does not answer within the timeout, an interrupt arrives
/// (the server is stopped), or what answered is not it. Its log says why: the caller shows it.
pub(crate) fn start(l: &Launch<'_>) -> Result<Running> {
    let t0 = Instant::now();
    // The bytes started must be the recorded ones: refused here, before anything runs.
    let script = check_binary(l.bin, l.recorded)?;
    let mut hash_ms = ms(t0.elapsed());
    let port = super::preset::free_port()?;
    let out = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(l.log)
        .map_err(|e| Error::io("create", l.log, e))?;
    let mut group = Group::spawn(command(l, port, out)?, l.bin)?;
    let spawned = Instant::now();
    let server = Server::new(&format!("http://127.0.0.1:{port}"), None, l.read_timeout);
    let interrupted = pinforge_sys::signal::interrupted;
    let waited = server.wait_healthy(l.start_timeout, &mut || {
        !group.leader_exited() && !interrupted()
    });
    if interrupted() {
        return Err(Error::check(
            l.bin.display(),
            "interrupted before the server answered /health; it was stopped",
        ));
    }
    if let Err(e) = waited {
        let why = match group.exit_status() {
            Some(st) => format!("the server exited ({st}) before it answered /health"),
            None => e.to_string(),
        };
        return Err(Error::check(l.bin.display(), why));
    }
    let start_ms = ms(spawned.elapsed());
    // A port taken between the probe and the server's bind would let another program answer
    // for it: the listener must be a socket of this process.
    if !owns_listener(group.pid(), port) {
        return Err(Error::check(
            l.bin.display(),
            format!(
                "something else answered /health on 127.0.0.1:{port}: the listener is not a \
                 socket of the server started (pid {})",
                group.pid()
            ),
        ));
    }
    // And the process runs the recorded bytes: a file swapped between the check above and
    // the exec shows here (once running, the file cannot be written: ETXTBSY). A script's
    // process runs its interpreter, so for one (a stand-in) the file is re-hashed instead.
    let t1 = Instant::now();
    let exe = match script {
        false => Path::new("/proc").join(group.pid().to_string()).join("exe"),
        true => l.bin.to_path_buf(),
    };
    let (exe_sha256, _) = Sha256::of_file(&exe)?;
    hash_ms += ms(t1.elapsed());
    if exe_sha256 != l.recorded {
        return Err(Error::check(
            l.bin.display(),
            format!(
                "the started process runs sha256 {exe_sha256}, not the recorded {}",
                l.recorded
            ),
        ));
    }
    Ok(Running {
        group,
        server,
        port,
        exe_sha256,
        hash_ms,
        start_ms,
    })
}

/// Milliseconds, as the reports give them.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Whether process `pid` holds the socket that listens on 127.0.0.1:`port` (IPv4: the only
/// address pinforge starts servers on). Read from `/proc/net/tcp` (the socket's inode) and
/// `/proc/PID/fd` (the process's descriptors).
pub(crate) fn owns_listener(pid: u32, port: u16) -> bool {
    let Ok(tcp) = pinforge_base::fsx::read(Path::new("/proc/net/tcp")) else {
        return false;
    };
    let inodes = listener_inodes(&String::from_utf8_lossy(&tcp), port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|t| {
            let t = t.to_string_lossy();
            inodes.iter().any(|i| t == format!("socket:[{i}]"))
        })
    })
}

/// The inodes of the sockets in LISTEN state (`0A`) on local port `port`, from the text of
/// `/proc/net/tcp` (`sl local_address rem_address st … uid timeout inode`).
fn listener_inodes(tcp: &str, port: u16) -> Vec<String> {
    tcp.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = f
                .get(1)?
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())?;
            (local_port == port && *f.get(3)? == "0A").then(|| f.get(9).map(|s| s.to_string()))?
        })
        .collect()
}

/// The last `n` lines of a log pinforge wrote (its own file in its own folder), for an error
/// message; empty when it cannot be read.
pub(crate) fn log_tail(log: &Path, n: usize) -> String {
    pinforge_base::fsx::read(log)
        .map(|b| pinforge_base::process::tail(&String::from_utf8_lossy(&b), n))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_of_a_port_is_found_by_its_socket() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let port = l.local_addr().expect("addr").port();
        assert!(owns_listener(std::process::id(), port));
        // Not the listener of another process (pid 1 is init, never this test's socket).
        assert!(!owns_listener(1, port));
        drop(l);
        assert!(!owns_listener(std::process::id(), port), "closed");
    }

    #[test]
    fn proc_net_tcp_lines_are_read_by_field() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0\n\
           1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0\n\
           2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0\n\
           garbage\n";
        assert_eq!(listener_inodes(text, 0x1F90), ["12345"]);
        assert_eq!(listener_inodes(text, 0x1F91), ["999"]);
        assert!(listener_inodes(text, 80).is_empty());
    }

    // The server's environment is fixed: the sanitizer's options, no ggml debugger backtrace
    // (it hangs a dying server where ptrace is restricted), PATH, and nothing of the caller's.
    #[test]
    fn the_server_runs_in_a_fixed_environment_without_ggmls_debugger_backtrace() {
        let d = tempfile::tempdir().expect("tmp");
        let bin = d.path().join("llama-server");
        let log = d.path().join("server.log");
        let args = |_: u16| Vec::new();
        let l = Launch {
            bin: &bin,
            recorded: Sha256::of_bytes(b""),
            args: &args,
            lib: None,
            log: &log,
            cwd: d.path(),
            asan_options: "detect_leaks=0".into(),
            start_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
        };
        let out = std::fs::File::create(&log).expect("log");
        let cmd = command(&l, 8080, out).expect("command");
        let env: Vec<(String, String)> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
            .collect();
        assert!(
            env.contains(&("GGML_NO_BACKTRACE".into(), "1".into())),
            "{env:?}"
        );
        assert!(
            env.contains(&("ASAN_OPTIONS".into(), "detect_leaks=0".into())),
            "{env:?}"
        );
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            names
                .iter()
                .all(|k| ["ASAN_OPTIONS", "GGML_NO_BACKTRACE", "PATH"].contains(k)),
            "{names:?}"
        );
    }

    #[test]
    fn a_binary_that_differs_from_its_record_is_not_started() {
        let d = tempfile::tempdir().expect("tmp");
        let bin = d.path().join("llama-server");
        let marker = d.path().join("started");
        std::fs::write(
            &bin,
            format!("#!/bin/sh\ntouch {}\nsleep 30\n", marker.display()),
        )
        .expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let log = d.path().join("server.log");
        let args = |_: u16| Vec::new();
        let l = Launch {
            bin: &bin,
            recorded: Sha256::of_bytes(b"other bytes"),
            args: &args,
            lib: None,
            log: &log,
            cwd: d.path(),
            asan_options: String::new(),
            start_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
        };
        let e = start(&l).err().expect("refused");
        assert!(e.to_string().contains("not the recorded"), "{e}");
        assert!(!marker.exists() && !log.exists(), "nothing was started");
    }

    #[test]
    fn a_server_that_exits_is_reported_at_once_with_its_status() {
        let d = tempfile::tempdir().expect("tmp");
        let bin = d.path().join("llama-server");
        std::fs::write(&bin, "#!/bin/sh\necho \"home: $HOME\" >&2\nexit 3\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let log = d.path().join("server.log");
        let args = |p: u16| vec![OsString::from("--port"), p.to_string().into()];
        let (recorded, _) = Sha256::of_file(&bin).expect("sha");
        let l = Launch {
            bin: &bin,
            recorded,
            args: &args,
            lib: None,
            log: &log,
            cwd: d.path(),
            asan_options: String::new(),
            start_timeout: Duration::from_secs(60),
            read_timeout: Duration::from_secs(5),
        };
        let t = Instant::now();
        let e = start(&l).err().expect("exited");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(e.to_string().contains("exited"), "{e}");
        assert!(e.to_string().contains('3'), "the status: {e}");
        // The environment is the fixed one: this process's HOME (cargo sets one) is not in it,
        // as no LLAMA_ARG_* of an operator's would be.
        assert!(
            std::env::var_os("HOME").is_some(),
            "the test needs a HOME to leave out"
        );
        assert_eq!(log_tail(&log, 5), "home: ");
    }
}
