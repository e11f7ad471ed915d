//! What content can show without history: whether a patch's change is already in a tree, by
//! git's own apply (libgit2's `apply_to_tree`, exact context, no fuzz): the patch applies
//! forward (the change is absent), its reverse applies (the change is present), or neither
//! (the context drifted: content cannot say).

use super::{field_line, Finding, PatchCheck};
use crate::git::GitContext;
use crate::git::OidExt;
use crate::patch::header::UpstreamStatus;
use crate::patch::PatchFile;
use crate::upstream::Tree;
use git2::{Diff, Repository};
use pinforge_base::error::Result;
use serde::Serialize;

/// Whether a patch's change is in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Content {
    /// The patch applies: the tree does not have the change.
    Absent,
    /// The reverse of the patch applies: the tree has the change, byte for byte.
    Present,
    /// Neither applies: the code around it changed, so content cannot say.
    Drifted,
}

/// The content check of one patch against `tree`, and the claims it refutes: a `Pending` or
/// `Submitted` patch whose change is already in the tree.
pub(super) fn check(tree: &Tree, p: &PatchFile) -> Result<PatchCheck> {
    let a = p.require_attribution()?;
    let repo = Repository::open(&tree.path).git_at(&tree.path.display())?;
    let base = repo
        .find_commit(tree.base_commit.to_git())
        .and_then(|c| c.tree())
        .git_at(&tree.path.display())?;
    let diff_bytes = p
        .header
        .diff_offset
        .and_then(|o| p.bytes.get(o..))
        .unwrap_or(&[]);
    let applies = |bytes: &[u8]| {
        Diff::from_buffer(bytes)
            .and_then(|d| repo.apply_to_tree(&base, &d, None))
            .is_ok()
    };
    let content = if applies(diff_bytes) {
        Content::Absent
    } else if reversed(diff_bytes).is_some_and(|r| applies(&r)) {
        Content::Present
    } else {
        Content::Drifted
    };
    let mut findings = Vec::new();
    if content == Content::Present
        && matches!(
            a.status,
            UpstreamStatus::Pending | UpstreamStatus::Submitted(_)
        )
    {
        findings.push(Finding {
            line: field_line(p, "Upstream-Status"),
            field: "Upstream-Status".into(),
            claimed: a.status.word().into(),
            found: "the change is already in this tree, byte for byte".into(),
            hint: "audit the patch against this pin (`pinforge audit --onto`) and drop it, or mark it Backport/Accepted".into(),
        });
    }
    Ok(PatchCheck {
        file: p.id.to_string(),
        commit_claimed: a.commit.clone(),
        commit_found: None,
        commit: None,
        upstream_author: None,
        first_tag: None,
        content: Some(content),
        findings,
    })
}

/// The reverse of a unified git diff of modified files: old and new swapped in every hunk.
/// None for what this does not reverse (creations, deletions, renames, mode changes, binary):
/// for those content then says `drifted` rather than guess.
pub(crate) fn reversed(diff: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(diff).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut in_hunk = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        if body.starts_with("diff --git ") {
            in_hunk = false;
            out.push_str(line);
        } else if !in_hunk {
            if let Some(idx) = body.strip_prefix("index ") {
                let (ids, mode) = idx.split_once(' ').map_or((idx, ""), |(i, m)| (i, m));
                let (a, b) = ids.split_once("..")?;
                out.push_str(&format!("index {b}..{a}"));
                if !mode.is_empty() {
                    out.push(' ');
                    out.push_str(mode);
                }
                out.push('\n');
            } else if body.starts_with("@@ ") {
                in_hunk = true;
                out.push_str(&reversed_hunk_header(body)?);
                out.push('\n');
            } else if body.starts_with("new file")
                || body.starts_with("deleted file")
                || body.starts_with("rename ")
                || body.starts_with("old mode")
                || body.starts_with("new mode")
                || body.starts_with("Binary ")
                || body.starts_with("GIT binary")
            {
                return None;
            } else {
                out.push_str(line);
            }
        } else if body.starts_with("@@ ") {
            out.push_str(&reversed_hunk_header(body)?);
            out.push('\n');
        } else if let Some(rest) = line.strip_prefix('+') {
            out.push('-');
            out.push_str(rest);
        } else if let Some(rest) = line.strip_prefix('-') {
            out.push('+');
            out.push_str(rest);
        } else {
            out.push_str(line);
        }
    }
    Some(out.into_bytes())
}

/// `@@ -a,b +c,d @@ ctx` → `@@ -c,d +a,b @@ ctx`.
fn reversed_hunk_header(h: &str) -> Option<String> {
    let rest = h.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, tail) = rest.split_once(" @@")?;
    Some(format!("@@ -{new} +{old} @@{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/f.c b/f.c\nindex 1111111..2222222 100644\n--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,3 @@ int f()\n a\n-b\n+B\n c\n";

    #[test]
    fn reversing_swaps_every_side_and_twice_is_identity_on_hunks() {
        let r = String::from_utf8(reversed(PATCH.as_bytes()).expect("reversible")).expect("utf8");
        assert!(r.contains("index 2222222..1111111 100644\n"), "{r}");
        assert!(
            r.contains("@@ -1,3 +1,3 @@ int f()\n a\n+b\n-B\n c\n"),
            "{r}"
        );
        let rr = reversed(r.as_bytes()).expect("reversible");
        assert_eq!(String::from_utf8(rr).expect("utf8"), PATCH);
    }

    #[test]
    fn what_cannot_be_reversed_safely_is_refused() {
        let created = "diff --git a/n b/n\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n";
        assert!(reversed(created.as_bytes()).is_none());
        assert_eq!(
            reversed_hunk_header("@@ -5 +6,2 @@"),
            Some("@@ -6,2 +5 @@".into())
        );
    }
}
