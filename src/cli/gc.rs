//! `pinforge gc`: remove store entries nothing references.

use super::{print_json, JsonArg, RootArg};
use crate::error::{exit, Result};
use crate::install::Root;
use crate::outln;

/// Arguments of `gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `gc`.
pub(super) fn run(ctx: &super::Ctx, a: GcArgs) -> Result<i32> {
    let ws_root = ctx.ws_root.as_path();
    cmd_gc(&a.root.resolve(ws_root), a.out.json)
}

fn cmd_gc(root: &std::path::Path, json: bool) -> Result<i32> {
    let root = Root::open(root)?;
    let out = root.gc()?;
    if json {
        print_json("pinforge.gc/v1", &out)?;
        return Ok(exit::OK);
    }
    for e in &out.removed_entries {
        outln!("removed store/{e}");
    }
    outln!(
        "gc: removed {} entr(ies) and {} old generation(s); {} entr(ies) still referenced",
        out.removed_entries.len(),
        out.removed_generations,
        out.kept_entries
    );
    Ok(exit::OK)
}
