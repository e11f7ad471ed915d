//! `pinforge history`: every install and rollback the root records, with the generation each
//! committed and what it showed. Everything read from the root's records that is text (names,
//! times, why a receipt is unreadable) is shown through [`pinforge_base::text::shown`]: a
//! receipt edited to hold a newline cannot forge a `* gen 9` row.

use super::rollback::slot;
use super::{print_json, JsonArg, RootArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text::Shown;
use pinforge_deploy::install::Root;

/// Arguments of `history`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `history`.
pub(super) fn run(ctx: &super::Ctx, a: HistoryArgs) -> Result<ExitCode> {
    let root = Root::open_existing(&a.root.resolve(&ctx.ws_root))?;
    let h = root.history()?;
    if a.out.json {
        print_json(pinforge_record::schema_id::HISTORY, &h)?;
        return Ok(ExitCode::Ok);
    }
    outln!(
        "install root {} (now generation {})",
        h.root.display(),
        h.committed_gen
    );
    for row in &h.rows {
        let Some(r) = &row.receipt_record else {
            outln!(
                "  #{:<4} {}: unreadable ({})",
                row.seq,
                Shown(&row.receipt),
                Shown(row.unreadable.as_deref().unwrap_or("?"))
            );
            continue;
        };
        let mark = if r.gen == h.committed_gen { "*" } else { " " };
        let what = if r.unchanged {
            "unchanged".to_string()
        } else if r.reverted {
            "reverted".to_string()
        } else {
            format!("{} -> {}", slot(&r.from), slot(&r.to))
        };
        outln!(
            "{mark} gen {:<4} #{:<4} {}  {:<8} {:<8} {what}",
            r.gen,
            row.seq,
            Shown(&r.time),
            r.op,
            r.layer
        );
        if let Some(gs) = &row.state {
            for (layer, s) in &gs.layers {
                let input = row
                    .input_digests
                    .get(layer)
                    .map(|d| format!("  input {}", d.short(12)))
                    .unwrap_or_default();
                let shown = if gs.current == Some(*layer) {
                    " (current)"
                } else {
                    ""
                };
                outln!("      {layer:<9} {}{input}{shown}", slot(&Some(s.clone())));
            }
        }
    }
    // Several receipts can name one generation (an unchanged install commits none).
    let on_disk: std::collections::BTreeSet<u64> = h
        .rows
        .iter()
        .filter(|r| r.state.is_some())
        .filter_map(|r| r.receipt_record.as_ref().map(|x| x.gen))
        .collect();
    let on_disk: Vec<String> = on_disk.iter().map(u64::to_string).collect();
    outln!(
        "{} transaction(s); generations on disk for `rollback --to-generation`: {}",
        h.rows.len(),
        if on_disk.is_empty() {
            "none".to_string()
        } else {
            on_disk.join(", ")
        }
    );
    Ok(ExitCode::Ok)
}
