//! The record-folder helpers flip and ablate share (and validate's run folders use): claim a
//! fresh numbered folder with one `mkdir`, write canonical JSON atomically, commit a folder's
//! final files at once ([`commit_final`]), and put an error on one line. Only `base` below.

use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::txn::{DirCommit, Step};
use pinforge_record::sign::record::Signer;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Claim a fresh record folder `ROOT/KIND/STEM-NNNN` with one `mkdir` (the first free
/// counter). `KIND` must be a real folder, never a link: a record written through a link
/// would land wherever it points.
pub(crate) fn claim_record_dir(root: &Path, kind: &str, stem: &str) -> Result<(String, PathBuf)> {
    let base = root.join(kind);
    if !real_folder(&base)? {
        // Two records claimed at once (two `ablate` runs in one workspace) both see no
        // folder; the loser's `mkdir` meets the winner's, which is fine as long as what is
        // there now is a real folder and not a link planted in between.
        match std::fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !real_folder(&base)? {
                    return Err(Error::io("create directory", &base, e));
                }
            }
            Err(e) => return Err(Error::io("create directory", &base, e)),
        }
    }
    remove_stale_finals(&base)?;
    for n in 1..=9999u32 {
        let id = format!("{stem}-{n:04}");
        let dir = base.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("create directory", &dir, e)),
        }
    }
    Err(Error::input(
        base.display(),
        format!("9999 records named {stem}-NNNN already exist"),
    )
    .with_hint("archive old records"))
}

/// The prefix of a record folder's staged final contents: `.pinforge-final-PID-ID` beside the
/// folder (a name no claimed id can have).
const FINAL_PREFIX: &str = ".pinforge-final-";

/// Make a record folder's final files visible at once: `record.json` (with its `.dsse.json`
/// and `.sig` under `--sign`, made by [`write_json`]) and `summary.md` are written into a
/// fresh stage folder beside `dir`, synced, and the stage is exchanged with `dir` by one
/// atomic exchange ([`fsx::exchange`]): the commit point. Before it, `dir` is what it was (the
/// record as last written, unfinished, without a summary); after it, every final file is
/// there, signed or not as the command was asked. The old contents, now in the stage's name,
/// are removed last ([`DirCommit`]). The crash points are the caller's steps ([`FlipStep`],
/// [`AblateStep`]): stage written and synced, then exchanged with the old contents not yet
/// removed; what a killed run leaves beside `dir` is removed by the next claim or commit in
/// that folder ([`remove_stale_finals`]).
pub(crate) fn commit_final<T: Serialize, S: Step>(
    dir: &Path,
    record: &T,
    summary: &str,
    signer: &Signer,
    (staged, swapped): (S, S),
) -> Result<()> {
    let commit = DirCommit::begin(dir, FINAL_PREFIX)?;
    let stage = commit.stage();
    fsx::write_atomic(&stage.join("summary.md"), summary.as_bytes())?;
    write_json(&stage.join("record.json"), record, signer)?;
    commit.commit(staged, swapped)
}

pinforge_base::steps! {
    /// The steps of a flip's final commit; each is the crash point `flip:<index>`.
    pub enum FlipStep for "flip" {
        /// The record and summary are staged and synced.
        Staged = 1,
        /// The stage is exchanged with the record folder; the old contents not yet removed.
        Swapped = 2,
    }
}

pinforge_base::steps! {
    /// The steps of an ablation's final commit; each is the crash point `ablate:<index>`.
    pub enum AblateStep for "ablate" {
        /// The record and summary are staged and synced.
        Staged = 1,
        /// The stage is exchanged with the record folder; the old contents not yet removed.
        Swapped = 2,
    }
}

/// Remove the staged final folders in `parent` whose writer is gone (a run killed before or
/// right after its commit: either way the record folder itself is whole). A live writer's
/// stage is never touched.
pub(crate) fn remove_stale_finals(parent: &Path) -> Result<usize> {
    pinforge_base::txn::remove_dead_stages(parent, FINAL_PREFIX)
}

/// Whether `path`, a folder pinforge keeps records in (`flips/`, `ablations/`, `validate/`
/// and each validate run folder), is there: true for a real folder, false when nothing is
/// there; a link (to anywhere), a file or anything else in its place is an input error
/// naming it, since records written through a link would land wherever it points. The one
/// check of record folders, for flip, ablate and validate alike.
pub(crate) fn real_folder(path: &Path) -> Result<bool> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("inspect", path, e)),
    };
    if m.is_dir() {
        return Ok(true);
    }
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        "a symlink"
    } else {
        fsx::special_kind(&ft).unwrap_or("a file")
    };
    Err(Error::input(
        path.display(),
        format!("is {kind}, not a folder: pinforge keeps its records only in real folders, never through a link"),
    )
    .with_hint(format!("move {} away", path.display())))
}

/// Write a record as canonical JSON (sorted keys), atomically.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T, signer: &Signer) -> Result<()> {
    let v = serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))?;
    let mut s = serde_json::to_string_pretty(&v).map_err(|e| Error::Internal(e.to_string()))?;
    s.push('\n');
    // Signed with `--sign` (flip and ablation records): sidecars first, the record last.
    signer.write_record(path, s.as_bytes())
}

/// An error as one line for a record: message, then the hint.
pub(crate) fn error_text(e: &Error) -> String {
    match e.hint() {
        Some(h) => format!("{e} (hint: {h})"),
        None => e.to_string(),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_folders_are_claimed_once_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, pa) = claim_record_dir(dir.path(), "flips", "r--x--y").expect("first");
        let (b, _) = claim_record_dir(dir.path(), "flips", "r--x--y").expect("second");
        assert_eq!(a, "r--x--y-0001");
        assert_eq!(b, "r--x--y-0002");
        assert!(pa.is_dir());
        let other = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(other.path(), dir.path().join("ablations")).expect("link");
        let e = claim_record_dir(dir.path(), "ablations", "s").expect_err("link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert_eq!(std::fs::read_dir(other.path()).expect("ls").count(), 0);
    }

    /// CI once saw `ablations: cannot create directory: File exists` when two ablate
    /// runs claimed their first record at once: both saw no folder and both ran `mkdir`.
    #[test]
    fn records_claimed_at_once_in_a_fresh_workspace_all_succeed_with_distinct_ids() {
        for _round in 0..20 {
            let dir = tempfile::tempdir().expect("tempdir");
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let root = dir.path().to_path_buf();
                    let start = start.clone();
                    std::thread::spawn(move || {
                        start.wait();
                        claim_record_dir(&root, "ablations", "s").map(|(id, _)| id)
                    })
                })
                .collect();
            let mut ids: Vec<String> = handles
                .into_iter()
                .map(|h| h.join().expect("thread").expect("claim"))
                .collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 8, "{ids:?}");
        }
    }
}
