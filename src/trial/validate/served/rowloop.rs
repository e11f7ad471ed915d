//! The rows of one arm against a server: one OpenAI chat-completions request per row (the
//! run's prompt, `response_format` with the schema, `max_tokens` = the budget, temperature 0),
//! presets switched in blocks so that with `--models-max 1` the router evicts and reloads
//! children and a child's prompt cache saves and restores prompts, as in production. After each
//! row: `/health` sampled, `/models` read for the preset's failure and exit, and for a crash
//! the router log's new lines searched for a sanitizer report. Each row is appended to
//! `serve-rows.jsonl` as one line when it is done.

use super::logsig;
use crate::base::error::{Error, Result};
use crate::deploy::serve::client::{Answer, Server};
use crate::trial::validate::serve::{classify, Limits, Response, ServeClass};
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

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
    /// `max_tokens` and the child's context.
    pub limits: Limits,
    /// SSE requests.
    pub stream: bool,
    /// The router log (managed arms), for crash evidence.
    pub log: Option<&'a Path>,
    /// Called with the row index once a row's response headers arrived (a test hook kills a
    /// child from here, mid-stream).
    pub on_response: &'a dyn Fn(u64),
}

/// One row as recorded.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ServedRow {
    pub arm: String,
    pub row: u64,
    pub preset: String,
    pub class: String,
    pub rule: String,
    pub status: Option<u16>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub max_tokens: u64,
    pub content: Option<String>,
    pub cut: Option<String>,
    pub error_body: Option<String>,
    pub child_failed: bool,
    pub child_exit: Option<i64>,
    pub health: Option<u16>,
    pub wall_ms: f64,
    pub timings: Option<Value>,
    pub sanitizer: Vec<String>,
}

/// A row loop's result: the rows, the classified responses (for the cross-arm rule) and the
/// wall time of the requests alone.
pub(super) struct ArmRows {
    pub rows: Vec<ServedRow>,
    pub responses: Vec<(ServeClass, Response)>,
    pub health: Vec<Option<u16>>,
    pub request_secs: f64,
    pub interrupted: bool,
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
    if let Some(s) = plan.schema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "row", "schema": s, "strict": true},
        });
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

/// Run every row of `plan` on `server`, appending each to `rows_file`.
pub(super) fn run(server: &Server, plan: &RowPlan<'_>, rows_file: &Path) -> Result<ArmRows> {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(rows_file)
        .map_err(|e| Error::io("open", rows_file, e))?;
    let mut res = ArmRows {
        rows: Vec::new(),
        responses: Vec::new(),
        health: Vec::new(),
        request_secs: 0.0,
        interrupted: false,
    };
    let mut log_at = plan.log.map(logsig::len).unwrap_or(0);
    for (i, prompt) in plan.prompts.iter().enumerate() {
        if crate::sys::signal::interrupted() {
            res.interrupted = true;
            break;
        }
        let i = i as u64;
        let preset = &plan.presets[((i / plan.switch_every) as usize) % plan.presets.len()];
        let t0 = Instant::now();
        let a = server.chat(&request(plan, prompt, preset), &mut || {
            (plan.on_response)(i)
        });
        res.request_secs += t0.elapsed().as_secs_f64();
        let state = server
            .models()
            .ok()
            .and_then(|ms| ms.into_iter().find(|m| m.id == *preset));
        let health = server.health();
        let resp = Response {
            harness_error: a.harness_error.clone(),
            status: a.status,
            cut: a.cut.clone(),
            child_failed: state.as_ref().is_some_and(|m| m.failed),
            finish_reason: a.finish_reason.clone(),
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.completion_tokens,
            content: a.content.clone(),
            schema_valid: schema_valid(plan, &a),
        };
        let (class, rule) = classify(&resp, plan.limits);
        let sanitizer = match plan.log {
            Some(log) if class == ServeClass::Crash => {
                let (lines, end) = logsig::excerpt_since(log, log_at)?;
                log_at = end;
                lines
            }
            Some(log) => {
                log_at = logsig::len(log);
                Vec::new()
            }
            None => Vec::new(),
        };
        let row = ServedRow {
            arm: plan.arm.to_string(),
            row: i,
            preset: preset.clone(),
            class: class.as_str().to_string(),
            rule,
            status: a.status,
            finish_reason: a.finish_reason,
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.completion_tokens,
            max_tokens: plan.limits.max_tokens,
            content: a.content,
            cut: a.cut,
            error_body: a.error_body,
            child_failed: resp.child_failed,
            child_exit: state.and_then(|m| m.exit_code),
            health,
            wall_ms: a.wall_ms,
            timings: a.timings,
            sanitizer,
        };
        let mut line =
            serde_json::to_vec(&row).map_err(|e| Error::Internal(format!("row json: {e}")))?;
        line.push(b'\n');
        out.write_all(&line)
            .map_err(|e| Error::io("append to", rows_file, e))?;
        res.health.push(health);
        res.responses.push((class, resp));
        res.rows.push(row);
    }
    out.sync_data()
        .map_err(|e| Error::io("sync", rows_file, e))?;
    Ok(res)
}
