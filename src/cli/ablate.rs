//! `pinforge ablate`: a variant built and smoked (or, `--trial soak`, soaked for `--rows` rows
//! per repeat) with subsets of its patches; which patches are necessary, which sets
//! sufficient, rendered with each subset's timing.

use super::reporter::TermReporter;
use super::{print_json, JsonArg, Verbosity};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::workspace::Workspace;
use pinforge_build::build::BuildOptions;
use pinforge_source::recipe::Recipe;
use pinforge_trial::ablate::{self, AblationRecord};
use std::path::PathBuf;

/// Arguments of `ablate`.
#[derive(Debug, clap::Args)]
pub struct AblateArgs {
    /// Recipe TOML [default: the embedded recipes/mrope-cpu.toml]
    pub recipe: Option<PathBuf>,
    /// The patched variant to ablate
    #[arg(long)]
    pub variant: String,
    /// A GGUF model for every smoke [default: the tiny model of --arch]
    #[arg(long, conflicts_with = "arch")]
    pub model: Option<PathBuf>,
    /// Architecture of the generated tiny model: qwen2vl (M-RoPE) or qwen2 (control)
    #[arg(long, value_parser = ["qwen2vl", "qwen2"])]
    pub arch: Option<String>,
    /// Tokens to generate in each smoke
    #[arg(long, default_value_t = 16)]
    pub tokens: usize,
    /// Ninja parallelism
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub soak: super::flip::SoakArgs,
    #[command(flatten)]
    pub sign: super::sign::SignWith,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `ablate`.
pub(super) fn run(ctx: &super::Ctx, a: AblateArgs) -> Result<ExitCode> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load_or_default(a.recipe.as_deref())?;
    let smoke_opts = super::smoke::smoke_options(&ctx.ws_root, a.model, a.arch, a.tokens, false)?;
    let soak = a.soak.options(&ctx.ws_root, &smoke_opts, &ctx.signer)?;
    let reporter = TermReporter::new(ctx.verbosity == Verbosity::Quiet);
    let record = ablate::run(
        &ws,
        &recipe,
        &a.variant,
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
        print_json(ablate::SCHEMA, &record)?;
    } else if record.soak.is_some() {
        render_soak(&record);
        render_analysis(&record);
    } else {
        render(&record);
        render_analysis(&record);
    }
    Ok(
        if record.subsets.iter().any(|s| s.class == "undetermined") {
            ExitCode::CheckFailed
        } else {
            ExitCode::Ok
        },
    )
}

fn render(r: &AblationRecord) {
    outln!(
        "ablate {}/{}: {} patches, {} subsets ({})",
        r.recipe,
        r.variant,
        r.patches.len(),
        r.subsets.len(),
        r.mode
    );
    outln!(
        "  {:<16} {:<36} {:>9} {:>7} {:<9} {:<13} signature or reason",
        "subset",
        "built as",
        "build",
        "smoke",
        "verdict",
        "class"
    );
    for s in &r.subsets {
        outln!(
            "  {:<16} {:<36} {:>8.1}s{} {:>6.1}s {:<9} {:<13} {}",
            s.label,
            s.built_as,
            s.build_seconds,
            if s.cached { "*" } else { " " },
            s.smoke.as_ref().map(|x| x.seconds).unwrap_or(0.0),
            s.smoke.as_ref().map(|x| x.verdict.as_str()).unwrap_or("-"),
            s.class,
            s.smoke
                .as_ref()
                .and_then(|x| x.normalized_signature.as_deref())
                .or(s.reason.as_deref())
                .unwrap_or("-")
        );
        if let Some(d) = &s.dependency {
            outln!("    note: {d}");
        }
    }
}

/// The soak trial's table: each subset's runs (one per repeat, with onset rows), its class,
/// and the mean wall time of its completed rows (crash and error rows, failed runs left out).
fn render_soak(r: &AblationRecord) {
    let Some(t) = &r.soak else {
        return;
    };
    outln!(
        "ablate {}/{}: {} patches, {} subsets ({}), soak of {} rows, {} repeat(s)",
        r.recipe,
        r.variant,
        r.patches.len(),
        r.subsets.len(),
        r.mode,
        t.settings.rows,
        t.settings.repeats
    );
    outln!(
        "  {:<16} {:<36} {:>9} {:<13} {:>9} runs (per repeat)",
        "subset",
        "built as",
        "build",
        "class",
        "wall ms"
    );
    for s in &r.subsets {
        let wall = s
            .soak
            .as_ref()
            .and_then(|x| x.timing.as_ref())
            .and_then(|t| t.mean_wall_ms)
            .map(|m| format!("{m:.1}"))
            .unwrap_or_else(|| "-".into());
        outln!(
            "  {:<16} {:<36} {:>8.1}s{} {:<13} {:>9} {}",
            s.label,
            s.built_as,
            s.build_seconds,
            if s.cached { "*" } else { " " },
            s.class,
            wall,
            s.soak
                .as_ref()
                .map(ablate::soak::runs_word)
                .unwrap_or_else(|| "-".into())
        );
        if let Some(why) = s.reason.as_deref().filter(|_| s.class == "undetermined") {
            outln!("    reason: {why}");
        }
        if let Some(d) = &s.dependency {
            outln!("    note: {d}");
        }
    }
    if let Some(rate) = t.target_rate {
        outln!(
            "target rate over the unpatched subset: {} of {} rows (p = {:.4})",
            rate.rows,
            rate.of,
            rate.p
        );
    }
}

/// What the subsets show, and where the record is.
fn render_analysis(r: &AblationRecord) {
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    outln!(
        "signature under test: {}",
        r.target_signature.as_deref().unwrap_or("none")
    );
    outln!("necessary:  {}", list(&r.necessary));
    left_out_onsets(r, &r.necessary);
    if !r.other_crash_when_left_out.is_empty() {
        outln!(
            "another crash when left out (not the signature under test): {}",
            list(&r.other_crash_when_left_out)
        );
        left_out_onsets(r, &r.other_crash_when_left_out);
    }
    outln!(
        "sufficient: {}",
        if r.sufficient.is_empty() {
            "none".to_string()
        } else {
            r.sufficient
                .iter()
                .map(|s| format!("{{{}}}", s.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        }
    );
    outln!("no effect:  {}", list(&r.no_effect));
    outln!("wall time {:.1}s (* = reused build)", r.seconds);
    outln!("record   {}", r.record.display());
    outln!("summary  {}", r.summary.display());
}

/// Under the soak trial, each named patch's left-out subset with its runs (the onset rows at
/// which the crash came back).
fn left_out_onsets(r: &AblationRecord, files: &[String]) {
    for f in files {
        let full: Vec<&String> = r.patches.iter().map(|p| &p.file).collect();
        let Some(s) = r.subsets.iter().find(|s| {
            s.applied.len() + 1 == full.len()
                && !s.applied.contains(f)
                && s.applied.iter().all(|a| full.contains(&a))
        }) else {
            continue;
        };
        if let Some(soak) = &s.soak {
            outln!(
                "  without {f}: subset {}: {}",
                s.label,
                ablate::soak::runs_word(soak)
            );
        }
    }
}
