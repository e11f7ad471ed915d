//! The bundle as one portable file and as one commit message: the bibliography (per patch:
//! status, issue, PR, commit, handles, URL) and every patch of the series in an mbox that
//! `git am` applies, so the attribution travels with the fixes wherever they go.
//!
//! `git am` refuses text before the first message ("Patch format detection failed") and stops
//! on a message without a diff, so the bibliography is written where `git am` is defined to
//! ignore text: after the first message's `---` separator and before its diff, the place
//! `git format-patch` puts the diffstat.

use super::{BibRow, Bundle, PatchFile};
use pinforge_base::error::{Error, Result};
use pinforge_base::text;
use std::path::{Path, PathBuf};

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
pub fn commit_message(rows: &[BibRow]) -> String {
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
pub fn mbox(patches: &[&PatchFile], rows: &[BibRow]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, p) in patches.iter().enumerate() {
        check_no_inner_separator(p)?;
        // "From: " (a header) is not "From " (an mbox separator).
        let (separator, rest) = match p.bytes.iter().position(|b| *b == b'\n') {
            Some(end) if p.bytes.starts_with(b"From ") => p.bytes.split_at(end + 1),
            _ => (SEPARATOR, &p.bytes[..]),
        };
        let message = [separator, mail_headers(p)?.as_bytes(), rest].concat();
        if i == 0 {
            out.extend_from_slice(&with_notes(p, &message, &bibliography_text(rows))?);
        } else {
            out.extend_from_slice(&message);
        }
        if !out.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    Ok(out)
}

/// The mail headers `git am` needs and `p` lacks (`From:`, `Date:`, `Subject:`), filled from
/// its attribution as `patch apply` fills the commit; empty for a patch that is a mail.
fn mail_headers(p: &PatchFile) -> Result<String> {
    let a = p.require_attribution()?;
    let mut s = String::new();
    let at = |field: &str| format!("{}: {field}", p.origin.display());
    if p.header.get("From").is_none() {
        let (name, email) = super::mail::author(a);
        text::refuse_control(&at("From"), &name)?;
        text::refuse_control(&at("From"), &email)?;
        s.push_str(&format!("From: {name} <{email}>\n"));
    }
    if p.header.get("Date").is_none() {
        let (secs, offset) = super::mail::when(a);
        s.push_str(&format!(
            "Date: {}\n",
            pinforge_base::time::rfc2822(secs, offset)
        ));
    }
    if p.header.get("Subject").is_none() {
        text::refuse_control(&at("Subject"), &a.summary)?;
        s.push_str(&format!("Subject: [PATCH] {}\n", a.summary));
    }
    Ok(s)
}

/// Refuse an output that is a file of `bundle` (its series, a patch, the ledger, a dropped
/// patch, the folder itself), compared by what the path resolves to (device and inode, or
/// the canonical folder for a file not there yet), never by spelling: `patches/./series`, a
/// link to it and a hard link are all the series.
pub fn refuse_bundle_file(bundle: &Bundle, output: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let identity = |m: std::fs::Metadata| (m.dev(), m.ino());
    let mut own: Vec<PathBuf> = vec![
        bundle.dir.clone(),
        bundle.series_path.clone(),
        bundle.dir.join("ledger.toml"),
    ];
    own.extend(bundle.files.values().map(|p| p.origin.clone()));
    let dropped = bundle.dir.join("dropped");
    own.push(dropped.clone());
    if let Ok(rd) = std::fs::read_dir(&dropped) {
        own.extend(rd.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    let out_ids: Vec<(u64, u64)> = [std::fs::metadata(output), std::fs::symlink_metadata(output)]
        .into_iter()
        .filter_map(|m| m.ok().map(identity))
        .collect();
    let clash = own.iter().find(|f| {
        std::fs::metadata(f)
            .ok()
            .map(identity)
            .is_some_and(|id| out_ids.contains(&id))
    });
    // A file not there yet lands in the bundle folder under one of its own names.
    let canon_dir = std::fs::canonicalize(&bundle.dir).ok();
    let lands_in = output
        .file_name()
        .and_then(|n| {
            let parent = std::fs::canonicalize(pinforge_base::fsx::parent_of(output)).ok()?;
            Some((parent, n.to_string_lossy().into_owned()))
        })
        .filter(|(parent, name)| {
            let own_name = super::export::BUNDLE_OWN.contains(&name.as_str())
                || name.ends_with(".patch")
                || name.ends_with(".diff");
            (Some(parent) == canon_dir.as_ref() && own_name)
                || canon_dir
                    .as_ref()
                    .is_some_and(|d| parent == &d.join("dropped"))
        });
    let why = match (clash, lands_in) {
        (Some(f), _) => format!("resolves to {}", text::shown(&f.display().to_string())),
        (None, Some(_)) => "is a name the bundle reader owns, inside its folder".to_string(),
        (None, None) => return Ok(()),
    };
    Err(Error::input(
        output.display(),
        format!(
            "{why}, a file of the bundle being read ({}); the mbox would replace it",
            bundle.dir.display()
        ),
    )
    .with_hint("write the mbox outside the bundle folder, e.g. `-o fixes.mbox`"))
}

/// The message with `notes` inserted just before its diff, after a `---` line (added when the
/// patch has none, so the notes never become part of the commit message).
fn with_notes(p: &PatchFile, message: &[u8], notes: &str) -> Result<Vec<u8>> {
    let at = diff_start(message).ok_or_else(|| {
        Error::input(p.origin.display(), "patch has no diff to bundle")
            .with_hint("a bundle patch needs a `diff --git` section")
    })?;
    let (head, diff) = message.split_at(at);
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
    use crate::patch::{Bundle, PatchId};
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

    // issue #19 class 5: a DEP-3 patch that is no mail gets the headers `git am` needs, from
    // its attribution as `patch apply` fills the commit (pinforge's ident for handles only).
    #[test]
    fn a_dep3_patch_without_mail_headers_gets_them_from_its_attribution() {
        let bytes = b"Description: fix the thing\n longer\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/r/issues/1\nReported-by: someone\nLast-Update: 2026-11-30\n\n---\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n".to_vec();
        let p = PatchFile::from_bytes(
            PatchId::new("0001-x.patch").expect("id"),
            PathBuf::from("0001-x.patch"),
            bytes,
        );
        assert!(p.require_attribution().is_ok(), "{:?}", p.findings);
        let text = String::from_utf8(mbox(&[&p], &[]).expect("mbox")).expect("utf8");
        assert!(
            text.starts_with(
                "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n\
                 From: pinforge <pinforge@pinforge.invalid>\n\
                 Date: Mon, 30 Nov 2026 00:00:00 +0000\n\
                 Subject: [PATCH] fix the thing\n\
                 Description: fix the thing\n"
            ),
            "{text}"
        );
        // A patch that is a mail already is left as written.
        let b = Bundle::embedded().expect("bundle");
        let first = b.select(None).expect("select")[0];
        assert_eq!(mail_headers(first).expect("headers"), "");
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
