//! The texts a rebase rewrites: a dropped patch's `Applied-Upstream` field, and the recipe's
//! `[pin]` table moved to the new upstream, edited as a TOML document (`toml_edit`), so the
//! rest of the recipe, comments and layout included, is kept as written.

use crate::audit;
use crate::patch::PatchFile;
use crate::recipe::PinSource;
use pinforge_base::error::{Error, Result};
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

/// The recipe text with its `[pin]` table's keys replaced by the new pin's, edited as a TOML
/// document (issue #19): the header and its comment (`[pin]  # the upstream tree`), every other
/// table, key, comment and blank line stay as they were; only the keys of the pin (which
/// describe the old tree) are replaced. A `pin = { .. }` inline table is edited the same way.
pub(super) fn moved_recipe_text(
    text: &str,
    path: &Path,
    pin: &crate::upstream::ResolvedPin,
    onto: &audit::Onto,
    from: &str,
    today: &str,
) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        Error::input(at_span(path, text, e.span()), e.message().to_string())
            .with_hint("fix the recipe's TOML, then run the rebase again")
    })?;
    let no_pin = || {
        Error::input(path.display(), "no `[pin]` table to move")
            .with_hint("write the pin as a `[pin]` table, then run the rebase again")
    };
    let table = doc
        .get_mut("pin")
        .and_then(|i| i.as_table_like_mut())
        .ok_or_else(no_pin)?;
    table.clear();
    for (k, v) in pin_keys(pin, &onto.source)? {
        table.insert(k, toml_edit::value(v));
    }
    // The note saying where the pin came from sits above its first key (a `[pin]` table only:
    // an inline table has no room for comments).
    if let Some(t) = doc.get_mut("pin").and_then(|i| i.as_table_mut()) {
        let mut note = format!("# Moved from {from} by `pinforge rebase` on {today}.\n");
        if let Some(from) = &onto.sha256_from {
            note.push_str(&format!("# {from}\n"));
        }
        if let Some(mut k) = t.key_mut("kind") {
            k.leaf_decor_mut().set_prefix(note);
        }
    }
    Ok(doc.to_string())
}

/// The keys of the new `[pin]`, in the order a person writes them.
fn pin_keys(
    pin: &crate::upstream::ResolvedPin,
    source: &PinSource,
) -> Result<Vec<(&'static str, String)>> {
    let mut keys = Vec::new();
    match source {
        PinSource::Crate {
            name,
            version,
            sha256,
        } => {
            keys.push(("kind", "crate".to_string()));
            keys.push(("crate", name.clone()));
            keys.push(("version", version.clone()));
            keys.push(("sha256", sha256.to_string()));
        }
        PinSource::Git { url, tag, .. } => {
            keys.push(("kind", "git".to_string()));
            keys.push(("url", url.clone()));
            if let Some(tag) = tag {
                keys.push(("tag", tag.clone()));
            }
            let commit = pin
                .git_commit
                .ok_or_else(|| Error::Internal("git pin resolved without a commit".into()))?;
            keys.push(("commit", commit.to_string()));
        }
        PinSource::Tarball { path, sha256 } => {
            keys.push(("kind", "tarball".to_string()));
            keys.push(("path", path_text(path)?));
            keys.push(("sha256", sha256.to_string()));
        }
        PinSource::Npm {
            package,
            version,
            sha256,
            path,
            bundle,
            bundle_sha256,
        } => {
            keys.push(("kind", "npm".to_string()));
            keys.push(("package", package.clone()));
            keys.push(("version", version.clone()));
            keys.push(("sha256", sha256.to_string()));
            if let Some(path) = path {
                keys.push(("path", path_text(path)?));
            }
            keys.push(("bundle", bundle.clone()));
            keys.push(("bundle-sha256", bundle_sha256.to_string()));
        }
        PinSource::Dir { path, tree_sha256 } => {
            keys.push(("kind", "dir".to_string()));
            keys.push(("path", path_text(path)?));
            keys.push(("tree-sha256", tree_sha256.to_string()));
        }
    }
    if let Some(sub) = &pin.subdir {
        keys.push(("subdir", sub.clone()));
    }
    // Every value becomes a recipe value: the one rule for strings (issue #19).
    for (k, v) in &keys {
        pinforge_base::text::refuse_control(&format!("the new pin's `{k}`"), v)?;
    }
    Ok(keys)
}

/// A pin path as recipe text: TOML strings are UTF-8, so a path that is not is refused (never
/// written lossily, which would pin another path).
fn path_text(path: &Path) -> Result<String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        Error::input(
            path.display(),
            "the pin path is not UTF-8; a recipe cannot name it",
        )
        .with_hint("move the upstream to a path that is UTF-8 text")
    })
}

/// `file:line:column` for a byte span of `text` (the TOML error's position).
pub(super) fn at_span(path: &Path, text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(r) => {
            let before = text.get(..r.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
            format!("{}:{line}:{col}", path.display())
        }
        None => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{PatchFile, PatchId};

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

    fn moved(text: &str) -> Result<String> {
        let tree: pinforge_base::digest::Sha256 = pinforge_base::digest::Sha256::of_bytes(b"tree");
        let onto = audit::Onto {
            spec: "dir:/x/up2".into(),
            source: PinSource::Dir {
                path: "/x/up2".into(),
                tree_sha256: tree,
            },
            sha256_from: None,
            subdir: None,
        };
        let pin = crate::upstream::ResolvedPin {
            kind: "dir".into(),
            uri: "/x/up2".into(),
            sha256: Some(tree),
            git_commit: None,
            tag: None,
            subdir: None,
            build_number: 0,
            build_commit: String::new(),
            archive: None,
            skipped_git_entries: 0,
            bundle_sha256: None,
            skipped_git_paths: Vec::new(),
        };
        moved_recipe_text(
            text,
            Path::new("r.toml"),
            &pin,
            &onto,
            "/x/up",
            "2026-12-02",
        )
    }

    const REST: &str = "\n# the CPU toolchain\n[toolchain.cpu]\ncc = \"gcc\"  # the system compiler\ncxx = \"g++\"\n\n[base]\ntoolchain = \"cpu\"\ntargets = [\"up\"]\n[variants.patched]\n";

    fn recipe(head: &str) -> String {
        format!("# up, pinned\nname = \"up\"\ndefault-variant = \"patched\"\n{head}kind = \"dir\"\npath = \"/x/up\"  # the old tree\ntree-sha256 = \"{}\"\n{REST}", pinforge_base::digest::Sha256::of_bytes(b"old"))
    }

    fn parses(text: &str) -> crate::recipe::Recipe {
        crate::recipe::Recipe::parse(text, Path::new("r.toml"), None).expect("a recipe")
    }

    // issue #19 class 3: a header with a comment is a `[pin]` header; the rest of the recipe,
    // comments and layout included, is kept as written.
    #[test]
    fn a_pin_header_with_a_comment_is_moved_and_every_other_comment_survives() {
        let old = recipe("[pin]  # the upstream tree\n");
        parses(&old);
        let new = moved(&old).expect("moved");
        let r = parses(&new);
        assert!(
            matches!(&r.pin.source, PinSource::Dir { path, .. } if path == Path::new("/x/up2")),
            "{new}"
        );
        assert!(new.starts_with("# up, pinned\nname = \"up\"\ndefault-variant = \"patched\"\n[pin]  # the upstream tree\n# Moved from /x/up by `pinforge rebase` on 2026-12-02.\nkind = \"dir\"\n"), "{new}");
        assert!(
            new.ends_with(REST),
            "everything after the pin is kept byte for byte:\n{new}"
        );
        assert!(
            !new.contains("the old tree"),
            "the old pin's keys are replaced: {new}"
        );
    }

    // issue #19 class 3: a line `[pin]` inside a multi-line string is text, not a header.
    #[test]
    fn a_multi_line_description_holding_a_pin_line_is_not_taken_for_the_table() {
        let description =
            "description = \"\"\"\nThe tree to build.\n[pin]\nkind = \"crate\"\n\"\"\"\n";
        let old = recipe(&format!("{description}[pin]\n"));
        parses(&old);
        let new = moved(&old).expect("moved");
        parses(&new);
        assert!(new.contains(description), "{new}");
        assert!(new.contains("path = \"/x/up2\""), "{new}");
        let e = moved("name = \"up\"\n").expect_err("no pin");
        assert!(e.to_string().contains("no `[pin]` table"), "{e}");
        let e = moved("name = \"up\n").expect_err("not toml");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().starts_with("r.toml:1:"), "{e}");
    }
}
