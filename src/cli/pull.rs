//! `pinforge pull`: an artifact from an OCI registry into `pulled/<digest>/`, every digest
//! and the signature policy checked before anything is unpacked.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_deploy::ship::{self, Access, PullOptions, Reference};
use std::path::PathBuf;

/// Arguments of `pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// What: HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST] (a tag with a digest must still name it)
    pub reference: String,
    /// Require a signature by a key of this OpenSSH allowed_signers file
    #[arg(long)]
    pub allowed_signers: Option<PathBuf>,
    /// Allow plain HTTP to a registry that is not on this machine
    #[arg(long)]
    pub insecure_registry: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `pull`.
pub(super) fn run(ctx: &super::Ctx, a: PullArgs) -> Result<ExitCode> {
    let r = Reference::parse(&a.reference)?;
    let opts = PullOptions {
        access: Access {
            insecure: a.insecure_registry,
        },
        allowed_signers: a.allowed_signers,
        require_digest: false,
    };
    let out = ship::pull(&ctx.ws_root, &r, &opts)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::PULL, &out)?;
    } else {
        render(&out);
    }
    Ok(ExitCode::Ok)
}

/// The human rendering of a pull (also used by `install oci://…`).
pub(super) fn render(out: &ship::PullOutcome) {
    let what = if out.unchanged {
        "already pulled"
    } else {
        "pulled"
    };
    outln!(
        "{what} sha256:{} ({} files, {} bytes)",
        out.digest.to_hex(),
        out.files,
        out.bytes
    );
    match &out.signer {
        Some(s) => outln!("  signed by {}", pinforge_base::text::shown(s)),
        None => outln!("  signature not checked (no --allowed-signers)"),
    }
    outln!("manifest {}", out.manifest.display());
}
