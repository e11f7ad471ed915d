//! Issue #35 item 4: `pinforge report` of a served run folder. A run against a crafted
//! endpoint (a hostile model name and answer bodies, rows that complete, die, are seen dead
//! again and stop at the budget) gives a page with every served class apart, the onset, the
//! identity of each round, each crash row's evidence, and the evidence checked now; loaded in
//! headless Chromium with no console message and one mark per row. A run that did not finish
//! is refused (exit 2), and a tampered one shows its evidence failing.

use crate::common::report::{check_in_chromium, CHROMIUM, HOSTILE};
use crate::serve_fake::{http, json_reply, Fake};
use crate::{code, pinforge, pinforge_cmd, skip, stderr, stdout};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Rows by turn of four: ok, a death (HTTP 500 as the proxy says it), the dead child not
/// back (a follow-on), a stop at the budget.
fn mixed_server() -> Fake {
    let n = Arc::new(AtomicU64::new(0));
    Fake::start(Arc::new(move |method, path, _body| {
        match (method, path.split('?').next().unwrap_or("")) {
            ("GET", "/health") => json_reply(serde_json::json!({"status": "ok"})),
            ("GET", "/models") => json_reply(serde_json::json!({
                "data": [{"id": HOSTILE, "status": {"value": "loaded"}}]
            })),
            ("GET", "/props") => json_reply(serde_json::json!({"build_info": "b1-fake"})),
            ("POST", "/v1/chat/completions") => match n.fetch_add(1, Ordering::SeqCst) % 4 {
                0 => json_reply(serde_json::json!({
                    "choices": [{"finish_reason": "stop", "message": {"content": "{\"ok\": true}"}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5}
                })),
                1 => http(
                    500,
                    "",
                    br#"{"error":{"message":"proxy error: Failed to read connection"}}"#,
                ),
                2 => http(
                    500,
                    "",
                    br#"{"error":{"message":"proxy error: Could not establish connection"}}"#,
                ),
                _ => json_reply(serde_json::json!({
                    "choices": [{"finish_reason": "length", "message": {"content": "{\"ok\": "}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 8}
                })),
            },
            _ => http(404, "", b"{}"),
        }
    }))
}

#[test]
fn report_of_a_served_run_shows_its_classes_apart_identity_and_crash_evidence() {
    let ws = crate::serve_fake::ws();
    let fake = mixed_server();
    let o = pinforge_cmd(&ws.ws)
        .args([
            "validate",
            "--endpoint",
            &fake.url,
            "--rows",
            "12",
            "--budget",
            "8",
        ])
        .env("PINFORGE_ENDPOINT_API_KEY", "")
        .output()
        .expect("run");
    assert_eq!(code(&o), 1, "crash rows fail the candidate: {}", stderr(&o));
    let dir = ws.run_dir();
    let d = dir.to_str().expect("utf8");
    let html = ws.ws.join("served.html");
    let o = pinforge(
        &ws.ws,
        &["report", d, "-o", html.to_str().expect("utf8"), "--json"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(crate::schemas::validate(&j), "pinforge.report/v1");
    assert_eq!(j["inputs"][0]["kind"], "served-run");
    assert_eq!(j["rows"], 12);
    assert_eq!(
        (j["evidence_files"].as_u64(), j["evidence_failing"].as_u64()),
        (Some(1), Some(0))
    );
    let page = std::fs::read_to_string(&html).expect("page");
    assert!(
        page.contains("<h2 id=\"served\">Served arms</h2>"),
        "{page}"
    );
    // Every class apart: 3 ok, 3 crash, 3 follow-on, 3 token-budget; onset row 1.
    let counts = page
        .split("<table class=\"served-counts\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("counts table");
    for c in ["ok", "crash", "follow-on", "router-stop", "token-budget"] {
        assert!(counts.contains(&format!("<th>{c}</th>")), "{c}: {counts}");
    }
    let cells: Vec<&str> = counts
        .split("<td class=\"n\">")
        .skip(1)
        .map(|c| c.split('<').next().unwrap_or(""))
        .collect();
    assert_eq!(
        &cells[..3],
        ["3", "3", "3"],
        "ok, crash, follow-on: {counts}"
    );
    assert_eq!(*cells.last().expect("onset"), "1", "{counts}");
    assert_eq!(page.matches("<details class=\"crash\">").count(), 3);
    let identity = page
        .split("<table class=\"identity\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or("");
    assert!(
        identity.contains("<td>/props build</td><td><code>b1-fake"),
        "identity: {identity}"
    );
    assert!(
        page.contains("<td class=\"verdict\">failed</td>")
            && page.contains("endpoint: 3 crash row(s), 0 mismatch row(s); 3 of 12 rows ok (25%"),
        "{page}"
    );
    assert!(page.contains("<title>row 2: follow-on</title>"), "{page}");
    // The engine-class table points to the served one instead of saying there are no rows.
    assert!(
        !page.contains("<p>No rows.</p>") && page.contains("<a href=\"#served\">Served arms</a>"),
        "{page}"
    );
    // The hostile model name is text, never markup.
    assert!(!page.contains(HOSTILE) && page.contains("&lt;/script&gt;"));
    // The text form carries the same.
    let o = pinforge(&ws.ws, &["report", d, "-o", "-", "--format", "text"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("Served arms") && text.contains("crash row 1 ("),
        "{text}"
    );
    assert!(text.contains("follow-on"), "{text}");
    if Path::new(CHROMIUM).exists() {
        let t = tempfile::tempdir().expect("tempdir");
        let dom = check_in_chromium(&html, t.path(), 12, &t.path().join("served.png"));
        assert!(dom.contains("Served arms"));
    } else {
        skip("chromium is not installed: the served page was not loaded in a browser");
    }
    // A tampered rows file: the page shows the evidence failing, and still renders.
    let rows = dir.join("serve-rows.jsonl");
    let t = std::fs::read_to_string(&rows).expect("rows");
    std::fs::write(
        &rows,
        t.replacen("\"class\":\"crash\"", "\"class\":\"ok\"", 1),
    )
    .expect("w");
    let o = pinforge(&ws.ws, &["report", d, "-o", "-", "--format", "text"]);
    assert_eq!(code(&o), 1, "evidence that fails its check: {}", stderr(&o));
    assert!(stdout(&o).contains("FAIL"), "{}", stdout(&o));
}

#[test]
fn report_of_a_served_run_that_did_not_finish_is_refused() {
    let ws = crate::serve_fake::ws();
    let fake = mixed_server();
    let o = pinforge_cmd(&ws.ws)
        .args(["validate", "--endpoint", &fake.url, "--rows", "4"])
        .env("PINFORGE_ENDPOINT_API_KEY", "")
        .env("PINFORGE_CRASH_AT", "serve:summary")
        .output()
        .expect("run");
    assert_ne!(code(&o), 0);
    let dir = ws.run_dir();
    let out = ws.ws.join("p.html");
    let o = pinforge(
        &ws.ws,
        &[
            "report",
            dir.to_str().expect("utf8"),
            "-o",
            out.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("did not finish"), "{}", stderr(&o));
    assert!(!out.exists(), "nothing written");
}
