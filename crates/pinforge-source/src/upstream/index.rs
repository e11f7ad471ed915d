//! What the registry knows about a crate's releases, for `bisect` over a range of crate pins
//! (issue #39 §2): every version the index lists with its checksum and yanked flag, and the
//! commit of the crate's own source repository a release was packaged from
//! (`.cargo_vcs_info.json`, which `cargo package` writes into every `.crate`).
//!
//! The index is read from cargo's own cache of it, after cargo refreshed it for this crate
//! (through [`registry_cksum`], which resolves one version the way cargo does): pinforge never
//! talks to the registry itself, so a mirror or a source replacement cargo is configured for is
//! honoured. Cargo's cache file is an internal format, but its payload is the index's own JSON
//! lines (the documented index format: `name`, `vers`, `cksum`, `yanked`); those are all that is
//! read, and a file that holds none is an error naming it.

use super::fetch::{cargo_home, fetch_crate, registry_cksum};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One release as the registry index lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The version.
    pub version: semver::Version,
    /// The `.crate`'s SHA-256 (the index's `cksum`).
    pub sha256: Sha256,
    /// Whether the release is yanked (still fetchable by an exact pin, but not offered).
    pub yanked: bool,
}

/// The index entry fields read (the rest of an entry is ignored).
#[derive(Deserialize)]
struct Entry {
    name: String,
    vers: String,
    cksum: String,
    #[serde(default)]
    yanked: bool,
}

/// The most bytes of cargo's index cache file read for one crate (llama-cpp-sys-2's, with
/// some 200 releases, is under 1 MiB): a larger file is not a cache cargo wrote.
const INDEX_CAP: u64 = 64 << 20;

/// Every release of `name` from `from` to `to` (both included), in version order, read from the
/// index after cargo refreshed it for `name@from`.
pub fn releases(name: &str, from: &semver::Version, to: &semver::Version) -> Result<Vec<Release>> {
    let subject = format!("crate:{name}@{from}..{to}");
    if from > to {
        return Err(
            Error::input(&subject, "the range's first version is above its last")
                .with_hint("write the older version first: crate:NAME@OLD..NEW"),
        );
    }
    // The first version must exist anyway (it is the range's known side), and resolving it
    // makes cargo refresh its index cache of this crate.
    registry_cksum(name, &from.to_string())?;
    let file = index_cache_file(name).ok_or_else(|| {
        Error::input(
            &subject,
            format!(
                "cargo keeps no index cache for `{name}` under {}",
                cargo_home().join("registry/index").display()
            ),
        )
        .with_hint("list the pins one by one with --pin crate:NAME@VERSION")
    })?;
    let mut bytes = Vec::new();
    fsx::open_regular(&file, "cargo's index cache", false)?
        .take(INDEX_CAP + 1)
        .read_to_end(&mut bytes)
        .at("read", &file)?;
    if bytes.len() as u64 > INDEX_CAP {
        return Err(Error::input(
            file.display(),
            format!(
                "is over {} MiB: not an index cache cargo wrote",
                INDEX_CAP >> 20
            ),
        )
        .with_hint("remove it (cargo writes it again) or list the pins with --pin"));
    }
    let mut out: Vec<Release> = parse_index(&bytes, name)
        .into_iter()
        .filter(|r| &r.version >= from && &r.version <= to)
        .collect();
    if out.is_empty() {
        return Err(Error::input(
            file.display(),
            format!("holds no index entry of `{name}` between {from} and {to}"),
        )
        .with_hint("list the pins one by one with --pin crate:NAME@VERSION"));
    }
    out.sort_by(|a, b| a.version.cmp(&b.version));
    out.dedup_by(|a, b| a.version == b.version);
    Ok(out)
}

/// The index entries of `name` in cargo's cache bytes: the NUL-separated chunks that parse as
/// an index entry of that crate (anything else in the file is cargo's bookkeeping).
pub(crate) fn parse_index(bytes: &[u8], name: &str) -> Vec<Release> {
    bytes
        .split(|&b| b == 0)
        .filter(|c| c.first() == Some(&b'{'))
        .filter_map(|c| serde_json::from_slice::<Entry>(c).ok())
        .filter(|e| e.name.eq_ignore_ascii_case(name))
        .filter_map(|e| {
            Some(Release {
                version: semver::Version::parse(&e.vers).ok()?,
                sha256: e.cksum.parse().ok()?,
                yanked: e.yanked,
            })
        })
        .collect()
}

/// Cargo's index cache file of `name` (the index's own path rule: `1/`, `2/`, `3/a/`, or
/// `ab/cd/` for longer names), the most recently written one when several registries hold it.
fn index_cache_file(name: &str) -> Option<PathBuf> {
    let lower = name.to_ascii_lowercase();
    let rel = match lower.len() {
        0 => return None,
        1 => format!("1/{lower}"),
        2 => format!("2/{lower}"),
        3 => format!("3/{}/{lower}", &lower[..1]),
        _ => format!("{}/{}/{lower}", &lower[..2], &lower[2..4]),
    };
    let root = cargo_home().join("registry/index");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&root)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(".cache").join(&rel))
        .filter_map(|p| {
            let m = std::fs::symlink_metadata(&p).ok()?;
            (m.is_file()).then(|| (m.modified().unwrap_or(std::time::UNIX_EPOCH), p))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// Where a release was packaged from: `.cargo_vcs_info.json` of the `.crate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcsInfo {
    /// The commit of the crate's source repository (`git.sha1`).
    pub sha1: String,
    /// The crate's folder in that repository (`path_in_vcs`, empty for the root).
    pub path_in_vcs: String,
}

#[derive(Deserialize)]
struct VcsFile {
    git: VcsGit,
    #[serde(default)]
    path_in_vcs: String,
}

#[derive(Deserialize)]
struct VcsGit {
    sha1: String,
}

/// The most bytes read of `.cargo_vcs_info.json` (cargo writes some 100).
const VCS_INFO_CAP: u64 = 64 << 10;

/// The VCS info of `name@version`, fetched and verified against `sha256` as a pin is; `None`
/// when the crate was packaged without it (`cargo package --allow-dirty` outside git).
pub fn vcs_info(
    ws: &Workspace,
    name: &str,
    version: &str,
    sha256: Sha256,
) -> Result<Option<VcsInfo>> {
    let archive = fetch_crate(ws, name, version, sha256)?;
    read_vcs_info(&archive, &format!("{name}-{version}"))
}

/// `.cargo_vcs_info.json` directly under the archive's `top/` folder.
pub(crate) fn read_vcs_info(archive: &Path, top: &str) -> Result<Option<VcsInfo>> {
    let f = fsx::open_regular(archive, "crate archive", true)?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let want = Path::new(top).join(".cargo_vcs_info.json");
    for entry in tar.entries().at("read", archive)? {
        let entry = entry.at("read", archive)?;
        let path = entry.path().at("read", archive)?.into_owned();
        if path != want {
            continue;
        }
        if !entry.header().entry_type().is_file() {
            return Err(Error::input(
                archive.display(),
                format!("{} is not a regular file", want.display()),
            ));
        }
        let mut text = Vec::new();
        entry
            .take(VCS_INFO_CAP)
            .read_to_end(&mut text)
            .at("read", archive)?;
        let v: VcsFile = serde_json::from_slice(&text).map_err(|e| {
            Error::input(
                format!("{}: {}", archive.display(), want.display()),
                format!("not cargo's VCS info: {e}"),
            )
        })?;
        let sha1 = v.git.sha1.to_ascii_lowercase();
        if sha1.len() != 40 || !sha1.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::input(
                format!("{}: {}", archive.display(), want.display()),
                format!("`git.sha1` `{}` is not a full commit id", v.git.sha1),
            ));
        }
        if v.path_in_vcs.split('/').any(|c| c == ".." || c == ".git")
            || v.path_in_vcs.starts_with('/')
        {
            return Err(Error::input(
                format!("{}: {}", archive.display(), want.display()),
                format!("`path_in_vcs` `{}` is not a relative folder", v.path_in_vcs),
            ));
        }
        return Ok(Some(VcsInfo {
            sha1,
            path_in_vcs: v.path_in_vcs,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "95cf8be1ff000b531ac0523c66a9ffce3cef6d09a5d95b21cad745bedb115468";

    // The cache's payload is the index's JSON lines between cargo's bookkeeping: only entries of
    // the crate asked for, with a version and a checksum that parse, are releases.
    #[test]
    fn index_entries_are_read_between_cargos_bookkeeping() {
        let mut b = vec![3u8, 2, 0, 0, 0];
        b.extend_from_slice(b"Unknown\x000.1.0\x00");
        for (v, y) in [("0.1.137", false), ("0.1.138", true)] {
            b.extend_from_slice(
                format!(r#"{{"name":"llama-cpp-sys-2","vers":"{v}","deps":[],"cksum":"{SUM}","yanked":{y}}}"#)
                    .as_bytes(),
            );
            b.push(0);
            b.extend_from_slice(b"0.1.x\x00");
        }
        // Another crate, a broken checksum, a bad version, garbage and non-UTF-8 bytes.
        b.extend_from_slice(
            format!(r#"{{"name":"other","vers":"0.1.139","cksum":"{SUM}"}}"#).as_bytes(),
        );
        b.push(0);
        b.extend_from_slice(br#"{"name":"llama-cpp-sys-2","vers":"0.1.140","cksum":"zz"}"#);
        b.push(0);
        b.extend_from_slice(
            format!(r#"{{"name":"llama-cpp-sys-2","vers":"x","cksum":"{SUM}"}}"#).as_bytes(),
        );
        b.extend_from_slice(b"\x00{not json\x00\xff\xfe{\x00");
        let r = parse_index(&b, "llama-cpp-sys-2");
        let got: Vec<(String, bool)> = r
            .iter()
            .map(|r| (r.version.to_string(), r.yanked))
            .collect();
        assert_eq!(
            got,
            [
                ("0.1.137".to_string(), false),
                ("0.1.138".to_string(), true)
            ]
        );
    }

    fn crate_with(top: &str, name: &str, body: &[u8]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp");
        let gz =
            flate2::write::GzEncoder::new(f.reopen().expect("reopen"), flate2::Compression::fast());
        let mut t = tar::Builder::new(gz);
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        t.append_data(&mut h, format!("{top}/{name}"), body)
            .expect("append");
        t.into_inner().expect("tar").finish().expect("gz");
        f
    }

    #[test]
    fn the_vcs_info_names_a_full_commit_and_a_relative_folder() {
        let good = br#"{"git":{"sha1":"875BA2D830544AB8140964DBBA06D207AB982E84"},"path_in_vcs":"llama-cpp-sys-2"}"#;
        let f = crate_with("x-0.1.0", ".cargo_vcs_info.json", good);
        let v = read_vcs_info(f.path(), "x-0.1.0")
            .expect("read")
            .expect("some");
        assert_eq!(v.sha1, "875ba2d830544ab8140964dbba06d207ab982e84");
        assert_eq!(v.path_in_vcs, "llama-cpp-sys-2");
        // Another top folder: none.
        assert!(read_vcs_info(f.path(), "y-0.1.0").expect("read").is_none());
        for bad in [
            &br#"{"git":{"sha1":"875ba2d"},"path_in_vcs":""}"#[..],
            br#"{"git":{"sha1":"875ba2d830544ab8140964dbba06d207ab982e84"},"path_in_vcs":"../up"}"#,
            br#"{"git":{"sha1":"875ba2d830544ab8140964dbba06d207ab982e84"},"path_in_vcs":"/abs"}"#,
            b"\xff\xfe not json",
        ] {
            let f = crate_with("x-0.1.0", ".cargo_vcs_info.json", bad);
            let e = read_vcs_info(f.path(), "x-0.1.0").expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{e}");
        }
    }
}
