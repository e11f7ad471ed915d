//! The verification policy: an `allowed_signers` file in git's and OpenSSH's format
//! (`ssh-keygen -Y verify -f`), so the same file serves `ssh-keygen`, `git` and pinforge.
//!
//! A line is `PRINCIPALS [OPTIONS] KEYTYPE BASE64 [COMMENT]`: principals comma separated,
//! options comma separated (`namespaces="a,b"`, `cert-authority`); `#` starts a comment line.
//! `cert-authority` and `valid-after`/`valid-before` are refused with their line (a key this
//! file cannot express exactly is never trusted more widely than written).

use pinforge_base::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The namespace pinforge signs in (`ssh-keygen -n pinforge`).
pub const NAMESPACE: &str = "pinforge";

/// Lines longer than this are refused (a real key line is well under 16 KiB).
const MAX_LINE: usize = 16 * 1024;

/// One trusted key with the principals that may use it.
#[derive(Debug, Clone)]
pub(crate) struct Allowed {
    pub(crate) principals: Vec<String>,
    /// None: every namespace (OpenSSH's rule when the option is absent).
    pub(crate) namespaces: Option<Vec<String>>,
    pub(crate) key: ssh_key::PublicKey,
    pub(crate) line: usize,
}

/// A loaded `allowed_signers` file.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) path: PathBuf,
    pub(crate) entries: Vec<Allowed>,
}

impl Policy {
    /// Read and parse `path` (a regular file: a FIFO is refused before it is opened).
    pub fn load(path: &Path) -> Result<Policy> {
        let bytes = pinforge_base::fsx::read(path)?;
        Policy::parse(&bytes, path)
    }

    /// Parse the bytes of an `allowed_signers` file; errors name `path:line`.
    pub(crate) fn parse(bytes: &[u8], path: &Path) -> Result<Policy> {
        let mut entries = Vec::new();
        for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
            let at = format!("{}:{}", path.display(), i + 1);
            if raw.len() > MAX_LINE {
                return Err(Error::input(
                    at,
                    format!("line of {} bytes, over {MAX_LINE}", raw.len()),
                ));
            }
            let text = std::str::from_utf8(raw).map_err(|e| {
                Error::input(
                    &at,
                    format!("not UTF-8 (bad byte at column {})", e.valid_up_to() + 1),
                )
            })?;
            let text = text.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            entries.push(parse_line(text, &at, i + 1)?);
        }
        if entries.is_empty() {
            return Err(Error::input(path.display(), "no allowed signer in the file")
                .with_hint("add a line `PRINCIPAL namespaces=\"pinforge\" ssh-ed25519 AAAA…` (`pinforge key generate` prints one)"));
        }
        Ok(Policy {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// The entry that trusts `key` for pinforge's namespace, if any.
    pub(crate) fn allows(&self, key: &ssh_key::public::KeyData) -> Option<&Allowed> {
        self.entries.iter().find(|e| {
            e.key.key_data() == key
                && e.namespaces
                    .as_ref()
                    .is_none_or(|ns| ns.iter().any(|n| n == NAMESPACE))
        })
    }
}

/// Split off the first field; an option value in double quotes may hold spaces and commas.
fn next_field(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return (&s[..i], s[i..].trim_start()),
            _ => {}
        }
    }
    (s, "")
}

fn parse_line(text: &str, at: &str, line: usize) -> Result<Allowed> {
    let (principals, rest) = next_field(text);
    let principals: Vec<String> = principals
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    if principals.is_empty() {
        return Err(Error::input(at, "no principal"));
    }
    let (mut field, mut rest) = next_field(rest);
    let mut namespaces = None;
    // A field that is not a key type is the options field.
    if ssh_key::Algorithm::new(field).is_err() {
        namespaces = parse_options(field, at)?;
        (field, rest) = next_field(rest);
    }
    let (b64, _comment) = next_field(rest);
    if b64.is_empty() {
        return Err(Error::input(at, format!("`{field}`: no key after it"))
            .with_hint("a line is PRINCIPALS [OPTIONS] KEYTYPE BASE64 [COMMENT]"));
    }
    let key = ssh_key::PublicKey::from_openssh(&format!("{field} {b64}")).map_err(|e| {
        Error::input(at, format!("not a public key `{field} …`: {e}"))
            .with_hint("copy the key from the `.pub` file as it is")
    })?;
    Ok(Allowed {
        principals,
        namespaces,
        key,
        line,
    })
}

fn parse_options(field: &str, at: &str) -> Result<Option<Vec<String>>> {
    let mut namespaces = None;
    let mut rest = field;
    while !rest.is_empty() {
        let (opt, after) = split_option(rest);
        rest = after;
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        match (name.to_ascii_lowercase().as_str(), value) {
            ("namespaces", Some(v)) => {
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .ok_or_else(|| Error::input(at, "namespaces=\"…\" must be quoted"))?;
                namespaces = Some(v.split(',').map(str::to_string).collect());
            }
            (other, _) => {
                return Err(Error::input(
                    at,
                    format!("option `{other}` is not supported; this line is refused"),
                )
                .with_hint("pinforge reads principals, namespaces=\"…\" and a plain key"))
            }
        }
    }
    Ok(namespaces)
}

/// One option off a comma-separated list, keeping commas inside quotes.
fn split_option(s: &str) -> (&str, &str) {
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => return (&s[..i], &s[i + 1..]),
            _ => {}
        }
    }
    (s, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEe+7LsFqK0YhQqcryI08xkxAbZj57j4Q8wfH4ZiHQD+";

    fn parse(s: &[u8]) -> Result<Policy> {
        Policy::parse(s, Path::new("allowed_signers"))
    }

    #[test]
    fn principals_options_and_comments_parse() {
        let text = format!(
            "# team\n\nalice@x,bob@x namespaces=\"git,pinforge\" {KEY} alice's key\ncarol {KEY}\n"
        );
        let p = parse(text.as_bytes()).expect("parse");
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[0].principals, ["alice@x", "bob@x"]);
        assert_eq!(
            p.entries[0].namespaces.as_deref(),
            Some(&["git".to_string(), "pinforge".to_string()][..])
        );
        assert_eq!(p.entries[0].line, 3);
        assert!(p.entries[1].namespaces.is_none());
        assert!(p.allows(p.entries[1].key.key_data()).is_some());
    }

    #[test]
    fn a_key_allowed_only_for_another_namespace_is_not_allowed() {
        let text = format!("alice namespaces=\"git\" {KEY}\n");
        let p = parse(text.as_bytes()).expect("parse");
        assert!(p.allows(p.entries[0].key.key_data()).is_none());
    }

    #[test]
    fn hostile_lines_are_refused_with_their_line_number() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"alice ssh-ed25519 not*base64\n".to_vec(),
                "allowed_signers:1",
            ),
            (
                b"\nalice \xff\xfe\n".to_vec(),
                "allowed_signers:2: not UTF-8",
            ),
            (vec![b'a'; MAX_LINE + 1], "over"),
            (
                format!("alice cert-authority {KEY}").into_bytes(),
                "cert-authority",
            ),
            (
                format!("alice valid-after=\"20200101\" {KEY}").into_bytes(),
                "valid-after",
            ),
            (b"alice ssh-ed25519\n".to_vec(), "no key"),
            (b"# only a comment\n".to_vec(), "no allowed signer"),
        ];
        for (bytes, want) in cases {
            let e = parse(&bytes).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("allowed_signers");
        assert_eq!(pinforge_sys::mkfifo(fifo.as_path(), 0o600), 0, "mkfifo");
        let e = Policy::load(&fifo).expect_err("fifo");
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse(&bytes);
        }
    }
}
