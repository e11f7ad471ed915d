//! Issue #35, item 6: `validate --endpoint` reads a hostile chat answer with bounds and names
//! what it was. A 256 MiB SSE line is the endpoint's `error` after 1 MiB (peak memory of the
//! pinforge process checked from /proc while it runs), bytes that are not UTF-8 are an
//! `error` with the start kept, an HTML 500 page is the proxy's `crash` with its body kept,
//! a stream cut mid-event is a `cut`, and a stream that never ends is a crash whose rule says
//! `hang`. None of these may be a silent success or a tool crash (exit 2+ or a panic).

use crate::serve_fake::{http, json_reply, ws, Fake, Reply};
use crate::{pinforge_cmd, stderr};
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The SSE response head; the body follows and the connection closes after it.
const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

/// A crafted chat answer.
type Chat = Arc<dyn Fn() -> Reply + Send + Sync>;

/// One hostile case: what it is, the answer, extra flags, the class and what the rule says.
type Case = (
    &'static str,
    Chat,
    &'static [&'static str],
    &'static str,
    &'static str,
);

/// A fake whose chat answer is `chat()`, the rest as a well-behaved llama-server.
fn chat_fake(chat: Chat) -> Fake {
    Fake::start(Arc::new(move |method, path, _| {
        match (method, path.split('?').next().unwrap_or("")) {
            ("GET", "/health") => json_reply(serde_json::json!({"status": "ok"})),
            ("GET", "/models") => json_reply(serde_json::json!({"data": [{"id": "m"}]})),
            ("GET", "/props") => json_reply(serde_json::json!({
                "build_info": "b1-fake",
                "default_generation_settings": {"n_ctx": 256}
            })),
            ("POST", "/v1/chat/completions") => chat(),
            _ => http(404, "", b"{}"),
        }
    }))
}

/// The rows of the one run, as JSON.
fn rows(w: &crate::serve_fake::Ws) -> Vec<serde_json::Value> {
    std::fs::read_to_string(w.run_dir().join("serve-rows.jsonl"))
        .expect("rows")
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect()
}

/// Run 3 rows against `url`; the exit code, stderr, and the highest VmHWM (KiB) read while
/// it ran.
fn run(w: &crate::serve_fake::Ws, url: &str, extra: &[&str]) -> (i32, String, u64) {
    let mut c = pinforge_cmd(&w.ws);
    c.args([
        "validate",
        "--endpoint",
        url,
        "--rows",
        "3",
        "--budget",
        "8",
        "--row-timeout",
        "1",
        "--json",
    ])
    .args(extra)
    .env("PINFORGE_ENDPOINT_API_KEY", "")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn");
    let status = format!("/proc/{}/status", child.id());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d2, peak) = (done.clone(), Arc::new(AtomicU64::new(0)));
    let p2 = peak.clone();
    let poll = std::thread::spawn(move || {
        while !d2.load(Ordering::SeqCst) {
            if let Ok(t) = std::fs::read_to_string(&status) {
                if let Some(kb) = t
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    p2.fetch_max(kb, Ordering::SeqCst);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let o = child.wait_with_output().expect("wait");
    done.store(true, Ordering::SeqCst);
    poll.join().expect("poll");
    (
        o.status.code().unwrap_or(-1),
        stderr(&o),
        peak.load(Ordering::SeqCst),
    )
}

#[test]
fn issue_35_a_256_mib_sse_line_is_the_endpoints_error_after_1_mib_with_memory_bounded() {
    let written = Arc::new(AtomicU64::new(0));
    let w2 = written.clone();
    // The fake writes the line itself, counting what the client took before it hung up.
    let fake = chat_fake(Arc::new(move || {
        let w3 = w2.clone();
        Reply::Stream(Box::new(move |s: &mut dyn Write| {
            if s.write_all(SSE_HEAD).is_err() || s.write_all(b"data: {\"x\":\"").is_err() {
                return;
            }
            let chunk = vec![b'a'; 1 << 20];
            for _ in 0..256 {
                if s.write_all(&chunk).is_err() {
                    return;
                }
                w3.fetch_add(1 << 20, Ordering::SeqCst);
            }
        }))
    }));
    let w = ws();
    let (rc, err, peak_kb) = run(&w, &fake.url, &["--stream"]);
    assert!(
        rc == 0 || rc == 1,
        "a result, not a tool failure: {rc}: {err}"
    );
    let rows = rows(&w);
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in &rows {
        assert_eq!(r["class"], "error", "{r}");
        let rule = r["rule"].as_str().expect("rule");
        assert!(rule.contains("an SSE line over 1048576 bytes"), "{rule}");
        assert!(
            r["error_body"]
                .as_str()
                .is_some_and(|b| b.starts_with("data: ")),
            "{r}"
        );
    }
    // Each row's reader hung up after about 1 MiB (plus the socket buffers): of 3 x 256 MiB
    // offered, far less was taken, and the process never held the line.
    let taken = written.load(Ordering::SeqCst);
    assert!(taken < (3 * 64) << 20, "{taken} bytes were taken");
    assert!(peak_kb > 0, "VmHWM was read");
    eprintln!("256 MiB SSE line x3: {taken} bytes taken, peak resident {peak_kb} KiB");
    assert!(peak_kb < 200 * 1024, "peak resident {peak_kb} KiB");
}

#[test]
fn issue_35_malformed_html_cut_and_endless_answers_are_each_named_for_what_they_are() {
    let cases: Vec<Case> = vec![
        (
            "bytes that are not UTF-8",
            Arc::new(|| {
                http(
                    200,
                    "",
                    b"{\"choices\":[{\"finish_reason\":\"stop\",\"message\":{\"content\":\"\xff\xfe\"}}]}",
                )
            }),
            &[],
            "error",
            "not UTF-8 at byte",
        ),
        (
            "an HTML 500 page",
            Arc::new(|| {
                http(
                    500,
                    "",
                    b"<html><body><h1>500 Internal Server Error</h1></body></html>",
                )
            }),
            &[],
            "crash",
            "HTTP 500",
        ),
        (
            "a stream cut mid-event",
            Arc::new(|| {
                let mut b = SSE_HEAD.to_vec();
                b.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"content\":\"a");
                Reply::Raw(b)
            }),
            &["--stream"],
            "crash",
            "cut: ",
        ),
        (
            "a stream that never ends",
            Arc::new(|| {
                Reply::Stream(Box::new(|s: &mut dyn Write| {
                    let _ = s.write_all(SSE_HEAD);
                    let _ = s.flush();
                    std::thread::sleep(Duration::from_secs(8));
                }))
            }),
            &["--stream"],
            "crash",
            "hang",
        ),
    ];
    for (what, chat, extra, class, says) in cases {
        let fake = chat_fake(chat);
        let w = ws();
        let t0 = std::time::Instant::now();
        let (rc, err, _) = run(&w, &fake.url, extra);
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "{what}: {:?}",
            t0.elapsed()
        );
        assert!(
            rc == 0 || rc == 1,
            "{what}: a result, not a tool failure: {rc}: {err}"
        );
        let rows = rows(&w);
        assert_eq!(rows.len(), 3, "{what}: {rows:?}");
        for r in &rows {
            assert_eq!(r["class"], class, "{what}: {r}");
            let rule = r["rule"].as_str().expect("rule");
            assert!(rule.contains(says), "{what}: {rule}");
        }
        if what == "an HTML 500 page" {
            assert!(
                rows[0]["error_body"]
                    .as_str()
                    .is_some_and(|b| b.contains("<h1>500")),
                "{what}: the body is kept: {}",
                rows[0]
            );
        }
        if what == "bytes that are not UTF-8" {
            assert!(
                rows[0]["error_body"].as_str().is_some(),
                "{what}: {}",
                rows[0]
            );
        }
    }
}
