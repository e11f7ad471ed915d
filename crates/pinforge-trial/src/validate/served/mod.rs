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
//!
//! The folder is one transaction ([`state`]): claimed with one `mkdir`, written as it goes, and
//! committed by the evidence, written last ([`evidence`]); a run killed (or interrupted) at any
//! step has no evidence, `verify` reports it incomplete, and `--resume ID` continues each arm
//! after its last complete row. Kill hooks (test builds only, `base::hooks`):
//! `serve:settings` (after the settings), `serve:row:ARM:K` (after row K of ARM is appended),
//! `serve:summary` (before the summary), `serve:evidence` (before the evidence).

mod endpoint;
pub mod evidence;
mod logsig;
mod router;
mod rowloop;
pub(crate) mod state;
mod tally;

use super::run_dir::{canonical, Inputs, RunDir};
use super::serve::Limits;
use super::Options;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::progress::Reporter;
use pinforge_deploy::serve::client::Server;
use pinforge_deploy::serve::preset::{PresetConfig, INCIDENT_SIMILARITY};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) use router::Identity;
pub(crate) use rowloop::ServedRow;

/// Where the rows go.
#[derive(Debug, Clone)]
pub enum Target {
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
pub const INCIDENT_CACHE_RAM: u64 = 8192;
/// The incident's slot similarity.
pub const DEFAULT_SIMILARITY: f64 = INCIDENT_SIMILARITY;
/// The fraction of the candidate's rows that must end `ok` for it to pass (`--min-ok`).
pub const DEFAULT_MIN_OK: f64 = 0.5;
/// The schema of a served run without `--schema`: one the tiny model completes within the
/// default budget (`{"ok": true}` is a handful of tokens), so that a healthy build gives `ok`
/// rows and "passed" rests on answers, not only on the absence of crashes (issue #35: with a
/// free-text or a label/score schema every row of the tiny model ends `token-budget`).
pub const DEFAULT_SERVE_SCHEMA: &str =
    r#"{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}"#;

/// What to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Rows, prompts, schema, budget, model and arms as `validate` takes them (the arms are
    /// unused for an endpoint).
    pub base: Options,
    /// Managed or endpoint.
    pub target: Target,
    /// SSE requests.
    pub stream: bool,
    /// Rows per preset before switching.
    pub switch_every: u64,
    /// The fraction of the candidate's rows that must be `ok` (0: crashes alone decide).
    pub min_ok: f64,
}

/// One arm's summary.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ServeArm {
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
pub struct ServeReport {
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
    /// The run was interrupted (Ctrl-C): the rows are partial, no evidence was written, and
    /// `--resume RUN` continues it.
    pub interrupted: bool,
    /// What a resume found and did (rows already done, a partial last row dropped).
    pub notes: Vec<String>,
    /// The fraction of the candidate's rows that had to end `ok` (`--min-ok`).
    pub min_ok: f64,
    /// In words.
    pub verdict: String,
    /// `serve-evidence.json` (None: the run was interrupted before its commit point).
    pub evidence: Option<PathBuf>,
    /// Its sha256.
    pub evidence_sha256: Option<Sha256>,
}

impl ServeReport {
    /// The candidate (last arm) has no crash, with two arms no mismatch, and at least
    /// `min_ok` of its rows `ok`.
    pub fn passed(&self) -> bool {
        !self.interrupted
            && self.arms.last().is_some_and(|a| {
                a.counts["crash"] == 0
                    && a.counts["mismatch"] == 0
                    && a.ok_fraction() >= self.min_ok
            })
    }
}

impl ServeArm {
    /// The fraction of its rows that ended `ok` (0 without rows).
    pub fn ok_fraction(&self) -> f64 {
        if self.rows == 0 {
            return 0.0;
        }
        self.counts.get("ok").copied().unwrap_or(0) as f64 / self.rows as f64
    }
}

/// Preset names: every row alternates between these children.
const PRESETS: [&str; 2] = ["tiny-a", "tiny-b"];

/// The run's inputs as `validate` reads them, with the served default schema where none was
/// given, and that schema parsed for the requests.
fn served_inputs(o: &ServeOptions) -> Result<(Inputs, Option<serde_json::Value>)> {
    if !(0.0..=1.0).contains(&o.min_ok) {
        return Err(Error::input(
            format!("--min-ok {}", o.min_ok),
            "must be a fraction from 0 to 1",
        ));
    }
    let mut inputs = Inputs::load(&o.base)?;
    if inputs.schema.is_none() {
        let g = super::grammar::schema_to_gbnf(
            DEFAULT_SERVE_SCHEMA,
            Path::new("(the served default schema)"),
        )?;
        inputs.schema = Some((DEFAULT_SERVE_SCHEMA.to_string(), g));
    }
    let schema: Option<serde_json::Value> = match &inputs.schema {
        Some((t, _)) => Some(
            serde_json::from_str(t)
                .map_err(|e| Error::input("--schema", format!("not JSON: {e}")))?,
        ),
        None => None,
    };
    Ok((inputs, schema))
}

/// Run a served validation (a fresh run, or `--resume ID`).
pub fn run(o: &ServeOptions, reporter: &dyn Reporter) -> Result<ServeReport> {
    super::check_options(&o.base)?;
    if o.switch_every == 0 {
        return Err(Error::input("--switch-every 0", "must be at least 1"));
    }
    let (inputs, schema) = served_inputs(o)?;
    let ws = pinforge_base::workspace::Workspace::new(&o.base.workspace)?;
    super::run_dir::check_folder(ws.root(), o.base.resume.as_deref())?;
    let arms = match &o.target {
        Target::Managed { .. } => super::arm::resolve_arms(&o.base.arms)?,
        Target::Endpoint { .. } => Vec::new(),
    };
    let servers: Vec<router::ArmServer> = arms
        .iter()
        .map(|a| router::server_of(&a.target.root, &a.record.manifest))
        .collect::<Result<_>>()?;
    let run = RunDir::open(&o.base, ws.root(), &inputs, &arms, true)?;
    let resuming = o.base.resume.as_deref();
    if let Some(id) = resuming {
        if std::fs::symlink_metadata(run.dir.join(evidence::EVIDENCE)).is_ok() {
            return Err(Error::input(
                format!("--resume {id}"),
                "the run is already complete (it has its serve-evidence.json)",
            )
            .with_hint(format!("`pinforge verify {}` checks it", run.dir.display())));
        }
    }
    state::settle(&run.dir, &serve_settings(o), resuming)?;
    pinforge_base::hooks::crash_named("serve:settings");
    pinforge_sys::signal::catch_interrupts();
    let limits = Limits {
        max_tokens: o.base.budget as u64,
        n_ctx: super::engine::N_CTX as u64,
    };
    let rows_file = run.dir.join("serve-rows.jsonl");
    let names: Vec<String> = match &o.target {
        Target::Managed { .. } => arms.iter().map(|a| a.record.name.clone()).collect(),
        Target::Endpoint { .. } => vec![ENDPOINT_ARM.to_string()],
    };
    let mut prior = state::resume_rows(&rows_file, &names)?;
    let mut notes = Vec::new();
    if prior.partial > 0 {
        notes.push(format!(
            "dropped the partial last line of serve-rows.jsonl ({} bytes): that row runs again",
            prior.partial
        ));
    }
    if resuming.is_some() {
        let have: Vec<String> = names
            .iter()
            .map(|n| format!("{n} {}", prior.by_arm.get(n).map_or(0, Vec::len)))
            .collect();
        notes.push(format!(
            "resumed with rows already done: {}",
            have.join(", ")
        ));
    }
    for n in &notes {
        reporter.stage("validate", n);
    }
    let ctx = RoundCtx {
        o,
        prompts: &inputs.prompts,
        schema: schema.as_ref(),
        grammar: inputs.schema.as_ref().map(|(_, g)| g.as_str()),
        rows_file: &rows_file,
        dir: &run.dir,
        reporter,
    };
    let mut done: Vec<(state::ArmRecord, rowloop::ArmRows)> = Vec::new();
    let mode = match &o.target {
        Target::Managed {
            cache_ram_mib,
            similarity,
        } => {
            let preset_file = write_presets(&run, *cache_ram_mib, *similarity, limits, resuming)?;
            for (a, srv) in arms.iter().zip(&servers) {
                let managed = ManagedArm {
                    name: &a.record.name,
                    server: srv,
                    preset_file: &preset_file,
                    model: &run.settings.model,
                    log: run.dir.join(format!("router-{}.log", a.record.name)),
                };
                let had = prior.by_arm.remove(&a.record.name).unwrap_or_default();
                let arm = managed.round(&ctx, limits, had, reporter)?;
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
            let had = prior.by_arm.remove(ENDPOINT_ARM).unwrap_or_default();
            done.push(endpoint::arm(&ctx, &s, had)?);
            "endpoint"
        }
    };
    finish(run, mode, o, done, notes)
}

/// The endpoint's one arm.
pub(super) const ENDPOINT_ARM: &str = "endpoint";

/// What every round of a run shares.
struct RoundCtx<'a> {
    o: &'a ServeOptions,
    prompts: &'a [String],
    schema: Option<&'a serde_json::Value>,
    /// The run's `grammar.gbnf` (from the schema): what the server samples under.
    grammar: Option<&'a str>,
    rows_file: &'a Path,
    dir: &'a Path,
    reporter: &'a dyn Reporter,
}

/// The served settings of these options.
fn serve_settings(o: &ServeOptions) -> state::ServeSettings {
    let (mode, endpoint, cache, sim) = match &o.target {
        Target::Managed {
            cache_ram_mib,
            similarity,
        } => ("serve", None, Some(*cache_ram_mib), Some(*similarity)),
        Target::Endpoint { url, .. } => ("endpoint", Some(url.clone()), None, None),
    };
    state::ServeSettings {
        schema: state::SETTINGS_SCHEMA.into(),
        mode: mode.into(),
        endpoint,
        stream: o.stream,
        switch_every: o.switch_every,
        cache_ram_mib: cache,
        slot_prompt_similarity: sim,
    }
}

/// Write the run's `presets.ini` (a resumed run's must be the same bytes: the children of the
/// resumed rounds load the presets the first rows ran under).
fn write_presets(
    run: &RunDir,
    cache_ram_mib: u64,
    similarity: f64,
    limits: Limits,
    resuming: Option<&str>,
) -> Result<PathBuf> {
    let cfg = PresetConfig {
        model: run.settings.model.clone(),
        names: PRESETS.iter().map(|s| s.to_string()).collect(),
        ctx: limits.n_ctx as u32,
        parallel: 1,
        cache_ram_mib: Some(cache_ram_mib),
        slot_prompt_similarity: similarity,
    };
    let ini = cfg.to_ini()?;
    let p = run.dir.join("presets.ini");
    if let (Some(id), Some(old)) = (resuming, fsx::read_if_present(&p)?) {
        if old.starts_with(b"version = 1\n") && old.ends_with(ini.as_bytes()) {
            return Err(Error::input(
                p.display(),
                "was written by an earlier pinforge: its `version = 1` line made the router serve a third preset, and its rows were sent with response_format, not the run's grammar",
            )
            .with_hint(format!(
                "start a new run instead of --resume {id}: its rows would not be one run's"
            )));
        }
        if old != ini.as_bytes() {
            return Err(Error::input(
                p.display(),
                "differs from the presets this run's settings give: it changed since the run started",
            )
            .with_hint(format!("restore it, or start a new run instead of --resume {id}")));
        }
        return Ok(p);
    }
    fsx::write_atomic(&p, ini.as_bytes())?;
    Ok(p)
}

/// Apply the cross-arm rule, count, write the summary and the evidence (the commit point). An
/// interrupted run writes neither: it is left to `--resume`.
fn finish(
    run: RunDir,
    mode: &str,
    o: &ServeOptions,
    done: Vec<(state::ArmRecord, rowloop::ArmRows)>,
    notes: Vec<String>,
) -> Result<ServeReport> {
    let interrupted = done.iter().any(|(_, r)| r.interrupted) || done.is_empty();
    let rows: Vec<&[rowloop::ServedRow]> = done.iter().map(|(_, r)| r.rows.as_slice()).collect();
    let tallies = tally::tallies(&rows);
    let mut arms = Vec::new();
    for (i, ((rec, r), t)) in done.iter().zip(tallies).enumerate() {
        let log = run.dir.join(format!("router-{}.log", rec.name));
        let signatures = if mode == "serve" {
            logsig::signatures_in(&log)?
        } else {
            BTreeMap::new()
        };
        arms.push(ServeArm {
            name: rec.name.clone(),
            mode: rec.mode.clone(),
            server: rec.server.clone(),
            url: rec.url.clone(),
            // The second arm by its place, even when an interrupted run has only the first.
            candidate: i == 1,
            rows: t.rows,
            counts: t.counts,
            onset_row: t.onset_row,
            signatures,
            health: t.health,
            identity_before: rec.identity_before.clone(),
            identity_after: rec
                .identity_after
                .clone()
                .unwrap_or_else(|| rec.identity_before.clone()),
            rows_per_second: r.rows.len() as f64 / r.request_secs().max(1e-9),
        });
    }
    let mut report = ServeReport {
        mode: mode.to_string(),
        run: run.id.clone(),
        run_dir: run.dir.clone(),
        stream: o.stream,
        arms,
        interrupted,
        notes,
        min_ok: o.min_ok,
        verdict: String::new(),
        evidence: None,
        evidence_sha256: None,
    };
    if !interrupted {
        pinforge_base::hooks::crash_named("serve:summary");
        let summary = canonical(&serde_json::json!({
            "mode": mode,
            "stream": o.stream,
            "min_ok": o.min_ok,
            "arms": report.arms,
        }))?;
        fsx::write_atomic(&run.dir.join("serve-summary.json"), &summary)?;
        pinforge_base::hooks::crash_named("serve:evidence");
        let (p, sha) = evidence::write(&run.dir, &run.id, mode)?;
        report.evidence = Some(p);
        report.evidence_sha256 = Some(sha);
    }
    report.verdict = verdict(&report);
    Ok(report)
}

fn verdict(r: &ServeReport) -> String {
    if r.interrupted {
        return format!(
            "interrupted: the rows are partial; continue with --resume {}",
            r.run
        );
    }
    let Some(c) = r.arms.last() else {
        return "no arm ran".into();
    };
    let ok = c.counts.get("ok").copied().unwrap_or(0);
    let share = format!(
        "{ok} of {} rows ok ({:.0}%, at least {:.0}% needed)",
        c.rows,
        c.ok_fraction() * 100.0,
        r.min_ok * 100.0
    );
    let bad = c.counts["crash"] > 0 || c.counts["mismatch"] > 0;
    if bad {
        format!(
            "{} failed: {} crash row(s), {} mismatch row(s); {share}",
            c.name, c.counts["crash"], c.counts["mismatch"]
        )
    } else if !r.passed() {
        format!(
            "{} failed: no crash and no mismatch, but only {share}",
            c.name
        )
    } else if ok == 0 {
        format!(
            "{} passed on crashes alone: no crash and no mismatch, and no row completed \
             (0 of {} ok; --min-ok 0)",
            c.name, c.rows
        )
    } else {
        format!("{} passed: no crash and no mismatch; {share}", c.name)
    }
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
    /// The arm's round: its router started, identity taken (and, resuming, checked against
    /// the identity the arm's first round recorded), the rows from `had.len()` on, identity
    /// again, the router stopped. An arm whose rows and record are complete is not started.
    fn round(
        &self,
        ctx: &RoundCtx<'_>,
        limits: Limits,
        had: Vec<rowloop::ServedRow>,
        reporter: &dyn Reporter,
    ) -> Result<(state::ArmRecord, rowloop::ArmRows)> {
        let old = state::read_arm(ctx.dir, self.name)?;
        if let Some(rec) = old.as_ref().filter(|r| r.identity_after.is_some()) {
            if had.len() == ctx.prompts.len() {
                let rows = rowloop::ArmRows {
                    rows: had,
                    interrupted: false,
                };
                return Ok((rec.clone(), rows));
            }
        }
        reporter.stage(
            "validate",
            &format!("arm {}: router {}", self.name, self.server.bin.display()),
        );
        let o = ctx.o;
        let r = router::start(
            self.server,
            self.preset_file,
            &PRESETS,
            &self.log,
            o.base.timeout,
        )?;
        let before = router::identity(&r, self.server, self.model, self.preset_file, PRESETS[0])?;
        check_drift(self.name, &before, &before, self.server)?;
        let first = match &old {
            Some(rec) => {
                check_drift(self.name, &rec.identity_before, &before, self.server)?;
                rec.identity_before.clone()
            }
            None => before,
        };
        let presets: Vec<String> = PRESETS.iter().map(|s| s.to_string()).collect();
        let mut rec = state::ArmRecord {
            name: self.name.to_string(),
            mode: "serve".into(),
            server: self.server.bin.display().to_string(),
            url: r.server.base().to_string(),
            presets: presets.clone(),
            identity_before: first,
            identity_after: None,
        };
        state::write_arm(ctx.dir, &rec)?;
        let kill_at = pinforge_base::hooks::serve_kill_child_at();
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
            prompts: ctx.prompts,
            presets: &presets,
            switch_every: o.switch_every,
            schema: ctx.schema,
            grammar: ctx.grammar,
            limits,
            stream: o.stream,
            log: Some(&r.log),
            on_response: &on_response,
            reporter,
        };
        let rows = rowloop::run(&r.server, &plan, ctx.rows_file, had)?;
        if rows.interrupted {
            return Ok((rec, rows));
        }
        let after = router::identity(&r, self.server, self.model, self.preset_file, PRESETS[0])?;
        check_drift(self.name, &rec.identity_before, &after, self.server)?;
        drop(r);
        rec.identity_after = Some(after);
        state::write_arm(ctx.dir, &rec)?;
        Ok((rec, rows))
    }
}

fn check_drift(
    arm: &str,
    before: &Identity,
    after: &Identity,
    server: &router::ArmServer,
) -> Result<()> {
    let d = router::drift(before, after, server);
    if d.is_empty() {
        Ok(())
    } else {
        Err(Error::check(format!("arm {arm}"), d.join("; "))
            .with_hint("the served build is not the one this run was started against"))
    }
}
