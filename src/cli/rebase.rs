//! `pinforge rebase RECIPE --onto PIN`: the recipe's pin and bundle moved onto a newer
//! upstream, with the ledger of what left the series (issue #9).

use super::{print_json, JsonArg};
use crate::base::error::{exit, Result};
use crate::base::workspace::Workspace;
use crate::outln;
use crate::source::rebase::{self, Decisions, Rebased};
use crate::source::recipe::Recipe;
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
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `rebase`.
pub(super) fn run(ctx: &super::Ctx, a: RebaseArgs) -> Result<i32> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load(&a.recipe)?;
    let onto = crate::source::audit::parse_onto(&a.onto)?;
    let decisions = Decisions {
        drop: a.drop.into_iter().collect(),
        keep: a.keep.into_iter().collect(),
    };
    let report = rebase::rebase(
        &ws,
        &a.recipe,
        &recipe,
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
            eprintln!("error: {}", stop.message);
            for l in stop.detail.lines() {
                eprintln!("  {l}");
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
        report.recipe,
        report.from,
        report.onto
    );
    for p in &report.patches {
        match &p.applied_upstream {
            Some(au) => outln!(
                "  {} {} ({}): Applied-Upstream: {au}",
                p.action,
                p.file,
                p.verdict.as_str()
            ),
            None => outln!("  {} {} ({})", p.action, p.file, p.verdict.as_str()),
        }
    }
    if let Some(l) = &report.ledger {
        outln!("ledger: {l}");
    }
    Ok(exit::OK)
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
