//! A loopback build farm for the distributed-build tests (issue #38): a real sccache-dist
//! scheduler and build server (the pinned binaries tools/bootstrap.sh puts in `.tools/bin`),
//! each on a free port of 127.0.0.1 with its own configuration, folders and log in a temporary
//! folder, and stopped by PID when the fleet is dropped, a failed test included.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The client token the scheduler accepts.
pub(crate) const TOKEN: &str = "pinforge-test-client-token";

pub(crate) struct Fleet {
    dir: tempfile::TempDir,
    scheduler: Child,
    server: Option<Child>,
    /// The scheduler's URL, as `--dist` takes it.
    pub(crate) url: String,
    /// The build server's address, as sccache names it in its counts.
    pub(crate) server_addr: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port()
}

fn tool(name: &str) -> PathBuf {
    super::repo_root().join(".tools/bin").join(name)
}

/// Why the fleet cannot start here, if it cannot: the binaries, bubblewrap and root (the build
/// server's overlay sandbox needs it).
pub(crate) fn missing() -> Option<String> {
    for t in ["sccache", "sccache-dist"] {
        if !tool(t).is_file() {
            return Some(format!(
                "{t} is not in .tools/bin: tools/bootstrap.sh installs sccache 0.16.0"
            ));
        }
    }
    if !Path::new("/usr/bin/bwrap").is_file() {
        return Some(
            "bubblewrap (/usr/bin/bwrap) is missing: tools/bootstrap.sh installs it as root".into(),
        );
    }
    if std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        != 0
    {
        return Some("the sccache-dist build server's sandbox needs root".into());
    }
    None
}

fn wait_listening(port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn(args: &[&str], log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log");
    let err = out.try_clone().expect("log");
    Command::new(tool("sccache-dist"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SCCACHE_LOG", "info,sccache_dist=debug")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start sccache-dist")
}

fn secret(args: &[&str]) -> String {
    let o = Command::new(tool("sccache-dist"))
        .args(args)
        .output()
        .expect("sccache-dist auth");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

impl Fleet {
    /// Start the scheduler and one build server, and wait until the server has joined.
    pub(crate) fn start() -> Fleet {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let (sched_port, server_port) = (free_port(), free_port());
        let server_addr = format!("127.0.0.1:{server_port}");
        let key = secret(&["auth", "generate-jwt-hs256-key"]);
        let server_token = secret(&[
            "auth",
            "generate-jwt-hs256-server-token",
            "--secret-key",
            &key,
            "--server",
            &server_addr,
        ]);
        std::fs::write(
            d.join("scheduler.conf"),
            format!(
                "public_addr = \"127.0.0.1:{sched_port}\"\n[client_auth]\ntype = \"token\"\ntoken = \"{TOKEN}\"\n[server_auth]\ntype = \"jwt_hs256\"\nsecret_key = \"{key}\"\n"
            ),
        )
        .expect("scheduler.conf");
        std::fs::write(
            d.join("server.conf"),
            format!(
                "cache_dir = \"{toolchains}\"\npublic_addr = \"{server_addr}\"\nscheduler_url = \"http://127.0.0.1:{sched_port}\"\n[builder]\ntype = \"overlay\"\nbuild_dir = \"{build}\"\nbwrap_path = \"/usr/bin/bwrap\"\n[scheduler_auth]\ntype = \"jwt_token\"\ntoken = \"{server_token}\"\n",
                toolchains = d.join("toolchains").display(),
                build = d.join("builds").display(),
            ),
        )
        .expect("server.conf");
        let sched_log = d.join("scheduler.log");
        let conf = d.join("scheduler.conf").display().to_string();
        let scheduler = spawn(&["scheduler", "--config", &conf], &sched_log);
        let mut fleet = Fleet {
            scheduler,
            server: None,
            url: format!("http://127.0.0.1:{sched_port}"),
            server_addr,
            dir,
        };
        wait_listening(sched_port, "the sccache-dist scheduler", &sched_log);
        let server_log = fleet.server_log();
        let conf = fleet.dir.path().join("server.conf").display().to_string();
        fleet.server = Some(spawn(&["server", "--config", &conf], &server_log));
        wait_listening(server_port, "the sccache-dist build server", &server_log);
        // The server has joined once it says so (the scheduler then hands it jobs).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !fleet.server_said("Server connected to scheduler") {
            assert!(
                Instant::now() < deadline,
                "the build server did not join: {}",
                fleet.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        fleet
    }

    fn server_log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Whether the build server's log holds `text`.
    pub(crate) fn server_said(&self, text: &str) -> bool {
        std::fs::read_to_string(self.server_log()).is_ok_and(|l| l.contains(text))
    }

    /// How many compile jobs the build server ran, from its own log (the server's side of the
    /// counts the client records).
    pub(crate) fn server_jobs(&self) -> usize {
        std::fs::read_to_string(self.server_log())
            .map(|l| {
                l.lines()
                    .filter(|l| l.contains("Performing build in"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Both logs, for a failure message.
    pub(crate) fn log(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        format!(
            "--- scheduler.log\n{}\n--- server.log\n{}",
            tail_lines(&read("scheduler.log"), 40),
            tail_lines(&read("server.log"), 40)
        )
    }

    /// Kill the build server (SIGKILL, by PID), as a machine that dies mid-build.
    pub(crate) fn kill_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill_server();
        let _ = self.scheduler.kill();
        let _ = self.scheduler.wait();
    }
}
