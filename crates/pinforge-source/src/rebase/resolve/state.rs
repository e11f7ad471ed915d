//! Where a stopped resolution lives and what it records: the checkout
//! `rebase-resolve/NAME/` in the workspace and the state file `rebase-resolve/NAME.json`
//! beside it (NAME: the recipe's file stem). The state names the recipe, the pin given to
//! `--onto`, the digests of the recipe and of the bundle as the rebase read them (so a
//! `--continue` after either changed is refused), the decisions given, the patch in progress
//! and every patch already taken past the first conflict, with the bytes it is to be written
//! with.

use crate::rebase::{journal, Decisions, Loaded};
use pinforge_base::digest::{GitOid, Sha256};
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The state file's format name.
const FORMAT: &str = "pinforge.rebase-resolve/v1";

/// The folder of every resolution in a workspace.
pub(crate) const DIR: &str = "rebase-resolve";

/// The paths of one recipe's resolution.
pub(crate) struct Paths {
    /// The checkout of the new pin.
    pub checkout: PathBuf,
    /// The state file.
    pub state: PathBuf,
}

impl Paths {
    /// The paths for the recipe at `recipe` (its file stem names them; it becomes a path, so
    /// a control character in it is refused, issue #19).
    pub(crate) fn of(ws: &Workspace, recipe: &Path) -> Result<Paths> {
        let stem = recipe
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        pinforge_base::text::refuse_control("the recipe's file name", &stem)?;
        if stem.is_empty() || stem.starts_with('.') {
            return Err(Error::input(
                recipe.display(),
                "the recipe's file name cannot name a resolution folder",
            ));
        }
        let dir = ws.root().join(DIR);
        Ok(Paths {
            checkout: dir.join(&stem),
            state: dir.join(format!("{stem}.json")),
        })
    }

    /// Whether anything of a resolution is there.
    pub(crate) fn exists(&self) -> bool {
        std::fs::symlink_metadata(&self.state).is_ok()
            || std::fs::symlink_metadata(&self.checkout).is_ok()
    }

    /// Remove the checkout and the state (and the folder, when it is left empty).
    pub(crate) fn remove(&self) -> Result<()> {
        if std::fs::symlink_metadata(&self.checkout).is_ok() {
            std::fs::remove_dir_all(&self.checkout).at("remove", &self.checkout)?;
        }
        if std::fs::symlink_metadata(&self.state).is_ok() {
            std::fs::remove_file(&self.state).at("remove", &self.state)?;
        }
        // Only an empty folder goes: another recipe's resolution may be there.
        let _ = std::fs::remove_dir(fsx::parent_of(&self.state));
        Ok(())
    }
}

/// A patch taken past the first conflict: resolved by the operator or carried onto their
/// resolution; `patch` is the file as it is to be written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Done {
    /// Patch file name.
    pub file: String,
    /// Its new bytes (patch files are text).
    pub patch: String,
    /// Taken from the operator's commit (else carried onto it by the replay).
    #[serde(default)]
    pub resolved: bool,
}

/// The recorded state of a stopped resolution.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    /// [`FORMAT`].
    pub format: String,
    /// The recipe (absolute).
    pub recipe: PathBuf,
    /// Its SHA-256 as the rebase read it.
    pub recipe_sha256: Sha256,
    /// The bundle folder.
    pub bundle: PathBuf,
    /// The bundle's digest ([`journal::bundle_digest`]) as the rebase read it.
    pub bundle_sha256: Sha256,
    /// The new pin as given to `--onto`.
    pub onto: String,
    /// `--drop` decisions.
    pub drop: Vec<String>,
    /// `--keep` decisions.
    pub keep: Vec<String>,
    /// The patch that conflicts, waiting for the operator's commit.
    pub in_progress: String,
    /// The checkout's HEAD before its conflict was written: the operator's commit goes on it.
    pub base: GitOid,
    /// Patches taken past the first conflict, in series order.
    pub done: Vec<Done>,
    /// The operator's commit a `--continue` took, when that `--continue` did not end: the
    /// commits after it are that run's and are undone by the next one.
    #[serde(default)]
    pub resumed_from: Option<GitOid>,
    /// The new pin's pristine base commit when the checkout was made from it: a `--continue`
    /// whose `--onto` now resolves to another tree (a `dir:` pin that changed, a tag that
    /// moved) is refused rather than pinning the recipe to a tree the resolution never saw.
    #[serde(default)]
    pub onto_base: Option<GitOid>,
}

impl State {
    /// A new state for a rebase that read `l`.
    pub(crate) fn new(l: &Loaded, onto: &str, d: &Decisions, base: GitOid) -> Result<State> {
        Ok(State {
            format: FORMAT.into(),
            recipe: l.recipe_path.clone(),
            recipe_sha256: Sha256::of_bytes(&l.old_bytes),
            bundle: l.dir.clone(),
            bundle_sha256: journal::bundle_digest(&l.dir)?,
            onto: onto.into(),
            drop: d.drop.iter().cloned().collect(),
            keep: d.keep.iter().cloned().collect(),
            in_progress: String::new(),
            base,
            done: Vec::new(),
            resumed_from: None,
            onto_base: None,
        })
    }

    /// The decisions recorded.
    pub(crate) fn decisions(&self) -> Decisions {
        Decisions {
            drop: self.drop.iter().cloned().collect(),
            keep: self.keep.iter().cloned().collect(),
        }
    }

    /// Read the state at `at`; none there is a usage error.
    pub(crate) fn load(at: &Paths, recipe: &Path) -> Result<State> {
        let Some(bytes) = fsx::read_if_present(&at.state)? else {
            return Err(Error::input(
                recipe.display(),
                format!(
                    "no stopped rebase to continue: {} does not exist",
                    at.state.display()
                ),
            )
            .with_hint(if at.exists() {
                // A --resolve killed before it recorded its state leaves its checkout only.
                format!(
                    "{} is left by a --resolve that did not finish: `pinforge rebase {} --abort` removes it",
                    at.checkout.display(),
                    recipe.display()
                )
            } else {
                format!(
                    "start one with `pinforge rebase {} --onto PIN --resolve`",
                    recipe.display()
                )
            }));
        };
        let st: State = serde_json::from_slice(&bytes).map_err(|e| {
            Error::input(at.state.display(), format!("not a resolution state: {e}"))
                .with_hint("`pinforge rebase RECIPE --abort` removes it")
        })?;
        if st.format != FORMAT {
            return Err(Error::input(
                at.state.display(),
                format!("format {:?}, expected {FORMAT}", st.format),
            ));
        }
        Ok(st)
    }

    /// Refuse a state that is not this recipe's, or whose recipe or bundle changed since the
    /// rebase stopped: what it recorded would no longer be what is written.
    pub(crate) fn check_fresh(&self, at: &Paths, l: &Loaded) -> Result<()> {
        let stale = |what: String| {
            Err(Error::input(at.state.display(), what).with_hint(format!(
                "`pinforge rebase {} --abort` removes the resolution; then rebase again with `--resolve`",
                l.recipe_path.display()
            )))
        };
        if self.recipe != l.recipe_path || self.bundle != l.dir {
            return stale(format!(
                "the resolution is of {} (bundle {}), not of this recipe",
                self.recipe.display(),
                self.bundle.display()
            ));
        }
        if Sha256::of_bytes(&l.old_bytes) != self.recipe_sha256 {
            return stale(format!(
                "{} changed since the rebase stopped",
                l.recipe_path.display()
            ));
        }
        if journal::bundle_digest(&l.dir)? != self.bundle_sha256 {
            return stale(format!(
                "the bundle {} changed since the rebase stopped",
                l.dir.display()
            ));
        }
        Ok(())
    }

    /// Write the state (atomically).
    pub(crate) fn save(&self, at: &Paths) -> Result<()> {
        fsx::create_dir_all(&fsx::parent_of(&at.state))?;
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Internal(format!("resolution state: {e}")))?;
        fsx::write_atomic(&at.state, format!("{text}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::new(d.path()).expect("workspace");
        (d, ws)
    }

    // The recipe's file stem becomes a folder name: a control character or a dot name is
    // refused at input (exit 2), a plain one names both paths.
    #[test]
    fn the_recipe_stem_names_the_checkout_and_the_state_or_is_refused() {
        let (_d, ws) = ws();
        let at = Paths::of(&ws, Path::new("/x/recipes/up.toml")).expect("paths");
        assert_eq!(at.checkout, ws.root().join("rebase-resolve/up"));
        assert_eq!(at.state, ws.root().join("rebase-resolve/up.json"));
        assert!(!at.exists());
        for bad in [
            "/x/recipes/u\u{1b}p.toml",
            "/x/recipes/.toml",
            "/x/recipes/.up.toml",
        ] {
            let e = Paths::of(&ws, Path::new(bad)).err().expect(bad);
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }

    // A state of another format, or none, is a usage error naming the file.
    #[test]
    fn a_missing_or_foreign_state_is_refused() {
        let (_d, ws) = ws();
        let at = Paths::of(&ws, Path::new("/x/up.toml")).expect("paths");
        let e = State::load(&at, Path::new("/x/up.toml")).expect_err("missing");
        assert_eq!(e.exit_code(), 2);
        fsx::create_dir_all(&fsx::parent_of(&at.state)).expect("mkdir");
        std::fs::write(&at.state, "{\"format\": \"other\"}").expect("write");
        let e = State::load(&at, Path::new("/x/up.toml")).expect_err("foreign");
        assert_eq!(e.exit_code(), 2);
        at.remove().expect("remove");
        assert!(!ws.root().join(DIR).exists(), "the empty folder goes too");
    }
}
