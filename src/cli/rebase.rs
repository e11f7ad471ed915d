//! `pinforge rebase RECIPE --onto PIN`: the recipe's pin and bundle moved onto a newer
//! upstream, with the ledger of what left the series (issue #9).

use super::{print_json, JsonArg};
use crate::error::{exit, Result};
use crate::outln;
use crate::rebase::{self, Decisions, Rebased};
use crate::recipe::Recipe;
use crate::workspace::Workspace;
use std::path::PathBuf;

/// Arguments of `rebase`.
#[derive(Debug, clap::Args)]
pub struct RebaseArgs {
    /// Recipe TOML whose pin and bundle move
    pub recipe: PathBuf,
    /// The newer upstream: crate:NAME@VERSION, git:URL@REV (commit or tag), tarball:PATH, dir:PATH
    #[arg(long)]
    pub onto: String,
    /// A patch to take out of the series (confirms `superseded`; also drops a carries-review or
    /// conflicting one); repeatable
    #[arg(long = "drop", value_name = "FILE")]
    pub drop: Vec<String>,
    /// A carries-review patch to carry after review; repeatable
    #[arg(long = "keep", value_name = "FILE")]
    pub keep: Vec<String>,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `rebase`.
pub(super) fn run(ctx: &super::Ctx, a: RebaseArgs) -> Result<i32> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load(&a.recipe)?;
    let onto = crate::audit::parse_onto(&a.onto)?;
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
        &crate::audit::today(),
    )?;
    let report = match report {
        Rebased::Done(r) => r,
        Rebased::Stopped(stop) => {
            if a.out.json {
                #[derive(serde::Serialize)]
                struct Stopped<'a> {
                    completed: bool,
                    #[serde(flatten)]
                    stop: &'a rebase::Stop,
                }
                print_json(
                    "pinforge.rebase/v1",
                    &Stopped {
                        completed: false,
                        stop: &stop,
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
        #[derive(serde::Serialize)]
        struct Done<'a> {
            completed: bool,
            #[serde(flatten)]
            report: &'a rebase::Report,
        }
        print_json(
            "pinforge.rebase/v1",
            &Done {
                completed: true,
                report: &report,
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
