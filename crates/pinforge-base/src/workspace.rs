//! The workspace layout: which folder holds what. One owner for every path pinforge writes,
//! so that commands agree on where vendor trees, caches and build directories live.
//!
//! ```text
//! <root>/vendor/cache/crates/NAME-VERSION.crate   verified registry archives
//! <root>/vendor/cache/git/URLHASH.git             bare repositories holding pinned commits
//! <root>/vendor/cache/npm/NAME-VERSION.tgz         verified npm package tarballs (`npm pack`)
//! <root>/vendor/SLUG/                             pristine upstream as a git repository
//! <root>/vendor/SLUG+SERIES/                      pristine + a patch series, one commit per patch
//! <root>/build/RECIPE/VARIANT/{cmake,build.log,manifest.json}
//! ```

use crate::error::Result;
use crate::fsx;
use std::path::{Path, PathBuf};

/// A pinforge workspace.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// A workspace rooted at `root` (made absolute; it must exist).
    pub fn new(root: &Path) -> Result<Workspace> {
        let root = fsx::absolute(root)?;
        if !root.is_dir() {
            return Err(crate::error::Error::input(
                root.display(),
                "workspace folder does not exist",
            )
            .with_hint("create it or pass --workspace"));
        }
        Ok(Workspace { root })
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `vendor/`.
    pub fn vendor(&self) -> PathBuf {
        self.root.join("vendor")
    }

    /// `vendor/cache/crates/`.
    pub fn crate_cache(&self) -> PathBuf {
        self.vendor().join("cache").join("crates")
    }

    /// `vendor/cache/git/`.
    pub fn git_cache(&self) -> PathBuf {
        self.vendor().join("cache").join("git")
    }

    /// `vendor/cache/npm/`.
    pub fn npm_cache(&self) -> PathBuf {
        self.vendor().join("cache").join("npm")
    }

    /// `build/RECIPE/VARIANT/`.
    pub fn variant_dir(&self, recipe: &str, variant: &str) -> PathBuf {
        self.root.join("build").join(recipe).join(variant)
    }

    /// Extra directories searched for build tools before `PATH`: `PINFORGE_TOOL_PATH`
    /// entries, then `<root>/.tools/bin` (where `tools/bootstrap.sh` installs CMake and Ninja).
    pub fn tool_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::env::var_os("PINFORGE_TOOL_PATH")
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default();
        dirs.push(self.root.join(".tools").join("bin"));
        dirs
    }

    /// Serialize commands that write to this workspace.
    pub fn lock(&self) -> Result<fsx::DirLock> {
        fsx::DirLock::acquire_as(&self.root, "the workspace lock")
    }
}
