//! A server process in its own process group, stopped with everything it started.
//!
//! The router spawns one child `llama-server` per loaded preset; they inherit its process
//! group. Stopping only the router's pid would leave children listening on their ports, so
//! [`Group`] signals the whole group: SIGTERM, a grace period, then SIGKILL, and reaps the
//! leader. It does so on [`Group::stop`] and on drop, so a normal end, an error (`?`) and a
//! panic unwinding all leave nothing behind. A SIGKILL of pinforge itself cannot be caught: the
//! leader is started with [`pinforge_sys::signal::kill_with_parent`], so it dies with pinforge.
//! Ctrl-C is caught while a server runs ([`pinforge_sys::signal::InterruptsCaught`]) and ends the
//! wait, so the group is stopped here rather than left to the terminal's signal.

use pinforge_base::error::{Error, Result};
use rustix::process::{kill_process_group, Pid, Signal};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running process group led by `child`.
#[derive(Debug)]
pub struct Group {
    child: Option<Child>,
    pgid: Pid,
    grace: Duration,
}

impl Group {
    /// Spawn `cmd` as the leader of a new process group.
    pub fn spawn(mut cmd: Command, what: &Path) -> Result<Group> {
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| Error::io("start the server", what, e))?;
        let pgid = Pid::from_child(&child);
        Ok(Group {
            child: Some(child),
            pgid,
            grace: Duration::from_secs(5),
        })
    }

    /// The leader's pid.
    pub fn pid(&self) -> u32 {
        self.pgid.as_raw_nonzero().get() as u32
    }

    /// Every live process of the group (leader included), read from /proc: the router's
    /// children, whose binaries the identity check hashes.
    pub fn members(&self) -> Vec<u32> {
        members_of(self.pgid.as_raw_nonzero().get())
    }

    /// Whether the leader has exited (reaped here if so).
    pub fn leader_exited(&mut self) -> bool {
        !matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// The leader's exit status once it has exited by itself (None while it runs, and after
    /// [`Group::stop`]): what a server that died before it was stopped ended with.
    pub(crate) fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Stop the whole group: SIGTERM, wait up to the grace period for every member to go,
    /// then SIGKILL; reap the leader.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // ESRCH (the group is already gone) is the goal, not an error.
        let _ = kill_process_group(self.pgid, Signal::TERM);
        let until = Instant::now() + self.grace;
        while Instant::now() < until && !self.members().is_empty() {
            let _ = child.try_wait();
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = kill_process_group(self.pgid, Signal::KILL);
        let _ = child.wait();
        // Members that are not our children (the router's) are reaped by init once the
        // router is gone; wait until none is left so a port is free when stop returns.
        let until = Instant::now() + self.grace;
        while Instant::now() < until && !self.members().is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Pids of live (not zombie) processes whose process group is `pgid`.
fn members_of(pgid: i32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(Some(stat)) = pinforge_base::fsx::read_if_present(&e.path().join("stat")) else {
            continue;
        };
        if let Some((state, pg)) = parse_stat(&stat) {
            if pg == pgid && state != b'Z' && state != b'X' {
                out.push(pid);
            }
        }
    }
    out.sort_unstable();
    out
}

/// (state, pgrp) from a /proc/PID/stat line. The command name is in parentheses and may hold
/// spaces or `)`, so fields are counted from the LAST `)`.
fn parse_stat(stat: &[u8]) -> Option<(u8, i32)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.bytes().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_from_the_last_parenthesis() {
        assert_eq!(
            parse_stat(b"42 (llama-server) S 1 42 42 0"),
            Some((b'S', 42))
        );
        assert_eq!(parse_stat(b"7 (a) b) (c) R 1 9 9"), Some((b'R', 9)));
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) S 1 notanumber"), None);
        assert_eq!(parse_stat(b""), None);
    }

    #[test]
    fn stopping_a_group_ends_its_grandchildren_too() {
        // A leader that starts two grandchildren (as the router starts its children) and
        // ignores SIGTERM, so the SIGKILL step is exercised as well.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; sleep 300 & sleep 300 & wait"]);
        let mut g = Group::spawn(cmd, Path::new("sh")).expect("spawn");
        g.grace = Duration::from_millis(300);
        let until = Instant::now() + Duration::from_secs(5);
        while g.members().len() < 3 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let members = g.members();
        assert_eq!(members.len(), 3, "leader and two sleeps: {members:?}");
        assert!(members.contains(&g.pid()), "the leader is a member");
        assert!(!g.leader_exited());
        drop(g);
        for pid in members {
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
                && members_of(pid as i32).contains(&pid);
            assert!(!alive, "pid {pid} outlived its group");
        }
    }
}
