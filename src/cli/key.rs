//! `pinforge key generate`: an OpenSSH Ed25519 key pair for signing, with the right modes.

use crate::artifact::sign;
use crate::base::error::{exit, Result};
use crate::outln;
use std::path::PathBuf;

/// Key commands.
#[derive(Debug, clap::Subcommand)]
pub enum KeyCommand {
    /// Write a new key pair: PATH (0600, encrypted when PINFORGE_KEY_PASSPHRASE is set) and
    /// PATH.pub (0644); refuses to overwrite either.
    Generate(GenerateArgs),
}

/// Arguments of `key generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Key type (only ed25519 today)
    #[arg(long = "type", default_value = "ed25519", value_parser = ["ed25519"])]
    pub key_type: String,
    /// Private key path
    #[arg(short = 'o', long, default_value = "pinforge_ed25519")]
    pub output: PathBuf,
    /// The key's comment (and the principal of the printed allowed_signers line)
    #[arg(long, default_value = "pinforge")]
    pub comment: String,
}

/// Run a key command.
pub(super) fn run(c: KeyCommand) -> Result<i32> {
    let KeyCommand::Generate(a) = c;
    let pass = std::env::var(sign::PASSPHRASE_VAR)
        .ok()
        .filter(|p| !p.is_empty());
    let (private, public) = sign::generate(&a.comment, pass.as_deref())?;
    sign::write_pair(&a.output, &private, &public)?;
    outln!(
        "wrote {} ({}) and {}.pub",
        a.output.display(),
        if pass.is_some() {
            "encrypted"
        } else {
            "not encrypted"
        },
        a.output.display()
    );
    outln!("allowed_signers line:");
    outln!(
        "{} namespaces=\"{}\" {}",
        a.comment,
        sign::NAMESPACE,
        public
    );
    Ok(exit::OK)
}
