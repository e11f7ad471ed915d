//! When a commit's note may stand for the commit (issue #19 class 5): a note is copied onto an
//! amended commit by `notes.rewriteRef`, and its trailers (file name and digest) survive the
//! amend too, so neither says the note still describes the commit. The note is trusted only
//! when it would make this very commit again: applied as `patch apply` applies it (hunks
//! placed as git places them) onto the commit's parent, it gives the commit's tree, and the
//! message and author apply would write are the commit's. Anything else is exported from the
//! commit itself, so an edit is never lost behind a stale note.

use crate::patch::{apply, mail, PatchFile, PatchId};
use git2::{Commit, Diff, Repository};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Whether `note` (the file of patch `id`, applied as the `order`-th patch) makes commit `c`.
/// Every failure on the way (a note that no longer parses or applies, a path it refuses, a
/// temp folder that cannot be written) means "not trusted": rebuilding from the commit is
/// always a correct export.
pub(super) fn note_makes_commit(
    repo: &Repository,
    c: &Commit,
    id: &PatchId,
    order: usize,
    note: &[u8],
) -> bool {
    let p = PatchFile::from_bytes(id.clone(), PathBuf::from(id.as_str()), note.to_vec());
    let Some(a) = p.attribution.as_ref() else {
        return false;
    };
    // Paths are checked (inside the tree, away from .git) before any is written below.
    if apply::parse_diff(&p).is_err() || c.parent_count() != 1 {
        return false;
    }
    let Ok(parent) = c.parent(0).and_then(|p| p.tree()) else {
        return false;
    };
    let Ok(tmp) = tempfile::tempdir() else {
        return false;
    };
    if !preimages(repo, &parent, &p, tmp.path()) {
        return false;
    }
    let Ok((placed, offsets)) = apply::placed_diff(tmp.path(), &p) else {
        return false;
    };
    let made_tree = Diff::from_buffer(&placed)
        .and_then(|d| repo.apply_to_tree(&parent, &d, None))
        .and_then(|mut index| index.write_tree_to(repo));
    if made_tree.ok() != Some(c.tree_id()) {
        return false;
    }
    let message = apply::commit_message(&p, a, order, &offsets);
    let (name, email) = mail::author(a);
    let author = c.author();
    c.message_bytes() == message.as_bytes()
        && author.name_bytes() == name.as_bytes()
        && author.email_bytes() == email.as_bytes()
}

/// Write the parent's version of every file the note touches into `dir`, where the placement
/// reads them. False when a file cannot be written.
fn preimages(repo: &Repository, tree: &git2::Tree, p: &PatchFile, dir: &Path) -> bool {
    let Ok(sections) = apply::read_sections(p) else {
        return false;
    };
    for f in &sections {
        for rel in [&f.old_path, &f.new_path].into_iter().flatten() {
            let rel = Path::new(std::ffi::OsStr::from_bytes(rel));
            let Some(bytes) = crate::git::blob_at(repo, tree, rel) else {
                continue;
            };
            let dest = dir.join(rel);
            let written = std::fs::create_dir_all(pinforge_base::fsx::parent_of(&dest))
                .and_then(|()| std::fs::write(&dest, bytes));
            if written.is_err() {
                return false;
            }
        }
    }
    true
}
