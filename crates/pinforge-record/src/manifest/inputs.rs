//! Which of a manifest's recorded inputs may be read, and from where. The `inputs` map is data
//! from whoever wrote the manifest (for a pulled build: a registry), so every path in it is
//! placed and checked before anything is opened (DESIGN §5):
//!
//! - A pulled manifest names another machine's files: none is read, each is reported "not on
//!   disk (pulled)". A manifest counts as pulled when its folder holds the marker `pull`
//!   writes into its stage ([`PULLED_MARKER`], committed by the same rename as the build) *or*
//!   when it sits at `pulled/<64 hex>/manifest.json`. Either sign alone misses a case (the
//!   marker travels with a copied folder and is there while `pull` verifies its stage; the
//!   location covers folders pulled before the marker existed), and a false "pulled" only
//!   skips inputs, the safe side; a missing marker never makes registry data choose files.
//! - A manifest at `<ws>/build/RECIPE/VARIANT/manifest.json` (where `build` writes it) reads a
//!   relative input from that folder: the path is walked lexically (`..` is how `build`
//!   records `vendor/`, `patches/` and `recipes/` from its folder, against the folder as
//!   spelled, so a `build/` that is a link to another disk still leads back), then resolved
//!   through its links. It may lead out of the workspace: a recipe and its patches are often
//!   kept elsewhere (`pinforge build ~/recipes/x.toml --workspace /scratch/ws`), and a local
//!   manifest is the user's own build record. What it may not reach is a kernel file system
//!   (`/proc`, `/sys`, `/dev`), as for a tool. Anywhere else the build folder is unknown and
//!   relative inputs are not read (their `..` steps would land somewhere the build never
//!   meant).
//! - An absolute input is read only for a tool (`tool:ROLE`, the one kind `build` records
//!   absolute), and only when it is an executable regular file outside `/proc`, `/sys` and
//!   `/dev`.
//! - Whatever is read is stat'ed first: a device, FIFO or socket is refused before it is
//!   opened (and [`fsx::open_regular`] checks again on the open descriptor), so nothing hangs.

use pinforge_base::fsx;
use std::path::{Component, Path, PathBuf};

/// The file `pull` writes beside a pulled manifest (what was pulled, from where).
pub const PULLED_MARKER: &str = "pulled.json";

/// Where one input stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Inside its root and not special: read it here (a file, or a git tree's folder).
    Read(PathBuf),
    /// Not read, and not an error: why (a manifest outlives its workspace).
    Absent(&'static str),
    /// The manifest names something it may not: why, for the mismatch.
    Refused(String),
}

/// How a manifest's inputs are placed (see the module comment).
#[derive(Debug, Clone)]
pub struct Scope {
    /// The manifest's folder, absolute.
    base: PathBuf,
    /// The manifest is where `build` writes one (`<ws>/build/R/V/`), so its relative inputs'
    /// `..` steps lead where the build meant; elsewhere they are not read.
    at_build_path: bool,
    pulled: bool,
}

impl Scope {
    /// The scope of the manifest at `manifest_path`.
    pub fn of(manifest_path: &Path) -> Scope {
        let base = fsx::absolute(&fsx::parent_of(manifest_path))
            .unwrap_or_else(|_| fsx::parent_of(manifest_path));
        let pulled =
            std::fs::symlink_metadata(base.join(PULLED_MARKER)).is_ok() || pulled_location(&base);
        let at_build_path = !pulled && is_build_folder(&base);
        Scope {
            base,
            at_build_path,
            pulled,
        }
    }

    /// The manifest came from a registry: no input is read.
    pub(crate) fn pulled(&self) -> bool {
        self.pulled
    }

    /// Where input `name`, recorded at `local`, stands; `dir` says whether a folder (a git
    /// tree) is what is expected there.
    pub fn place(&self, name: &str, local: &Path, dir: bool) -> Place {
        if self.pulled {
            return Place::Absent("pulled");
        }
        let found = if local.is_absolute() {
            self.absolute(name, local)
        } else {
            self.relative(local)
        };
        match found {
            Ok(Some(p)) => match kind_refusal(&p, dir) {
                Some(why) => Place::Refused(format!("{}: {why}", local.display())),
                None => Place::Read(p),
            },
            Ok(None) => Place::Absent("not on disk"),
            Err(why) => Place::Refused(format!("{}: {why}", local.display())),
        }
    }

    /// A relative input, walked from the manifest's folder (None: not there, or the folder
    /// is not a build folder).
    fn relative(&self, local: &Path) -> Result<Option<PathBuf>, String> {
        if !self.at_build_path {
            return Ok(None);
        }
        // Walked from the folder as spelled, not its canonical form: `build` wrote the `..`
        // steps against that spelling, and a `build/` that is a link to another disk must
        // still lead back into this workspace (the links are followed after, on the result).
        let mut cur = self.base.clone();
        for c in local.components() {
            match c {
                Component::Normal(n) => cur.push(n),
                Component::ParentDir => {
                    cur.pop();
                }
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err("not a relative path".into())
                }
            }
        }
        match std::fs::canonicalize(&cur) {
            Ok(real) if kernel_fs(&real) => {
                Err(format!("resolves to {}; not read", real.display()))
            }
            Ok(real) => Ok(Some(real)),
            // Missing, or a dangling or looping link: absent, as before.
            Err(_) => Ok(None),
        }
    }

    /// An absolute input: only a tool, an executable outside the kernel's file systems.
    fn absolute(&self, name: &str, local: &Path) -> Result<Option<PathBuf>, String> {
        if !name.starts_with("tool:") {
            return Err("an absolute path for an input that is not a tool; not read".into());
        }
        let Ok(real) = std::fs::canonicalize(local) else {
            return Ok(None);
        };
        if kernel_fs(&real) {
            return Err(format!("resolves to {}; not read", real.display()));
        }
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(&real) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 == 0 => {
                Err("a tool that is not executable; not read".into())
            }
            _ => Ok(Some(real)),
        }
    }
}

/// Whether a canonical path lies in a kernel file system, whose files are never inputs (a
/// device never ends, `/proc` files change as they are read).
fn kernel_fs(real: &Path) -> bool {
    ["/proc", "/sys", "/dev"]
        .iter()
        .any(|k| real.starts_with(k))
}

/// Why the thing at `p` may not be read as an input (None: it may), from a stat that opens
/// nothing.
fn kind_refusal(p: &Path, dir: bool) -> Option<String> {
    let m = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot be examined: {e}")),
    };
    let ft = m.file_type();
    if let Some(kind) = fsx::special_kind(&ft) {
        return Some(format!("is {kind}, not a regular file; not opened"));
    }
    match (dir, ft.is_dir()) {
        (true, false) => Some("is not a folder (a git tree was recorded)".into()),
        (false, true) => Some("is a folder, not a file".into()),
        _ => None,
    }
}

/// `…/pulled/<64 lowercase hex>`: where `pull` commits a build.
fn pulled_location(base: &Path) -> bool {
    let hex = base.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.len() == 64
            && n.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    hex && base
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "pulled")
}

/// Whether `base` is `<ws>/build/RECIPE/VARIANT`, where `build` writes manifests.
fn is_build_folder(base: &Path) -> bool {
    base.parent()
        .and_then(Path::parent)
        .is_some_and(|b| b.file_name().is_some_and(|n| n == "build") && b.parent().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().expect("tempdir");
        let v = d.path().join("build/r/v");
        std::fs::create_dir_all(&v).expect("mkdir");
        std::fs::create_dir_all(d.path().join("patches")).expect("mkdir");
        std::fs::write(d.path().join("patches/a.patch"), "x").expect("write");
        (d, v.join("manifest.json"))
    }

    #[test]
    fn a_build_folder_that_is_a_link_to_another_disk_still_reads_the_workspace_inputs() {
        let (d, _) = ws();
        let elsewhere = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(elsewhere.path().join("r/v")).expect("mkdir");
        // Decoy where the kernel's `..` through the link would land.
        std::fs::create_dir_all(elsewhere.path().join("patches")).expect("mkdir");
        std::fs::write(elsewhere.path().join("patches/a.patch"), "decoy").expect("write");
        let ws2 = d.path().join("ws2");
        std::fs::create_dir_all(ws2.join("patches")).expect("mkdir");
        std::fs::write(ws2.join("patches/a.patch"), "x").expect("write");
        std::os::unix::fs::symlink(elsewhere.path(), ws2.join("build")).expect("link");
        let s = Scope::of(&ws2.join("build/r/v/manifest.json"));
        let p = s.place("patch:a", Path::new("../../../patches/a.patch"), false);
        let want = std::fs::canonicalize(ws2.join("patches/a.patch")).expect("real");
        assert_eq!(p, Place::Read(want));
    }

    #[test]
    fn a_relative_input_is_read_where_the_build_recorded_it_but_never_in_a_kernel_fs() {
        let (d, m) = ws();
        let s = Scope::of(&m);
        let p = s.place("patch:a", Path::new("../../../patches/a.patch"), false);
        assert!(matches!(p, Place::Read(_)), "{p:?}");
        // A recipe kept outside the workspace (its patches beside it): read there.
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("r.toml"), "x").expect("write");
        let up = "../".repeat(m.components().count() - 2);
        let rel = format!("{up}{}", outside.path().join("r.toml").display());
        let p = s.place("recipe", Path::new(rel.trim_start_matches('/')), false);
        let want = std::fs::canonicalize(outside.path().join("r.toml")).expect("real");
        assert_eq!(p, Place::Read(want), "{rel}");
        // Through a link into /proc or to a device: refused unopened.
        std::os::unix::fs::symlink("/proc/self", d.path().join("patches/p")).expect("link");
        std::os::unix::fs::symlink("/dev/zero", d.path().join("patches/z")).expect("link");
        for bad in ["../../../patches/p/environ", "../../../patches/z"] {
            let p = s.place("patch:a", Path::new(bad), false);
            assert!(
                matches!(&p, Place::Refused(w) if w.contains("not read")),
                "{bad}: {p:?}"
            );
        }
        let p = s.place("patch:a", Path::new("../../../patches/none"), false);
        assert_eq!(p, Place::Absent("not on disk"));
        let fifo = d.path().join("patches/fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let p = s.place("patch:a", Path::new("../../../patches/fifo"), false);
        assert!(
            matches!(&p, Place::Refused(w) if w.contains("a FIFO")),
            "{p:?}"
        );
    }

    #[test]
    fn an_absolute_input_is_read_only_for_an_executable_tool() {
        let (_d, m) = ws();
        let s = Scope::of(&m);
        let p = s.place("recipe", Path::new("/etc/passwd"), false);
        assert!(
            matches!(&p, Place::Refused(w) if w.contains("not a tool")),
            "{p:?}"
        );
        let p = s.place("tool:cc", Path::new("/etc/passwd"), false);
        assert!(
            matches!(&p, Place::Refused(w) if w.contains("not executable")),
            "{p:?}"
        );
        let p = s.place("tool:cc", Path::new("/dev/zero"), false);
        assert!(
            matches!(&p, Place::Refused(w) if w.contains("/dev/zero")),
            "{p:?}"
        );
        let p = s.place("tool:sh", Path::new("/bin/sh"), false);
        assert!(matches!(p, Place::Read(_)), "{p:?}");
    }

    #[test]
    fn a_pulled_manifest_reads_nothing_by_marker_or_by_location() {
        let (d, m) = ws();
        std::fs::write(fsx::parent_of(&m).join(PULLED_MARKER), "{}").expect("marker");
        let s = Scope::of(&m);
        assert!(s.pulled());
        let p = s.place("patch:a", Path::new("../../../patches/a.patch"), false);
        assert_eq!(p, Place::Absent("pulled"));
        let at = d.path().join("pulled").join("ab".repeat(32));
        std::fs::create_dir_all(&at).expect("mkdir");
        let s = Scope::of(&at.join("manifest.json"));
        assert!(s.pulled());
        assert_eq!(
            s.place("tool:sh", Path::new("/bin/sh"), false),
            Place::Absent("pulled")
        );
    }

    #[test]
    fn outside_a_workspace_relative_inputs_are_not_read() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("x"), "x").expect("write");
        let s = Scope::of(&d.path().join("manifest.json"));
        assert_eq!(
            s.place("recipe", Path::new("x"), false),
            Place::Absent("not on disk")
        );
    }
}
