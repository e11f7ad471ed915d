//! The `install --smoke` server check (issue #20): a build whose outputs include
//! `bin/llama-server` is the binary an operator ships, so before a swap to it the gate starts
//! that binary (the recorded bytes, [`super::launch`]) on 127.0.0.1 over the smoke's tiny
//! model and requires one OpenAI chat completion: HTTP 200 with a well-formed answer, the
//! server alive until it is stopped, and no sanitizer report in its log. Then the server is
//! stopped (its group, so nothing is left listening) and its temp folder removed.
//!
//! Every failure is a refusal (a check failure, exit 1) naming the binary, with what happened
//! and the tail of the server's log, whose folder is then kept; a crash of the server is such
//! a result, never pinforge's crash. Ctrl-C (or SIGTERM) during the check stops the server.

use super::client::Answer;
use super::launch::{self, ms, Launch, Running};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_record::manifest::Statement;
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The subject the check looks for.
pub(crate) const BINARY: &str = "bin/llama-server";
/// Tokens asked for: enough for a real decode, few enough for an instrumented build.
const MAX_TOKENS: u64 = 8;
/// The server's context (the prompt and the answer are a few dozen tokens).
const CTX: u32 = 256;
/// The one request's user message.
const PROMPT: &str = "Say hello.";
/// The most of the answer's text kept in the report.
const CONTENT_KEPT: usize = 200;
/// Lines of the server's log shown in a refusal.
const LOG_LINES: usize = 20;

/// How the check runs.
pub struct GateOptions {
    /// The model the server loads (the smoke's).
    pub model: PathBuf,
    /// The bound on the wait for `/health` and on every read of the request.
    pub timeout: Duration,
    /// Layers to offload (`-ngl`): as the smoke ran, on a GPU or not.
    pub gpu_layers: u32,
    /// Whether the build has a CUDA backend (an instrumented one needs `protect_shadow_gap=0`).
    pub cuda: bool,
}

/// A build's server: where its binary is and the digest the manifest records.
pub struct BuildServer {
    /// The artifact root (the binary is `bin/llama-server` in it, the libraries `lib/`).
    pub root: PathBuf,
    /// The recorded sha256 of `bin/llama-server`.
    pub recorded: Sha256,
}

/// The server check's part of the `install --json` document.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ServerCheck {
    /// The subject started (`bin/llama-server`).
    pub binary: String,
    /// Its sha256: re-hashed from the file before the start and from the running process
    /// (`/proc/PID/exe`) after, both equal to the manifest's record.
    pub sha256: Sha256,
    /// sha256 of the model it served.
    pub model_sha256: Sha256,
    /// The port on 127.0.0.1 it listened on (nothing listens there once it was stopped).
    pub port: u16,
    /// The build the server reports (`/props` `build_info`), when it reports one.
    pub build_info: Option<String>,
    /// The one request.
    pub request: ServerRequest,
    /// What answered it.
    pub answer: ServerAnswer,
    /// Where the time went.
    pub timings: ServerTimings,
    /// The server was stopped with its process group and nothing of it is left running.
    pub stopped: bool,
}

/// The one request of the check.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ServerRequest {
    /// `POST /v1/chat/completions`.
    pub endpoint: String,
    /// The user message.
    pub prompt: String,
    /// `max_tokens`.
    pub max_tokens: u64,
    /// `temperature`.
    pub temperature: f64,
}

/// The answer: a complete chat completion.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ServerAnswer {
    /// HTTP status (200).
    pub status: u16,
    /// `finish_reason` (`stop` or `length`).
    pub finish_reason: String,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `usage.completion_tokens`.
    pub completion_tokens: u64,
    /// The message content (its first 200 characters).
    pub content: String,
}

/// Milliseconds of each step.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ServerTimings {
    /// Re-hashing the binary before the start and the running process after.
    pub hash_ms: f64,
    /// From the spawn to `/health` 200.
    pub start_ms: f64,
    /// The chat completion.
    pub request_ms: f64,
    /// Stopping the group until no member was left.
    pub stop_ms: f64,
    /// The whole check.
    pub total_ms: f64,
}

/// The server the manifest records, or None when its outputs have no `bin/llama-server`.
pub fn server_of_manifest(manifest: &Path) -> Result<Option<BuildServer>> {
    let st = Statement::read(manifest)?;
    let Some(s) = st.subject.iter().find(|s| s.name == BINARY) else {
        return Ok(None);
    };
    let recorded = s.sha256().ok_or_else(|| {
        Error::input(
            manifest.display(),
            format!("subject `{BINARY}` has no sha256"),
        )
    })?;
    Ok(Some(BuildServer {
        root: st.checked_artifact_root(manifest)?,
        recorded,
    }))
}

/// Run the check on `build`; the report, or the refusal.
pub fn check(build: &BuildServer, opts: &GateOptions) -> Result<ServerCheck> {
    let t0 = Instant::now();
    let bin = binary_in(&build.root)?;
    let dir = tempfile::Builder::new()
        .prefix("pinforge-server-")
        .tempdir()
        .map_err(|e| Error::io("create a temp folder in", &std::env::temp_dir(), e))?;
    let log = dir.path().join("server.log");
    // From here until the server is stopped, Ctrl-C and SIGTERM stop it instead of ending
    // pinforge with the server orphaned; the default dispositions are back afterwards.
    let caught = pinforge_sys::signal::InterruptsCaught::new();
    let mut outcome = run_once(&bin, build, opts, dir.path(), &log);
    drop(caught);
    // An interrupt after the request (while the server was being stopped and its log read) is
    // still the user's "stop": the check does not pass, so install does not swap.
    if outcome.is_ok() && pinforge_sys::signal::interrupted() {
        outcome = Err(Error::check(
            bin.display(),
            "interrupted during the check; the server was stopped and nothing was installed",
        ));
    }
    match outcome {
        Ok(mut report) => {
            report.timings.total_ms = ms(t0.elapsed());
            let path = dir.path().to_path_buf();
            dir.close()
                .map_err(|e| Error::io("remove the temp folder", &path, e))?;
            Ok(report)
        }
        Err(e) if !log.exists() => Err(e),
        Err(e) => {
            let kept = dir.keep();
            Err(with_log(e, &kept.join("server.log")))
        }
    }
}

/// `root/bin/llama-server`, reached through a real `bin/` folder (never a link out of the
/// build).
fn binary_in(root: &Path) -> Result<PathBuf> {
    let bin_dir = root.join("bin");
    match std::fs::symlink_metadata(&bin_dir) {
        Ok(m) if m.is_dir() => Ok(root.join(BINARY)),
        Ok(_) => Err(Error::input(
            bin_dir.display(),
            "is not a folder (a link?); the server was not started",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::input(bin_dir.display(), "not found")
                .with_hint("the build folder changed since the build; rebuild the variant"))
        }
        Err(e) => Err(Error::io("stat", &bin_dir, e)),
    }
}

/// A refusal with the server's log: its path (kept) and its last lines.
fn with_log(e: Error, log: &Path) -> Error {
    match e {
        Error::Check {
            subject, message, ..
        } => {
            let tail = launch::log_tail(log, LOG_LINES);
            let shown: String = tail.lines().map(|l| format!("\n    {l}")).collect();
            Error::check(
                subject,
                format!(
                    "{message}; the swap was not committed\nthe server's log, kept at {}, ends:{}",
                    log.display(),
                    if shown.is_empty() {
                        "\n    (empty)".to_string()
                    } else {
                        shown
                    }
                ),
            )
            .with_hint("the whole log is the server's output: it says what the server did")
        }
        other => other,
    }
}

/// The server's arguments: a plain server (no router) over the model, one slot, on
/// 127.0.0.1:`port`.
fn server_args(model: &Path, port: u16, gpu_layers: u32) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string().into(),
        "--model".into(),
    ];
    v.push(model.as_os_str().to_owned());
    for (k, val) in [
        ("--ctx-size", CTX.to_string()),
        ("--parallel", "1".into()),
        ("--n-gpu-layers", gpu_layers.to_string()),
    ] {
        v.push(k.into());
        v.push(val.into());
    }
    v
}

/// A sanitizer report ends the process (`halt_on_error`) with the smoke's exit code, and no
/// leak report at the stop muddies the log.
fn asan_options(cuda: bool) -> String {
    format!(
        "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode={}{}",
        crate::smoke::ASAN_EXIT,
        if cuda { ":protect_shadow_gap=0" } else { "" }
    )
}

/// Start, ask, stop, judge.
fn run_once(
    bin: &Path,
    build: &BuildServer,
    opts: &GateOptions,
    dir: &Path,
    log: &Path,
) -> Result<ServerCheck> {
    let (model_sha256, _) = Sha256::of_file(&opts.model)?;
    let args = |port: u16| server_args(&opts.model, port, opts.gpu_layers);
    let mut running = launch::start(&Launch {
        bin,
        recorded: build.recorded,
        args: &args,
        // The staged binary finds lib/ through its `$ORIGIN/../lib` run path; the variable
        // says the same, and replaces any the caller's environment had.
        lib: Some(build.root.join("lib")),
        log,
        cwd: dir,
        asan_options: asan_options(opts.cuda),
        start_timeout: opts.timeout,
        read_timeout: opts.timeout,
    })?;
    let build_info = running
        .server
        .props(None)
        .ok()
        .and_then(|p| p["build_info"].as_str().map(str::to_string));
    let (answer, request_ms) = ask(bin, &mut running)?;
    pinforge_base::hooks::crash_named("install-server:answered");
    // A server that dropped the request may still be on its way out (its sockets close
    // before it is a zombie): a moment's wait, so the refusal says it died and how.
    let failed = answer.status != Some(200) || answer.cut.is_some();
    let died = exit_within(
        &mut running.group,
        Duration::from_millis(if failed { 1000 } else { 0 }),
    );
    let t = Instant::now();
    running.group.stop();
    let stop_ms = ms(t.elapsed());
    let left = running.group.members();
    if !left.is_empty() {
        return Err(Error::check(
            bin.display(),
            format!("processes of the server outlived its stop: {left:?}"),
        ));
    }
    let text = pinforge_base::fsx::read(log)?;
    let report = sanitizer_report(&String::from_utf8_lossy(&text));
    if died.is_some() || report.is_some() {
        let mut why = match died {
            Some(st) => format!("the server died ({st}) while it answered the request"),
            None => "the server answered".to_string(),
        };
        if let Some(r) = report {
            why.push_str(&format!(", and its log holds a sanitizer report: {r}"));
        }
        return Err(Error::check(bin.display(), why));
    }
    let answer = judge(&answer).map_err(|why| Error::check(bin.display(), why))?;
    Ok(ServerCheck {
        binary: BINARY.to_string(),
        sha256: running.exe_sha256,
        model_sha256,
        port: running.port,
        build_info,
        request: ServerRequest {
            endpoint: "POST /v1/chat/completions".into(),
            prompt: PROMPT.into(),
            max_tokens: MAX_TOKENS,
            temperature: 0.0,
        },
        answer,
        timings: ServerTimings {
            hash_ms: running.hash_ms,
            start_ms: running.start_ms,
            request_ms,
            stop_ms,
            total_ms: 0.0,
        },
        stopped: true,
    })
}

/// The leader's exit status if it exits within `wait` (checked at least once).
fn exit_within(
    group: &mut super::group::Group,
    wait: Duration,
) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + wait;
    loop {
        if let Some(st) = group.exit_status() {
            return Some(st);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one chat completion, sent from a thread while this one watches for an interrupt (which
/// stops the server, so the request ends at once); the answer and its wall time.
fn ask(bin: &Path, r: &mut Running) -> Result<(Answer, f64)> {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": false,
    });
    let t = Instant::now();
    let (server, group) = (&r.server, &mut r.group);
    let joined = std::thread::scope(|s| {
        let h = s.spawn(|| server.chat(&body, &mut || {}));
        while !h.is_finished() {
            if pinforge_sys::signal::interrupted() {
                group.stop();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join()
    });
    if pinforge_sys::signal::interrupted() {
        return Err(Error::check(
            bin.display(),
            "interrupted during the request; the server was stopped",
        ));
    }
    let answer = joined.map_err(|_| Error::Internal("the request thread panicked".to_string()))?;
    Ok((answer, ms(t.elapsed())))
}

/// A sanitizer's report in the server's output: ASan's signature, or the first line of
/// another sanitizer's report.
fn sanitizer_report(log: &str) -> Option<String> {
    if let Some(sig) = crate::smoke::asan_signature(log) {
        return Some(sig);
    }
    const MARKERS: [&str; 4] = [
        "ERROR: AddressSanitizer",
        "ERROR: LeakSanitizer",
        "SUMMARY: UndefinedBehaviorSanitizer",
        "WARNING: ThreadSanitizer",
    ];
    log.lines()
        .find(|l| MARKERS.iter().any(|m| l.contains(m)))
        .map(|l| l.trim().to_string())
}

/// A well-formed chat completion, or what is wrong with the answer.
fn judge(a: &Answer) -> std::result::Result<ServerAnswer, String> {
    if let Some(e) = &a.harness_error {
        return Err(format!("the request reached no server: {e}"));
    }
    if let Some(cut) = &a.cut {
        return Err(format!("the request got no complete answer: {cut}"));
    }
    let status = a.status.unwrap_or(0);
    if status != 200 {
        return Err(format!(
            "the chat completion answered HTTP {status}: {}",
            a.error_body.as_deref().unwrap_or("(no body)")
        ));
    }
    let (Some(finish), Some(content)) = (&a.finish_reason, &a.content) else {
        return Err(format!(
            "HTTP 200, but the body is not a chat completion (no choices[0] finish_reason and \
             message content): {}",
            a.error_body.as_deref().unwrap_or("(no error either)")
        ));
    };
    let tokens_fit = match finish.as_str() {
        "stop" => a.completion_tokens <= MAX_TOKENS,
        "length" => a.completion_tokens == MAX_TOKENS,
        _ => false,
    };
    if !tokens_fit {
        return Err(format!(
            "the chat completion is not well-formed: finish_reason `{}` with {} completion \
             tokens for max_tokens {MAX_TOKENS}",
            finish.escape_debug(),
            a.completion_tokens
        ));
    }
    Ok(ServerAnswer {
        status,
        finish_reason: finish.clone(),
        prompt_tokens: a.prompt_tokens,
        completion_tokens: a.completion_tokens,
        content: content.chars().take(CONTENT_KEPT).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Answer {
        Answer {
            status: Some(200),
            finish_reason: Some("length".into()),
            prompt_tokens: 12,
            completion_tokens: MAX_TOKENS,
            content: Some("hello".into()),
            ..Answer::default()
        }
    }

    #[test]
    fn only_a_complete_chat_completion_passes() {
        let a = judge(&ok()).expect("ok");
        assert_eq!((a.status, a.completion_tokens), (200, MAX_TOKENS));
        let stop = Answer {
            finish_reason: Some("stop".into()),
            completion_tokens: 3,
            ..ok()
        };
        assert!(judge(&stop).is_ok());
        let cases = [
            (
                Answer {
                    status: Some(500),
                    error_body: Some("boom".into()),
                    ..ok()
                },
                "HTTP 500: boom",
            ),
            (
                Answer {
                    cut: Some("reset".into()),
                    ..ok()
                },
                "no complete answer",
            ),
            (
                Answer {
                    harness_error: Some("refused".into()),
                    ..ok()
                },
                "reached no server",
            ),
            (
                Answer {
                    finish_reason: None,
                    ..ok()
                },
                "not a chat completion",
            ),
            (
                Answer {
                    content: None,
                    ..ok()
                },
                "not a chat completion",
            ),
            (
                Answer {
                    completion_tokens: 3,
                    ..ok()
                },
                "not well-formed",
            ),
            (
                Answer {
                    finish_reason: Some("tool_calls".into()),
                    ..ok()
                },
                "not well-formed",
            ),
            (
                Answer {
                    finish_reason: Some("stop".into()),
                    completion_tokens: MAX_TOKENS + 1,
                    ..ok()
                },
                "not well-formed",
            ),
        ];
        for (a, want) in cases {
            let e = judge(&a).err().unwrap_or_default();
            assert!(e.contains(want), "{a:?}: {e}");
        }
    }

    #[test]
    fn a_sanitizer_report_in_the_log_is_found() {
        assert_eq!(sanitizer_report("main: server is listening\n"), None);
        let asan = "==9==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n\
                    #0 0x1 in llama_kv_cache::apply_ubatch /x.cpp:1\n\
                    SUMMARY: AddressSanitizer: heap-buffer-overflow /x.cpp:1\n";
        let r = sanitizer_report(asan).expect("report");
        assert!(r.starts_with("heap-buffer-overflow in"), "{r}");
        let ub = "x.cpp:3:5: runtime error: shift\nSUMMARY: UndefinedBehaviorSanitizer: undefined-behavior x.cpp:3:5\n";
        assert!(sanitizer_report(ub).is_some_and(|r| r.contains("UndefinedBehavior")));
    }

    #[test]
    fn the_server_is_asked_for_loopback_one_slot_and_the_model() {
        let a: Vec<String> = server_args(Path::new("/m/tiny.gguf"), 4242, 0)
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            a.join(" "),
            "--host 127.0.0.1 --port 4242 --model /m/tiny.gguf --ctx-size 256 --parallel 1 \
             --n-gpu-layers 0"
        );
        assert!(asan_options(true).ends_with(":protect_shadow_gap=0"));
        assert!(asan_options(false).contains("halt_on_error=1"));
    }

    #[test]
    fn a_refusal_shows_the_log_tail_and_where_it_is_kept() {
        let d = tempfile::tempdir().expect("tmp");
        let log = d.path().join("server.log");
        std::fs::write(&log, "line 1\nerror: cannot bind\n").expect("write");
        let e = with_log(Error::check("/b/bin/llama-server", "it exited"), &log).to_string();
        assert!(e.starts_with("/b/bin/llama-server: it exited; the swap was not committed"));
        assert!(e.contains(&format!("kept at {}", log.display())), "{e}");
        assert!(e.ends_with("\n    line 1\n    error: cannot bind"), "{e}");
        // Not a check failure (an I/O error): passed through as it is.
        let io = Error::io("read", &log, std::io::Error::other("x"));
        assert!(matches!(with_log(io, &log), Error::Io { .. }));
    }
}
