//! The engine process of one arm: `pinforge __validate-engine` loads the smoke shim (compiled
//! against the verified build) and the model once, keeps one slot (sequence 0), and answers
//! row requests read as JSON lines on stdin with JSON lines on stdout, as a server's prompt
//! cache would: a restored path and an uninterrupted path per row ([`slot`] says which state a
//! row restores and why it is a function of the row alone).
//!
//! The parent side ([`Engine`]) spawns it, talks to it with a deadline per row, and turns its
//! death (signal, sanitizer report, exit, hang) into a crash signature.

use pinforge_base::error::ExitCode;
use pinforge_base::error::{Error, Result};
use pinforge_base::proc_wait::signal_name;
use pinforge_deploy::smoke::{self, SmokeTarget};
use pinforge_sys::shim::{LoadParams, Shim};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod slot;
mod symbols;
use slot::Slot;
pub(crate) use symbols::Symbols;

/// The context a row runs in (prompt plus budget must fit).
pub(crate) const N_CTX: usize = 256;

/// What each row of a run drives in the engine (`validate --row-kind`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum RowKind {
    /// The prompt-cache path: a saved sequence state restored, the prompt's new part decoded
    /// (issue #20093's path), beside an uninterrupted decode of the same prompt.
    #[default]
    PromptCache,
    /// A multimodal caller's path: an embedding batch with `pos` NULL (the engine makes the
    /// positions), then the prompt, twice from an empty memory.
    EmbdPosNull,
    /// The same with the `n_tokens` positions `llama_batch_init` allocates (issue #28902: an
    /// M-RoPE engine reads more planes than that).
    EmbdPosNTokens,
}

impl RowKind {
    /// Every kind, in the order `--help` lists them.
    pub const ALL: [RowKind; 3] = [
        RowKind::PromptCache,
        RowKind::EmbdPosNull,
        RowKind::EmbdPosNTokens,
    ];

    /// The name on the command line and in `settings.json`.
    pub fn name(self) -> &'static str {
        match self {
            RowKind::PromptCache => "prompt-cache",
            RowKind::EmbdPosNull => "embd-pos-null",
            RowKind::EmbdPosNTokens => "embd-pos-n-tokens",
        }
    }

    /// The kind of a name, or an input error listing the kinds.
    pub fn parse(name: &str) -> Result<RowKind> {
        RowKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                let all: Vec<&str> = RowKind::ALL.iter().map(|k| k.name()).collect();
                Error::input(
                    format!("--row-kind {}", name.escape_debug()),
                    format!("is not a row kind; the kinds are {}", all.join(", ")),
                )
            })
    }

    /// Whether this is the default (a run that never asked for a kind records none).
    pub fn is_default(&self) -> bool {
        *self == RowKind::PromptCache
    }
}

/// A row request.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Request {
    /// What the row drives.
    #[serde(default)]
    pub kind: RowKind,
    /// Row id.
    pub row: u64,
    /// Prompt text.
    pub prompt: String,
    /// The prompt of row `row - 1` (None for row 0): the state this row restores is the one
    /// saved after that prompt's uninterrupted path, replayed when this engine did not run it.
    #[serde(default)]
    pub previous: Option<String>,
    /// Token budget.
    pub budget: u32,
}

/// The engine's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Response {
    /// Row id answered.
    pub row: u64,
    /// The row could not run (the engine is still alive).
    pub error: Option<String>,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Tokens generated on the restored path.
    pub restored: Vec<i32>,
    /// Tokens generated from an empty memory.
    pub reference: Vec<i32>,
    /// EOG sampled on the restored path.
    pub eog: bool,
    /// The restored path used the whole budget.
    pub budget_exhausted: bool,
    /// A saved state was restored before the row.
    pub restored_state: bool,
    /// Common prefix kept from the restored state.
    pub cached_prefix: u64,
    /// Bytes of the state restored.
    pub state_bytes: u64,
    /// Engine time for the row.
    pub engine_ms: f64,
    /// Bare decode loop time (restored path).
    pub decode_ms: f64,
    /// Generated text (restored path), lossy UTF-8, capped.
    pub text: String,
}

/// The engine's first line.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Ready {
    /// Loading failed (the engine exits after saying so).
    pub error: Option<String>,
    /// Vocabulary size.
    pub n_vocab: u32,
}

/// Options of the engine process.
#[derive(Debug, Clone)]
pub struct EngineArgs {
    /// The compiled shim.
    pub shim: PathBuf,
    /// The model.
    pub model: PathBuf,
    /// GBNF grammar file, when rows are constrained.
    pub grammar: Option<PathBuf>,
    /// Threads for llama.cpp.
    pub threads: i32,
}

/// Write one JSON line to the parent; false when it is gone.
fn say(out: &mut std::io::StdoutLock<'_>, v: &dyn erased::Line) -> bool {
    let line = v.line();
    out.write_all(line.as_bytes())
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush())
        .is_ok()
}

/// Serve rows on stdin/stdout until stdin closes. Returns the process exit code.
pub fn serve(a: &EngineArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let fail = |out: &mut std::io::StdoutLock<'_>, e: String| {
        say(
            out,
            &Ready {
                error: Some(e),
                n_vocab: 0,
            },
        );
        ExitCode::Input
    };
    let shim = match Shim::open(&a.shim) {
        Ok(s) => s,
        Err(e) => return fail(&mut out, e.to_string()),
    };
    let grammar = match &a.grammar {
        Some(p) => match pinforge_base::fsx::read_to_string(p).map(CString::new) {
            Ok(Ok(g)) => Some(g),
            _ => return fail(&mut out, format!("cannot read the grammar {}", p.display())),
        },
        None => None,
    };
    let Ok(path) = CString::new(a.model.as_os_str().as_encoded_bytes()) else {
        return fail(&mut out, "model path contains NUL".into());
    };
    let crash_rows: Vec<u64> = pinforge_base::hooks::validate_crash_rows();
    let params = LoadParams {
        gpu_layers: 0,
        n_ctx: N_CTX as i32,
        threads: a.threads,
        verbose: std::env::var_os("PINFORGE_SMOKE_VERBOSE").is_some(),
    };
    let model = match shim.load(&path, params) {
        Ok(m) => m,
        Err(e) => return fail(&mut out, e),
    };
    let n_vocab = model.n_vocab();
    let mut slot = Slot::new(model, grammar);
    if !say(
        &mut out,
        &Ready {
            error: None,
            n_vocab: n_vocab as u32,
        },
    ) {
        return ExitCode::Ok;
    }
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let r = Response {
                    error: Some(format!("bad request: {e}")),
                    ..Default::default()
                };
                if !say(&mut out, &r) {
                    break;
                }
                continue;
            }
        };
        if crash_rows.contains(&req.row) {
            // Deliberately crashes this process (test of the parent's containment).
            shim.crash_for_test();
        }
        let r = slot.row(&req);
        if !say(&mut out, &r) {
            break;
        }
    }
    // Exit without unloading: the parent only needs the answers, and freeing a model on the
    // way out is one more place for a broken build to fault after the work is done.
    ExitCode::Ok
}

mod erased {
    /// Something that serializes to one JSON line.
    pub(crate) trait Line {
        fn line(&self) -> String;
    }
    impl<T: serde::Serialize> Line for T {
        fn line(&self) -> String {
            serde_json::to_string(self)
                .unwrap_or_else(|e| format!("{{\"error\":\"cannot serialize the answer: {e}\"}}"))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parent side.

/// How a request ended when the engine did not answer it.
#[derive(Debug, Clone)]
pub(crate) struct Death {
    /// Crash signature: sanitizer report, signal, exit status, or hang.
    pub signature: String,
    /// Last lines of the engine's stderr.
    pub stderr_tail: String,
    /// The engine's stderr (its last 256 KiB).
    pub stderr: String,
    /// Whether the sanitizer was told to symbolize.
    pub symbolized: bool,
}

/// Everything a spawn needs (cloneable per worker).
#[derive(Debug, Clone)]
pub(crate) struct Spawn {
    /// The verified build.
    pub target: SmokeTarget,
    /// The engine's arguments.
    pub args: EngineArgs,
    /// Deadline per row (and for loading).
    pub timeout: Duration,
}

/// Why an engine did not become ready.
#[derive(Debug)]
pub(crate) enum StartFailure {
    /// It answered with an error (or garbage) instead of its ready line: a harness failure.
    Refused(String),
    /// It died (or hung) before its ready line.
    Died(Death),
}

impl StartFailure {
    /// The one-line reason.
    pub(crate) fn message(&self) -> String {
        match self {
            StartFailure::Refused(m) => m.clone(),
            StartFailure::Died(d) => format!("the engine died while loading: {}", d.signature),
        }
    }
}

impl Death {
    /// Whether this death is the engine crashing (a sanitizer report or a signal), as opposed
    /// to a hang or a plain exit: a crash while loading is evidence about the build, not a
    /// harness failure.
    pub(crate) fn is_crash(&self) -> bool {
        smoke::asan_signature(&self.stderr).is_some()
            || self.signature.starts_with("killed by signal")
            || self.signature.starts_with("GGML_")
    }
}

/// A running engine process.
pub(crate) struct Engine {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_thread: Option<std::thread::JoinHandle<()>>,
    timeout: Duration,
    /// Rows answered or died on since this process started.
    pub rows_run: u64,
    symbolized: bool,
}

/// The most stderr kept per engine process (a sanitizer report is a few KiB).
const STDERR_KEEP: usize = 256 << 10;

impl Engine {
    /// Spawn and wait for the engine to say it is ready. `Err(Death)` when it dies or hangs
    /// while loading; `Ok(Err(msg))` when it refused to load.
    pub(crate) fn start(
        s: &Spawn,
        symbolize: bool,
    ) -> Result<std::result::Result<Engine, StartFailure>> {
        let exe =
            std::env::current_exe().map_err(|e| Error::io("locate", Path::new("pinforge"), e))?;
        let mut cmd = Command::new(exe);
        cmd.arg("__validate-engine")
            .arg("--shim")
            .arg(&s.args.shim)
            .arg("--model")
            .arg(&s.args.model)
            .arg("--threads")
            .arg(s.args.threads.to_string());
        if let Some(g) = &s.args.grammar {
            cmd.arg("--grammar").arg(g);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        smoke::engine_env_symbolized(&mut cmd, &s.target, symbolize);
        let line = pinforge_base::process::display(&cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| pinforge_base::process::spawn_error(&line, e, ""))?;
        let stdout = child.stdout.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            if let Some(out) = stdout {
                for l in std::io::BufReader::new(out).lines() {
                    let Ok(l) = l else { break };
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            }
        });
        let buf = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take();
        let b2 = Arc::clone(&buf);
        let stderr_thread = std::thread::spawn(move || {
            let Some(mut err) = stderr else { return };
            let mut chunk = [0u8; 8192];
            loop {
                match err.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut b) = b2.lock() {
                            b.extend_from_slice(&chunk[..n]);
                            if b.len() > STDERR_KEEP * 2 {
                                let cut = b.len() - STDERR_KEEP;
                                b.drain(..cut);
                            }
                        }
                    }
                }
            }
        });
        let mut e = Engine {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            stderr: buf,
            stderr_thread: Some(stderr_thread),
            timeout: s.timeout,
            rows_run: 0,
            symbolized: symbolize,
        };
        match e.next_line() {
            Ok(l) => match serde_json::from_str::<Ready>(&l) {
                Ok(Ready { error: None, .. }) => Ok(Ok(e)),
                Ok(Ready { error: Some(m), .. }) => {
                    e.kill();
                    Ok(Err(StartFailure::Refused(m)))
                }
                Err(err) => {
                    e.kill();
                    Ok(Err(StartFailure::Refused(format!(
                        "the engine's first line is not its ready line: {err}"
                    ))))
                }
            },
            Err(d) => Ok(Err(StartFailure::Died(d))),
        }
    }

    fn next_line(&mut self) -> std::result::Result<String, Death> {
        match self.lines.recv_timeout(self.timeout) {
            Ok(l) => Ok(l),
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                Err(self.death(Some(format!(
                    "hang: no answer within {}s",
                    self.timeout.as_secs()
                ))))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.death(None)),
        }
    }

    /// Run one row: the answer, or how the engine died on it.
    pub(crate) fn request(&mut self, req: &Request) -> std::result::Result<Response, Death> {
        self.rows_run += 1;
        let line = serde_json::to_string(req).unwrap_or_default();
        let wrote = match self.stdin.as_mut() {
            Some(w) => w
                .write_all(line.as_bytes())
                .and_then(|_| w.write_all(b"\n"))
                .and_then(|_| w.flush())
                .is_ok(),
            None => false,
        };
        if !wrote {
            return Err(self.death(None));
        }
        let l = self.next_line()?;
        match serde_json::from_str::<Response>(&l) {
            Ok(r) if r.row == req.row || r.error.is_some() => Ok(r),
            Ok(r) => Ok(Response {
                error: Some(format!(
                    "answer for row {} to a request for row {}",
                    r.row, req.row
                )),
                ..r
            }),
            Err(e) => Ok(Response {
                row: req.row,
                error: Some(format!("unreadable answer: {e}")),
                ..Default::default()
            }),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The process ended (or was killed): wait for it and read why.
    fn death(&mut self, hang: Option<String>) -> Death {
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    self.kill();
                    break None;
                }
            }
        };
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        let stderr = self
            .stderr
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        use std::os::unix::process::ExitStatusExt;
        let signature = hang
            .or_else(|| smoke::asan_signature(&stderr))
            // A failed ggml assertion names itself (as in smoke and `Pinforge-Check`), not
            // only the SIGABRT it ends in; only a process that died of a signal aborted.
            .or_else(|| {
                status
                    .and_then(|s| s.signal())
                    .and_then(|_| smoke::ggml_abort_signature(&stderr))
            })
            .unwrap_or_else(|| match status {
                Some(s) if s.signal().is_some() => {
                    let sig = s.signal().unwrap_or(0);
                    format!("killed by signal {sig} ({})", signal_name(sig))
                }
                Some(s) => format!(
                    "exited with {} without an answer",
                    s.code()
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "?".into())
                ),
                None => "did not exit after its output closed".into(),
            });
        Death {
            signature,
            stderr_tail: pinforge_base::process::tail(&smoke::without_shadow_legend(&stderr), 12),
            stderr,
            symbolized: self.symbolized,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Closing stdin ends the serve loop; a process that does not go is killed.
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill();
    }
}
