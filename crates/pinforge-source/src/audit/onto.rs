//! The pin a bundle is audited or rebased onto, as the command line names it, and the recipe
//! moved to it.

use crate::recipe::{PinSource, Recipe};
use crate::upstream;
use pinforge_base::error::{Error, Result};
use std::path::Path;

/// A pin named on the command line, with where its digest came from.
#[derive(Debug, Clone)]
pub struct Onto {
    /// As written.
    pub spec: String,
    /// The pin source.
    pub source: PinSource,
    /// Where the digest came from, when not from the user.
    pub sha256_from: Option<String>,
    /// The folder of the tree inside the new pin when it is not the recipe's (`Some(None)`:
    /// the pin's root). A bisect over llama.cpp's own repository moves a crate recipe, whose
    /// tree is the crate's `llama.cpp/`, onto commits whose tree is the root.
    pub subdir: Option<Option<String>>,
}

impl Onto {
    /// The recipe with its pin moved here ([`moved_recipe`], then this pin's folder).
    pub fn moved(&self, recipe: &Recipe) -> Recipe {
        let mut r = moved_recipe(recipe, &self.source);
        if let Some(sub) = &self.subdir {
            r.pin.subdir = sub.clone();
        }
        r
    }
}

/// Parse `crate:NAME@VERSION`, `git:URL@REV`, `tarball:PATH` or `dir:PATH`. A crate's SHA-256
/// is taken from the registry index the way cargo takes it; a tarball's or folder's is computed
/// now (trust on first use, recorded in the rebased recipe).
pub fn parse_onto(spec: &str) -> Result<Onto> {
    let bad = |why: &str| {
        Error::input(format!("--onto {spec}"), why.to_string()).with_hint(
            "write crate:NAME@VERSION, git:URL@REV (a full commit id or a tag), tarball:PATH or dir:PATH",
        )
    };
    let (kind, rest) = spec.split_once(':').ok_or_else(|| bad("no pin kind"))?;
    match kind {
        "crate" => onto_crate(spec, rest, &bad),
        "git" => onto_git(spec, rest, &bad),
        "tarball" | "dir" => onto_path(spec, kind, rest, &bad),
        _ => Err(bad("unknown pin kind")),
    }
}

/// The recipe with its pin moved to `onto`: subfolder and build settings carry over; the build
/// number and commit string are facts about a pin and are derived from the new one.
pub fn moved_recipe(recipe: &Recipe, onto: &PinSource) -> Recipe {
    let mut r = recipe.clone();
    r.pin.source = onto.clone();
    r.pin.build_number = None;
    r.pin.build_commit = None;
    // No lock file is read or written for the new pin while auditing: the recipe's lock moves
    // only when a rebase completes.
    r.embedded = true;
    r
}

/// `crate:NAME@VERSION`, its SHA-256 from the registry index.
fn onto_crate(spec: &str, rest: &str, bad: &dyn Fn(&str) -> Error) -> Result<Onto> {
    let (name, version) = rest
        .split_once('@')
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        .ok_or_else(|| bad("a crate pin is crate:NAME@VERSION"))?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        || semver::Version::parse(version).is_err()
    {
        return Err(bad("not a crate name and exact version"));
    }
    let sha256 = upstream::registry_cksum(name, version)?;
    Ok(Onto {
        spec: spec.into(),
        source: PinSource::Crate {
            name: name.into(),
            version: version.into(),
            sha256,
        },
        sha256_from: Some(format!(
            "sha256 {sha256} taken from the registry index (the `cksum` cargo records as `checksum`)"
        )),
        subdir: None,
    })
}

/// `git:URL@REV`: a full commit id, or a tag resolved when the tree is fetched.
fn onto_git(spec: &str, rest: &str, bad: &dyn Fn(&str) -> Error) -> Result<Onto> {
    let (url, rev) = rest
        .rsplit_once('@')
        .filter(|(u, r)| !u.is_empty() && !r.is_empty())
        .ok_or_else(|| bad("a git pin is git:URL@REV"))?;
    let full = rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit());
    let source = if full {
        PinSource::Git {
            url: url.into(),
            tag: None,
            commit: rev.to_ascii_lowercase(),
        }
    } else {
        if rev.starts_with('-')
            || rev.contains("..")
            || rev.ends_with(".lock")
            || rev
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || ":^~?*[\\@{".contains(c))
        {
            return Err(bad("not a commit id or a tag name"));
        }
        // A tag resolves to whatever commit it names now; the rebased recipe records it.
        PinSource::Git {
            url: url.into(),
            tag: Some(rev.into()),
            commit: String::new(),
        }
    };
    Ok(Onto {
        spec: spec.into(),
        source,
        sha256_from: None,
        subdir: None,
    })
}

/// `tarball:PATH` or `dir:PATH`, its digest computed now (trust on first use).
fn onto_path(spec: &str, kind: &str, rest: &str, bad: &dyn Fn(&str) -> Error) -> Result<Onto> {
    if rest.is_empty() {
        return Err(bad("no path"));
    }
    let path = pinforge_base::fsx::absolute(Path::new(rest))?;
    let (_, sha256) = upstream::pin_digest(&path)?;
    let source = if kind == "tarball" {
        if path.is_dir() {
            return Err(bad("a tarball pin names a file"));
        }
        PinSource::Tarball { path, sha256 }
    } else {
        if !path.is_dir() {
            return Err(bad("a dir pin names a folder"));
        }
        PinSource::Dir {
            path,
            tree_sha256: sha256,
        }
    };
    Ok(Onto {
        spec: spec.into(),
        source,
        sha256_from: Some(format!(
            "digest {sha256} computed from {rest} now (trust on first use)"
        )),
        subdir: None,
    })
}
