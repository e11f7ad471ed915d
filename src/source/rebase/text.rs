//! The texts a rebase rewrites: a dropped patch's `Applied-Upstream` field, and the recipe's
//! `[pin]` table moved to the new upstream (the rest of the recipe kept line for line).

use crate::base::error::{Error, Result};
use crate::source::audit;
use crate::source::patch::PatchFile;
use crate::source::recipe::PinSource;
use std::path::Path;

/// The patch with its `Applied-Upstream` field set to `value` (replaced, or added after the
/// last header field).
pub(crate) fn with_applied_upstream(p: &PatchFile, value: &str) -> Vec<u8> {
    let end = p
        .header
        .diff_offset
        .unwrap_or(p.bytes.len())
        .min(p.bytes.len());
    let head = &p.bytes[..end];
    let existing = p
        .header
        .fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("Applied-Upstream"))
        .map(|f| f.line);
    let last = p.header.fields.iter().map(|f| f.line).max();
    let mut out = Vec::new();
    let mut skipping = false;
    let mut insert_pending = false;
    let field = format!("Applied-Upstream: {value}\n");
    for (i, l) in head.split_inclusive(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        let continuation = l.starts_with(b" ") || l.starts_with(b"\t");
        if skipping && continuation {
            continue;
        }
        skipping = false;
        if insert_pending && !continuation {
            // After the last field and its continuation lines.
            out.extend_from_slice(field.as_bytes());
            insert_pending = false;
        }
        if Some(n) == existing {
            out.extend_from_slice(field.as_bytes());
            skipping = true;
            continue;
        }
        out.extend_from_slice(l);
        if existing.is_none() && Some(n) == last {
            insert_pending = true;
        }
    }
    if insert_pending {
        out.extend_from_slice(field.as_bytes());
    }
    out.extend_from_slice(&p.bytes[end..]);
    out
}

/// The recipe text with its `[pin]` table replaced by the new pin.
pub(super) fn moved_recipe_text(
    text: &str,
    path: &Path,
    pin: &crate::source::upstream::ResolvedPin,
    onto: &audit::Onto,
    report: &audit::Audit,
    today: &str,
) -> Result<String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "[pin]")
        .ok_or_else(|| {
            Error::input(path.display(), "no `[pin]` table to move")
                .with_hint("write the pin as a `[pin]` table, then run the rebase again")
        })?;
    let end = lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .find(|(_, l)| l.trim_start().starts_with('['))
        .map(|(i, _)| i)
        .unwrap_or(lines.len());
    // Comments just above the next table belong to it, not to the pin.
    let mut end_pin = end;
    while end_pin > start + 1 && lines[end_pin - 1].trim_start().starts_with('#') {
        end_pin -= 1;
    }
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut t = String::from("[pin]\n");
    t.push_str(&format!(
        "# Moved from {} by `pinforge rebase` on {today}.\n",
        report.from
    ));
    if let Some(from) = &onto.sha256_from {
        t.push_str(&format!("# {from}\n"));
    }
    match &onto.source {
        PinSource::Crate {
            name,
            version,
            sha256,
        } => {
            t.push_str(&format!(
                "kind = \"crate\"\ncrate = {}\nversion = {}\nsha256 = \"{sha256}\"\n",
                q(name),
                q(version)
            ));
        }
        PinSource::Git { url, tag, .. } => {
            t.push_str(&format!("kind = \"git\"\nurl = {}\n", q(url)));
            if let Some(tag) = tag {
                t.push_str(&format!("tag = {}\n", q(tag)));
            }
            let commit = pin
                .git_commit
                .ok_or_else(|| Error::Internal("git pin resolved without a commit".into()))?;
            t.push_str(&format!("commit = \"{commit}\"\n"));
        }
        PinSource::Tarball { path, sha256 } => {
            t.push_str(&format!(
                "kind = \"tarball\"\npath = {}\nsha256 = \"{sha256}\"\n",
                q(&path.to_string_lossy())
            ));
        }
        PinSource::Dir { path, tree_sha256 } => {
            t.push_str(&format!(
                "kind = \"dir\"\npath = {}\ntree-sha256 = \"{tree_sha256}\"\n",
                q(&path.to_string_lossy())
            ));
        }
    }
    if let Some(sub) = &pin.subdir {
        t.push_str(&format!("subdir = {}\n", q(sub)));
    }
    t.push('\n');
    let mut out: Vec<String> = lines[..start].iter().map(|s| s.to_string()).collect();
    out.push(t.trim_end().to_string());
    out.push(String::new());
    out.extend(lines[end_pin..].iter().map(|s| s.to_string()));
    let mut s = out.join("\n");
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::patch::{PatchFile, PatchId};

    #[test]
    fn applied_upstream_is_replaced_or_added_after_the_last_field() {
        let text = "From: a <a@b.c>\nSubject: x\nUpstream-Status: Pending\nLast-Update: 2026-11-30\n\n---\ndiff --git a/f b/f\n";
        let p = PatchFile::from_bytes(
            PatchId::new("0001-x.patch").expect("id"),
            "0001-x.patch".into(),
            text.as_bytes().to_vec(),
        );
        let once = with_applied_upstream(&p, "commit abc");
        let s = String::from_utf8(once.clone()).expect("utf8");
        assert!(
            s.contains("Last-Update: 2026-11-30\nApplied-Upstream: commit abc\n\n---\n"),
            "{s}"
        );
        let p2 = PatchFile::from_bytes(p.id.clone(), p.origin.clone(), once);
        let twice = String::from_utf8(with_applied_upstream(&p2, "commit def")).expect("utf8");
        assert_eq!(twice.matches("Applied-Upstream").count(), 1, "{twice}");
        assert!(twice.contains("Applied-Upstream: commit def\n"));
    }
}
