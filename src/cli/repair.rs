//! `pinforge repair`: re-hash every entry the install root's committed generation references
//! and re-materialize the damaged ones from verified sources (issue #36).

use super::{print_json, JsonArg, RootArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text::Shown;
use pinforge_deploy::install::Root;
use std::path::PathBuf;

/// Arguments of `repair`.
#[derive(Debug, clap::Args)]
pub struct RepairArgs {
    #[command(flatten)]
    pub root: RootArg,
    /// A build manifest whose outputs may supply damaged files (each output is hashed and
    /// used only when it matches the recorded digest); repeatable
    #[arg(long, value_name = "MANIFEST")]
    pub from: Vec<PathBuf>,
    /// Report what is damaged and where each file would come from; write nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `repair`.
pub(super) fn run(ctx: &super::Ctx, a: RepairArgs) -> Result<ExitCode> {
    let root = Root::open_existing(&a.root.resolve(ctx.ws_root.as_path()))?;
    let out = root.repair(&a.from, a.dry_run)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::REPAIR, &out)?;
        return Ok(ExitCode::Ok);
    }
    let verb = if a.dry_run {
        "would repair"
    } else {
        "repaired"
    };
    for e in &out.repaired {
        outln!(
            "{verb} {} ({}; {}): {} mismatch(es), record from {}",
            e.entry,
            e.sharing.as_str(),
            e.referenced_by.join(", "),
            e.mismatches.len(),
            Shown(&e.record_from)
        );
        for (file, src) in &e.sources {
            outln!("  {} <- {}", Shown(file), Shown(src));
        }
        for (file, sharers) in &e.shared_with {
            let names: Vec<String> = sharers.iter().map(|s| Shown(s).to_string()).collect();
            outln!(
                "  note: {}'s damaged inode is also {}",
                Shown(file),
                names.join(", ")
            );
        }
    }
    outln!(
        "repair: {} damaged entr(ies) {}, {} intact",
        out.repaired.len(),
        if a.dry_run { "found" } else { "repaired" },
        out.intact.len()
    );
    if let Some(r) = &out.report {
        outln!("report {}", r.display());
    }
    Ok(ExitCode::Ok)
}
