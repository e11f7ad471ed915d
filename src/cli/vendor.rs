//! `pinforge vendor digest`: the digest a tarball or folder pin needs.

use crate::error::{exit, Result};
use crate::outln;
use clap::Subcommand;
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
    },
}

/// Run `vendor ...`.
pub(super) fn run(c: VendorCommand) -> Result<i32> {
    match c {
        VendorCommand::Digest { path } => {
            let (kind, digest) = crate::upstream::pin_digest(&path)?;
            outln!("{digest}  {kind}  {}", path.display());
            Ok(exit::OK)
        }
    }
}
