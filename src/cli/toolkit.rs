//! `pinforge toolkit LOCK`: provision (or re-verify) a CUDA toolkit from its lock of pinned
//! wheels, and say where it is: the step a build runs first, on its own, so that a GPU
//! machine's script can carry a toolkit made elsewhere.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_build::cudakit;
use std::path::PathBuf;

/// Arguments of `toolkit`.
#[derive(Debug, clap::Args)]
pub struct ToolkitArgs {
    /// A toolkit lock (`recipes/toolkits/NAME.toml`)
    pub lock: PathBuf,
    /// Cache folder [default: PINFORGE_TOOLKIT_CACHE, else $XDG_CACHE_HOME/pinforge, else
    /// ~/.cache/pinforge]
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `toolkit`.
pub(super) fn run(ctx: &super::Ctx, a: ToolkitArgs) -> Result<ExitCode> {
    let lock = cudakit::load_lock(&a.lock)?;
    let cache = match a.cache_dir {
        Some(c) => c,
        None => cudakit::default_cache_dir()?,
    };
    let quiet = a.out.json || ctx.verbosity == super::Verbosity::Quiet;
    let note = |stage: &str, detail: &str| {
        if !quiet {
            eprintln!("{stage:>9} {detail}");
        }
    };
    let ws_dirs = pinforge_base::workspace::Workspace::new(&ctx.ws_root)
        .map(|w| w.tool_dirs())
        .unwrap_or_default();
    let kit = cudakit::provision(&lock, &cache, &ws_dirs, &note)?;
    if a.out.json {
        print_json(
            pinforge_record::schema_id::TOOLKIT,
            &ToolkitOut {
                root: kit.root.display().to_string(),
                assembled: kit.assembled,
                record: &kit.record,
            },
        )?;
    } else {
        outln!(
            "{} {}: {} ({}), tree {}",
            if kit.assembled {
                "assembled"
            } else {
                "verified"
            },
            kit.record.name,
            kit.root.display(),
            kit.record.nvcc_version_line,
            kit.record.tree_sha256.short(16)
        );
    }
    Ok(ExitCode::Ok)
}

/// The `toolkit --json` document (see `cli::schema`): where the toolkit is, and its record.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct ToolkitOut<'a> {
    root: String,
    assembled: bool,
    #[serde(flatten)]
    record: &'a cudakit::ToolkitRecord,
}
