//! `pinforge sign FILE --key KEY`: write `FILE.dsse.json` and `FILE.sig` beside a record.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_record::sign::record::Signer;
use pinforge_record::sign::{self, SigningKey};
use std::path::PathBuf;

/// Arguments of `sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The record to sign (a manifest, flip or ablation record, evidence, receipt)
    pub file: PathBuf,
    /// OpenSSH Ed25519 or ECDSA P-256 private key (an encrypted one reads
    /// PINFORGE_KEY_PASSPHRASE, or asks on the terminal when that is unset)
    #[arg(long, env = "PINFORGE_SIGN_KEY")]
    pub key: PathBuf,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `sign`.
pub(super) fn run(a: SignArgs) -> Result<ExitCode> {
    let key = SigningKey::load(&a.key)?;
    let s = sign::sign_file(&a.file, &key)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::SIGN, &s)?;
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
    Ok(ExitCode::Ok)
}

/// `--sign KEY`, shared by every command that writes a record (build, flip, ablate, validate,
/// install): the record is signed as it is written (`FILE.dsse.json` and `FILE.sig` beside it,
/// renamed before the record itself, see `artifact::sign::record`).
///
/// Where the key comes from, first match wins: `--sign KEY`, then `PINFORGE_SIGN_KEY`, then
/// `key` in the `[sign]` table of `$XDG_CONFIG_HOME/pinforge/config.toml` (default
/// `~/.config/pinforge/config.toml`; a relative path there is relative to the file's folder).
/// The config file is the operator's, not the recipe's: a recipe cannot turn signing on.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SignWith {
    /// Sign the record this command writes with this OpenSSH Ed25519 or ECDSA P-256 key
    /// [env: PINFORGE_SIGN_KEY] [config: [sign] key in $XDG_CONFIG_HOME/pinforge/config.toml]
    #[arg(long = "sign", value_name = "KEY")]
    pub sign: Option<PathBuf>,
}

impl SignWith {
    /// Load the key (flag, environment, config, in that order) into the command's signer,
    /// before the command writes anything: a bad key is exit 2 with nothing done.
    pub(super) fn signer(&self) -> Result<Signer> {
        let env = std::env::var_os(SIGN_KEY_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let path = match self.sign.clone().or(env) {
            Some(p) => Some(p),
            None => config_key(config_path().as_deref())?,
        };
        match path {
            Some(p) => Ok(Signer::with_key(SigningKey::load(&p)?)),
            None => Ok(Signer::none()),
        }
    }
}

/// The environment variable that names the signing key.
const SIGN_KEY_VAR: &str = "PINFORGE_SIGN_KEY";

/// `$XDG_CONFIG_HOME/pinforge/config.toml`, or `$HOME/.config/pinforge/config.toml`.
fn config_path() -> Option<PathBuf> {
    let nonempty = |v: &str| {
        std::env::var_os(v)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    nonempty("XDG_CONFIG_HOME")
        .or_else(|| nonempty("HOME").map(|h| h.join(".config")))
        .map(|d| d.join("pinforge/config.toml"))
}

/// The operator's config file: only `[sign] key` today; anything else is refused by name, so
/// a misspelt setting is not silently ignored.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    sign: Option<SignConfig>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignConfig {
    key: PathBuf,
}

/// The `[sign] key` of the config file at `path`, if the file exists and sets one.
fn config_key(path: Option<&std::path::Path>) -> Result<Option<PathBuf>> {
    let Some(path) = path else { return Ok(None) };
    let Some(bytes) = pinforge_base::fsx::read_if_present(path)? else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| pinforge_base::error::Error::input(path.display(), "is not UTF-8"))?;
    let c: Config = toml::from_str(&text).map_err(|e| {
        pinforge_base::error::Error::input(path.display(), e.message().to_string())
            .with_hint("the config file takes one setting: [sign] key = \"PATH\"")
    })?;
    Ok(c.sign.map(|s| {
        if s.key.is_absolute() {
            s.key
        } else {
            pinforge_base::fsx::parent_of(path).join(s.key)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_key_is_read_relative_to_its_file_and_unknown_settings_are_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("config.toml");
        assert_eq!(config_key(Some(&p)).expect("absent"), None);
        std::fs::write(&p, "[sign]\nkey = \"keys/builder\"\n").expect("write");
        assert_eq!(
            config_key(Some(&p)).expect("read"),
            Some(d.path().join("keys/builder"))
        );
        std::fs::write(&p, "[sign]\nkey = \"/k\"\n").expect("write");
        assert_eq!(
            config_key(Some(&p)).expect("read"),
            Some(PathBuf::from("/k"))
        );
        std::fs::write(&p, "[sign]\nkee = \"/k\"\n").expect("write");
        let e = config_key(Some(&p)).expect_err("unknown");
        assert!(e.to_string().contains("kee"), "{e}");
        std::fs::write(&p, "").expect("write");
        assert_eq!(config_key(Some(&p)).expect("empty"), None);
    }
}
