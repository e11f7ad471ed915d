//! `pinforge rollback`: point `current` at another layer, or return live to the previous build.

use super::verify::render_verification;
use super::{print_json, JsonArg, RootArg};
use crate::error::{exit, Result};
use crate::install::{Layer, Root};
use crate::outln;

/// Arguments of `rollback`.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// Layer to show through `current`
    #[arg(long, value_parser = ["live", "control", "original"])]
    pub to: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `rollback`.
pub(super) fn run(ctx: &super::Ctx, a: RollbackArgs) -> Result<i32> {
    let ws_root = ctx.ws_root.as_path();
    cmd_rollback(&a.root.resolve(ws_root), a.to, a.out.json)
}

fn cmd_rollback(root: &std::path::Path, to: Option<String>, json: bool) -> Result<i32> {
    let to = to.as_deref().map(Layer::parse).transpose()?;
    let root = Root::open_existing(root)?;
    let out = root.rollback(to)?;
    if json {
        print_json("pinforge.rollback/v1", &out)?;
    } else {
        if let Some(r) = &out.recovered {
            outln!("recovered an interrupted transaction: {}", r.display());
        }
        outln!("current now shows {}", out.layer);
        render_verification(&out.verification);
        outln!("receipt {}", out.receipt.display());
    }
    Ok(exit::OK)
}
