//! A served run folder in the report (issue #35 item 4): `validate --serve` / `--endpoint`
//! leaves `serve-evidence.json`, `serve-summary.json`, `serve-rows.jsonl` and the router logs.
//! The page shows the same evidence `verify` re-checks: the verdict with the share of `ok`
//! rows, a timeline per arm, every served class apart (a crash is a death; `follow-on` and
//! `router-stop` rows are not, and `token-budget` rows are the budget's), the onset, each arm's
//! identity before and after its round (the binary and the libraries it mapped), and for each
//! crash row the router log's own lines (the sanitizer report) and for each router-stop row
//! the router's stop lines.

use super::load::read_bounded;
use super::{Claim, EvidenceItem, Latency, Report, Status, Timeline};
use crate::validate::rows::Outcome;
use crate::validate::serve::ServeClass;
use crate::validate::served::{evidence, state, Identity, ServeArm, ServedRow};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A served run folder read whole, and its evidence checked now.
pub(crate) struct ServedView {
    /// The folder.
    pub dir: PathBuf,
    /// Run id (the folder's name).
    pub run: String,
    /// The stored summary.
    pub summary: StoredSummary,
    /// Rows per arm as recorded.
    pub rows: BTreeMap<String, Vec<ServedRow>>,
    /// Rows per arm the run's settings asked for.
    pub span: u64,
    /// `verify` of the folder, now.
    pub check: crate::validate::evidence::EvidenceCheck,
    /// sha256 of serve-evidence.json as read.
    pub evidence_sha256: Sha256,
}

/// `serve-summary.json`.
#[derive(Deserialize)]
pub(crate) struct StoredSummary {
    /// `serve` or `endpoint`.
    pub mode: String,
    /// SSE requests.
    #[serde(default)]
    pub stream: bool,
    /// The share of ok rows the candidate needed (absent in runs before `--min-ok`).
    #[serde(default)]
    pub min_ok: Option<f64>,
    /// Per arm.
    pub arms: Vec<ServeArm>,
}

/// The largest rows file read (a 200-row A/B with its sanitizer excerpts is a few MB).
const MAX_ROWS_BYTES: u64 = 512 << 20;

/// Read the served run folder `dir`: a run that did not finish has no evidence to show.
pub(crate) fn load(dir: &Path) -> Result<ServedView> {
    let ev = dir.join(evidence::EVIDENCE);
    if std::fs::symlink_metadata(&ev).is_err() {
        return Err(Error::input(
            dir.display(),
            "is a served run that did not finish (no serve-evidence.json): there is no evidence to report",
        )
        .with_hint("continue it with `pinforge validate --serve … --resume RUN`"));
    }
    let (evidence_sha256, _) = Sha256::of_file(&ev)?;
    let sum_p = dir.join("serve-summary.json");
    let summary: StoredSummary = serde_json::from_slice(&read_bounded(&sum_p)?)
        .map_err(|e| Error::input(sum_p.display(), format!("not a served run's summary: {e}")))?;
    let names: Vec<String> = summary.arms.iter().map(|a| a.name.clone()).collect();
    let rows_p = dir.join("serve-rows.jsonl");
    let f = pinforge_base::fsx::open_regular(&rows_p, "rows file", false)?;
    let size = f
        .metadata()
        .map_err(|e| Error::io("stat", &rows_p, e))?
        .len();
    if size > MAX_ROWS_BYTES {
        return Err(Error::input(
            rows_p.display(),
            format!("is {size} bytes, more than the {MAX_ROWS_BYTES} a report reads"),
        ));
    }
    let bytes = pinforge_base::fsx::read(&rows_p)?;
    let rows = state::parse_rows(&bytes, &rows_p, &names)?.by_arm;
    let settings_p = dir.join("settings.json");
    let span = serde_json::from_slice::<serde_json::Value>(&read_bounded(&settings_p)?)
        .ok()
        .and_then(|v| v["rows"].as_u64())
        .unwrap_or_else(|| rows.values().map(|r| r.len() as u64).max().unwrap_or(0));
    let check = evidence::verify(dir)?;
    Ok(ServedView {
        dir: dir.to_path_buf(),
        run: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        summary,
        rows,
        span,
        check,
        evidence_sha256,
    })
}

/// One served arm on the page.
#[derive(Debug, Clone)]
pub(crate) struct ServedArm {
    /// `run · arm`.
    pub label: String,
    /// Rows per served class, every class, in rule order.
    pub counts: Vec<(&'static str, u64)>,
    /// The first crash row.
    pub onset: Option<u64>,
    /// What identified the arm's processes: `(round, what, value)`.
    pub identity: Vec<(String, String, String)>,
    /// Crash rows with the router log's lines for each.
    pub crashes: Vec<RowLines>,
    /// Router-stop rows with the router's stop lines.
    pub stops: Vec<RowLines>,
}

/// A row and the log lines that are its evidence.
#[derive(Debug, Clone)]
pub(crate) struct RowLines {
    /// Row index.
    pub row: u64,
    /// Preset it went to.
    pub preset: String,
    /// The class rule that gave its class.
    pub rule: String,
    /// The lines.
    pub lines: Vec<String>,
}

/// The colour class a served row is drawn with on the shared timeline: the four the engine's
/// rows have, and grey (`error`, never counted against a build) for the rows that are not a
/// build's answer or death: follow-on, router-stop, context-exhausted, semantic-output-absent.
fn drawn_as(c: ServeClass) -> Outcome {
    match c {
        ServeClass::Ok => Outcome::Ok,
        ServeClass::Crash => Outcome::Crash,
        ServeClass::TokenBudget => Outcome::TokenBudget,
        ServeClass::Mismatch => Outcome::Mismatch,
        _ => Outcome::Error,
    }
}

/// Identity lines of one round: every binary, every mapped library, the model, the build.
fn identity_lines(round: &str, id: &Identity) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (role, sha) in &id.exe {
        out.push((round.into(), format!("{role} binary"), sha.clone()));
    }
    for (lib, sha) in &id.mapped {
        out.push((round.into(), format!("mapped {lib}"), sha.clone()));
    }
    if !id.model_sha256.is_empty() {
        out.push((round.into(), "model".into(), id.model_sha256.clone()));
    }
    if !id.build.is_empty() {
        out.push((round.into(), "/props build".into(), id.build.clone()));
    }
    out
}

/// The verdict the run's summary gives, as `validate` words it.
fn verdict(v: &ServedView) -> (String, String) {
    let Some(c) = v.summary.arms.last() else {
        return ("none".into(), "no arm ran".into());
    };
    let min_ok = v.summary.min_ok.unwrap_or(0.0);
    let ok = c.counts.get("ok").copied().unwrap_or(0);
    let crash = c.counts.get("crash").copied().unwrap_or(0);
    let mismatch = c.counts.get("mismatch").copied().unwrap_or(0);
    let share = c.ok_fraction();
    let passed = crash == 0 && mismatch == 0 && share >= min_ok;
    let word = if passed { "passed" } else { "failed" };
    let mut why = format!(
        "{}: {crash} crash row(s), {mismatch} mismatch row(s); {ok} of {} rows ok ({:.0}%, at least {:.0}% needed)",
        c.name,
        c.rows,
        share * 100.0,
        min_ok * 100.0
    );
    if passed && ok == 0 {
        why.push_str("; no row completed: the verdict rests on crashes alone");
    }
    (word.into(), why)
}

/// Put a served run into the report.
pub(crate) fn add(r: &mut Report, v: &ServedView) {
    let (word, why) = verdict(v);
    let mut facts = vec![
        ("mode".to_string(), v.summary.mode.clone()),
        ("streaming".to_string(), v.summary.stream.to_string()),
    ];
    for a in &v.summary.arms {
        let classes: Vec<String> = ServeClass::ALL
            .iter()
            .map(|c| (c.as_str(), a.counts.get(c.as_str()).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        facts.push((
            format!("{} rows", a.name),
            format!("{}: {}", a.rows, classes.join(", ")),
        ));
    }
    r.claims.push(Claim {
        title: format!("Served run {} ({})", v.run, v.summary.mode),
        verdict: word,
        reason: Some(why),
        facts,
        ..Claim::default()
    });
    for a in &v.summary.arms {
        let label = format!("{} · {}", v.run, a.name);
        let rows = v.rows.get(&a.name).map(Vec::as_slice).unwrap_or(&[]);
        let mut marks: Vec<(u64, Outcome)> =
            rows.iter().map(|x| (x.row, drawn_as(x.class()))).collect();
        marks.sort_by_key(|m| m.0);
        // The finer served class names the mark where it is drawn as another outcome.
        let names = rows
            .iter()
            .map(|x| (x.row, x.class()))
            .filter(|(_, c)| drawn_as(*c).as_str() != c.as_str())
            .map(|(row, c)| (row, c.as_str()))
            .collect();
        r.timelines.push(Timeline {
            label: label.clone(),
            span: v.span,
            marks,
            onset: a.onset_row,
            names,
        });
        let mut wall: Vec<f64> = rows
            .iter()
            .filter(|x| x.class() != ServeClass::Error)
            .map(|x| x.wall_ms)
            .collect();
        wall.sort_by(f64::total_cmp);
        r.latency.push(Latency {
            label: label.clone(),
            wall_ms: wall,
        });
        let lines_of = |class: ServeClass, pick: fn(&ServedRow) -> &Vec<String>| {
            rows.iter()
                .filter(|x| x.class() == class)
                .map(|x| RowLines {
                    row: x.row,
                    preset: x.preset.clone(),
                    rule: x.rule.clone(),
                    lines: pick(x).clone(),
                })
                .collect::<Vec<_>>()
        };
        let mut identity = identity_lines("before", &a.identity_before);
        identity.extend(identity_lines("after", &a.identity_after));
        r.served.push(ServedArm {
            label,
            counts: ServeClass::ALL
                .iter()
                .map(|c| (c.as_str(), a.counts.get(c.as_str()).copied().unwrap_or(0)))
                .collect(),
            onset: a.onset_row,
            identity,
            crashes: lines_of(ServeClass::Crash, |x| &x.sanitizer),
            stops: lines_of(ServeClass::RouterStop, |x| &x.router_stop),
        });
    }
    let c = &v.check;
    let detail = if c.ok {
        format!("{} checks pass", c.checked.len())
    } else {
        let m: Vec<String> = c
            .mismatches
            .iter()
            .map(|m| format!("{}: {}", m.path, m.actual))
            .collect();
        m.join("; ")
    };
    r.evidence.push(EvidenceItem {
        path: super::shown_path(&v.dir.join(evidence::EVIDENCE)),
        role: format!("served run {} ({})", v.run, v.summary.mode),
        sha256: v.evidence_sha256.to_string(),
        status: if c.ok { Status::Pass } else { Status::Fail },
        detail,
    });
    if let Some(cand) = v.summary.arms.last() {
        if cand.counts.get("ok").copied().unwrap_or(0) == 0 {
            r.coverage.push(format!(
                "served run {}: no row of {} completed (0 ok); its verdict rests on crashes alone",
                v.run, cand.name
            ));
        }
    }
    if v.summary.mode == "endpoint" {
        r.coverage.push(format!(
            "served run {}: an endpoint's identity is what it reports (/props), not a hash pinforge took",
            v.run
        ));
    }
}
