//! A patch rewritten for a new pin: its header kept byte for byte with `Last-Update` set, over
//! a diff that is either the old one (only its position moved) or regenerated from a three-way
//! merge of two trees. Shared by the audit (carried patches) and `rebase --resolve`.

use crate::git::GitContext;
use crate::patch::PatchFile;
use git2::Repository;
use pinforge_base::error::Result;

/// The patch's header with `Last-Update` set to `today`, over `diff`.
pub(crate) fn refreshed(p: &PatchFile, diff: &[u8], today: &str) -> Vec<u8> {
    let at = p
        .header
        .diff_offset
        .unwrap_or(p.bytes.len())
        .min(p.bytes.len());
    let head = &p.bytes[..at];
    let line = p
        .header
        .fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("Last-Update"))
        .map(|f| f.line);
    let mut out = Vec::with_capacity(p.bytes.len());
    for (i, l) in head.split_inclusive(|&b| b == b'\n').enumerate() {
        if Some(i + 1) == line {
            let name_len = l.iter().position(|&b| b == b':').unwrap_or(0);
            out.extend_from_slice(&l[..name_len]);
            out.extend_from_slice(format!(": {today}\n").as_bytes());
        } else {
            out.extend_from_slice(l);
        }
    }
    out.extend_from_slice(diff);
    out
}

/// A git diff of two trees (what `git diff A B` prints), for a patch regenerated from a merge
/// or taken back from an operator's resolution.
pub(crate) fn tree_diff(
    repo: &Repository,
    from: &git2::Tree,
    to: &git2::Tree,
    subject: &str,
) -> Result<Vec<u8>> {
    let diff = repo
        .diff_tree_to_tree(Some(from), Some(to), None)
        .git_at(&subject)?;
    let mut out = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    })
    .git_at(&subject)?;
    Ok(out)
}
