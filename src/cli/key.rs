//! `pinforge key generate`: an OpenSSH key pair for signing (Ed25519, or ECDSA P-256 for
//! cosign users), with the right modes.

use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_record::sign;
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
    /// Key type: ed25519 (ssh-ed25519) or p256 (ecdsa-sha2-nistp256, which cosign verifies)
    #[arg(long = "type", default_value = "ed25519", value_parser = ["ed25519", "p256"])]
    pub key_type: String,
    /// Private key path [default: pinforge_ed25519, or pinforge_ecdsa for p256]
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// The key's comment (and the principal of the printed allowed_signers line)
    #[arg(long, default_value = "pinforge")]
    pub comment: String,
}

/// Run a key command.
pub(super) fn run(c: KeyCommand) -> Result<ExitCode> {
    let KeyCommand::Generate(a) = c;
    // An empty passphrase means none (an unencrypted key), as before.
    let pass = sign::passphrase_from_env()?.filter(|p| !p.is_empty());
    let p256 = a.key_type == "p256";
    let output = a.output.unwrap_or_else(|| {
        PathBuf::from(if p256 {
            "pinforge_ecdsa"
        } else {
            "pinforge_ed25519"
        })
    });
    let (private, public) = sign::generate(&a.comment, pass.as_ref().map(|p| p.as_str()), p256)?;
    sign::write_pair(&output, &private, &public)?;
    outln!(
        "wrote {} ({}) and {}.pub",
        output.display(),
        if pass.is_some() {
            "encrypted"
        } else {
            "not encrypted"
        },
        output.display()
    );
    outln!("allowed_signers line:");
    outln!(
        "{} namespaces=\"{}\" {}",
        a.comment,
        sign::NAMESPACE,
        public
    );
    Ok(ExitCode::Ok)
}
