//! Typed digests and ids (`Sha256`, `GitOid`): never loose hex strings. Hashing of files and of
//! directory trees lives here so that every digest in pinforge is computed one way.

use crate::error::{Error, IoContext, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256([u8; 32]);

impl Sha256 {
    /// Digest of a byte slice.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Sha256(sha2::Sha256::digest(bytes).into())
    }

    /// Digest and size of a file, streamed (artifacts can be gigabytes). Only regular files are
    /// read: a FIFO or a device named by a manifest or a pin is refused as input before it is
    /// opened for reading (`/dev/zero` never ends, a FIFO never answers).
    pub fn of_file(path: &Path) -> Result<(Self, u64)> {
        let file = crate::fsx::open_regular(path, "file", true)?;
        Self::of_reader(file, path)
    }

    /// Digest and size of an opened file; `path` names it in errors.
    pub fn of_reader(mut file: std::fs::File, path: &Path) -> Result<(Self, u64)> {
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf).at("read", path)?;
            if n == 0 {
                break;
            }
            size += n as u64;
            hasher.update(&buf[..n]);
        }
        Ok((Sha256(hasher.finalize().into()), size))
    }

    /// Lower-case hex.
    pub fn to_hex(self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// The first `n` hex digits, for directory names and display.
    pub fn short(&self, n: usize) -> String {
        let mut hex = self.to_hex();
        hex.truncate(n.min(64));
        hex
    }
}

/// Why a string is not a SHA-256 digest.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseDigestError(String);

impl fmt::Display for ParseDigestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a SHA-256 digest (64 hex digits, optionally prefixed `sha256:`)",
            self.0
        )
    }
}

impl FromStr for Sha256 {
    type Err = ParseDigestError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let hex = s.strip_prefix("sha256:").unwrap_or(s);
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ParseDigestError(s.to_string()));
        }
        let mut out = [0u8; 32];
        for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
            let pair = std::str::from_utf8(chunk).map_err(|_| ParseDigestError(s.into()))?;
            out[i] = u8::from_str_radix(pair, 16).map_err(|_| ParseDigestError(s.into()))?;
        }
        Ok(Sha256(out))
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

impl Serialize for Sha256 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Sha256 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Sha256 {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Sha256".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "SHA-256, 64 lowercase hex digits",
            "type": "string",
            "pattern": "^[0-9a-f]{64}$"
        })
    }
}

/// A full git object id (40 hex digits, SHA-1 repositories). Held as its 20 bytes, so that this
/// leaf names no git library: the crate that drives libgit2 converts (`source::git::OidExt`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitOid([u8; 20]);

impl GitOid {
    /// The id whose 20 bytes are `bytes`.
    pub fn from_bytes(bytes: [u8; 20]) -> Self {
        GitOid(bytes)
    }
    /// The 20 bytes of the id.
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }
    /// The first `n` hex digits.
    pub fn short(&self, n: usize) -> String {
        let mut s = self.to_string();
        s.truncate(n.min(40));
        s
    }
}

impl FromStr for GitOid {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::input(
                format!("`{s}`"),
                "is not a full git commit id (40 hex digits)",
            )
        };
        if s.len() != 40 {
            return Err(bad());
        }
        let mut out = [0u8; 20];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Ok(GitOid(out))
    }
}

impl fmt::Display for GitOid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for GitOid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "git:{self}")
    }
}

impl Serialize for GitOid {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl schemars::JsonSchema for GitOid {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GitOid".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "a full git object id, 40 lowercase hex digits",
            "type": "string",
            "pattern": "^[0-9a-f]{40}$"
        })
    }
}

impl<'de> Deserialize<'de> for GitOid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<GitOid>().map_err(serde::de::Error::custom)
    }
}

/// Digest of a directory tree: SHA-256 over the sorted list of `mode path\0sha256\n` records
/// for every regular file and `link path\0target\n` for every symlink. Directories themselves
/// are implied by their contents (like git), and `.git` folders are skipped: the digest names
/// content, not a repository's bookkeeping.
pub fn tree_digest(root: &Path) -> Result<Sha256> {
    let mut records: Vec<Vec<u8>> = Vec::new();
    walk(root, root, &mut records)?;
    // Byte order, which is `str` order for UTF-8 records: digests of UTF-8 trees are unchanged.
    records.sort();
    let mut hasher = sha2::Sha256::new();
    for r in &records {
        hasher.update(r);
    }
    Ok(Sha256(hasher.finalize().into()))
}

/// One record: `head rel\0tail\n`, with the name and link target as their raw bytes (bytes
/// are bytes: two names that differ only in invalid UTF-8 are two names).
fn record(head: &str, rel: &Path, tail: &[u8]) -> Vec<u8> {
    let rel = rel.as_os_str().as_encoded_bytes();
    let mut r = Vec::with_capacity(head.len() + rel.len() + tail.len() + 3);
    r.extend_from_slice(head.as_bytes());
    r.push(b' ');
    r.extend_from_slice(rel);
    r.push(0);
    r.extend_from_slice(tail);
    r.push(b'\n');
    r
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Vec<u8>>) -> Result<()> {
    for entry in std::fs::read_dir(dir).at("read directory", dir)? {
        let entry = entry.at("read directory", dir)?;
        let path = entry.path();
        // Case-insensitively, as the folder pin's copy skips them (git refuses `.GIT` too).
        if entry
            .file_name()
            .as_encoded_bytes()
            .eq_ignore_ascii_case(b".git")
        {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).at("stat", &path)?;
        let rel = path.strip_prefix(root).map_err(|_| {
            Error::Internal(format!("{} outside {}", path.display(), root.display()))
        })?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).at("read link", &path)?;
            out.push(record("link", rel, target.as_os_str().as_encoded_bytes()));
        } else if meta.is_dir() {
            walk(root, &path, out)?;
        } else if meta.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let mode = if meta.permissions().mode() & 0o111 != 0 {
                "755"
            } else {
                "644"
            };
            let file = crate::fsx::open_regular(&path, "file", false)?;
            let (digest, _) = Sha256::of_reader(file, &path)?;
            out.push(record(mode, rel, digest.to_hex().as_bytes()));
        } else {
            // A FIFO would hang whatever copies the folder later; a digest that silently left
            // it out would pin a tree that cannot be materialized.
            let kind = crate::fsx::special_kind(&meta.file_type()).unwrap_or("not a regular file");
            return Err(Error::input(
                path.display(),
                format!("is {kind}: a pinned folder holds files, folders and links only"),
            )
            .with_hint("remove it from the folder; devices, FIFOs and sockets are never read"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_is_the_known_value() {
        assert_eq!(
            Sha256::of_bytes(b"").to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn parse_round_trips_and_accepts_prefix() {
        let d = Sha256::of_bytes(b"abc");
        let parsed: Sha256 = format!("sha256:{d}").parse().expect("valid digest");
        assert_eq!(parsed, d);
        assert!("abc".parse::<Sha256>().is_err());
        assert!("zz".repeat(32).parse::<Sha256>().is_err());
    }

    #[test]
    fn file_digest_matches_bytes_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello").expect("write");
        let (d, n) = Sha256::of_file(&p).expect("hash");
        assert_eq!(d, Sha256::of_bytes(b"hello"));
        assert_eq!(n, 5);
    }

    #[test]
    fn tree_digest_sees_content_mode_and_names_but_not_git() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/.git")).expect("mkdir");
        std::fs::write(root.join("a/x"), b"1").expect("write");
        let d1 = tree_digest(root).expect("digest");
        std::fs::write(root.join("a/.git/HEAD"), b"ref").expect("write");
        assert_eq!(tree_digest(root).expect("digest"), d1, ".git is ignored");
        std::fs::write(root.join("a/x"), b"2").expect("write");
        let d2 = tree_digest(root).expect("digest");
        assert_ne!(d1, d2, "content change is seen");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("a/x"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        assert_ne!(
            tree_digest(root).expect("digest"),
            d2,
            "mode change is seen"
        );
    }

    // DESIGN §5 "bytes are bytes": names (and link targets) that differ only in invalid UTF-8
    // are different trees, never one lossily decoded name.
    #[test]
    fn tree_digest_hashes_raw_name_bytes() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let digest_with = |name: &[u8], target: &[u8]| {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join(OsStr::from_bytes(name)), b"1").expect("write");
            std::os::unix::fs::symlink(OsStr::from_bytes(target), dir.path().join("l"))
                .expect("link");
            tree_digest(dir.path()).expect("digest")
        };
        let a = digest_with(b"f\xff", b"t");
        let b = digest_with(b"f\xfe", b"t");
        assert_ne!(a, b, "two invalid names are not one U+FFFD");
        assert_ne!(digest_with(b"f", b"t\xff"), digest_with(b"f", b"t\xfe"));
        // An all-UTF-8 tree's digest is the one of the textual records (pins stay valid).
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("é")).expect("mkdir");
        std::fs::write(dir.path().join("é/x"), b"1").expect("write");
        std::os::unix::fs::symlink("é/x", dir.path().join("l")).expect("link");
        let text = format!(
            "644 é/x\0{}\nlink l\0é/x\n",
            Sha256::of_bytes(b"1").to_hex()
        );
        assert_eq!(
            tree_digest(dir.path()).expect("digest"),
            Sha256::of_bytes(text.as_bytes())
        );
    }

    #[test]
    fn git_oid_requires_full_id() {
        assert!("612db6188".parse::<GitOid>().is_err());
        let full = "612db6188aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        assert_eq!(full.parse::<GitOid>().expect("full id").to_string(), full);
        // Uppercase is read as git reads it and shown lowercase; a non-hex digit anywhere, or
        // a multi-byte character that makes 40 bytes, is refused (never a panic on a split).
        let upper = "612DB6188AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(upper.parse::<GitOid>().expect("upper").to_string(), full);
        assert!("612db6188aaaaaaaaaaaaaaaaaaaaaaaaaaaaaag"
            .parse::<GitOid>()
            .is_err());
        assert!("é12db6188aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse::<GitOid>()
            .is_err());
    }

    proptest::proptest! {
        #[test]
        fn git_oid_parse_never_panics_and_round_trips(s in "\\PC{0,44}") {
            if let Ok(oid) = s.parse::<GitOid>() {
                proptest::prop_assert_eq!(oid.to_string(), s.to_ascii_lowercase());
            }
        }
    }
}
