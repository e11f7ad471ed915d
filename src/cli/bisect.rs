//! `pinforge bisect RECIPE --patch FILE --range crate:NAME@OLD..NEW|git:URL@OLD..NEW` (issue
//! #39 §2): the first
//! pin of a range where the patch's defect is gone without the patch, found by building and
//! smoking its `Pinforge-Check` as `git bisect run` would, with every probe kept as evidence.
//! Exit 0 for an exact answer (a pin that shows the defect right before one that runs clean),
//! 1 for anything else (skipped pins between, fixed before or after the range, no answer),
//! 2 for bad input.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text;
use pinforge_base::workspace::Workspace;
use pinforge_source::audit;
use pinforge_source::bisect::search::Found;
use pinforge_source::bisect::RangeKind;
use pinforge_source::recipe::Recipe;
use pinforge_trial::bisect::{self as run_mod, BisectReport, BisectRequest};
use std::path::PathBuf;

/// Arguments of `bisect`.
#[derive(Debug, clap::Args)]
pub struct BisectArgs {
    /// Recipe TOML whose bundle holds the patch
    pub recipe: PathBuf,
    /// The patch whose defect is bisected (a file the series lists; it must declare a
    /// Pinforge-Check)
    #[arg(long)]
    pub patch: String,
    /// The pins to search, both ends included: crate:NAME@OLD..NEW (the registry's releases;
    /// yanked ones are left out) or git:URL@OLD..NEW (the commits of the first-parent line
    /// between two tags or commits of a repository; a local clone is fastest)
    #[arg(long)]
    pub range: String,
    /// A clone of the crate's source repository (git directory or work tree): releases are
    /// then ordered by the upstream commit each vendors, and releases vendoring one commit are
    /// built once (crate ranges only)
    #[arg(long, value_name = "DIR")]
    pub vcs_repo: Option<PathBuf>,
    /// Write the answer into the patch's header as Applied-Upstream (only for an exact answer)
    #[arg(long)]
    pub write: bool,
    /// Ninja parallelism of the probe builds
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `bisect`.
pub(super) fn run(ctx: &super::Ctx, a: BisectArgs) -> Result<ExitCode> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load(&a.recipe)?;
    // The range is read before anything is fetched or built, so a typo costs nothing.
    pinforge_source::bisect::parse_range(&a.range)?;
    let reporter = super::reporter::TermReporter::new(ctx.verbosity == super::Verbosity::Quiet);
    let opts = pinforge_build::build::BuildOptions {
        jobs: a.jobs,
        reporter: &reporter,
        compile_cache: pinforge_build::build::cache::Settings::from_env(),
        // Probe builds are scratch builds: their manifests are written plainly.
        signer: pinforge_record::sign::record::Signer::none(),
    };
    let req = BisectRequest {
        recipe: &recipe,
        patch: a.patch.clone(),
        range: a.range.clone(),
        vcs_repo: a.vcs_repo.clone(),
        write: a.write,
        today: audit::today(),
    };
    let report = run_mod::run(&ws, &req, &opts)?;
    let code = if report.exact() {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    };
    if a.out.json {
        print_json(pinforge_record::schema_id::BISECT, &report)?;
        return Ok(code);
    }
    render(&report);
    Ok(code)
}

/// Like `git bisect log` then its verdict: the plan, each probe, the answer.
fn render(r: &BisectReport) {
    let s = |v: &str| text::shown_line(v).into_owned();
    outln!(
        "bisect {} in {}: {} ({})",
        s(&r.patch),
        s(&r.recipe),
        s(&r.plan.range),
        s(&r.check)
    );
    match r.plan.kind {
        RangeKind::Git => outln!(
            "  {} commits in upstream order; at most {} probes without skips",
            r.plan.pins.len(),
            r.bound
        ),
        RangeKind::Crate => outln!(
            "  {} releases in {} groups by {}; at most {} probes without skips",
            r.plan.pins.len(),
            r.plan.groups.len(),
            s(&r.plan.order),
            r.bound
        ),
    }
    for n in &r.plan.notes {
        outln!("  note: {}", s(n));
    }
    for p in &r.probes {
        let built = match (&p.build.error, p.build.cached) {
            (Some(_), _) => "not built".to_string(),
            (None, true) => "cached".to_string(),
            (None, false) => format!("built {:.0}s", p.build.seconds),
        };
        outln!(
            "  probe {}: {} {:<4} {} ({}; text: {})",
            p.step,
            s(&p.releases.join("/")),
            p.mark.as_str(),
            s(&p.why),
            built,
            s(&p.text)
        );
    }
    let name = |n: &Option<run_mod::Named>| {
        n.as_ref()
            .map(|n| {
                let first = n.releases.first().map(String::as_str).unwrap_or_default();
                let up = match (n.tags.first(), n.upstream.as_deref()) {
                    (Some(t), _) => format!(" ({t})"),
                    // A git range's release is the commit itself.
                    (None, Some(u)) if !u.starts_with(first) => {
                        format!(" (vendors {})", &u[..u.len().min(12)])
                    }
                    _ => String::new(),
                };
                format!("{}{up}", n.releases.join("/"))
            })
            .unwrap_or_default()
    };
    match &r.found {
        Found::Exact { .. } => {
            outln!("first without the defect: {}", s(&name(&r.first_good)));
            outln!("  last with it: {}", s(&name(&r.last_bad)));
            if let Some(v) = &r.first_fixed_release {
                outln!("  first fixed release: {}", s(v));
            }
        }
        Found::Between { .. } => outln!(
            "undecided between {} (bad) and {} (good): the pins between were skipped",
            s(&name(&r.last_bad)),
            s(&name(&r.first_good))
        ),
        Found::AlreadyFixed { .. } => outln!(
            "already fixed at the range's oldest decided pin {}: the fix is older than the range",
            s(&name(&r.first_good))
        ),
        Found::NotFixed { .. } => outln!(
            "not fixed in the range: {} still shows the defect",
            s(&name(&r.last_bad))
        ),
        Found::Undecided => outln!("no pin decided: every probe was skipped"),
    }
    if let Some(n) = &r.non_monotone {
        outln!("  warning: {}", s(n));
    }
    if let Some(p) = &r.first_not_applying {
        outln!(
            "  patch text: first probed pin where it no longer applies: {}",
            s(p)
        );
    }
    if let Some(line) = &r.applied_upstream {
        let verb = if r.written {
            "written"
        } else {
            "to write (--write)"
        };
        outln!("  Applied-Upstream {verb}: {}", s(line));
    }
    outln!("  log: {}", s(&r.log));
}
