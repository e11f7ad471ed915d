//! `pinforge flip`: two variants that differ in one axis, built and smoked side by side with a
//! pre-registered hypothesis; the record and its verdict rendered.

use super::reporter::TermReporter;
use super::{print_json, JsonArg, Verbosity};
use crate::cli::output::{paint, Tone};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::workspace::Workspace;
use pinforge_build::build::BuildOptions;
use pinforge_source::recipe::Recipe;
use pinforge_trial::flip::{self, FlipRecord, FlipRequest, FlipVerdict};
use pinforge_trial::soak::SoakOptions;
use pinforge_trial::validate::{self, ArmSource};
use std::path::PathBuf;

/// Arguments of `flip`.
#[derive(Debug, clap::Args)]
pub struct FlipArgs {
    /// Recipe TOML [default: the embedded recipes/mrope-cpu.toml]
    pub recipe: Option<PathBuf>,
    /// The variant that shows the defect
    #[arg(long)]
    pub from: String,
    /// The variant that differs from it in exactly one axis
    #[arg(long)]
    pub to: String,
    /// What the flip tests, written to the record before anything is built
    #[arg(long)]
    pub hypothesis: String,
    /// What the hypothesis predicts the to side will show
    #[arg(long)]
    pub prediction: Option<String>,
    /// A GGUF model for both smokes [default: the tiny model of --arch]
    #[arg(long, conflicts_with = "arch")]
    pub model: Option<PathBuf>,
    /// Architecture of the generated tiny model: qwen2vl (M-RoPE) or qwen2 (control)
    #[arg(long, value_parser = ["qwen2vl", "qwen2"])]
    pub arch: Option<String>,
    /// Tokens to generate in each smoke
    #[arg(long, default_value_t = 16)]
    pub tokens: usize,
    /// Proceed when more than one axis differs (the record says it is not a single-setting trial)
    #[arg(long)]
    pub allow_multi: bool,
    /// Ninja parallelism
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub soak: SoakArgs,
    #[command(flatten)]
    pub sign: super::sign::SignWith,
    #[command(flatten)]
    pub out: JsonArg,
}

/// The trial each side runs: one smoke, or a validation soak of `--rows` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Trial {
    /// One smoke decode per side (a defect that shows at the first state restore)
    Smoke,
    /// A validation run of --rows rows per side (a late or probabilistic onset)
    Soak,
}

/// The soak trial's arguments (`flip` and `ablate`).
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// What each side runs: one smoke, or a validation soak of --rows rows
    #[arg(long, value_enum, default_value_t = Trial::Smoke)]
    pub trial: Trial,
    /// Rows per side and repeat of a soak
    #[arg(long, required_if_eq("trial", "soak"))]
    pub rows: Option<u64>,
    /// Soak repeats, the sides interleaved (from to from to …); every repeat must agree
    #[arg(long, default_value_t = 1)]
    pub repeats: u32,
    /// Seed of the soak's prompt generator
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Token budget per soak row: 1 to 128 (half the soak engine's 256-token context)
    #[arg(long, default_value_t = 24)]
    pub budget: u32,
    /// Seconds a soak row may take before it counts as hung
    #[arg(long, default_value_t = 120)]
    pub row_timeout: u64,
}

impl SoakArgs {
    /// The soak's options (None for a smoke trial), over the smoke's model and arch.
    pub(super) fn options(
        &self,
        ws_root: &std::path::Path,
        smoke: &pinforge_deploy::smoke::SmokeOptions,
        signer: &pinforge_record::sign::record::Signer,
    ) -> Result<Option<SoakOptions>> {
        if self.trial == Trial::Smoke {
            for (set, flag) in [
                (self.rows.is_some(), "--rows"),
                (self.repeats != 1, "--repeats"),
            ] {
                if set {
                    return Err(pinforge_base::error::Error::input(
                        flag,
                        "applies to a soak trial only",
                    )
                    .with_hint("add --trial soak"));
                }
            }
            return Ok(None);
        }
        let ws_root = pinforge_base::fsx::absolute(ws_root)?;
        Ok(Some(SoakOptions {
            validate: validate::Options {
                // Set by the trial to the two builds once they are built.
                arms: [
                    ArmSource::Manifest(PathBuf::new()),
                    ArmSource::Manifest(PathBuf::new()),
                ],
                rows: self.rows.unwrap_or(0),
                model: smoke.model.clone(),
                arch: smoke.arch,
                seed: self.seed,
                prompts: None,
                budget: self.budget,
                row_kind: validate::RowKind::default(),
                schema: None,
                jobs: 1,
                resume: None,
                timeout: std::time::Duration::from_secs(self.row_timeout),
                threads: 1,
                workspace: ws_root,
                shard: None,
                signer: signer.clone(),
            },
            repeats: self.repeats,
        }))
    }
}

/// Run `flip`.
pub(super) fn run(ctx: &super::Ctx, a: FlipArgs) -> Result<ExitCode> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load_or_default(a.recipe.as_deref())?;
    let smoke_opts = super::smoke::smoke_options(&ctx.ws_root, a.model, a.arch, a.tokens, false)?;
    let plan = flip::plan(
        &ws,
        &FlipRequest {
            recipe: &recipe,
            from: &a.from,
            to: &a.to,
            hypothesis: &a.hypothesis,
            prediction: a.prediction.as_deref(),
            allow_multi: a.allow_multi,
        },
    )?;
    let quiet = ctx.verbosity == Verbosity::Quiet;
    if !a.out.json && !quiet {
        // The mechanical diff first: the operator sees what is about to be compared before
        // minutes of building.
        outln!("flip {}: {} -> {}", recipe.name, a.from, a.to);
        for line in pinforge_trial::axis::render_rows(&plan.rows).lines() {
            outln!("  {line}");
        }
    }
    let soak = a.soak.options(&ctx.ws_root, &smoke_opts, &ctx.signer)?;
    let record = plan.register(&ws, &smoke_opts, soak.as_ref(), &ctx.signer)?;
    if !a.out.json && !quiet {
        outln!("registered {}", record.record.display());
    }
    let reporter = TermReporter::new(quiet);
    let record = plan.run(
        &ws,
        record,
        &smoke_opts,
        soak.as_ref(),
        &BuildOptions {
            jobs: a.jobs,
            reporter: &reporter,
            compile_cache: pinforge_build::build::cache::Settings::from_env(),
            signer: ctx.signer.clone(),
        },
    )?;
    if a.out.json {
        print_json(flip::SCHEMA, &record)?;
    } else {
        render(&record, ctx.verbosity);
    }
    Ok(match record.verdict {
        Some(FlipVerdict::Supported) | Some(FlipVerdict::Falsified) => ExitCode::Ok,
        _ => ExitCode::CheckFailed,
    })
}

fn render(r: &FlipRecord, verbosity: Verbosity) {
    outln!(
        "axis {}{}",
        r.axis,
        if r.single_setting {
            ""
        } else {
            "  (several axes: not a single-setting trial)"
        }
    );
    outln!(
        "  {:<8} {:<24} {:<8} {:<8} signature",
        "side",
        "variant",
        "build",
        "smoke"
    );
    for (side, b, s) in [
        ("from", &r.builds.from, &r.smokes.from),
        ("to", &r.builds.to, &r.smokes.to),
    ] {
        let build = match b {
            None => "not run".to_string(),
            Some(b) if b.error.is_some() => "failed".to_string(),
            Some(b) => format!("{:.1}s{}", b.seconds, if b.cached { "*" } else { "" }),
        };
        outln!(
            "  {side:<8} {:<24} {build:<8} {:<8} {}",
            b.as_ref().map(|b| b.variant.as_str()).unwrap_or("-"),
            s.as_ref().map(|s| s.verdict.as_str()).unwrap_or("-"),
            s.as_ref()
                .and_then(|s| s.normalized_signature.as_deref())
                .unwrap_or("-")
        );
    }
    if let Some(t) = &r.soak {
        outln!(
            "soak: {} rows per side, {} repeat(s), order {}",
            t.settings.rows,
            t.settings.repeats,
            t.order.join(" ")
        );
        for line in pinforge_trial::soak::table_lines(t) {
            outln!("  {line}");
        }
    }
    render_artifacts(r, verbosity);
    let verdict = r.verdict.map(|v| v.as_str()).unwrap_or("-");
    outln!(
        "verdict: {} — {}",
        paint(
            if matches!(
                r.verdict,
                Some(FlipVerdict::Invalid) | Some(FlipVerdict::Inconclusive)
            ) {
                Tone::Bad
            } else {
                Tone::Good
            },
            verdict
        ),
        r.reason.as_deref().unwrap_or("")
    );
    outln!("record   {}", r.record.display());
    outln!("summary  {}", r.summary.display());
}

/// The artifact tally, then one line per artifact that is not the same (every one, verbose).
fn render_artifacts(r: &FlipRecord, verbosity: Verbosity) {
    let differ = r.artifacts.iter().filter(|a| a.differs()).count();
    let normalized = r
        .artifacts
        .iter()
        .filter(|a| a.equal_under.is_some())
        .count();
    outln!(
        "artifacts: {} same, {}{differ} different{}",
        r.artifacts.len() - differ - normalized,
        if normalized > 0 {
            let rules: std::collections::BTreeSet<&str> = r
                .artifacts
                .iter()
                .filter_map(|a| a.equal_under.as_deref())
                .collect();
            let rules = rules.into_iter().collect::<Vec<_>>().join(", ");
            format!("{normalized} equivalent (equal under {rules}), ")
        } else {
            String::new()
        },
        if r.artifacts
            .iter()
            .any(|a| a.differs() && a.embeds_machine_path)
        {
            " (* embeds this machine's build paths: the difference may be only the trees' paths)"
        } else {
            ""
        }
    );
    let short = |d: &Option<String>| {
        d.as_deref()
            .map(|d| d.chars().take(12).collect::<String>())
            .unwrap_or_else(|| "-".into())
    };
    for a in r
        .artifacts
        .iter()
        .filter(|a| !a.same || verbosity == Verbosity::Verbose)
    {
        outln!(
            "  {:<10} {:<40} {}  {}",
            match (a.same, &a.equal_under, a.embeds_machine_path) {
                (true, _, _) => "same".to_string(),
                (false, Some(_), _) => "equivalent".to_string(),
                (false, None, false) => "different".to_string(),
                (false, None, true) => "different*".to_string(),
            },
            a.path,
            short(&a.from_sha256),
            short(&a.to_sha256)
        );
    }
}

/// `verify` of a soak flip's record: every linked run's evidence re-checked.
pub(super) fn verify_soak_record(path: &std::path::Path, json: bool) -> Result<ExitCode> {
    let c = pinforge_trial::soak::verify::verify_record(path)?;
    if json {
        print_json(pinforge_record::schema_id::SOAK_CHECK, &c)?;
    } else {
        for r in &c.runs {
            let ok = r.problem.is_none() && r.check.as_ref().is_some_and(|c| c.ok);
            outln!(
                "  {:<7} {:<4} run {} {}",
                r.side,
                if ok {
                    paint(Tone::Good, "ok")
                } else {
                    paint(Tone::Bad, "BAD")
                },
                r.run,
                r.problem.as_deref().unwrap_or("")
            );
            if let Some(check) = r.check.as_ref().filter(|c| !c.ok) {
                for m in &check.mismatches {
                    outln!("      {}: {} ({})", m.role, m.path, m.actual);
                }
            }
        }
        for f in &c.failed_runs {
            outln!("  {f:<7} -    the run failed when the flip ran: nothing to re-check");
        }
        outln!(
            "{}: {} linked run(s) of {}",
            if c.ok {
                paint(Tone::Good, "ok")
            } else {
                paint(Tone::Bad, "mismatch")
            },
            c.runs.len(),
            c.record.display()
        );
    }
    Ok(if c.ok {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}
