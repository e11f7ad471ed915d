//! `pinforge rebase RECIPE --onto PIN`: the recipe's pin and bundle moved onto a newer
//! upstream, with the ledger of what left the series (issue #9).

use super::{print_json, JsonArg};
use crate::base::error::{exit, Result};
use crate::base::text;
use crate::base::workspace::Workspace;
use crate::outln;
use crate::source::rebase::{self, Decisions, Rebased};
use std::path::PathBuf;

/// Arguments of `rebase`.
#[derive(Debug, clap::Args)]
pub struct RebaseArgs {
    /// Recipe TOML whose pin and bundle move
    pub recipe: PathBuf,
    /// The newer upstream: crate:NAME@VERSION, git:URL@REV (commit or tag), tarball:PATH, dir:PATH
    #[arg(long)]
    pub onto: String,
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
pub(super) fn run(ctx: &super::Ctx, a: RebaseArgs) -> Result<i32> {
    // Values that become recipe keys and patch header lines (issue #19): refused before use.
    text::refuse_control("--onto", &a.onto)?;
    for v in &a.drop {
        text::refuse_control("--drop", v)?;
    }
    for v in &a.keep {
        text::refuse_control("--keep", v)?;
    }
    let ws = Workspace::new(&ctx.ws_root)?;
    let onto = crate::source::audit::parse_onto(&a.onto)?;
    let decisions = Decisions {
        drop: a.drop.into_iter().collect(),
        keep: a.keep.into_iter().collect(),
    };
    if a.check {
        super::audit::check_before_rebase(ctx, &ws, &a.recipe, &onto, &decisions.drop)?;
    }
    // The recipe is read under the workspace lock, inside the rebase, after any leftover
    // rebase is settled.
    let report = rebase::rebase(
        &ws,
        &a.recipe,
        &onto,
        &decisions,
        &crate::source::audit::today(),
    )?;
    let report = match report {
        Rebased::Done(r) => r,
        Rebased::Stopped(stop) => {
            if a.out.json {
                print_json(
                    super::schema::id::REBASE,
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
            return Ok(exit::CHECK_FAILED);
        }
    };
    if a.out.json {
        print_json(
            super::schema::id::REBASE,
            &RebaseOut {
                completed: true,
                outcome: RebaseOutcome::Done(&report),
            },
        )?;
        return Ok(exit::OK);
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
            None => outln!("  {} {} ({})", p.action, p.file, p.verdict.as_str()),
        }
    }
    if let Some(l) = &report.ledger {
        outln!("ledger: {}", text::shown(l));
    }
    Ok(exit::OK)
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
}
