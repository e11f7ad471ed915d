//! The rebase journal (`.pinforge-rebase.json` in the workspace root): written before the
//! stage folder exists and removed after it is gone, it names everything a rebase touches (the
//! recipe, its lock, the bundle folder, the stage) and the digests of each before and after,
//! so that the next command can tell which side of the commit point a killed rebase was on.
//! Reading it trusts none of it: every path must be the one the recipe itself derives.

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The journal's file name in the workspace root.
pub(super) const JOURNAL: &str = ".pinforge-rebase.json";

/// Where a rebase was when the journal was last written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Phase {
    /// Only the stage folder may exist: undo is removing it.
    Staging,
    /// Everything is staged; the exchange and the renames may have happened.
    Commit,
}

/// One rebase in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct Journal {
    /// staging | commit.
    pub phase: Phase,
    /// The recipe (absolute): its rename is the commit point.
    pub recipe: PathBuf,
    /// The recipe's lock, for a git pin (the recipe's own `.lock` path).
    pub lock: Option<PathBuf>,
    /// The bundle folder the recipe names.
    pub bundle: PathBuf,
    /// The stage folder: always `.rebase-NAME` beside the bundle folder `NAME`.
    pub stage: PathBuf,
    /// The recipe's bytes before.
    pub old_recipe: Sha256,
    /// The recipe's bytes after (set in the commit phase).
    pub new_recipe: Option<Sha256>,
    /// The lock's bytes before (None: there was no lock).
    pub old_lock: Option<Sha256>,
    /// The lock's bytes after (set in the commit phase when the lock moves).
    pub new_lock: Option<Sha256>,
    /// The bundle folder before ([`bundle_digest`]).
    pub old_bundle: Sha256,
    /// The bundle folder after (set in the commit phase).
    pub new_bundle: Option<Sha256>,
}

/// Inside the stage folder: the new bundle (the old one after the exchange), the new recipe
/// and lock to rename into place, and the old lock to put back on undo.
pub(super) const STAGED_BUNDLE: &str = "bundle";
pub(super) const STAGED_RECIPE: &str = "recipe.toml";
pub(super) const STAGED_LOCK: &str = "lock";
pub(super) const OLD_LOCK: &str = "lock.old";

/// The stage folder of a bundle folder: a name derived from it, never taken from data.
pub(super) fn stage_of(bundle: &Path) -> Result<PathBuf> {
    let name = bundle.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::input(
            bundle.display(),
            "the bundle folder's name is not UTF-8 text",
        )
    })?;
    Ok(fsx::parent_of(bundle).join(format!(".rebase-{name}")))
}

/// The journal's path in `ws`.
pub(super) fn path(ws: &Workspace) -> PathBuf {
    ws.root().join(JOURNAL)
}

/// Write the journal atomically.
pub(super) fn write(ws: &Workspace, j: &Journal) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(j).map_err(|e| Error::Internal(e.to_string()))?;
    fsx::write_atomic(&path(ws), &bytes)
}

/// Remove the journal: the rebase is over.
pub(super) fn remove(ws: &Workspace) -> Result<()> {
    let p = path(ws);
    match std::fs::remove_file(&p) {
        Ok(()) => fsx::sync_dir(ws.root()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", &p, e)),
    }
}

/// The journal in `ws`, if one is there, parsed and checked for shape (the paths are checked
/// against the recipe by recovery).
pub(super) fn read(ws: &Workspace) -> Result<Option<Journal>> {
    let p = path(ws);
    if std::fs::symlink_metadata(&p).is_err() {
        return Ok(None);
    }
    let bytes = fsx::read(&p)?;
    parse(&bytes).map(Some).map_err(|why| {
        Error::input(p.display(), format!("the rebase journal is refused: {why}")).with_hint(
            "the journal is written atomically, so this is outside damage; compare the recipe, \
             its lock and the bundle folder with version control, then remove the journal",
        )
    })
}

/// Parse a journal: every field must be one the protocol can have written.
pub(super) fn parse(bytes: &[u8]) -> std::result::Result<Journal, String> {
    let j: Journal = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    for (what, p) in [("recipe", &j.recipe), ("bundle", &j.bundle)] {
        // Absolute; that it is the recipe's own bundle is checked against the recipe.
        if !p.is_absolute() {
            return Err(format!("the {what} path `{}` is not absolute", p.display()));
        }
    }
    let stage = stage_of(&j.bundle).map_err(|e| e.to_string())?;
    if j.stage != stage {
        return Err(format!(
            "the stage `{}` is not `{}`",
            j.stage.display(),
            stage.display()
        ));
    }
    if j.lock
        .as_ref()
        .is_some_and(|l| *l != j.recipe.with_extension("lock"))
    {
        return Err("the lock is not the recipe's own lock file".into());
    }
    let committing = j.phase == Phase::Commit;
    if committing != (j.new_recipe.is_some() && j.new_bundle.is_some()) {
        return Err("the new digests are set exactly in the commit phase".into());
    }
    if j.new_lock.is_some() && (j.lock.is_none() || !committing) {
        return Err("a new lock digest without a lock in the commit phase".into());
    }
    Ok(j)
}

/// The digest of a bundle folder as the rebase replaces it: the names and bytes of its regular
/// files and of those under `dropped/`, in name order. Two folders with one digest hold the
/// same bundle.
pub(super) fn bundle_digest(dir: &Path) -> Result<Sha256> {
    let mut listing = String::new();
    for sub in ["", super::DROPPED_DIR] {
        let from = if sub.is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(sub)
        };
        if !sub.is_empty() && !from.is_dir() {
            continue;
        }
        let mut names: Vec<(String, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&from).at("read directory", &from)? {
            let e = e.at("read directory", &from)?;
            let m = std::fs::symlink_metadata(e.path()).at("inspect", &e.path())?;
            if m.is_file() {
                names.push((e.file_name().to_string_lossy().into_owned(), e.path()));
            }
        }
        names.sort();
        for (name, p) in names {
            let d = Sha256::of_bytes(&fsx::read(&p)?);
            listing.push_str(&format!("{sub}/{name}\0{d}\n"));
        }
    }
    Ok(Sha256::of_bytes(listing.as_bytes()))
}

/// The digest of a file's bytes, None when there is no file.
pub(super) fn file_digest(path: &Path) -> Result<Option<Sha256>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("inspect", path, e)),
        Ok(_) => Ok(Some(Sha256::of_bytes(&fsx::read(path)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> Journal {
        let d = Sha256::of_bytes(b"x");
        Journal {
            phase: Phase::Commit,
            recipe: "/ws/recipes/up.toml".into(),
            lock: Some("/ws/recipes/up.lock".into()),
            bundle: "/ws/patches".into(),
            stage: "/ws/.rebase-patches".into(),
            old_recipe: d,
            new_recipe: Some(d),
            old_lock: None,
            new_lock: Some(d),
            old_bundle: d,
            new_bundle: Some(d),
        }
    }

    #[test]
    fn a_journal_round_trips_and_paths_it_did_not_derive_are_refused() {
        let j = journal();
        let bytes = serde_json::to_vec(&j).expect("json");
        assert_eq!(parse(&bytes).expect("parse"), j);
        let bad = [
            Journal {
                stage: "/elsewhere/.rebase-patches".into(),
                ..journal()
            },
            Journal {
                lock: Some("/etc/passwd".into()),
                ..journal()
            },
            Journal {
                recipe: "recipes/up.toml".into(),
                lock: Some("recipes/up.lock".into()),
                ..journal()
            },
            Journal {
                phase: Phase::Staging,
                ..journal()
            },
        ];
        for b in bad {
            let bytes = serde_json::to_vec(&b).expect("json");
            assert!(parse(&bytes).is_err(), "{b:?}");
        }
        assert!(parse(b"{\"phase\":\"staging\"}").is_err());
        assert!(parse(b"not json").is_err());
    }

    #[test]
    fn the_bundle_digest_sees_names_bytes_and_the_dropped_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = dir.path();
        std::fs::write(b.join("series"), b"a\n").expect("write");
        let one = bundle_digest(b).expect("digest");
        std::fs::create_dir(b.join("dropped")).expect("mkdir");
        assert_eq!(bundle_digest(b).expect("digest"), one, "an empty dropped/");
        std::fs::write(b.join("dropped/a.patch"), b"x").expect("write");
        let two = bundle_digest(b).expect("digest");
        assert_ne!(two, one);
        std::fs::write(b.join("dropped/a.patch"), b"y").expect("write");
        assert_ne!(bundle_digest(b).expect("digest"), two);
    }
}
