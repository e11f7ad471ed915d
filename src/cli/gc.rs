//! `pinforge gc`: remove store entries nothing references.

use super::{print_json, JsonArg, RootArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_deploy::install::Root;

/// Arguments of `gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub root: RootArg,
    /// Report what would be removed (entries, bytes, generations); remove nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `gc`.
pub(super) fn run(ctx: &super::Ctx, a: GcArgs) -> Result<ExitCode> {
    let ws_root = ctx.ws_root.as_path();
    cmd_gc(&a.root.resolve(ws_root), a.dry_run, a.out.json)
}

fn cmd_gc(root: &std::path::Path, dry_run: bool, json: bool) -> Result<ExitCode> {
    let root = Root::open_existing(root)?;
    let out = root.gc(dry_run)?;
    if json {
        print_json(pinforge_record::schema_id::GC, &out)?;
        return Ok(ExitCode::Ok);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for e in &out.removed_entries {
        outln!("{verb} store/{e}");
    }
    for e in &out.missing_entries {
        outln!("warning: referenced entry store/{e} is missing");
    }
    outln!(
        "gc: {verb} {} entr(ies), {} object(s) ({} bytes) and {} old generation(s); {} entr(ies) \
         still referenced",
        out.removed_entries.len(),
        out.removed_objects,
        out.bytes_freed,
        out.removed_generations,
        out.kept_entries
    );
    Ok(ExitCode::Ok)
}
