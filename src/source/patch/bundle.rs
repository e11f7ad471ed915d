//! The bundle as one portable file and as one commit message: the bibliography (per patch:
//! status, issue, PR, commit, handles, URL) and every patch of the series in an mbox that
//! `git am` applies, so the attribution travels with the fixes wherever they go.
//!
//! `git am` refuses text before the first message ("Patch format detection failed") and stops
//! on a message without a diff, so the bibliography is written where `git am` is defined to
//! ignore text: after the first message's `---` separator and before its diff, the place
//! `git format-patch` puts the diffstat.

use super::{BibRow, PatchFile};
use crate::base::error::{Error, Result};

/// The mbox separator line for a patch file that does not start with one; the all-zero id is
/// what `git format-patch --zero-commit` writes.
const SEPARATOR: &[u8] =
    b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n";

/// The bibliography as plain text, one block per patch in series order.
pub(crate) fn bibliography_text(rows: &[BibRow]) -> String {
    let mut s = format!(
        "pinforge patch bundle: {} patch(es) in series order\n",
        rows.len()
    );
    for (i, r) in rows.iter().enumerate() {
        s.push_str(&format!("{:>3}. {}\n", i + 1, r.file));
        if let Some(summary) = &r.summary {
            s.push_str(&format!("     {summary}\n"));
        }
        let mut facts = vec![r.status.clone().unwrap_or_else(|| "INVALID".into())];
        facts.extend(r.issue.as_ref().map(|u| format!("issue {u}")));
        facts.extend(r.pr.as_ref().map(|u| format!("PR {u}")));
        facts.extend(r.commit.as_ref().map(|c| format!("commit {c}")));
        if !r.handles.is_empty() {
            facts.push(format!("by {}", r.handles.join(", ")));
        }
        s.push_str(&format!("     {}\n", facts.join("; ")));
        if let Some(url) = &r.url {
            s.push_str(&format!("     {url}\n"));
        }
        s.push_str(&format!("     sha256 {}\n", r.sha256));
    }
    s
}

/// The commit message for applying the whole bundle as one commit (a vendor import, a
/// downstream packaging repository): a subject, the bibliography, and one trailer per patch
/// with its digest, so the attribution survives in git history too.
pub(crate) fn commit_message(rows: &[BibRow]) -> String {
    let mut s = format!(
        "Apply {} attributed patch(es) from the pinforge bundle\n\n",
        rows.len()
    );
    s.push_str(&bibliography_text(rows));
    s.push('\n');
    for r in rows {
        s.push_str(&format!("Pinforge-Patch: {} sha256:{}\n", r.file, r.sha256));
    }
    s
}

/// One mbox of the patches, in order, with the bibliography in the first message's notes.
pub(crate) fn mbox(patches: &[&PatchFile], rows: &[BibRow]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, p) in patches.iter().enumerate() {
        check_no_inner_separator(p)?;
        // "From: " (a header) is not "From " (an mbox separator).
        if !p.bytes.starts_with(b"From ") {
            out.extend_from_slice(SEPARATOR);
        }
        if i == 0 {
            out.extend_from_slice(&with_notes(p, &bibliography_text(rows))?);
        } else {
            out.extend_from_slice(&p.bytes);
        }
        if !out.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    Ok(out)
}

/// The patch with `notes` inserted just before its diff, after a `---` line (added when the
/// patch has none, so the notes never become part of the commit message).
fn with_notes(p: &PatchFile, notes: &str) -> Result<Vec<u8>> {
    let at = diff_start(&p.bytes).ok_or_else(|| {
        Error::input(p.origin.display(), "patch has no diff to bundle")
            .with_hint("a bundle patch needs a `diff --git` section")
    })?;
    let (head, diff) = p.bytes.split_at(at);
    let has_separator = head
        .split(|b| *b == b'\n')
        .any(|line| line == b"---" || line == b"---\r");
    let mut out = head.to_vec();
    if !has_separator {
        out.extend_from_slice(b"---\n");
    }
    out.extend_from_slice(notes.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(diff);
    Ok(out)
}

/// Byte offset of the first `diff --git ` line.
fn diff_start(bytes: &[u8]) -> Option<usize> {
    let mut offset = 0usize;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        if line.starts_with(b"diff --git ") {
            return Some(offset);
        }
        offset += line.len();
    }
    None
}

/// A line starting with `From ` inside a message would be read as the start of the next one
/// by `git mailsplit`; such a patch cannot travel in an mbox unchanged, so it is refused with
/// its line instead of being escaped into a different commit message.
fn check_no_inner_separator(p: &PatchFile) -> Result<()> {
    for (i, line) in p.bytes.split(|b| *b == b'\n').enumerate().skip(1) {
        if line.starts_with(b"From ") {
            return Err(Error::input(
                format!("{}:{}", p.origin.display(), i + 1),
                "a line starting with `From ` would split the bundle's mbox here",
            )
            .with_hint("reword that line (for example indent it) and run the command again"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::patch::{Bundle, PatchId};
    use std::path::PathBuf;

    #[test]
    fn the_embedded_bundle_becomes_one_mbox_message_per_patch_with_the_bibliography_first() {
        let b = Bundle::embedded().expect("bundle");
        let patches = b.select(None).expect("select");
        let rows = b.bibliography();
        let bytes = mbox(&patches, &rows).expect("mbox");
        let text = String::from_utf8(bytes).expect("utf8");
        assert_eq!(text.matches("\nFrom 0000000000").count() + 1, 3, "{text}");
        assert!(text.starts_with("From 0000000000000000000000000000000000000000 "));
        let bib = text
            .find("pinforge patch bundle: 3 patch(es)")
            .expect("bibliography");
        let first_diff = text.find("\ndiff --git ").expect("diff");
        let separator = text.find("\n---\n").expect("separator");
        assert!(
            separator < bib && bib < first_diff,
            "notes sit between --- and the diff"
        );
        assert!(text.contains("issue https://github.com/ggml-org/llama.cpp/issues/20093"));
        assert!(text.contains("commit 99bd67c9b"));
    }

    #[test]
    fn a_patch_with_an_inner_from_line_is_refused_with_its_line() {
        let bytes = b"From: A <a@b.c>\nSubject: x\n\nbody\nFrom here on\n---\ndiff --git a/f b/f\n"
            .to_vec();
        let p = PatchFile::from_bytes(
            PatchId::new("0001-x.patch").expect("id"),
            PathBuf::from("0001-x.patch"),
            bytes,
        );
        let e = mbox(&[&p], &[]).expect_err("refused");
        assert!(e.to_string().contains("0001-x.patch:5"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn the_commit_message_carries_every_patch_digest_as_a_trailer() {
        let b = Bundle::embedded().expect("bundle");
        let rows = b.bibliography();
        let m = commit_message(&rows);
        assert!(m.starts_with("Apply 3 attributed patch(es)"));
        for r in &rows {
            assert!(m.contains(&format!("Pinforge-Patch: {} sha256:{}", r.file, r.sha256)));
        }
    }
}
