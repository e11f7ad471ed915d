//! Registry references (`HOST[:PORT]/REPO[:TAG][@sha256:HEX]`, optionally behind `oci://`),
//! parsed strictly by the distribution spec's grammar: every part that ends up in a URL path
//! is checked here, so the client never builds a URL from unchecked text.

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// The repository path (`llama/mrope-cpu`).
    pub repository: String,
    /// The tag, if one was given.
    pub tag: Option<String>,
    /// The manifest digest, if one was given.
    pub digest: Option<Sha256>,
}

impl Reference {
    /// Parse `text` (an `oci://` prefix is allowed and dropped).
    pub fn parse(text: &str) -> Result<Reference> {
        let bad = |why: &str| {
            Error::input(format!("reference `{}`", text.escape_debug()), why).with_hint(
                "write HOST[:PORT]/REPOSITORY[:TAG][@sha256:HEX], e.g. 127.0.0.1:5000/llama/mrope-cpu:patched",
            )
        };
        let rest = text.strip_prefix("oci://").unwrap_or(text);
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad("the digest must be sha256:<64 hex digits>"))?;
                let digest: Sha256 = hex
                    .parse()
                    .map_err(|_| bad("the digest must be sha256:<64 hex digits>"))?;
                (r, Some(digest))
            }
            None => (rest, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no registry host: the reference needs HOST/REPOSITORY"))?;
        if !valid_registry(registry) {
            return Err(bad("the registry host is not HOST or HOST:PORT"));
        }
        // A tag follows the last `:` after the last `/` (a port lives before the first `/`).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, Some(t)),
            _ => (path, None),
        };
        if !valid_repository(repository) {
            return Err(bad(
                "the repository must be lower-case path components of [a-z0-9] joined by . _ __ -",
            ));
        }
        if let Some(t) = tag {
            if !valid_tag(t) {
                return Err(bad("a tag is [A-Za-z0-9_][A-Za-z0-9._-]{0,127}"));
            }
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The registry's host name without the port.
    pub(crate) fn host(&self) -> &str {
        match self.registry.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => self
                .registry
                .rsplit_once(':')
                .map_or(self.registry.as_str(), |(h, _)| h),
        }
    }

    /// Whether the registry is on this machine (the only place plain HTTP goes by default).
    pub(crate) fn is_loopback(&self) -> bool {
        let h = self.host();
        h == "localhost"
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The reference as text, digest form when a digest is known.
    pub(crate) fn shown(&self) -> String {
        let mut s = format!("{}/{}", self.registry, self.repository);
        if let Some(t) = &self.tag {
            s.push(':');
            s.push_str(t);
        }
        if let Some(d) = &self.digest {
            s.push_str("@sha256:");
            s.push_str(&d.to_hex());
        }
        s
    }
}

fn valid_registry(r: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    !r.is_empty() && r.len() <= 255 && r.chars().all(ok) && !r.starts_with(['-', '.', ':'])
}

fn valid_repository(r: &str) -> bool {
    !r.is_empty() && r.len() <= 255 && r.split('/').all(valid_component)
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_with_port_tag_and_digest() {
        let hex = "ab".repeat(32);
        let r = Reference::parse(&format!(
            "oci://127.0.0.1:5000/llama/mrope-cpu:patched@sha256:{hex}"
        ))
        .expect("parses");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "llama/mrope-cpu");
        assert_eq!(r.tag.as_deref(), Some("patched"));
        assert_eq!(r.digest.map(|d| d.to_hex()), Some(hex));
        assert!(r.is_loopback());
        let r = Reference::parse("registry.example.com/a/b").expect("parses");
        assert_eq!(
            (r.tag.clone(), r.digest, r.is_loopback()),
            (None, None, false)
        );
        assert!(Reference::parse("[::1]:5000/x:y")
            .expect("v6")
            .is_loopback());
    }

    #[test]
    fn hostile_references_are_refused() {
        for bad in [
            "127.0.0.1:5000",
            "127.0.0.1:5000/../x",
            "127.0.0.1:5000/A",
            "127.0.0.1:5000/x/",
            "127.0.0.1:5000/x:t@sha256:zz",
            "127.0.0.1:5000/x@md5:00",
            "127.0.0.1:5000/x:-t",
            "127.0.0.1:5000/x:t\n",
            "127.0.0.1:5000/x?y",
            "127.0.0.1:5000/x%2e",
            "host/a\u{202e}b",
            "/x",
        ] {
            let e = Reference::parse(bad).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        }
    }
}
