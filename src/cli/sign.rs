//! `pinforge sign FILE --key KEY`: write `FILE.dsse.json` and `FILE.sig` beside a record.

use super::{print_json, JsonArg};
use crate::artifact::sign::{self, SigningKey};
use crate::base::error::{exit, Result};
use crate::outln;
use std::path::PathBuf;

/// Arguments of `sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The record to sign (a manifest, flip or ablation record, evidence, receipt)
    pub file: PathBuf,
    /// OpenSSH Ed25519 private key (an encrypted one reads PINFORGE_KEY_PASSPHRASE)
    #[arg(long, env = "PINFORGE_SIGN_KEY")]
    pub key: PathBuf,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `sign`.
pub(super) fn run(a: SignArgs) -> Result<i32> {
    let key = SigningKey::load(&a.key)?;
    let s = sign::sign_file(&a.file, &key)?;
    if a.out.json {
        print_json(super::schema::id::SIGN, &s)?;
    } else {
        outln!(
            "signed {} as {} ({})",
            s.file.display(),
            s.keyid,
            s.payload_type
        );
        outln!("  envelope  {}", s.envelope.display());
        outln!("  sshsig    {}", s.sig.display());
    }
    Ok(exit::OK)
}
