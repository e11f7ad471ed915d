//! `pinforge status`: the install root's layers, `current`, and any unfinished transaction.

use super::{print_json, JsonArg, RootArg};
use crate::error::{exit, Result};
use crate::install::Root;
use crate::outln;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `status`.
pub(super) fn run(ctx: &super::Ctx, a: StatusArgs) -> Result<i32> {
    let ws_root = ctx.ws_root.as_path();
    cmd_status(&a.root.resolve(ws_root), a.out.json)
}

fn cmd_status(root: &std::path::Path, json: bool) -> Result<i32> {
    let root = Root::open(root)?;
    let st = root.status()?;
    if json {
        print_json("pinforge.status/v1", &st)?;
        return Ok(exit::OK);
    }
    outln!("install root {} (generation {})", st.root.display(), st.gen);
    match &st.current {
        Some(c) => outln!(
            "current -> {} ({}/{}, {})",
            c.layer,
            c.recipe,
            c.variant,
            c.digest.short(16)
        ),
        None => outln!("current -> nothing installed"),
    }
    for (name, slot) in &st.layers {
        match slot {
            Some(s) => outln!(
                "  {name:<9} {}  {}/{}  verification: {}",
                s.digest.short(16),
                s.recipe,
                s.variant,
                s.verification
            ),
            None => outln!("  {name:<9} -"),
        }
    }
    if !st.live_history.is_empty() {
        outln!(
            "  rollback stack: {} earlier live build(s)",
            st.live_history.len()
        );
    }
    if let Some(j) = &st.transaction {
        outln!(
            "unfinished transaction {} ({} of {}, generation {} -> {}, phase {}): the next install, rollback or gc finishes or undoes it",
            j.txid, j.op, j.layer, j.from_gen, j.to_gen, j.phase
        );
    }
    Ok(exit::OK)
}
