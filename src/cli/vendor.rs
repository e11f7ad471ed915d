//! `pinforge vendor digest`: the digest a tarball or folder pin needs.

use crate::outln;
use clap::Subcommand;
use pinforge_base::error::{ExitCode, Result};
use std::path::PathBuf;

/// `pinforge vendor ...`
#[derive(Debug, Subcommand)]
pub enum VendorCommand {
    /// Print the digest to pin a local source with: SHA-256 of a tarball, or the tree digest
    /// of a folder (`tree-sha256` of a `dir` pin).
    #[command(after_help = "Example:\n  pinforge vendor digest llama_cpp_python-0.3.17.tar.gz")]
    Digest {
        /// A tarball or a folder
        path: PathBuf,
        #[command(flatten)]
        out: super::JsonArg,
    },
}

/// Run `vendor ...`.
pub(super) fn run(c: VendorCommand) -> Result<ExitCode> {
    match c {
        VendorCommand::Digest { path, out } => {
            let (kind, digest) = pinforge_source::upstream::pin_digest(&path)?;
            if out.json {
                super::print_json(
                    pinforge_record::schema_id::VENDOR_DIGEST,
                    &VendorDigest {
                        path: path.display().to_string(),
                        kind,
                        digest,
                    },
                )?;
                return Ok(ExitCode::Ok);
            }
            outln!("{digest}  {kind}  {}", path.display());
            Ok(ExitCode::Ok)
        }
    }
}

/// The `vendor digest --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct VendorDigest {
    path: String,
    /// `sha256` (a tarball pin) or `tree-sha256` (a folder pin).
    kind: &'static str,
    digest: pinforge_base::digest::Sha256,
}
