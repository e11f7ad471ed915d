//! `validate --serve` and `validate --endpoint` (issue #20): the same rows sent over HTTP to a
//! real `llama-server`, each row classified by [`super::serve`]'s rules with its evidence.
//!
//! Managed (`--serve`): per arm, the arm's own `bin/llama-server` in router mode over the run's
//! `presets.ini` (two presets of one model, `--models-max 1`, the incident's prompt-cache and
//! slot settings by default), one arm after the other, each stopped (with its children) before
//! the next starts. Identity before and after each arm's round; a drift is exit 1 naming what
//! changed. Endpoint (`--endpoint URL`): a server pinforge did not start; the same rows over
//! the presets its `/models` lists, recorded as mode `endpoint` with the identity it reports.
//!
//! The run folder is a validate run folder (`settings.json`, `prompts.jsonl`, `model.gguf`,
//! `schema.json`) plus `presets.ini`, `router-ARM.log` (managed), `serve-rows.jsonl` (one line
//! per arm and row, the arm's own class), `serve-summary.json` (the counts, with the cross-arm
//! `mismatch` rule applied) and `serve-evidence.json` (sha256 of every file, written last).

mod logsig;
mod router;
mod rowloop;

use super::run_dir::{canonical, Inputs, RunDir};
use super::serve::{against_other_arm, Limits, ServeClass};
use super::Options;
use crate::base::digest::Sha256;
use crate::base::error::{Error, Result};
use crate::base::fsx;
use crate::base::progress::Reporter;
use crate::deploy::serve::client::Server;
use crate::deploy::serve::preset::{PresetConfig, INCIDENT_SIMILARITY};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use router::Identity;

/// Where the rows go.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Start each arm's own router.
    Managed {
        /// `--cache-ram` MiB (the incident: 8192, upstream's default).
        cache_ram_mib: u64,
        /// `--slot-prompt-similarity` (the incident: 0.3).
        similarity: f64,
    },
    /// An operator's server.
    Endpoint {
        /// Base URL.
        url: String,
        /// API key (from the environment), sent as a Bearer token.
        api_key: Option<String>,
    },
}

/// The incident's host-RAM prompt cache.
pub(crate) const INCIDENT_CACHE_RAM: u64 = 8192;
/// The incident's slot similarity.
pub(crate) const DEFAULT_SIMILARITY: f64 = INCIDENT_SIMILARITY;

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// Rows, prompts, schema, budget, model and arms as `validate` takes them (the arms are
    /// unused for an endpoint).
    pub base: Options,
    /// Managed or endpoint.
    pub target: Target,
    /// SSE requests.
    pub stream: bool,
    /// Rows per preset before switching.
    pub switch_every: u64,
}

/// One arm's summary.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct ServeArm {
    /// Arm name (layer, variant, or `endpoint`).
    pub name: String,
    /// `serve` or `endpoint`.
    pub mode: String,
    /// The binary (managed) or the URL (endpoint).
    pub server: String,
    /// The URL the rows went to (a managed router's loopback port is free again at the end).
    pub url: String,
    /// The candidate (second) arm.
    pub candidate: bool,
    /// Rows run.
    pub rows: u64,
    /// Rows per class, every class present.
    pub counts: BTreeMap<String, u64>,
    /// The first crash row.
    pub onset_row: Option<u64>,
    /// Sanitizer signatures in the arm's router log, with how many reports each.
    pub signatures: BTreeMap<String, u64>,
    /// `/health` after each row: samples per status (`none` when nothing answered).
    pub health: BTreeMap<String, u64>,
    /// Identity before the round.
    pub identity_before: Identity,
    /// Identity after the round.
    pub identity_after: Identity,
    /// Rows per second of the requests alone.
    pub rows_per_second: f64,
}

/// What one `validate --serve` / `--endpoint` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct ServeReport {
    /// `serve` or `endpoint`: an endpoint run is never a managed one.
    pub mode: String,
    /// Run id.
    pub run: String,
    /// Run folder.
    pub run_dir: PathBuf,
    /// SSE requests.
    pub stream: bool,
    /// Per arm.
    pub arms: Vec<ServeArm>,
    /// The run was interrupted (Ctrl-C): the rows are partial.
    pub interrupted: bool,
    /// In words.
    pub verdict: String,
    /// `serve-evidence.json`.
    pub evidence: PathBuf,
    /// Its sha256.
    pub evidence_sha256: Sha256,
}

impl ServeReport {
    /// The candidate (last arm) has no crash and, with two arms, no mismatch.
    pub(crate) fn passed(&self) -> bool {
        !self.interrupted
            && self
                .arms
                .last()
                .is_some_and(|a| a.counts["crash"] == 0 && a.counts["mismatch"] == 0)
    }
}

/// Preset names: every row alternates between these children.
const PRESETS: [&str; 2] = ["tiny-a", "tiny-b"];

/// Run a served validation.
pub(crate) fn run(o: &ServeOptions, reporter: &dyn Reporter) -> Result<ServeReport> {
    super::check_options(&o.base)?;
    if o.switch_every == 0 {
        return Err(Error::input("--switch-every 0", "must be at least 1"));
    }
    let inputs = Inputs::load(&o.base)?;
    let schema: Option<serde_json::Value> = match &inputs.schema {
        Some((t, _)) => Some(
            serde_json::from_str(t)
                .map_err(|e| Error::input("--schema", format!("not JSON: {e}")))?,
        ),
        None => None,
    };
    let ws = crate::base::workspace::Workspace::new(&o.base.workspace)?;
    super::run_dir::check_folder(ws.root(), None)?;
    let arms = match &o.target {
        Target::Managed { .. } => super::arm::resolve_arms(&o.base.arms)?,
        Target::Endpoint { .. } => Vec::new(),
    };
    let servers: Vec<router::ArmServer> = arms
        .iter()
        .map(|a| router::server_of(&a.target.root, &a.record.manifest))
        .collect::<Result<_>>()?;
    crate::sys::signal::catch_interrupts();
    let run = RunDir::open(&o.base, ws.root(), &inputs, &arms)?;
    let limits = Limits {
        max_tokens: o.base.budget as u64,
        n_ctx: super::engine::N_CTX as u64,
    };
    let rows_file = run.dir.join("serve-rows.jsonl");
    let mut done: Vec<(ServeArm, rowloop::ArmRows)> = Vec::new();
    let mode = match &o.target {
        Target::Managed {
            cache_ram_mib,
            similarity,
        } => {
            let cfg = PresetConfig {
                model: run.settings.model.clone(),
                names: PRESETS.iter().map(|s| s.to_string()).collect(),
                ctx: limits.n_ctx as u32,
                parallel: 1,
                cache_ram_mib: Some(*cache_ram_mib),
                slot_prompt_similarity: *similarity,
            };
            let preset_file = run.dir.join("presets.ini");
            fsx::write_atomic(&preset_file, cfg.to_ini()?.as_bytes())?;
            for (i, (a, srv)) in arms.iter().zip(&servers).enumerate() {
                reporter.stage(
                    "validate",
                    &format!("arm {}: router {}", a.record.name, srv.bin.display()),
                );
                let managed = ManagedArm {
                    name: &a.record.name,
                    server: srv,
                    preset_file: &preset_file,
                    model: &run.settings.model,
                    log: run.dir.join(format!("router-{}.log", a.record.name)),
                };
                let arm = managed.run(o, &inputs.prompts, schema.as_ref(), limits, &rows_file)?;
                let mut arm = arm;
                arm.0.candidate = i + 1 == arms.len();
                let stop = arm.1.interrupted;
                done.push(arm);
                if stop {
                    break;
                }
            }
            "serve"
        }
        Target::Endpoint { url, api_key } => {
            let s = Server::new(url, api_key.clone(), o.base.timeout);
            let mut arm = endpoint_arm(o, &s, &inputs.prompts, schema.as_ref(), &rows_file)?;
            arm.0.candidate = true;
            done.push(arm);
            "endpoint"
        }
    };
    finish(run, mode, o.stream, done)
}

/// Apply the cross-arm rule, count, write the summary and the evidence.
fn finish(
    run: RunDir,
    mode: &str,
    stream: bool,
    mut done: Vec<(ServeArm, rowloop::ArmRows)>,
) -> Result<ServeReport> {
    let interrupted = done.iter().any(|(_, r)| r.interrupted) || done.is_empty();
    let classes: Vec<Vec<ServeClass>> = (0..done.len())
        .map(|i| {
            let other = done.get(1 - i.min(1)).filter(|_| done.len() == 2);
            done[i]
                .1
                .responses
                .iter()
                .enumerate()
                .map(
                    |(row, (c, r))| match other.and_then(|o| o.1.responses.get(row)) {
                        Some((oc, or)) => against_other_arm((*c, r), (*oc, or)),
                        None => *c,
                    },
                )
                .collect()
        })
        .collect();
    for ((arm, rows), cls) in done.iter_mut().zip(&classes) {
        arm.counts = count(cls);
        arm.onset_row = cls
            .iter()
            .position(|c| *c == ServeClass::Crash)
            .map(|p| p as u64);
        arm.rows = cls.len() as u64;
        arm.health = health_counts(&rows.health);
    }
    let arms: Vec<ServeArm> = done.into_iter().map(|(a, _)| a).collect();
    let summary = canonical(&serde_json::json!({"mode": mode, "stream": stream, "arms": arms}))?;
    fsx::write_atomic(&run.dir.join("serve-summary.json"), &summary)?;
    let (evidence, evidence_sha256) = write_evidence(&run.dir, mode)?;
    let mut report = ServeReport {
        mode: mode.to_string(),
        run: run.id,
        run_dir: run.dir,
        stream,
        arms,
        interrupted,
        verdict: String::new(),
        evidence,
        evidence_sha256,
    };
    report.verdict = verdict(&report);
    Ok(report)
}

fn verdict(r: &ServeReport) -> String {
    if r.interrupted {
        return "interrupted: the rows are partial".into();
    }
    let Some(c) = r.arms.last() else {
        return "no arm ran".into();
    };
    if r.passed() {
        format!("{} passed: no crash and no mismatch", c.name)
    } else {
        format!(
            "{} failed: {} crash row(s), {} mismatch row(s)",
            c.name, c.counts["crash"], c.counts["mismatch"]
        )
    }
}

/// Every class with its count (zero included: one key per class).
fn count(cls: &[ServeClass]) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = [
        ServeClass::Ok,
        ServeClass::Crash,
        ServeClass::TokenBudget,
        ServeClass::ContextExhausted,
        ServeClass::SemanticOutputAbsent,
        ServeClass::Mismatch,
        ServeClass::Error,
    ]
    .iter()
    .map(|c| (c.as_str().to_string(), 0))
    .collect();
    for c in cls {
        *m.entry(c.as_str().to_string()).or_insert(0) += 1;
    }
    m
}

fn health_counts(h: &[Option<u16>]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for s in h {
        let k = s.map(|s| s.to_string()).unwrap_or_else(|| "none".into());
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// The files a served run's evidence covers, when present.
const EVIDENCE_FILES: &[&str] = &[
    "settings.json",
    "prompts.jsonl",
    "schema.json",
    "model.gguf",
    "presets.ini",
    "serve-rows.jsonl",
    "serve-summary.json",
];

fn write_evidence(dir: &Path, mode: &str) -> Result<(PathBuf, Sha256)> {
    let mut files = BTreeMap::new();
    let mut names: Vec<String> = EVIDENCE_FILES.iter().map(|s| s.to_string()).collect();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("router-") && n.ends_with(".log") {
            names.push(n);
        }
    }
    names.sort();
    for n in names {
        let p = dir.join(&n);
        if p.is_file() {
            files.insert(n, Sha256::of_file(&p)?.0);
        }
    }
    let doc = canonical(&serde_json::json!({
        "schema": "pinforge.validate-serve-evidence/v1",
        "mode": mode,
        "files": files,
    }))?;
    let p = dir.join("serve-evidence.json");
    fsx::write_atomic(&p, &doc)?;
    Ok((p, Sha256::of_bytes(&doc)))
}

/// One managed arm's round.
struct ManagedArm<'a> {
    name: &'a str,
    server: &'a router::ArmServer,
    preset_file: &'a Path,
    model: &'a Path,
    log: PathBuf,
}

impl ManagedArm<'_> {
    fn run(
        &self,
        o: &ServeOptions,
        prompts: &[String],
        schema: Option<&serde_json::Value>,
        limits: Limits,
        rows_file: &Path,
    ) -> Result<(ServeArm, rowloop::ArmRows)> {
        let r = router::start(self.server, self.preset_file, &self.log, o.base.timeout)?;
        let before = router::identity(&r, self.model, self.preset_file, PRESETS[0])?;
        check_drift(self.name, &before, &before, &self.server.recorded)?;
        let presets: Vec<String> = PRESETS.iter().map(|s| s.to_string()).collect();
        let kill_at = crate::base::hooks::serve_kill_child_at();
        let leader = r.group.pid();
        let group = &r.group;
        let on_response = move |i: u64| {
            if kill_at == Some(i) {
                for pid in group.members().into_iter().filter(|p| *p != leader) {
                    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                    }
                }
            }
        };
        let plan = rowloop::RowPlan {
            arm: self.name,
            prompts,
            presets: &presets,
            switch_every: o.switch_every,
            schema,
            limits,
            stream: o.stream,
            log: Some(&r.log),
            on_response: &on_response,
        };
        let rows = rowloop::run(&r.server, &plan, rows_file)?;
        let url = r.server.base().to_string();
        let after = router::identity(&r, self.model, self.preset_file, PRESETS[0])?;
        check_drift(self.name, &before, &after, &self.server.recorded)?;
        drop(r);
        let signatures = logsig::signatures_in(&self.log)?;
        let secs = rows.request_secs.max(1e-9);
        Ok((
            ServeArm {
                name: self.name.to_string(),
                mode: "serve".into(),
                server: self.server.bin.display().to_string(),
                url,
                candidate: false,
                rows: 0,
                counts: BTreeMap::new(),
                onset_row: None,
                signatures,
                health: BTreeMap::new(),
                identity_before: before,
                identity_after: after,
                rows_per_second: rows.rows.len() as f64 / secs,
            },
            rows,
        ))
    }
}

fn check_drift(arm: &str, before: &Identity, after: &Identity, rec: &Sha256) -> Result<()> {
    let d = router::drift(before, after, rec);
    if d.is_empty() {
        Ok(())
    } else {
        Err(Error::check(format!("arm {arm}"), d.join("; "))
            .with_hint("the served build is not the one this run was started against"))
    }
}

/// The endpoint's identity: what it reports (never a hash pinforge took).
fn endpoint_identity(s: &Server, preset: &str) -> Identity {
    let props = s
        .props(Some(preset))
        .or_else(|_| s.props(None))
        .unwrap_or_default();
    Identity {
        exe: BTreeMap::new(),
        model_sha256: String::new(),
        preset_sha256: String::new(),
        build: props["build_info"].as_str().unwrap_or_default().to_string(),
    }
}

/// The context per slot the endpoint reports (`/props` `default_generation_settings.n_ctx`,
/// of the first model, or of the server itself), for the context-exhausted rule; the tiny
/// model's context when it reports none.
fn endpoint_n_ctx(s: &Server, preset: &str) -> u64 {
    [s.props(Some(preset)).ok(), s.props(None).ok()]
        .into_iter()
        .flatten()
        .find_map(|p| {
            p["default_generation_settings"]["n_ctx"]
                .as_u64()
                .filter(|n| *n > 0)
        })
        .unwrap_or(super::engine::N_CTX as u64)
}

fn endpoint_arm(
    o: &ServeOptions,
    s: &Server,
    prompts: &[String],
    schema: Option<&serde_json::Value>,
    rows_file: &Path,
) -> Result<(ServeArm, rowloop::ArmRows)> {
    s.wait_healthy(Duration::from_secs(30), &mut || true)?;
    let presets: Vec<String> = s.models()?.into_iter().map(|m| m.id).collect();
    if presets.is_empty() {
        return Err(Error::check(
            s.base(),
            "/models lists no model to send rows to",
        ));
    }
    let before = endpoint_identity(s, &presets[0]);
    let plan = rowloop::RowPlan {
        arm: "endpoint",
        prompts,
        presets: &presets,
        switch_every: o.switch_every,
        schema,
        limits: Limits {
            max_tokens: o.base.budget as u64,
            n_ctx: endpoint_n_ctx(s, &presets[0]),
        },
        stream: o.stream,
        log: None,
        on_response: &|_| {},
    };
    let rows = rowloop::run(s, &plan, rows_file)?;
    let after = endpoint_identity(s, &presets[0]);
    // An endpoint that stopped answering reports no build: that is the rows' finding (crash,
    // then harness errors), not a drift.
    if !before.build.is_empty() && !after.build.is_empty() && before.build != after.build {
        return Err(Error::check(
            s.base(),
            format!("/props build changed: {} -> {}", before.build, after.build),
        ));
    }
    let secs = rows.request_secs.max(1e-9);
    Ok((
        ServeArm {
            name: "endpoint".into(),
            mode: "endpoint".into(),
            server: s.base().to_string(),
            url: s.base().to_string(),
            candidate: true,
            rows: 0,
            counts: BTreeMap::new(),
            onset_row: None,
            signatures: BTreeMap::new(),
            health: BTreeMap::new(),
            identity_before: before,
            identity_after: after,
            rows_per_second: rows.rows.len() as f64 / secs,
        },
        rows,
    ))
}
