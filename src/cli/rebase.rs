//! `pinforge rebase RECIPE --onto PIN`: the recipe's pin and bundle moved onto a newer
//! upstream, with the ledger of what left the series (issue #9).

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text;
use pinforge_base::workspace::Workspace;
use pinforge_source::rebase::{self, Decisions, Rebased};
use std::path::PathBuf;

/// Arguments of `rebase`.
#[derive(Debug, clap::Args)]
pub struct RebaseArgs {
    /// Recipe TOML whose pin and bundle move
    pub recipe: PathBuf,
    /// The newer upstream: crate:NAME@VERSION, git:URL@REV (commit or tag), tarball:PATH, dir:PATH
    #[arg(long, required_unless_present_any = ["resume", "abort"])]
    pub onto: Option<String>,
    /// Where a patch conflicts, leave a git checkout of the new pin (`rebase-resolve/NAME/`)
    /// with the series applied up to it and its conflict as diff3 markers, and stop; resolve,
    /// `git commit`, then `--continue`
    #[arg(long, requires = "onto")]
    pub resolve: bool,
    /// Take the resolution committed in the checkout back as the patch file and go on with the
    /// rest of the series; ends as a rebase without conflicts ends
    #[arg(long = "continue", conflicts_with_all = ["onto", "drop", "keep", "resolve", "abort", "check"])]
    pub resume: bool,
    /// Remove the checkout and the state of a stopped `--resolve`; nothing else is written
    #[arg(long, conflicts_with_all = ["onto", "drop", "keep", "resolve", "check"])]
    pub abort: bool,
    /// A patch to take out of the series (confirms `superseded`; also drops a carries-review,
    /// conflicting or reverted one); repeatable
    #[arg(long = "drop", value_name = "FILE")]
    pub drop: Vec<String>,
    /// A carries-review (or reverted) patch to carry after review; repeatable
    #[arg(long = "keep", value_name = "FILE")]
    pub keep: Vec<String>,
    /// First run `audit --check` (issue #26 §2): refuse, writing nothing, when the rebase would
    /// drop a patch whose Pinforge-Check still shows the defect on the new pin
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `rebase`.
pub(super) fn run(ctx: &super::Ctx, a: RebaseArgs) -> Result<ExitCode> {
    // Values that become recipe keys and patch header lines (issue #19): refused before use.
    if let Some(onto) = &a.onto {
        text::refuse_control("--onto", onto)?;
    }
    for v in &a.drop {
        text::refuse_control("--drop", v)?;
    }
    for v in &a.keep {
        text::refuse_control("--keep", v)?;
    }
    let ws = Workspace::new(&ctx.ws_root)?;
    if a.abort {
        let removed = rebase::abort(&ws, &a.recipe)?;
        outln!(
            "aborted: removed {} and its state; nothing else was written",
            text::shown(&removed.display().to_string())
        );
        return Ok(ExitCode::Ok);
    }
    let today = pinforge_source::audit::today();
    let report = match &a.onto {
        _ if a.resume => rebase::resume(&ws, &a.recipe, &today)?,
        Some(onto) => {
            let onto = pinforge_source::audit::parse_onto(onto)?;
            let decisions = Decisions {
                drop: a.drop.into_iter().collect(),
                keep: a.keep.into_iter().collect(),
            };
            if a.check {
                super::audit::check_before_rebase(ctx, &ws, &a.recipe, &onto, &decisions.drop)?;
            }
            // The recipe is read under the workspace lock, inside the rebase, after any
            // leftover rebase is settled.
            rebase::rebase(&ws, &a.recipe, &onto, &decisions, &today, a.resolve)?
        }
        None => {
            return Err(pinforge_base::error::Error::input(
                "rebase",
                "--onto PIN is required (or --continue, --abort)",
            ))
        }
    };
    let report = match report {
        Rebased::Done(r) => r,
        Rebased::Stopped(stop) => {
            if a.out.json {
                print_json(
                    pinforge_record::schema_id::REBASE,
                    &RebaseOut {
                        completed: false,
                        outcome: RebaseOutcome::Stopped(&stop),
                    },
                )?;
            }
            // The evidence quotes upstream commit messages: shown escaped, never raw (issue #19).
            eprintln!("error: {}", text::shown(&stop.message));
            for l in stop.detail.lines() {
                eprintln!("  {}", text::shown(l));
            }
            eprintln!("hint: {}", stop.hint);
            return Ok(ExitCode::CheckFailed);
        }
        Rebased::Resolving(r) => return print_resolving(a.out.json, &r),
    };
    if a.out.json {
        print_json(
            pinforge_record::schema_id::REBASE,
            &RebaseOut {
                completed: true,
                outcome: RebaseOutcome::Done(&report),
            },
        )?;
        return Ok(ExitCode::Ok);
    }
    outln!(
        "rebased {} from {} onto {}",
        text::shown(&report.recipe),
        text::shown(&report.from),
        text::shown(&report.onto)
    );
    for p in &report.patches {
        match &p.applied_upstream {
            Some(au) => outln!(
                "  {} {} ({}): Applied-Upstream: {}",
                p.action,
                p.file,
                p.verdict.as_str(),
                text::shown(au)
            ),
            None if p.resolved => outln!(
                "  {} {} ({}; resolved by the operator's commit)",
                p.action,
                p.file,
                p.verdict.as_str()
            ),
            None => outln!("  {} {} ({})", p.action, p.file, p.verdict.as_str()),
        }
    }
    if let Some(l) = &report.ledger {
        outln!("ledger: {}", text::shown(l));
    }
    Ok(ExitCode::Ok)
}

/// Where a `--resolve` or `--continue` waits for the operator: the checkout, the conflicted
/// files, the state and what to do; exit 1.
fn print_resolving(json: bool, r: &rebase::Resolving) -> Result<ExitCode> {
    if json {
        print_json(
            pinforge_record::schema_id::REBASE,
            &RebaseOut {
                completed: false,
                outcome: RebaseOutcome::Resolving(r),
            },
        )?;
    }
    eprintln!("error: {}", text::shown(&r.message));
    eprintln!("  checkout: {}", text::shown(&r.checkout));
    for f in &r.conflicts {
        eprintln!("  conflict: {}", text::shown(f));
    }
    eprintln!("  state: {}", text::shown(&r.state));
    eprintln!("hint: {}", text::shown(&r.hint));
    Ok(ExitCode::CheckFailed)
}

/// Settle a rebase killed in this workspace before a command that reads a recipe or a bundle
/// runs (issue #19): the leftover is finished or undone under the workspace lock, and said on
/// standard error. `rebase` itself does this under its own lock.
pub(super) fn settle_leftover(ctx: &super::Ctx) -> Result<()> {
    if let Some(r) = rebase::recover(&ctx.ws_root)? {
        eprintln!(
            "note: an interrupted rebase of {} was {}",
            text::shown(&r.recipe.display().to_string()),
            if r.finished {
                "past its commit point and is finished"
            } else {
                "undone: the recipe, its lock and the bundle are as they were before it"
            }
        );
    }
    Ok(())
}

/// The `rebase --json` document (see `cli::schema`): the report of a completed rebase, or
/// where it stopped; `completed` says which.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct RebaseOut<'a> {
    completed: bool,
    #[serde(flatten)]
    outcome: RebaseOutcome<'a>,
}

/// The members a rebase adds beside `completed`.
#[derive(serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(super) enum RebaseOutcome<'a> {
    /// The rebase completed: the new pin, the patches and the ledger.
    Done(&'a rebase::Report),
    /// The rebase stopped at a decision or a conflict; nothing was written.
    Stopped(&'a rebase::Stop),
    /// `--resolve`/`--continue` stopped at a conflict, left in a checkout for the operator;
    /// nothing of the bundle or the recipe was written.
    Resolving(&'a rebase::Resolving),
}
