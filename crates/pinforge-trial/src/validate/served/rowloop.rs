//! The rows of one arm against a server: one OpenAI chat-completions request per row (the
//! run's prompt, its `grammar.gbnf` as `grammar`, `max_tokens` = the budget, temperature 0),
//! presets switched in blocks so that with `--models-max 1` the router evicts and reloads
//! children and a child's prompt cache saves and restores prompts, as in production. After each
//! row: `/health` sampled, `/models` read for the preset's failure and exit, and for a crash
//! the router log's new lines searched for a sanitizer report. Each row is appended to
//! `serve-rows.jsonl` as one line when it is done (a resumed arm continues after its last
//! complete row).
//!
//! A crash is observed a moment after the proxy answered: the router marks the preset failed
//! once it has reaped the child, and the child's sanitizer report is still being symbolized
//! and forwarded. So after a crash row `/models` is polled (up to [`FAILED_WAIT`]) until the
//! preset shows failed, and the log is read once the report's `SUMMARY:` line is there or the
//! log has stopped growing (see [`logsig::excerpt_since`]). A follow-on row (the same death
//! seen again) waits for neither.

use super::logsig;
use crate::validate::serve::follow_on;
use crate::validate::serve::{classify, router_stopped, Limits, Response, ServeClass};
use pinforge_base::error::{Error, Result};
use pinforge_deploy::serve::client::{Answer, ModelState, Server};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long `/models` is polled after a crash row for the preset to show failed.
const FAILED_WAIT: Duration = Duration::from_secs(2);

/// What a row loop needs besides the server.
pub(super) struct RowPlan<'a> {
    /// The arm's name.
    pub arm: &'a str,
    /// One prompt per row.
    pub prompts: &'a [String],
    /// Preset (model) names, switched every `switch_every` rows.
    pub presets: &'a [String],
    /// Rows per preset before the switch.
    pub switch_every: u64,
    /// The schema (parsed), when constrained.
    pub schema: Option<&'a Value>,
    /// The run's grammar (`grammar.gbnf`, from the schema), sent as the request's `grammar`.
    pub grammar: Option<&'a str>,
    /// `max_tokens` and the child's context.
    pub limits: Limits,
    /// SSE requests.
    pub stream: bool,
    /// The router log (managed arms), for crash evidence.
    pub log: Option<&'a Path>,
    /// Called with the row index once a row's response headers arrived (a test hook kills a
    /// child from here, mid-stream).
    pub on_response: &'a dyn Fn(u64),
    /// Told after every row: rows done of the arm's, with the classes so far and the rate.
    pub reporter: &'a dyn pinforge_base::progress::Reporter,
}

/// The progress message after a row: the arm, its classes so far (in rule order) and the rows
/// per second of this round's requests.
fn progress_message(arm: &str, rows: &[ServedRow], round_secs: f64, round_rows: usize) -> String {
    let mut counts: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in rows {
        *counts.entry(r.class.as_str()).or_default() += 1;
    }
    let classes: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let rate = if round_secs > 0.0 {
        round_rows as f64 / round_secs
    } else {
        0.0
    };
    format!("{arm}: {}, {rate:.1} rows/s", classes.join(", "))
}

/// One row as recorded: the facts the class rules read (so `verify` re-applies them), the
/// class and the rule that gave it, and the row's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServedRow {
    pub arm: String,
    pub row: u64,
    pub preset: String,
    pub class: String,
    pub rule: String,
    /// For a `follow-on` row: the crash row whose death it saw again.
    pub follow_on: Option<u64>,
    pub harness_error: Option<String>,
    pub schema_valid: Option<bool>,
    pub status: Option<u16>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub max_tokens: u64,
    /// The child's context the context-exhausted rule read.
    pub n_ctx: u64,
    pub content: Option<String>,
    pub cut: Option<String>,
    pub error_body: Option<String>,
    pub child_failed: bool,
    pub child_exit: Option<i64>,
    pub health: Option<u16>,
    pub wall_ms: f64,
    pub timings: Option<Value>,
    pub sanitizer: Vec<String>,
    /// The router's own lines stopping this row's preset while the row ran (issue #35);
    /// absent from rows that have none (and from rows written before the field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub router_stop: Vec<String>,
}

impl ServedRow {
    /// The facts of this row as the class rules read them.
    pub(crate) fn response(&self) -> Response {
        Response {
            harness_error: self.harness_error.clone(),
            status: self.status,
            cut: self.cut.clone(),
            child_failed: self.child_failed,
            finish_reason: self.finish_reason.clone(),
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            content: self.content.clone(),
            schema_valid: self.schema_valid,
            error_body: self.error_body.clone(),
            router_stopped: router_stopped(
                &self.router_stop,
                &self.sanitizer,
                self.child_failed,
                self.child_exit,
            ),
        }
    }

    /// The recorded class (a name no rule gives reads as `error`: `verify` names such a row).
    pub(crate) fn class(&self) -> ServeClass {
        ServeClass::parse(&self.class).unwrap_or(ServeClass::Error)
    }
}

/// A row loop's result: the rows (earlier ones of a resumed arm included) and whether an
/// interrupt cut it short.
pub(super) struct ArmRows {
    pub rows: Vec<ServedRow>,
    pub interrupted: bool,
}

impl ArmRows {
    /// The wall time of the requests alone, from the rows (so a resumed arm counts them all).
    pub(super) fn request_secs(&self) -> f64 {
        self.rows.iter().map(|r| r.wall_ms).sum::<f64>() / 1e3
    }
}

/// The request body of row `prompt` on `preset`.
pub(super) fn request(plan: &RowPlan<'_>, prompt: &str, preset: &str) -> Value {
    let mut body = json!({
        "model": preset,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": plan.limits.max_tokens,
        "temperature": 0,
        "stream": plan.stream,
    });
    if plan.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    // The run's own GBNF, not `response_format`: with a schema the server would compile a
    // grammar of its own that the run folder does not hold; with `grammar` it samples under
    // the bytes `grammar.gbnf` records (and that the in-process harness uses), so the
    // recorded grammar and its digest are what ran (issue #35). llama-server refuses a
    // request that sends both.
    if let Some(g) = plan.grammar {
        body["grammar"] = json!(g);
    }
    body
}

/// Whether `content` is valid under the schema as far as HTTP can tell: the server samples
/// under the schema's grammar, so a complete answer is valid when it parses as JSON; an answer
/// cut by the budget does not parse.
fn schema_valid(plan: &RowPlan<'_>, a: &Answer) -> Option<bool> {
    plan.schema?;
    Some(
        a.content
            .as_deref()
            .is_some_and(|c| serde_json::from_str::<Value>(c).is_ok()),
    )
}

/// Poll `/models` (bounded) until `preset` shows failed: the router marks it once it reaped
/// the child, a moment after the proxy answered the row.
fn state_after_crash(server: &Server, preset: &str) -> Option<ModelState> {
    let until = Instant::now() + FAILED_WAIT;
    loop {
        let state = preset_state(server, preset);
        // A server that reports no state (not a router) will never show one.
        let stateless = state.as_ref().is_none_or(|m| m.value.is_empty());
        if stateless || state.as_ref().is_some_and(|m| m.failed) || Instant::now() >= until {
            return state;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn preset_state(server: &Server, preset: &str) -> Option<ModelState> {
    server
        .models()
        .ok()
        .and_then(|ms| ms.into_iter().find(|m| m.id == preset))
}

/// The router log's lines a row's class asks for, from `*log_at` on (moved past them): for a
/// crash its sanitizer report and the router's own stops of `preset` in that window; for any
/// other row none (the log position moves on, so the next crash reads only its own lines).
fn log_evidence(
    log: Option<&Path>,
    class: ServeClass,
    preset: &str,
    log_at: &mut u64,
) -> Result<(Vec<String>, Vec<String>)> {
    match log {
        Some(log) if class == ServeClass::Crash => {
            let from = *log_at;
            let (lines, end) = logsig::excerpt_since(log, from)?;
            *log_at = end;
            Ok((lines, logsig::router_stop_lines(log, from, end, preset)?))
        }
        Some(log) => {
            *log_at = logsig::len(log);
            Ok((Vec::new(), Vec::new()))
        }
        None => Ok((Vec::new(), Vec::new())),
    }
}

/// Run the rows of `plan` on `server` from row `prior.len()` on (the rows a resumed arm
/// already has), appending each to `rows_file`.
pub(super) fn run(
    server: &Server,
    plan: &RowPlan<'_>,
    rows_file: &Path,
    prior: Vec<ServedRow>,
) -> Result<ArmRows> {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(rows_file)
        .map_err(|e| Error::io("open", rows_file, e))?;
    let mut res = ArmRows {
        rows: prior,
        interrupted: false,
    };
    let mut log_at = plan.log.map(logsig::len).unwrap_or(0);
    let first = res.rows.len();
    let total = plan.prompts.len() as u64;
    let round = Instant::now();
    for (i, prompt) in plan.prompts.iter().enumerate().skip(first) {
        if pinforge_sys::signal::interrupted() {
            res.interrupted = true;
            break;
        }
        let i = i as u64;
        let preset = &plan.presets[((i / plan.switch_every) as usize) % plan.presets.len()];
        let a = server.chat(&request(plan, prompt, preset), &mut || {
            (plan.on_response)(i)
        });
        let mut resp = Response {
            harness_error: a.harness_error.clone(),
            status: a.status,
            cut: a.cut.clone(),
            child_failed: false,
            finish_reason: a.finish_reason.clone(),
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.completion_tokens,
            content: a.content.clone(),
            schema_valid: schema_valid(plan, &a),
            error_body: a.error_body.clone(),
            router_stopped: false,
        };
        let prev = res.rows.last().map(|r| (r.row, r.class(), r.follow_on));
        // A follow-on is known from the answer alone; a new death is then waited for.
        let seen = classify(&resp, plan.limits).0;
        let again = follow_on(seen, &resp, prev).is_some();
        let state = if seen == ServeClass::Crash && !again {
            state_after_crash(server, preset)
        } else {
            preset_state(server, preset)
        };
        resp.child_failed = state.as_ref().is_some_and(|m| m.failed);
        let health = server.health();
        let (mut class, mut rule) = classify(&resp, plan.limits);
        let origin = follow_on(class, &resp, prev);
        if let Some(r) = origin {
            class = ServeClass::FollowOn;
            rule = format!("{rule}; the child of the crash at row {r} was not back yet");
        }
        let (sanitizer, router_stop) = log_evidence(plan.log, class, preset, &mut log_at)?;
        // A cut the router made itself, with no death shown, is its own class.
        let child_exit = state.as_ref().and_then(|m| m.exit_code);
        resp.router_stopped =
            router_stopped(&router_stop, &sanitizer, resp.child_failed, child_exit);
        if resp.router_stopped {
            (class, rule) = classify(&resp, plan.limits);
        }
        let row = ServedRow {
            arm: plan.arm.to_string(),
            row: i,
            preset: preset.clone(),
            class: class.as_str().to_string(),
            rule,
            follow_on: origin,
            harness_error: resp.harness_error,
            schema_valid: resp.schema_valid,
            status: a.status,
            finish_reason: a.finish_reason,
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.completion_tokens,
            max_tokens: plan.limits.max_tokens,
            n_ctx: plan.limits.n_ctx,
            content: a.content,
            cut: a.cut,
            error_body: a.error_body,
            child_failed: resp.child_failed,
            child_exit,
            health,
            wall_ms: a.wall_ms,
            timings: a.timings,
            sanitizer,
            router_stop,
        };
        let mut line =
            serde_json::to_vec(&row).map_err(|e| Error::Internal(format!("row json: {e}")))?;
        line.push(b'\n');
        out.write_all(&line)
            .map_err(|e| Error::io("append to", rows_file, e))?;
        res.rows.push(row);
        pinforge_base::hooks::crash_named(&format!("serve:row:{}:{i}", plan.arm));
        plan.reporter.progress(
            res.rows.len() as u64,
            total,
            &progress_message(
                plan.arm,
                &res.rows,
                round.elapsed().as_secs_f64(),
                res.rows.len() - first,
            ),
        );
    }
    plan.reporter.finish();
    out.sync_data()
        .map_err(|e| Error::io("sync", rows_file, e))?;
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Silent;
    impl pinforge_base::progress::Reporter for Silent {
        fn stage(&self, _: &str, _: &str) {}
        fn progress(&self, _: u64, _: u64, _: &str) {}
        fn finish(&self) {}
    }

    // Issue #35: the server samples under the run's recorded grammar, sent as `grammar`, and
    // never under one it would compile itself from a `response_format` schema.
    #[test]
    fn a_constrained_request_sends_the_runs_grammar_and_no_schema_to_compile() {
        let schema = json!({"type": "object"});
        let presets = vec!["tiny-a".to_string()];
        let plan = RowPlan {
            arm: "a",
            prompts: &[],
            presets: &presets,
            switch_every: 1,
            schema: Some(&schema),
            grammar: Some("root ::= \"{}\""),
            limits: Limits {
                max_tokens: 24,
                n_ctx: 512,
            },
            stream: true,
            log: None,
            on_response: &|_| {},
            reporter: &Silent,
        };
        let body = request(&plan, "hi", "tiny-a");
        assert_eq!(body["grammar"], "root ::= \"{}\"", "{body}");
        assert!(body.get("response_format").is_none(), "{body}");
        assert_eq!(body["max_tokens"], 24);
        assert_eq!(body["stream_options"]["include_usage"], true);
        let free = RowPlan {
            schema: None,
            grammar: None,
            ..plan
        };
        assert!(request(&free, "hi", "tiny-a").get("grammar").is_none());
    }
}
