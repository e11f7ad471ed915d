//! `pinforge status`: the install root's layers, `current`, and any unfinished transaction.
//! Names and times read from the root's records are shown through
//! [`pinforge_base::text::shown`], never raw.

use super::{print_json, JsonArg, RootArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text::Shown;
use pinforge_deploy::install::Root;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub root: RootArg,
    /// Re-hash every layer's entry now (exit 1 on a mismatch) instead of showing the last
    /// verification a receipt recorded
    #[arg(long)]
    pub verify: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `status`.
pub(super) fn run(ctx: &super::Ctx, a: StatusArgs) -> Result<ExitCode> {
    let ws_root = ctx.ws_root.as_path();
    cmd_status(&a.root.resolve(ws_root), a.out.json, a.verify)
}

fn cmd_status(root: &std::path::Path, json: bool, verify: bool) -> Result<ExitCode> {
    let root = Root::open_existing(root)?;
    let st = root.status(verify)?;
    let all_ok = st
        .layers
        .values()
        .flatten()
        .all(|s| s.verification == pinforge_deploy::install::VerificationState::Ok);
    let code = if verify && !all_ok {
        ExitCode::CheckFailed
    } else {
        ExitCode::Ok
    };
    if json {
        print_json(pinforge_record::schema_id::STATUS, &st)?;
        return Ok(code);
    }
    outln!("install root {} (generation {})", st.root.display(), st.gen);
    match &st.current {
        Some(c) => outln!(
            "current -> {} ({}/{}, {})",
            c.layer,
            Shown(&c.recipe),
            Shown(&c.variant),
            c.digest.short(16)
        ),
        None => outln!("current -> nothing installed"),
    }
    // Layers in their own order (live, control, original), not the JSON map's alphabetical one.
    let ordered = pinforge_deploy::install::Layer::ALL
        .iter()
        .filter_map(|l| st.layers.get(l.as_str()).map(|s| (l.as_str(), s)));
    for (name, slot) in ordered {
        match slot {
            Some(s) => outln!(
                "  {name:<9} {}  {}/{}  {}  verification: {} ({})",
                s.digest.short(16),
                Shown(&s.recipe),
                Shown(&s.variant),
                s.sharing.as_str(),
                s.verification,
                match (&s.verified_at, st.verified_now) {
                    (Some(t), true) => format!("re-hashed now, {}", Shown(t)),
                    (Some(t), false) =>
                        format!("recorded {}; `status --verify` re-hashes", Shown(t)),
                    (None, _) => "never verified".to_string(),
                }
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
    Ok(code)
}
