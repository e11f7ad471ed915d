//! `pinforge rollback`: point `current` at another layer, return live to the previous build,
//! or restore a whole earlier generation (and roll forward again the same way).

use super::verify::render_verification;
use super::{print_json, JsonArg, RootArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_deploy::install::{GenSlot, Layer, RollbackTo, Root};

/// Arguments of `rollback`.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// Layer to show through `current`
    #[arg(long, value_parser = ["live", "control", "original"], conflicts_with = "to_generation")]
    pub to: Option<String>,
    /// Restore the whole state of generation N (`pinforge history` lists them)
    #[arg(long, value_name = "N")]
    pub to_generation: Option<u64>,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `rollback`.
pub(super) fn run(ctx: &super::Ctx, a: RollbackArgs) -> Result<ExitCode> {
    let to = match (
        a.to.as_deref().map(Layer::parse).transpose()?,
        a.to_generation,
    ) {
        (Some(l), _) => RollbackTo::Layer(l),
        (None, Some(n)) => RollbackTo::Generation(n),
        (None, None) => RollbackTo::PreviousLive,
    };
    let root = Root::open_existing(&a.root.resolve(&ctx.ws_root))?;
    let out = root.rollback_to(to)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::ROLLBACK, &out)?;
    } else {
        if let Some(r) = &out.recovered {
            outln!("recovered an interrupted transaction: {}", r.display());
        }
        if out.unchanged {
            outln!(
                "unchanged: current already shows {} ({})",
                out.layer,
                slot(&out.reached)
            );
        } else {
            outln!(
                "current now shows {}: left {}, reached {} (generation {})",
                out.layer,
                slot(&out.left),
                slot(&out.reached),
                out.gen
            );
        }
        render_verification(&out.verification);
        outln!("receipt {}", out.receipt.display());
    }
    Ok(ExitCode::Ok)
}

/// A layer's slot in one line: `recipe/variant digest12`, or `nothing`. The names come from
/// the install root's records (data that may have been edited): shown escaped.
pub(super) fn slot(s: &Option<GenSlot>) -> String {
    use pinforge_base::text::Shown;
    match s {
        Some(s) => format!(
            "{}/{} {}",
            Shown(&s.recipe),
            Shown(&s.variant),
            s.digest.short(12)
        ),
        None => "nothing".into(),
    }
}
