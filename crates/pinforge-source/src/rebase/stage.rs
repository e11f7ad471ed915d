//! The new bundle folder, written inside the rebase's stage: a copy of the old one with the
//! refreshed patches rewritten, the dropped ones moved under `dropped/` (never over an older
//! copy, issue #19), the series without them and the ledger appended to; then checked (it
//! loads and every carried patch lints clean) before the commit protocol swaps it in.

use super::{ledger, with_applied_upstream, Action, Moved, DROPPED_DIR, LEDGER};
use crate::audit::{self, Outcome};
use crate::patch::lint::Severity;
use crate::patch::Bundle;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use std::collections::BTreeSet;
use std::path::Path;

/// Write the new bundle into `new_dir` (which does not exist yet) and check it.
pub(super) fn fill(
    new_dir: &Path,
    bundle: &Bundle,
    report: &audit::Audit,
    rows: &[Moved],
    today: &str,
) -> Result<()> {
    copy_flat(&bundle.dir, new_dir)?;
    let entries = stage_patches(new_dir, bundle, report, rows, today)?;
    let dropped: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.action == Action::Dropped)
        .map(|r| r.file.as_str())
        .collect();
    if bundle.series_path.exists() {
        stage_series(&bundle.series_path, new_dir, &dropped)?;
    }
    if !entries.is_empty() {
        let ledger_path = bundle.dir.join(LEDGER);
        let old = match std::fs::symlink_metadata(&ledger_path) {
            Ok(_) => Some(fsx::read_to_string(&ledger_path)?),
            Err(_) => None,
        };
        let text = ledger::appended(&ledger_path, old.as_deref(), &entries)?;
        fsx::write_atomic_keep_mode(&new_dir.join(LEDGER), text.as_bytes())?;
    }
    check_staged(new_dir)
}

/// In the staged bundle `new_dir`: refreshed patches rewritten, dropped ones moved under
/// `dropped/` with their `Applied-Upstream` filled. Returns the ledger entries to append.
fn stage_patches(
    new_dir: &Path,
    bundle: &Bundle,
    report: &audit::Audit,
    rows: &[Moved],
    today: &str,
) -> Result<Vec<ledger::Entry>> {
    let mut entries = Vec::new();
    for (row, p) in rows.iter().zip(&report.patches) {
        let Some((_, original)) = bundle.files.iter().find(|(id, _)| id.as_str() == p.file) else {
            continue;
        };
        match (&p.outcome, row.action) {
            (Outcome::Carried { bytes }, Action::Refreshed) => {
                fsx::write_atomic_keep_mode(&new_dir.join(&p.file), bytes)?;
            }
            (_, Action::Dropped) => {
                let applied = row.applied_upstream.clone().unwrap_or_default();
                // It becomes a header line: the one rule for strings (issue #19).
                pinforge_base::text::refuse_control(
                    &format!("Applied-Upstream of {}", p.file),
                    &applied,
                )?;
                let kept = with_applied_upstream(original, &applied);
                fsx::create_dir_all(&new_dir.join(DROPPED_DIR))?;
                let rel = kept_name(new_dir, &p.file, &kept)?;
                let mode = fsx::mode_of(&new_dir.join(&p.file)).unwrap_or(0o644);
                if !new_dir.join(&rel).exists() {
                    fsx::write_atomic_mode(&new_dir.join(&rel), &kept, mode)?;
                }
                std::fs::remove_file(new_dir.join(&p.file)).at("remove", &new_dir.join(&p.file))?;
                entries.push(ledger::Entry {
                    file: p.file.clone(),
                    sha256: original.sha256,
                    verdict: p.verdict.as_str().into(),
                    applied_upstream: applied,
                    from: report.from.clone(),
                    onto: report.onto.clone(),
                    date: today.into(),
                    kept_as: rel,
                    evidence: evidence_lines(p),
                });
            }
            _ => {}
        }
    }
    Ok(entries)
}

/// One line per evidence, strongest first, as the ledger keeps them.
fn evidence_lines(p: &audit::PatchAudit) -> Vec<String> {
    p.evidence
        .iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                audit::word(&e.strength),
                audit::word(&e.kind),
                e.detail.lines().next().unwrap_or_default()
            )
        })
        .collect()
}

/// Where a dropped patch is kept: `dropped/FILE`, unless an earlier drop of a patch with that
/// name is there with other bytes; then `dropped/STEM.HEX12.patch`, named by the kept bytes'
/// digest, so that every ledger entry keeps pointing at its own bytes (issue #19). An existing
/// file with the same bytes is reused.
fn kept_name(new_dir: &Path, file: &str, kept: &[u8]) -> Result<String> {
    let plain = format!("{DROPPED_DIR}/{file}");
    let digest = Sha256::of_bytes(kept);
    let stem = file.strip_suffix(".patch").unwrap_or(file);
    let by_digest = format!("{DROPPED_DIR}/{stem}.{}.patch", digest.short(12));
    for rel in [&plain, &by_digest] {
        let p = new_dir.join(rel);
        match std::fs::symlink_metadata(&p) {
            Err(_) => return Ok(rel.clone()),
            Ok(_) if Sha256::of_bytes(&fsx::read(&p)?) == digest => return Ok(rel.clone()),
            Ok(_) => {}
        }
    }
    Err(Error::input(
        new_dir.join(&by_digest).display(),
        "a different file already has the name derived from this dropped patch's digest",
    )
    .with_hint("the dropped/ folder was edited by hand; restore it from version control"))
}

/// The staged `series` without the dropped patches' lines (comments and order kept).
fn stage_series(series_path: &Path, new_dir: &Path, dropped: &BTreeSet<&str>) -> Result<()> {
    let text = fsx::read_to_string(series_path)?;
    let mut out = String::new();
    for line in text.lines() {
        let name = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        if name.is_some_and(|n| dropped.contains(n)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    fsx::write_atomic_keep_mode(&new_dir.join("series"), out.as_bytes())
}

/// The staged bundle must load, and every carried patch lint clean.
fn check_staged(new_dir: &Path) -> Result<()> {
    let staged = Bundle::load(new_dir)?;
    for (path, f) in staged.lint() {
        if f.severity == Severity::Error {
            return Err(Error::Internal(format!(
                "{}:{}: the rebased patch does not lint clean: {}",
                path.display(),
                f.line,
                f.message
            )));
        }
    }
    Ok(())
}

/// Copy the regular files of `src` (and of its `dropped/`) into a new folder `dest`.
fn copy_flat(src: &Path, dest: &Path) -> Result<()> {
    fsx::create_dir_all(dest)?;
    for sub in [None, Some(DROPPED_DIR)] {
        let from = sub
            .map(|s| src.join(s))
            .unwrap_or_else(|| src.to_path_buf());
        if !from.is_dir() {
            continue;
        }
        let to = sub
            .map(|s| dest.join(s))
            .unwrap_or_else(|| dest.to_path_buf());
        fsx::create_dir_all(&to)?;
        for e in std::fs::read_dir(&from).at("read directory", &from)? {
            let e = e.at("read directory", &from)?;
            let m = std::fs::symlink_metadata(e.path()).at("inspect", &e.path())?;
            if m.is_file() {
                use std::os::unix::fs::PermissionsExt;
                fsx::write_atomic_mode(
                    &to.join(e.file_name()),
                    &fsx::read(&e.path())?,
                    m.permissions().mode() & 0o7777,
                )?;
            } else if !(sub.is_none() && m.is_dir() && e.file_name() == DROPPED_DIR) {
                // The old folder is replaced as a whole: anything not copied would be lost.
                return Err(Error::input(
                    e.path().display(),
                    "the bundle folder holds something other than regular files and dropped/; \
                     the rebase replaces the folder as a whole and would lose it",
                )
                .with_hint("move it out of the bundle folder (links and subfolders are not part of a bundle)"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // issue #19 class 4: an earlier dropped/FILE is never overwritten by a newer drop of a
    // patch with the same name; the same bytes again reuse it.
    #[test]
    fn a_second_drop_of_the_same_name_is_kept_beside_the_first_named_by_its_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::create_dir(d.join(DROPPED_DIR)).expect("mkdir");
        assert_eq!(
            kept_name(d, "0001-a.patch", b"one").expect("name"),
            "dropped/0001-a.patch"
        );
        std::fs::write(d.join("dropped/0001-a.patch"), b"one").expect("write");
        assert_eq!(
            kept_name(d, "0001-a.patch", b"one").expect("same"),
            "dropped/0001-a.patch"
        );
        let other = kept_name(d, "0001-a.patch", b"two").expect("other");
        let hex = Sha256::of_bytes(b"two").short(12);
        assert_eq!(other, format!("dropped/0001-a.{hex}.patch"));
        std::fs::write(d.join(&other), b"forged").expect("write");
        assert!(
            kept_name(d, "0001-a.patch", b"two").is_err(),
            "never overwritten"
        );
    }
}
