//! Waiting on a child process with a deadline (both pipes drained so it cannot block), and the
//! names of the signals that end a crashed one.

use crate::error::{IoContext, Result};
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The name of a signal that ends a crashed child (`signal` for any other).
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        _ => "signal",
    }
}

/// How a child ended (`None`: killed at the deadline), and its stdout and stderr.
pub(crate) type ChildOutput = (Option<std::process::ExitStatus>, String, String);

/// Run with a deadline; both pipes drained on threads so a chatty child cannot block.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<ChildOutput> {
    let line = crate::process::display(cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| crate::process::spawn_error(&line, e, ""))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().at("wait for", Path::new(&line))? {
            Some(s) => break Some(s),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok((status, stdout, stderr))
}
