//! Git helpers shared by apply, audit, rebase and export (issue #8: git helpers have one home):
//! the fixed identity pinforge commits with, the note that keeps a patch's original bytes on
//! its vendor commit, the pristine tag, abbreviated-id resolution, blob reads at a path,
//! ancestry, and the check that a work tree is clean at its commit.

use git2::{Oid, Repository, Signature, Time, Tree};
use pinforge_base::digest::GitOid;
use pinforge_base::error::{Error, Result};
use std::path::Path;

/// The tag every pristine repository carries on its base commit (the upstream as pinned).
pub(crate) const PRISTINE_TAG: &str = "refs/tags/pinforge/pristine";

/// The notes ref where each vendor patch commit keeps the exact bytes of the patch file it was
/// made from, so that `patch export` gives back the file byte for byte.
pub(crate) const PATCH_NOTES_REF: &str = "refs/notes/pinforge-patch";

/// The typed id of a libgit2 oid (SHA-1 repositories: 20 bytes).
pub(crate) fn git_oid(oid: Oid) -> GitOid {
    let mut bytes = [0u8; 20];
    // git2 0.20 opens SHA-1 repositories only, whose ids are 20 bytes.
    bytes.copy_from_slice(oid.as_bytes().get(..20).unwrap_or(&[0; 20]));
    GitOid::from_bytes(bytes)
}

/// The libgit2 oid of a typed id.
pub(crate) trait OidExt {
    /// The same id as libgit2's type.
    fn to_git(&self) -> Oid;
}

impl OidExt for GitOid {
    fn to_git(&self) -> Oid {
        Oid::from_bytes(self.as_bytes()).expect("invariant: a GitOid is 20 bytes, a SHA-1 oid")
    }
}

/// The committer name of every commit and note pinforge makes.
pub(crate) const COMMITTER_NAME: &str = "pinforge";
/// The committer e-mail of every commit and note pinforge makes (`.invalid`: never routable).
pub(crate) const COMMITTER_EMAIL: &str = "pinforge@pinforge.invalid";

/// The committer signature of every commit and note pinforge makes (fixed: ids depend on
/// content only).
pub(crate) fn tool_signature(when: &Time) -> Result<Signature<'static>> {
    Signature::new(COMMITTER_NAME, COMMITTER_EMAIL, when).git_at(&"pinforge signature")
}

/// Record `bytes` (a patch file) as the note of `commit`.
pub(crate) fn write_patch_note(repo: &Repository, commit: Oid, bytes: &[u8]) -> Result<()> {
    // Notes are text in git: UTF-8 bytes without NUL are kept as they are; anything else (a
    // diff may change lines of any bytes) is kept as hex behind a marker, never lossily.
    let text = match std::str::from_utf8(bytes) {
        Ok(t) if !t.contains('\0') && !t.starts_with(HEX_MARK) => t.to_string(),
        _ => {
            let mut t = String::from(HEX_MARK);
            for b in bytes {
                t.push_str(&format!("{b:02x}"));
            }
            t
        }
    };
    let sig = tool_signature(&Time::new(0, 0))?;
    repo.note(&sig, &sig, Some(PATCH_NOTES_REF), commit, &text, true)
        .git_at(&format!("note on {commit}"))?;
    Ok(())
}

const HEX_MARK: &str = "pinforge-hex:";

/// The patch bytes kept on `commit`, if any.
pub(crate) fn read_patch_note(repo: &Repository, commit: Oid) -> Option<Vec<u8>> {
    let note = repo.find_note(Some(PATCH_NOTES_REF), commit).ok()?;
    let raw = note.message_bytes();
    match raw.strip_prefix(HEX_MARK.as_bytes()) {
        Some(hex) => {
            let hex = std::str::from_utf8(hex).ok()?.trim_end();
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect()
        }
        None => Some(raw.to_vec()),
    }
}

/// Resolve a full or abbreviated commit id to a commit present in `repo`.
pub(crate) fn resolve_commit(repo: &Repository, spec: &str) -> Option<Oid> {
    if spec.len() < 4 || !spec.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    repo.revparse_single(spec)
        .ok()
        .and_then(|o| o.peel_to_commit().ok())
        .map(|c| c.id())
}

/// Whether `ancestor` is `tip` or one of its ancestors.
pub(crate) fn is_ancestor(repo: &Repository, ancestor: Oid, tip: Oid) -> bool {
    ancestor == tip || repo.graph_descendant_of(tip, ancestor).unwrap_or(false)
}

/// The bytes of the blob at `path` in `tree`; None when there is no blob there.
pub(crate) fn blob_at(repo: &Repository, tree: &Tree, path: &Path) -> Option<Vec<u8>> {
    let entry = tree.get_path(path).ok()?;
    let blob = repo.find_blob(entry.id()).ok()?;
    Some(blob.content().to_vec())
}

/// Make the objects of `other` (a repository folder with a `.git`, or a bare one) readable
/// from `repo` without copying them.
pub(crate) fn borrow_objects(repo: &Repository, other: &Path) -> Result<()> {
    let objects = if other.join(".git").is_dir() {
        other.join(".git").join("objects")
    } else {
        other.join("objects")
    };
    let odb = repo.odb().git_at(&other.display())?;
    odb.add_disk_alternate(&objects.to_string_lossy())
        .git_at(&objects.display())?;
    Ok(())
}

/// Check that a work tree is exactly at `head` with no modified, added or deleted files.
pub fn check_clean(path: &Path, head: GitOid) -> Result<()> {
    let repo = Repository::open(path).git_at(&path.display())?;
    // The files at `path` are what is checked, whatever the repository's own config says:
    // a `core.worktree` planted in its `.git/config` would make the status describe another
    // folder (a pristine copy, or `/proc`) and a changed tree pass.
    repo.set_workdir(path, false).git_at(&path.display())?;
    let actual = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&path.display())?
        .id();
    if actual != head.to_git() {
        return Err(Error::check(
            path.display(),
            format!("HEAD is {actual}, expected {head}"),
        ));
    }
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .include_ignored(false)
        .recurse_untracked_dirs(true);
    let statuses = repo.statuses(Some(&mut opts)).git_at(&path.display())?;
    let dirty: Vec<String> = statuses
        .iter()
        .filter(|s| s.status() != git2::Status::CURRENT)
        .filter_map(|s| s.path().map(str::to_string))
        .take(10)
        .collect();
    if !dirty.is_empty() {
        return Err(Error::check(
            path.display(),
            format!("work tree differs from its commit: {}", dirty.join(", ")),
        ));
    }
    Ok(())
}

/// Attach a subject to libgit2 results in one call.
pub(crate) trait GitContext<T> {
    /// Map a libgit2 error to [`Error::Git`] naming `subject`.
    fn git_at(self, subject: &dyn std::fmt::Display) -> Result<T>;
}

impl<T> GitContext<T> for std::result::Result<T, git2::Error> {
    fn git_at(self, subject: &dyn std::fmt::Display) -> Result<T> {
        self.map_err(|e| Error::git(subject, e))
    }
}

/// The tree check of `verify` (`artifact::manifest::TreeCheck`) through libgit2.
pub struct GitTrees;

impl pinforge_record::manifest::TreeCheck for GitTrees {
    fn check_clean(&self, path: &Path, head: GitOid) -> Result<()> {
        check_clean(path, head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_note_round_trips_and_abbreviated_ids_resolve() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let tree = repo
            .find_tree(repo.index().expect("index").write_tree().expect("tree"))
            .expect("tree");
        let sig = tool_signature(&Time::new(0, 0)).expect("sig");
        let c = repo
            .commit(Some("HEAD"), &sig, &sig, "m", &tree, &[])
            .expect("commit");
        write_patch_note(&repo, c, b"From: x\n\ndiff\n").expect("note");
        assert_eq!(
            read_patch_note(&repo, c).as_deref(),
            Some(&b"From: x\n\ndiff\n"[..])
        );
        let odd = b"diff\n+\xff\x00bytes\n".to_vec();
        write_patch_note(&repo, c, &odd).expect("note");
        assert_eq!(
            read_patch_note(&repo, c),
            Some(odd),
            "non-UTF-8 bytes round trip"
        );
        assert_eq!(resolve_commit(&repo, &c.to_string()[..9]), Some(c));
        assert_eq!(resolve_commit(&repo, "zz"), None);
        assert!(is_ancestor(&repo, c, c));
    }

    #[test]
    fn a_changed_tree_is_dirty_even_when_its_config_points_the_work_tree_elsewhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (tree_dir, pristine) = (dir.path().join("t"), dir.path().join("pristine"));
        std::fs::create_dir_all(&tree_dir).expect("mkdir");
        let repo = Repository::init(&tree_dir).expect("init");
        std::fs::write(tree_dir.join("a"), "hi\n").expect("write");
        let mut index = repo.index().expect("index");
        index.add_path(Path::new("a")).expect("add");
        index.write().expect("index");
        let tree = repo
            .find_tree(index.write_tree().expect("tree"))
            .expect("tree");
        let sig = tool_signature(&Time::new(0, 0)).expect("sig");
        let c = repo
            .commit(Some("HEAD"), &sig, &sig, "m", &tree, &[])
            .expect("commit");
        let head = git_oid(c);
        check_clean(&tree_dir, head).expect("clean");
        // A pristine copy elsewhere, the repository's config aimed at it, the tree changed.
        std::fs::create_dir_all(&pristine).expect("mkdir");
        std::fs::write(pristine.join("a"), "hi\n").expect("write");
        repo.config()
            .expect("config")
            .set_str("core.worktree", pristine.to_str().expect("utf8"))
            .expect("set");
        std::fs::write(tree_dir.join("a"), "EVIL\n").expect("write");
        let e = check_clean(&tree_dir, head).expect_err("dirty");
        assert!(e.to_string().contains("differs from its commit: a"), "{e}");
    }
}
