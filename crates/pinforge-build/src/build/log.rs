//! The build log: every CMake and Ninja run of one build appends its command line and all it
//! printed to `build.log`, while Ninja's status lines feed the reporter; a failure shows the
//! log's tail and path.

use super::SCRUBBED_ENV;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::process;
use pinforge_base::progress::{parse_ninja_status, Reporter};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// One build's log file, shared by the thread that copies a run's stderr into it.
pub(super) struct Log {
    file: Arc<Mutex<std::fs::File>>,
    /// Where it is (the build outcome names it).
    pub(super) path: PathBuf,
}

impl Log {
    /// Start the log afresh: it holds this build's runs only.
    pub(super) fn create(path: PathBuf) -> Result<Log> {
        let file = std::fs::File::create(&path).at("create", &path)?;
        Ok(Log {
            file: Arc::new(Mutex::new(file)),
            path,
        })
    }

    /// Lines pinforge itself adds to the log (why an argument was chosen), before a run.
    pub(super) fn note(&self, lines: &[String]) {
        if let Ok(mut f) = self.file.lock() {
            for l in lines {
                let _ = writeln!(f, "{l}");
            }
        }
    }
}

/// Run a command with stdout and stderr appended to the log; Ninja status lines feed the
/// reporter. Returns how many Ninja steps ran. A failure shows the log's tail and path.
pub(super) fn run_logged(
    cmd: &mut Command,
    env: &[(&str, &std::ffi::OsStr)],
    log: &Log,
    reporter: &dyn Reporter,
) -> Result<u64> {
    let Log {
        file: log,
        path: log_path,
    } = log;
    let line = process::display(cmd);
    // The build sees a fixed environment: variables that silently change what CMake or the
    // compilers produce are removed. SOURCE_DATE_EPOCH in particular makes ggml's CMakeLists
    // turn GGML_NATIVE_DEFAULT off, which drops SSE4.2/AVX/AVX2/FMA/F16C from ggml-cpu.
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env("NINJA_STATUS", "[%f/%t] ")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(mut f) = log.lock() {
        let _ = writeln!(f, "$ {line}");
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| process::spawn_error(&line, e, "run tools/bootstrap.sh or put it on PATH"))?;
    let stderr = child.stderr.take();
    let log_err = Arc::clone(log);
    let err_thread = std::thread::spawn(move || {
        if let Some(s) = stderr {
            for l in BufReader::new(s).lines().map_while(|l| l.ok()) {
                if let Ok(mut f) = log_err.lock() {
                    let _ = writeln!(f, "{l}");
                }
            }
        }
    });
    let mut steps = 0u64;
    if let Some(out) = child.stdout.take() {
        for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Some((done, total, msg)) = parse_ninja_status(&l) {
                steps = steps.max(done);
                reporter.progress(done, total, msg);
            }
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{l}");
            }
        }
    }
    let status = child.wait().at("wait for", Path::new(&line))?;
    let _ = err_thread.join();
    if let Ok(mut f) = log.lock() {
        let _ = f.flush();
    }
    if !status.success() {
        let text = pinforge_base::fsx::read_to_string(log_path).unwrap_or_default();
        return Err(Error::tool(&line, format!("exited with {status}"))
            .with_detail(format!(
                "{}\n(full log: {})",
                process::tail(&text, process::TAIL_LINES),
                log_path.display()
            ))
            .with_hint(format!("read the full log: {}", log_path.display())));
    }
    Ok(steps)
}
