//! `validate --serve` and `validate --endpoint URL` (issue #20): the served mode's options and
//! its rendering, kept apart from the in-process harness's `validate.rs` (which only
//! dispatches here).

use super::{print_json, Verbosity};
use crate::cli::output::{paint, Tone};
use crate::outln;
use pinforge_base::error::{Error, ExitCode, Result};
use pinforge_trial::validate::served::{self, ServeOptions, ServeReport, Target};

/// The served mode's options of `validate`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Send the rows to each arm's own `bin/llama-server`, started in router mode with two
    /// presets of the model and `--models-max 1`. `--resume ID` continues a served run after
    /// each arm's last complete row; `--shard` is refused in the served mode
    #[arg(long, conflicts_with = "endpoint")]
    pub serve: bool,
    /// Send the rows to a server pinforge did not start (recorded as mode `endpoint`). Each
    /// answer is read with caps: 1 MiB an SSE line, 8 MiB a body or a whole stream; past a
    /// cap, or bytes that are not UTF-8, the row is the endpoint's `error` (never a crash),
    /// the reason and the start of what came kept in the row. A stream that does not end
    /// within three times --row-timeout is a `crash` whose rule names the hang
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// The environment variable holding the endpoint's API key (sent as a Bearer token)
    #[arg(long, value_name = "VAR", default_value = "PINFORGE_ENDPOINT_API_KEY")]
    pub api_key_env: String,
    /// Streaming requests (Server-Sent Events)
    #[arg(long)]
    pub stream: bool,
    /// Host-RAM prompt cache of each child in MiB (0 turns it off: the #20093 workaround)
    #[arg(long, value_name = "MIB", default_value_t = served::INCIDENT_CACHE_RAM)]
    pub cache_ram: u64,
    /// Slot prompt similarity of each child
    #[arg(long, value_name = "F", default_value_t = served::DEFAULT_SIMILARITY)]
    pub slot_prompt_similarity: f64,
    /// Rows sent to one preset before switching to the next
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub switch_every: u64,
    /// The candidate passes only when at least this fraction of its rows end `ok` (0 to 1).
    /// 0 lets the verdict rest on crashes alone, and it says so. Without --schema the rows
    /// use the served default schema `{"ok": boolean}`, which the tiny model completes
    #[arg(long, value_name = "FRACTION", default_value_t = served::DEFAULT_MIN_OK,
          value_parser = parse_fraction)]
    pub min_ok: f64,
}

/// A fraction from 0 to 1 (`--min-ok`).
fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{s}` is not a fraction from 0 to 1")),
    }
}

impl ServeArgs {
    /// Whether the served mode was asked for.
    pub fn wanted(&self) -> bool {
        self.serve || self.endpoint.is_some()
    }
}

impl ServeArgs {
    /// `--endpoint` without arms: the endpoint is the only arm.
    pub fn endpoint_alone(
        &self,
        installed: &Option<String>,
        manifests: &[std::path::PathBuf],
    ) -> bool {
        self.endpoint.is_some() && installed.is_none() && manifests.is_empty()
    }
}

/// The arms of an endpoint run: none is resolved (the served mode ignores them).
pub(super) fn no_arms() -> [pinforge_trial::validate::ArmSource; 2] {
    let none = || pinforge_trial::validate::ArmSource::Manifest(std::path::PathBuf::new());
    [none(), none()]
}

/// Run the served mode with the in-process harness's options `base`.
pub(super) fn run(
    ctx: &super::Ctx,
    a: &ServeArgs,
    base: pinforge_trial::validate::Options,
    json: bool,
) -> Result<ExitCode> {
    if base.shard.is_some() {
        return Err(Error::input(
            "validate --serve/--endpoint",
            "--shard is not available in the served mode (each arm's router serves every row)",
        ));
    }
    let target = match &a.endpoint {
        Some(url) => {
            pinforge_deploy::serve::client::check_endpoint_url(url)?;
            Target::Endpoint {
                url: url.clone(),
                api_key: std::env::var(&a.api_key_env).ok().filter(|k| !k.is_empty()),
            }
        }
        None => Target::Managed {
            cache_ram_mib: a.cache_ram,
            similarity: a.slot_prompt_similarity,
        },
    };
    let opts = ServeOptions {
        base,
        target,
        stream: a.stream,
        switch_every: a.switch_every,
        min_ok: a.min_ok,
    };
    let reporter =
        super::reporter::TermReporter::counting(ctx.verbosity == Verbosity::Quiet, "rows");
    let report = served::run(&opts, &reporter)?;
    if json {
        print_json(pinforge_record::schema_id::VALIDATE_SERVE, &report)?;
    } else {
        render(&report);
    }
    Ok(if report.passed() {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

fn render(r: &ServeReport) {
    outln!(
        "validate run {} ({}), mode {}{}",
        r.run,
        r.run_dir.display(),
        r.mode,
        if r.stream { ", streaming" } else { "" }
    );
    for a in &r.arms {
        outln!(
            "  {}{}: {} rows, {:.1} rows/s, server {}",
            a.name,
            if a.candidate { " (cand.)" } else { "" },
            a.rows,
            a.rows_per_second,
            a.server
        );
        let counts: Vec<String> = a.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        outln!("    {}", counts.join(", "));
        if let Some(o) = a.onset_row {
            outln!("    onset row {o}");
        }
        for (s, n) in &a.signatures {
            outln!("    signature ({n} report(s)): {s}");
        }
        let health: Vec<String> = a.health.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        outln!("    /health {}", health.join(", "));
        // What tells the arms apart: the engine library the served processes mapped.
        for (lib, sha) in a.identity_after.mapped.iter().filter(|(k, _)| {
            std::path::Path::new(k)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libllama"))
        }) {
            outln!("    mapped {lib} sha256 {}", sha.get(..16).unwrap_or(sha));
        }
    }
    for n in &r.notes {
        outln!("note: {n}");
    }
    let good = r.passed();
    outln!(
        "verdict: {}",
        paint(if good { Tone::Good } else { Tone::Bad }, &r.verdict)
    );
    match (&r.evidence, &r.evidence_sha256) {
        (Some(p), Some(sha)) => outln!("evidence: {} (sha256 {})", p.display(), sha.short(16)),
        _ => outln!(
            "no evidence written (the run did not finish): pinforge validate --serve … --resume {}",
            r.run
        ),
    }
}
