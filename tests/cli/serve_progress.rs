//! Issue #35 item 5: a served arm shows its progress. On a terminal (a pseudo-terminal from
//! util-linux `script`) an indicatif bar with the row count, the classes so far and the rate;
//! in a log (stderr a pipe) a line each tenth of the rows, as the in-process validate and the
//! build print, since silence for minutes reads as a hang; under `-q` nothing.

use crate::serve_fake::{json_reply, Fake};
use crate::{code, in_test_env, pinforge_cmd, pinforge_exe, skip, stderr};
use std::sync::Arc;

/// A server whose every row completes (`{"ok": true}`, finish `stop`).
fn ok_server() -> Fake {
    Fake::start(Arc::new(|method, path, _body| {
        match (method, path.split('?').next().unwrap_or("")) {
            ("GET", "/health") => json_reply(serde_json::json!({"status": "ok"})),
            ("GET", "/models") => json_reply(serde_json::json!({
                "data": [{"id": "fake-a", "status": {"value": "loaded"}}]
            })),
            ("GET", "/props") => json_reply(serde_json::json!({"build_info": "b1-fake"})),
            ("POST", "/v1/chat/completions") => json_reply(serde_json::json!({
                "choices": [{"finish_reason": "stop", "message": {"content": "{\"ok\": true}"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}
            })),
            _ => crate::serve_fake::http(404, "", b"{}"),
        }
    }))
}

const ROWS: &str = "20";

fn args(url: &str) -> Vec<String> {
    [
        "validate",
        "--endpoint",
        url,
        "--rows",
        ROWS,
        "--budget",
        "8",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn a_served_arm_shows_a_bar_on_a_terminal_lines_in_a_log_and_nothing_under_q() {
    let ws = crate::serve_fake::ws();
    let fake = ok_server();
    // In a log: a line per tenth, each with the arm's classes and rate.
    let o = pinforge_cmd(&ws.ws)
        .args(args(&fake.url))
        .env("PINFORGE_ENDPOINT_API_KEY", "")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("(20/20)")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("rows 100%") && lines[0].contains("endpoint: ok 20, "),
        "{err}"
    );
    assert!(lines[0].contains(" rows/s"), "{err}");
    assert!(err.contains("(2/20)") && err.contains("rows  10%"), "{err}");
    // The verdict states the share of ok rows.
    let out = crate::stdout(&o);
    assert!(
        out.contains("verdict: endpoint passed: no crash and no mismatch; 20 of 20 rows ok"),
        "{out}"
    );
    // Under -q: no progress at all.
    let o = pinforge_cmd(&ws.ws)
        .arg("-q")
        .args(args(&fake.url))
        .env("PINFORGE_ENDPOINT_API_KEY", "")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("rows"), "{}", stderr(&o));
    // On a terminal: the bar, redrawn, with the counter and the classes.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("util-linux `script` (a pseudo-terminal) is not installed");
        return;
    }
    let quoted: Vec<String> = std::iter::once(pinforge_exe().to_string())
        .chain(args(&fake.url))
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let o = in_test_env("script", &ws.ws)
        .args(["-qfec", &quoted.join(" "), "/dev/null"])
        .env("PINFORGE_ENDPOINT_API_KEY", "")
        .env("TERM", "xterm")
        .output()
        .expect("run script");
    let tty = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 0, "{tty}");
    assert!(tty.contains("rows ["), "the bar: {tty:?}");
    assert!(
        tty.contains("/20") && tty.contains("endpoint: ok "),
        "{tty:?}"
    );
    assert!(
        !tty.contains("rows  10%"),
        "no log lines on a terminal: {tty:?}"
    );
}
