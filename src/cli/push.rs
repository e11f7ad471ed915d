//! `pinforge push`: a verified build to an OCI registry; prints the artifact's digest.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_deploy::ship::{self, Access, Reference};
use std::path::PathBuf;

/// Arguments of `push`.
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The build's manifest (its FILE.dsse.json and FILE.sig, when present, are attached)
    pub manifest: PathBuf,
    /// Where to: HOST[:PORT]/REPOSITORY[:TAG]
    pub reference: String,
    /// Allow plain HTTP to a registry that is not on this machine
    #[arg(long)]
    pub insecure_registry: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `push`.
pub(super) fn run(a: PushArgs) -> Result<ExitCode> {
    let r = Reference::parse(&a.reference)?;
    let access = Access {
        insecure: a.insecure_registry,
    };
    let out = ship::push(&a.manifest, &r, access)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::PUSH, &out)?;
    } else {
        outln!("pushed {}", out.reference);
        outln!(
            "  layer sha256:{} ({} bytes)",
            out.layer_digest.to_hex(),
            out.layer_size
        );
        match (&out.attestation, &out.attestation_via) {
            (Some(d), Some(via)) => outln!("  attestation sha256:{} ({via})", d.to_hex()),
            _ => outln!("  unsigned: no signature beside the manifest was attached"),
        }
        outln!("sha256:{}", out.digest.to_hex());
    }
    Ok(ExitCode::Ok)
}
