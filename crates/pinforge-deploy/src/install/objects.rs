//! The content-addressed object store (`objects/`): every file of every linked entry (live
//! and its rollback stack) is a hard link to `objects/<sha256>` (sealed 0444) or
//! `objects/<sha256>.x` (sealed 0555); own entries (control, original) hold no object's
//! inode (see `own`). Hard links share
//! their inode's mode, so the mode is part of an object's name: the same bytes as a library
//! and as an executable are two objects.
//!
//! An entry stays what it was (a folder of files, its record, its identity); the objects only
//! let entries share inodes, so an install that differs from an installed entry in one file
//! writes that one file. What the checks read is the entry's files, which *are* the objects:
//! a damaged object is a damaged entry (every entry sharing it), found by every check, and a
//! reinstall writes a fresh object under the same name (the damaged inode stays with the old
//! entries, which are still reported damaged until they are reinstalled too).
//!
//! Removing an object's name never changes an entry (the entry holds its own link), so `gc`
//! may remove every object no remaining entry's record names. Old stores, whose entries hold
//! their own copies, read and verify as before (nothing is migrated: an entry becomes shared
//! only when it is staged again, e.g. by a repair).

use super::*;

/// The folder of the objects.
pub(super) const OBJECTS: &str = "objects";

/// An object's file name: the content digest, plus `.x` for executables.
pub(super) fn object_name(rec: &FileRec) -> String {
    if rec.executable {
        format!("{}.x", rec.sha256.to_hex())
    } else {
        rec.sha256.to_hex()
    }
}

/// An object name as pinforge writes it (a canonical digest, optionally `.x`); anything
/// else in `objects/` is a stray gc leaves alone.
pub(super) fn parse_object_name(name: &str) -> Option<(Sha256, bool)> {
    let (hex, exec) = match name.strip_suffix(".x") {
        Some(h) => (h, true),
        None => (name, false),
    };
    let d: Sha256 = hex.parse().ok()?;
    (d.to_hex() == hex).then_some((d, exec))
}

/// What one install did in the object store (`None` in an outcome when no entry was staged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoreUse {
    /// Entry files linked to an object already in the store: nothing written for them.
    pub objects_reused: usize,
    /// Objects this install wrote (content the store did not have).
    pub objects_written: usize,
    /// Bytes of the objects written.
    pub bytes_written: u64,
    /// Objects found damaged (wrong type, mode, size or bytes) and written afresh.
    pub objects_replaced: usize,
    /// Entry files that are copies, not links to their object, each with why (the object's
    /// link count is at its limit, or the entry is on another file system): these cost their
    /// full size in the store.
    pub copied_not_linked: Vec<String>,
    /// Files of an own entry (control, original: issue #36), each made from the build
    /// output and linked to nothing; their bytes are counted in `bytes_written`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub own_files: usize,
    /// Of those, the reflinks (copy-on-write clones: new inodes that share blocks until one
    /// is written); the rest are byte copies (a file system without reflinks, such as ext4).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub own_reflinked: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Root {
    /// `objects/`, created when missing; anything but a real folder there is damage (nothing
    /// is ever written through a link).
    pub(super) fn objects_dir(&self) -> Result<PathBuf> {
        let p = self.path.join(OBJECTS);
        match safe::kind(&p)? {
            Kind::Dir => Ok(p),
            Kind::Missing => {
                std::fs::create_dir(&p).at("create directory", &p)?;
                fsx::sync_dir(&self.path)?;
                Ok(p)
            }
            _ => Err(damaged(p.display(), "`objects` is not a folder").with_hint(
                "move it away: every entry keeps its own links, and the next install \
                 writes the objects it needs again",
            )),
        }
    }

    /// Remove the objects no entry in `keep` names (their records name them), regular files
    /// only; with `dry_run`, only count them. Returns (names removed, bytes of those objects).
    pub(super) fn gc_objects(
        &self,
        keep: &BTreeSet<EntryKey>,
        dry_run: bool,
    ) -> Result<(Vec<String>, u64)> {
        let dir = self.path.join(OBJECTS);
        match safe::kind(&dir)? {
            Kind::Missing => return Ok((Vec::new(), 0)),
            Kind::Dir => {}
            _ => return Err(damaged(dir.display(), "`objects` is not a folder")),
        }
        let mut used = BTreeSet::new();
        // Own entries hold no object's inode: only linked ones keep objects.
        for k in keep.iter().filter(|k| k.sharing.is_linked()) {
            // An entry whose record does not read names nothing: dropping an object's name
            // never changes an entry, so this can cost a rewrite, never an entry's data.
            if let Ok(info) = self.read_entry(k) {
                used.extend(info.files.values().map(object_name));
            }
        }
        let (mut removed, mut bytes) = (Vec::new(), 0u64);
        for name in self.names(OBJECTS)? {
            if parse_object_name(&name).is_none() || used.contains(&name) {
                continue;
            }
            let p = dir.join(&name);
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if !m.is_file() {
                continue;
            }
            bytes += m.len();
            if !dry_run {
                std::fs::remove_file(&p).at("remove", &p)?;
            }
            removed.push(name);
        }
        if !dry_run && !removed.is_empty() {
            fsx::sync_dir(&dir)?;
        }
        Ok((removed, bytes))
    }
}

/// An object that can be linked without writing: a regular file (not followed) of the
/// recorded size and sealed mode. Its bytes are not read here: the staged entry is hashed
/// before it is placed, and a same-size object with other bytes is then rewritten.
pub(super) fn looks_intact(p: &Path, rec: &FileRec) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).is_ok_and(|m| {
        m.is_file() && m.len() == rec.size && m.permissions().mode() & 0o7777 == rec.mode()
    })
}

/// Link failures after which an entry file is copied instead (and the outcome says so):
/// the object's link count is at the file system's limit, or the entry cannot link across
/// file systems (or at all, on one without hard links).
pub(super) fn link_fallback(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMLINK) | Some(libc::EXDEV) | Some(libc::EPERM) | Some(libc::ENOTSUP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_carry_the_mode_and_parse_strictly() {
        let rec = |executable| FileRec {
            sha256: Sha256::of_bytes(b"x"),
            size: 1,
            executable,
        };
        let lib = object_name(&rec(false));
        let exe = object_name(&rec(true));
        assert_ne!(lib, exe, "the same bytes as a library and an executable");
        assert_eq!(parse_object_name(&lib), Some((rec(false).sha256, false)));
        assert_eq!(parse_object_name(&exe), Some((rec(true).sha256, true)));
        for stray in [
            "x",
            "",
            ".x",
            &format!("{lib}.y"),
            &format!("{lib}.x.x"),
            &lib.to_uppercase(),
            &format!("{TMP_PREFIX}1-0"),
        ] {
            assert_eq!(parse_object_name(stray), None, "{stray}");
        }
    }
}
