//! `pinforge model tiny`: write a tiny random-weight GGUF model.

use crate::outln;
use clap::Subcommand;
use pinforge_base::error::{ExitCode, Result};
use pinforge_deploy::model::{self, Arch};
use std::path::PathBuf;

/// `pinforge model ...`
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Write a tiny random-weight GGUF model (deterministic for a seed, well under 1 MB).
    #[command(after_help = "Example:\n  pinforge model tiny --arch qwen2vl -o tiny-qwen2vl.gguf")]
    Tiny {
        /// qwen2vl (M-RoPE) or qwen2 (classical RoPE, same weights)
        #[arg(long, value_parser = ["qwen2vl", "qwen2"])]
        arch: String,
        /// Output file
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Seed for the weights
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        out: super::JsonArg,
    },
}

/// Run `model ...`.
pub(super) fn run(c: ModelCommand) -> Result<ExitCode> {
    match c {
        ModelCommand::Tiny {
            arch,
            output,
            seed,
            out,
        } => cmd_model_tiny(&arch, &output, seed, out.json),
    }
}

fn cmd_model_tiny(arch: &str, output: &std::path::Path, seed: u64, json: bool) -> Result<ExitCode> {
    let arch = Arch::parse(arch)?;
    let size = model::write_tiny(arch, seed, output)?;
    if json {
        let (sha256, _) = pinforge_base::digest::Sha256::of_file(output)?;
        super::print_json(
            pinforge_record::schema_id::MODEL_TINY,
            &ModelWritten {
                path: output.display().to_string(),
                bytes: size,
                arch: arch.name(),
                seed,
                sha256,
            },
        )?;
        return Ok(ExitCode::Ok);
    }
    outln!(
        "wrote {} ({} bytes, arch {}, seed {seed})",
        output.display(),
        size,
        arch.name()
    );
    Ok(ExitCode::Ok)
}

/// The `model tiny --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct ModelWritten<'a> {
    path: String,
    bytes: u64,
    arch: &'a str,
    seed: u64,
    sha256: pinforge_base::digest::Sha256,
}
