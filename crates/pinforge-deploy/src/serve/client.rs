//! The HTTP side of a `llama-server` (router or a plain server, managed or an operator's
//! endpoint): `/health`, `/models`, `/props` and OpenAI chat completions, non-streaming and
//! streaming (read line by line through [`super::sse`]).
//!
//! A chat request never fails as a Rust error for what the server did: a 5xx, a dropped
//! connection or a cut stream is an outcome ([`Answer`]) the row classification reads. Only
//! "nothing reached the server" (connection refused, a bad address) is reported as
//! `harness_error`, which is never counted against a build.

use super::sse::{SseReader, StreamEnd};
use pinforge_base::error::{Error, Result};
use serde_json::Value;
use std::io::BufRead;
use std::time::{Duration, Instant};

/// The most bytes of one body read, streaming or not, and of a GET's body (a runaway answer
/// is stopped here, not buffered forever). Stated in `validate --help`.
pub const BODY_LIMIT: u64 = 8 << 20;
/// The longest SSE line read: one llama-server event is a few hundred bytes. A line past it
/// is the endpoint's error and nothing more is read, so memory stays bounded by this, not by
/// what the endpoint sends (a 256 MiB line once cost 1.6 GB resident).
pub const LINE_LIMIT: usize = 1 << 20;
/// The most of an error body kept as evidence.
const EXCERPT: usize = 300;

/// A server reached over HTTP.
pub struct Server {
    agent: ureq::Agent,
    base: String,
    api_key: Option<String>,
}

/// One preset's state as `GET /models` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ModelState {
    /// Preset (model) id.
    pub id: String,
    /// `loaded`, `unloaded`, `loading`, … (empty when the server gives none: not a router).
    pub value: String,
    /// The router marked the last child of this preset failed.
    pub failed: bool,
    /// The exit code it recorded (a signal death is reported as 1 by the router).
    pub exit_code: Option<i64>,
}

/// A GET's answer.
struct Got {
    status: u16,
    location: Option<String>,
    body: Vec<u8>,
}

/// What one chat request showed: the raw facts the row rules classify.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// Nothing reached the server.
    pub harness_error: Option<String>,
    /// HTTP status, when one came back.
    pub status: Option<u16>,
    /// The connection dropped or the stream was cut: why.
    pub cut: Option<String>,
    /// `finish_reason` of a complete answer.
    pub finish_reason: Option<String>,
    /// Usage of a complete answer.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
    /// The content (what arrived, for a cut stream too).
    pub content: Option<String>,
    /// The start of an error body (`proxy error: …`).
    pub error_body: Option<String>,
    /// The server's `timings` object, when it sent one.
    pub timings: Option<Value>,
    /// Wall time of the request.
    pub wall_ms: f64,
}

fn excerpt(s: &str) -> String {
    s.chars().take(EXCERPT).collect()
}

/// Whether a ureq error means the request never reached a server.
fn never_sent(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::BadUri(_) => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
        ),
        _ => false,
    }
}

/// An `--endpoint` URL pinforge may record and call: `http://` or `https://`, a host, a port
/// that is one, and no credentials (a `user:password@` part would be written into the run's
/// evidence and output; the API key comes from the environment instead). Exit 2 naming it.
pub fn check_endpoint_url(url: &str) -> Result<()> {
    let bad = |why: &str| Error::input(format!("--endpoint {url}"), why.to_string());
    let uri: ureq::http::Uri = url.parse().map_err(|e| bad(&format!("not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("give an http:// or https:// URL"));
    }
    let Some(auth) = uri.authority() else {
        return Err(bad("no host"));
    };
    if auth.as_str().contains('@') {
        return Err(
            bad("holds credentials, which would be recorded in the run's evidence").with_hint(
                "pass the API key in the environment (--api-key-env, PINFORGE_ENDPOINT_API_KEY)",
            ),
        );
    }
    if auth.host().is_empty() {
        return Err(bad("no host"));
    }
    // `http::Uri` takes any digits as a port; one over 65535 would only fail at connect time,
    // after a wait.
    let port_text = auth.as_str().rsplit_once(':').map(|(_, p)| p);
    if let Some(p) = port_text.filter(|p| !p.contains(']')) {
        if p.parse::<u16>().map_or(true, |n| n == 0) {
            return Err(bad(&format!("port {p} is not a port (1 to 65535)")));
        }
    }
    Ok(())
}

impl Server {
    /// A client for `base` (`http://127.0.0.1:PORT`, no trailing slash); `read_timeout`
    /// bounds every read, so a hung child shows as a cut, not a hang.
    pub fn new(base: &str, api_key: Option<String>, read_timeout: Duration) -> Server {
        // ureq's default provider is rustls, which this build does not carry: without naming
        // the system's TLS an https:// endpoint panicked inside ureq.
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::NativeTls)
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_per_read(Some(read_timeout))
            // A server that trickles a byte now and then never trips the per-read bound:
            // this one ends any request.
            .timeout_global(Some(read_timeout.saturating_mul(3)))
            .max_redirects(0)
            .build()
            .into();
        Server {
            agent,
            base: base.trim_end_matches('/').to_string(),
            api_key,
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`: the status, a redirect's target, and the body's bytes (at most
    /// [`BODY_LIMIT`]).
    fn get(&self, path: &str) -> std::result::Result<Got, ureq::Error> {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        if let Some(k) = &self.api_key {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        let mut resp = req.call()?;
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let body = resp
            .body_mut()
            .with_config()
            .limit(BODY_LIMIT)
            .read_to_vec()?;
        Ok(Got {
            status,
            location,
            body,
        })
    }

    /// `GET path` as JSON. What the server sent that is not a usable answer (a redirect, a
    /// body over the limit, bytes that are not UTF-8, text that is not JSON or nests deeper
    /// than the parser's limit) is an input error naming the URL (exit 2); no answer at all,
    /// or an error status, is a failed check (exit 1).
    fn get_json(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let got = match self.get(path) {
            Ok(g) => g,
            Err(e @ ureq::Error::BodyExceedsLimit(_)) => {
                return Err(Error::input(&url, format!("the body is too large: {e}")))
            }
            Err(e) => return Err(Error::check(&url, format!("no answer: {e}"))),
        };
        let Ok(body) = std::str::from_utf8(&got.body) else {
            return Err(Error::input(&url, "the body is not UTF-8"));
        };
        if (300..400).contains(&got.status) {
            return Err(Error::input(
                &url,
                format!(
                    "HTTP {} redirects to `{}`: redirects are not followed",
                    got.status,
                    got.location.unwrap_or_default().escape_debug()
                ),
            )
            .with_hint("give the URL the server really answers on"));
        }
        if got.status != 200 {
            return Err(Error::check(
                &url,
                format!("HTTP {}: {}", got.status, excerpt(body).escape_debug()),
            ));
        }
        serde_json::from_str(body).map_err(|e| {
            Error::input(
                &url,
                format!("not JSON ({e}): {}", excerpt(body).escape_debug()),
            )
        })
    }

    /// `GET /health`: the status, or None when nothing answered.
    pub fn health(&self) -> Option<u16> {
        self.get("/health").ok().map(|g| g.status)
    }

    /// Wait until `/health` answers 200, giving up at `timeout` or as soon as `alive` says
    /// the process is gone (its log then says why).
    pub fn wait_healthy(&self, timeout: Duration, alive: &mut dyn FnMut() -> bool) -> Result<()> {
        let until = Instant::now() + timeout;
        let mut last = None;
        // 10 ms doubling to 100 ms: a tiny model's server is up in about 60 ms, and a fixed
        // 100 ms poll made every start cost at least that (measured: start 102 ms, against
        // 50 to 70 ms for a shell loop polling every 10 ms).
        let mut pause = Duration::from_millis(10);
        while Instant::now() < until {
            last = self.health();
            if last == Some(200) {
                return Ok(());
            }
            if !alive() {
                return Err(Error::check(
                    &self.base,
                    "the server exited before it answered /health",
                )
                .with_hint("its log, in the run folder, says why"));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
        Err(Error::check(
            &self.base,
            format!(
                "/health did not answer 200 within {}s (last: {})",
                timeout.as_secs(),
                last.map(|s| s.to_string())
                    .unwrap_or_else(|| "no answer".into())
            ),
        ))
    }

    /// `GET /models`: every preset and its state. A field of the wrong type is an input
    /// error naming the URL and the field (exit 2), never read as a default.
    pub fn models(&self) -> Result<Vec<ModelState>> {
        let url = format!("{}/models", self.base);
        let v = self.get_json("/models")?;
        let wrong =
            |field: String, want: &str| Error::input(&url, format!("field {field} is not {want}"));
        let data = v["data"]
            .as_array()
            .ok_or_else(|| wrong("data".into(), "an array"))?;
        let mut out = Vec::new();
        for (i, m) in data.iter().enumerate() {
            let id = m["id"]
                .as_str()
                .ok_or_else(|| wrong(format!("data[{i}].id"), "a string"))?;
            let st = &m["status"];
            let opt = |k: &str| (!st[k].is_null()).then_some(&st[k]);
            let value = match opt("value") {
                None => "",
                Some(x) => x
                    .as_str()
                    .ok_or_else(|| wrong(format!("data[{i}].status.value"), "a string"))?,
            };
            let failed = match opt("failed") {
                None => false,
                Some(x) => x
                    .as_bool()
                    .ok_or_else(|| wrong(format!("data[{i}].status.failed"), "a boolean"))?,
            };
            let exit_code =
                match opt("exit_code") {
                    None => None,
                    Some(x) => Some(x.as_i64().ok_or_else(|| {
                        wrong(format!("data[{i}].status.exit_code"), "an integer")
                    })?),
                };
            out.push(ModelState {
                id: id.to_string(),
                value: value.to_string(),
                failed,
                exit_code,
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// `GET /props` (of the router, or proxied to preset `model`'s child).
    pub fn props(&self, model: Option<&str>) -> Result<Value> {
        match model {
            Some(m) => self.get_json(&format!("/props?model={m}")),
            None => self.get_json("/props"),
        }
    }

    /// `POST /v1/chat/completions` with `body` (its `stream` field decides the reading);
    /// `on_headers` runs once the status line and headers arrived, before the body is read.
    pub fn chat(&self, body: &Value, on_headers: &mut dyn FnMut()) -> Answer {
        let t0 = Instant::now();
        let mut a = self.chat_inner(body, on_headers);
        a.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        a
    }

    fn chat_inner(&self, body: &Value, on_headers: &mut dyn FnMut()) -> Answer {
        let url = format!("{}/v1/chat/completions", self.base);
        let mut req = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(k) = &self.api_key {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        let bytes = body.to_string();
        let resp = match req.send(bytes.as_bytes()) {
            Ok(r) => r,
            Err(e) if never_sent(&e) => {
                return Answer {
                    harness_error: Some(format!("{url}: {e}")),
                    ..Answer::default()
                }
            }
            // A child that never answers within the row's time is a hang: a crash class, as
            // the in-process harness counts one, and the rule says which it was.
            Err(e @ ureq::Error::Timeout(_)) => {
                return Answer {
                    cut: Some(format!("hang: no response in time ({e})")),
                    ..Answer::default()
                }
            }
            Err(e) => {
                return Answer {
                    cut: Some(format!("no response: {e}")),
                    ..Answer::default()
                }
            }
        };
        on_headers();
        let status = resp.status().as_u16();
        let streaming = body["stream"].as_bool().unwrap_or(false);
        let mut a = if streaming && status == 200 {
            read_stream(resp.into_body())
        } else {
            read_whole(resp.into_body())
        };
        a.status = Some(status);
        a
    }
}

/// A non-streaming body: the answer's fields, or the error body as evidence.
fn read_whole(mut body: ureq::Body) -> Answer {
    let bytes = match body.with_config().limit(BODY_LIMIT).read_to_vec() {
        Ok(b) => b,
        Err(ureq::Error::BodyExceedsLimit(_)) => {
            return malformed(format!("a body over {BODY_LIMIT} bytes"), &[]);
        }
        Err(e) => {
            return Answer {
                cut: Some(format!("the body was cut: {e}")),
                ..Answer::default()
            }
        }
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            return malformed(
                format!("bytes that are not UTF-8 at byte {at}"),
                e.as_bytes(),
            );
        }
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Answer {
            error_body: Some(excerpt(&text)),
            ..Answer::default()
        };
    };
    let choice = &v["choices"][0];
    // A count that is there but is no non-negative integer (negative, a float, a string, past
    // u64) is the endpoint's error, not a zero: the row is the harness's `error`, with why.
    let mut bad = None;
    let mut count = |field: &str| -> u64 {
        let x = &v["usage"][field];
        match x {
            Value::Null => 0,
            _ => x.as_u64().unwrap_or_else(|| {
                bad.get_or_insert(format!(
                    "usage.{field} is not a non-negative integer: {}",
                    excerpt(&x.to_string())
                ));
                0
            }),
        }
    };
    let (prompt_tokens, completion_tokens) = (count("prompt_tokens"), count("completion_tokens"));
    if let Some(why) = bad {
        return Answer {
            harness_error: Some(format!("the endpoint's answer: {why}")),
            error_body: Some(excerpt(&text)),
            ..Answer::default()
        };
    }
    Answer {
        finish_reason: choice["finish_reason"].as_str().map(String::from),
        content: choice["message"]["content"].as_str().map(String::from),
        prompt_tokens,
        completion_tokens,
        error_body: v.get("error").map(|e| excerpt(&e.to_string())),
        timings: v.get("timings").cloned(),
        ..Answer::default()
    }
}

/// ureq reports its own timeouts as an I/O error wrapping `ureq::Error::Timeout`.
fn is_timeout(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
        .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)))
}

/// The endpoint's answer was malformed (past a cap, not UTF-8): the harness's `error` with
/// the reason named and the start of what came kept as evidence, never a crash: no death
/// was seen, and reading stops here.
fn malformed(why: String, start: &[u8]) -> Answer {
    let head = &start[..start.len().min(EXCERPT)];
    Answer {
        harness_error: Some(format!(
            "the endpoint's answer: {why}; nothing more was read"
        )),
        error_body: (!head.is_empty()).then(|| excerpt(&String::from_utf8_lossy(head))),
        ..Answer::default()
    }
}

/// A streaming body, line by line (each line and the whole stream capped); a read error is a
/// dropped connection.
fn read_stream(body: ureq::Body) -> Answer {
    use std::io::Read;
    let mut reader = std::io::BufReader::new(body.into_reader());
    let mut sse = SseReader::default();
    let mut line = Vec::new();
    let mut total = 0u64;
    let mut dropped = None;
    loop {
        line.clear();
        // One line at most LINE_LIMIT + 1 bytes: the `take` bounds what is buffered.
        let cap = LINE_LIMIT as u64 + 1;
        match (&mut reader).take(cap).read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            // A stream that stops sending (or trickles past the row's time) is a hang, named
            // as one; any other read error is a cut connection.
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut || is_timeout(&e) => {
                dropped = Some(format!("hang: the stream did not end in time ({e})"));
                break;
            }
            Err(e) => {
                dropped = Some(e.to_string());
                break;
            }
        }
        if line.len() > LINE_LIMIT {
            return malformed(format!("an SSE line over {LINE_LIMIT} bytes"), &line);
        }
        if total > BODY_LIMIT {
            return malformed(format!("a stream over {BODY_LIMIT} bytes"), &line);
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            let at = total - line.len() as u64;
            return malformed(
                format!("bytes that are not UTF-8 in the SSE line at byte {at}"),
                &line,
            );
        };
        sse.line(text.trim_end_matches('\n'));
    }
    match sse.finish(dropped.as_deref()) {
        StreamEnd::Complete {
            finish_reason,
            content,
            usage,
        } => Answer {
            finish_reason: Some(finish_reason),
            content: Some(content),
            prompt_tokens: usage.map(|u| u.prompt_tokens).unwrap_or(0),
            completion_tokens: usage.map(|u| u.completion_tokens).unwrap_or(0),
            ..Answer::default()
        },
        StreamEnd::Cut { why, content } => Answer {
            cut: Some(why),
            content: Some(content),
            ..Answer::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_nobody_listens_on_is_a_harness_error_not_a_crash() {
        let port = super::super::preset::free_port().expect("port");
        let s = Server::new(
            &format!("http://127.0.0.1:{port}/"),
            None,
            Duration::from_secs(2),
        );
        assert_eq!(s.base(), format!("http://127.0.0.1:{port}"));
        assert_eq!(s.health(), None);
        let a = s.chat(&serde_json::json!({"messages": []}), &mut || {});
        assert!(a.harness_error.is_some(), "{a:?}");
        assert_eq!(a.status, None);
        assert!(s.models().is_err());
        let err = s
            .wait_healthy(Duration::from_secs(5), &mut || false)
            .expect_err("gone");
        assert!(err.to_string().contains("exited"), "{err}");
    }
}

#[cfg(test)]
mod url_tests {
    use super::check_endpoint_url;

    #[test]
    fn an_endpoint_url_with_credentials_a_bad_port_or_another_scheme_is_refused() {
        for ok in [
            "http://127.0.0.1:8080",
            "https://llm.example.org/",
            "http://[::1]:8080/v1",
            "http://localhost",
        ] {
            assert!(check_endpoint_url(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("http://user:hunter2@127.0.0.1:8080", "credentials"),
            ("http://127.0.0.1:99999", "not a port"),
            ("http://127.0.0.1:0", "not a port"),
            ("ftp://127.0.0.1:21", "http:// or https://"),
            ("127.0.0.1:8080", "http:// or https://"),
            ("http://", "URL"),
        ] {
            let e = check_endpoint_url(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains("hunter2") || bad.contains("hunter2"), "{e}");
        }
    }
}
