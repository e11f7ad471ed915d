//! `pinforge audit RECIPE --onto PIN`: every patch of the recipe's bundle against a newer
//! upstream, with a verdict and its evidence (issue #9). Exit 0 when every patch carries, 1
//! when anything needs a decision. `--check` adds behaviour (issue #26 §2): every patch's
//! `Pinforge-Check` built and smoked on both pins (`trial::check`); a check that is invalid or
//! gives no answer is also exit 1.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text;
use pinforge_base::workspace::Workspace;
use pinforge_source::audit::{self, Verdict};
use pinforge_source::recipe::Recipe;
use std::path::PathBuf;

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Recipe TOML whose pin and bundle are audited
    pub recipe: PathBuf,
    /// The newer upstream: crate:NAME@VERSION, git:URL@REV (commit or tag), tarball:PATH, dir:PATH
    #[arg(long)]
    pub onto: String,
    /// Build and smoke every patch's Pinforge-Check (its sanitizer variant, without the patch)
    /// on the old and the new pin, and record what it shows as evidence
    #[arg(long)]
    pub check: bool,
    /// Ninja parallelism of the --check builds
    #[arg(long, short = 'j', requires = "check")]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `audit`.
pub(super) fn run(ctx: &super::Ctx, a: AuditArgs) -> Result<ExitCode> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load(&a.recipe)?;
    let bundle = pinforge_build::build::bundle_for(&recipe)?;
    let onto = audit::parse_onto(&a.onto)?;
    let session = if a.check {
        let reporter = super::reporter::TermReporter::new(ctx.verbosity == super::Verbosity::Quiet);
        pinforge_trial::check::audit(
            &ws,
            &recipe,
            &bundle,
            &onto,
            &audit::today(),
            &build_options(a.jobs, &reporter),
        )?
    } else {
        audit::run(
            &ws,
            &recipe,
            &bundle,
            &onto,
            &audit::today(),
            &Default::default(),
        )?
    };
    let report = &session.audit;
    let unanswered = report.patches.iter().any(|p| {
        matches!(
            p.check,
            Some(audit::Behaviour::CheckInvalid | audit::Behaviour::Undetermined)
        )
    });
    let code = if report.all_carry() && !unanswered {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    };
    if a.out.json {
        print_json(pinforge_record::schema_id::AUDIT, report)?;
        return Ok(code);
    }
    render(report);
    Ok(code)
}

/// `rebase --check`: the checked audit before the rebase ([`pinforge_trial::check::gate`]); an
/// error (exit 1, nothing written) when a still-needed patch would be dropped. Each check's
/// finding is said on standard error.
pub(super) fn check_before_rebase(
    ctx: &super::Ctx,
    ws: &Workspace,
    recipe: &std::path::Path,
    onto: &audit::Onto,
    drop: &std::collections::BTreeSet<String>,
) -> Result<()> {
    let reporter = super::reporter::TermReporter::new(ctx.verbosity == super::Verbosity::Quiet);
    let checked = pinforge_trial::check::gate(
        ws,
        recipe,
        onto,
        drop,
        &audit::today(),
        &build_options(None, &reporter),
    )?;
    for p in &checked.patches {
        if let Some(b) = p.check {
            eprintln!("check: {}: {}", p.file, audit::word(&b));
        }
    }
    Ok(())
}

/// The build options of `--check`: the environment's compile cache.
fn build_options<'a>(
    jobs: Option<usize>,
    reporter: &'a dyn pinforge_base::progress::Reporter,
) -> pinforge_build::build::BuildOptions<'a> {
    pinforge_build::build::BuildOptions {
        jobs,
        reporter,
        compile_cache: pinforge_build::build::cache::Settings::from_env(),
        // `audit` takes no --sign: its scratch builds' manifests are written plainly.
        signer: pinforge_record::sign::record::Signer::none(),
    }
}

/// A commit id as the evidence shows it (nine digits).
fn short(id: &str) -> &str {
    id.get(..9).unwrap_or(id)
}

/// The human report: one block per patch, verdict first, evidence strongest first.
pub(super) fn render(report: &audit::Audit) {
    outln!("audit of {} onto {}", report.from, report.onto);
    outln!("history: {}", report.history);
    for p in &report.patches {
        outln!("");
        outln!("{}: {}", p.file, p.verdict.as_str());
        // Both commits of a standing revert, before the evidence: what the decision is about.
        for r in &p.reverts {
            outln!(
                "  reverted: {} \"{}\" by {} \"{}\" ({}{})",
                short(&r.commit),
                text::Shown(&r.subject),
                short(&r.reverted_by),
                text::Shown(&r.reverted_by_subject),
                audit::word(&r.signal),
                if r.chain > 1 {
                    format!(", the last of {} reverts", r.chain)
                } else {
                    String::new()
                }
            );
        }
        for e in &p.evidence {
            let mut lines = e.detail.lines();
            let first = lines.next().unwrap_or_default();
            outln!(
                "  [{}] {}: {first}",
                audit::word(&e.strength),
                audit::word(&e.kind)
            );
            for l in lines {
                outln!("      {l}");
            }
        }
    }
    let count =
        |f: &dyn Fn(&Verdict) -> bool| report.patches.iter().filter(|p| f(&p.verdict)).count();
    let carry = count(&|v| *v == Verdict::Carries);
    // Merged and fixed-upstream patches leave the series on `rebase` without a decision
    // (the content, or the check, is the evidence); the rest wait for `--drop`/`--keep`.
    let leave = count(&|v| matches!(v, Verdict::Merged | Verdict::FixedUpstream));
    let decide = report.patches.len() - carry - leave;
    outln!("");
    if leave == 0 {
        outln!(
            "{} patch(es): {carry} carry, {decide} need a decision",
            report.patches.len()
        );
    } else {
        outln!(
            "{} patch(es): {carry} carry, {leave} leave the series (merged or fixed upstream), {decide} need a decision",
            report.patches.len()
        );
    }
    if let Some(c) = &report.check {
        outln!(
            "check: {} build(s) ({} current), {:.1} s building, {:.1} s smoking; compile cache {} hits, {} misses",
            c.builds.len(),
            c.cached_builds,
            c.build_seconds,
            c.smoke_seconds,
            c.compile_cache_hits,
            c.compile_cache_misses
        );
    }
}
