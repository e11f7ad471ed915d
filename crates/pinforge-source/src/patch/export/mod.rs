//! The reverse of applying (issue #9, the way `gbp pq export` and `devtool finish` work): the
//! vendor tree's commits above the pristine base written back as patch files, one per commit.
//!
//! A commit pinforge made from a patch file keeps that file's exact bytes as a git note
//! ([`crate::git::PATCH_NOTES_REF`]); when the note is on that very commit and its SHA-256 is
//! the one the commit's `Pinforge-Patch-Sha256` trailer names, the file is written back byte
//! for byte. Any other commit (added or amended by hand) is exported from the commit itself:
//! `From`/`Date`/`Subject` from the commit, the attribution fields from its trailers, the body
//! as `Description`, then the diff against its parent. Every exported file is linted, so a
//! commit without attribution trailers exports with lint errors, never silently.
//!
//! The trust rules (issue #19 class 5), each in one place: file names follow [`name`]'s rule
//! (a valid series entry ending in `.patch`, never one of the bundle's own files); a note is
//! used only when it makes the commit again ([`trust`]); a binary change is exported as a git
//! binary diff that `git apply` applies, never as `Binary files … differ`; a checkout with no
//! commit above its base (the pristine tree) is refused unless asked for; and the whole bundle
//! is staged and swapped in one step ([`write`]).

mod name;
mod trust;
mod write;

pub(crate) use name::{patch_file_name, BUNDLE_OWN};
pub use write::{rewrite_patches, write_bundle, BundleWriteStep};

use super::{lint, PatchFile};
use crate::git::GitContext;
use git2::{Commit, Repository};
use pinforge_base::digest::{GitOid, Sha256};
use pinforge_base::error::{Error, Result};
use pinforge_base::text;
use serde::Serialize;
use std::path::Path;

/// Trailers that are attribution fields of the header (in the order they are written).
const FIELDS: &[&str] = &[
    "Upstream-Status",
    "Upstream-Issue",
    "Upstream-PR",
    "Upstream-Commit",
    "Upstream-Author",
    "Reported-by",
    "Origin",
    "Applied-Upstream",
    "Last-Update",
];

/// Where an exported file's bytes come from (serialized in lower case, as before it was typed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportedFrom {
    /// The note on the commit: the original file, byte for byte.
    Note,
    /// Rebuilt from the commit's message, trailers and diff.
    Commit,
}

impl std::fmt::Display for ExportedFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExportedFrom::Note => "note",
            ExportedFrom::Commit => "commit",
        })
    }
}

/// One exported patch.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Exported {
    /// File name written.
    pub file: String,
    /// The commit it came from.
    // Typed, with the plain-string schema it has always published.
    #[schemars(with = "String")]
    pub commit: GitOid,
    /// `note` (the original file, byte for byte) or `commit` (rebuilt from the commit).
    #[schemars(with = "String")]
    pub from: ExportedFrom,
    /// SHA-256 of the file.
    pub sha256: Sha256,
    /// Lint findings of the file (errors for a commit without attribution).
    pub findings: Vec<lint::Finding>,
    /// The bytes.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// Export the commits of `repo` above `base` (default: the pristine tag), oldest first. A
/// checkout with no commit above its base (the pristine tree itself) is refused unless
/// `allow_empty`: its export is an empty series that would wipe the bundle.
pub fn export(repo_path: &Path, base: Option<&str>, allow_empty: bool) -> Result<Vec<Exported>> {
    let subject = repo_path.display().to_string();
    let repo = Repository::open(repo_path)
        .map_err(|e| Error::input(&subject, format!("not a git repository: {}", e.message())))?;
    let base_spec = base.unwrap_or(crate::git::PRISTINE_TAG);
    let base_oid = repo
        .revparse_single(base_spec)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|_| {
            Error::input(
                &subject,
                format!("base `{}` is not a commit here", text::shown(base_spec)),
            )
            .with_hint("name the upstream commit the patches sit on with --base")
        })?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|_| Error::input(&subject, "repository has no HEAD commit"))?;
    let mut walk = repo.revwalk().git_at(&subject)?;
    walk.push(head.id()).git_at(&subject)?;
    walk.hide(base_oid).git_at(&subject)?;
    walk.simplify_first_parent().git_at(&subject)?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)
        .git_at(&subject)?;
    let oids: Vec<git2::Oid> = walk
        .collect::<std::result::Result<_, _>>()
        .git_at(&subject)?;
    if oids.is_empty() && !allow_empty {
        return Err(nothing_above(repo_path, base_spec));
    }
    let mut out: Vec<Exported> = Vec::new();
    for (n, oid) in oids.into_iter().enumerate() {
        let c = repo.find_commit(oid).git_at(&subject)?;
        if c.parent_count() != 1 {
            return Err(Error::input(
                format!("{subject}: commit {oid}"),
                "a merge commit cannot become one patch",
            )
            .with_hint("rebase the vendor tree's patches into a linear series first"));
        }
        let e = export_one(&repo, &c, n + 1, &subject)?;
        // Two commits naming one file (a copied trailer, or a generated name equal to a
        // trailer's) would overwrite each other's patch: refuse before anything is written.
        if let Some(first) = out.iter().find(|x| x.file == e.file) {
            let file = &e.file;
            return Err(Error::input(
                format!("{subject}: commits {} and {oid}", first.commit),
                format!("both export to {file}; one patch would overwrite the other"),
            )
            .with_hint(format!(
                "give one of them its own file name: amend its `Pinforge-Patch: {file}` trailer (or remove it to get a generated name)"
            )));
        }
        out.push(e);
    }
    Ok(out)
}

/// One commit as a patch file: its note when the note makes this very commit, else rebuilt
/// from the commit; named by its trailer or its subject, under the one rule for names.
fn export_one(repo: &Repository, c: &Commit, n: usize, subject: &str) -> Result<Exported> {
    let oid = c.id();
    let what = format!("{subject}: commit {oid}");
    let trailers = trailers(c);
    let value = |key: &str| {
        trailers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    // An amended pinforge commit keeps its trailer, and so its file name.
    let id = match value("Pinforge-Patch") {
        Some(named) => patch_file_name(&format!("{what}: trailer `Pinforge-Patch`"), named)?,
        None => patch_file_name(&what, &file_name(n, c.summary().unwrap_or("patch")))
            .map_err(|e| Error::Internal(format!("a derived file name broke the rule: {e}")))?,
    };
    let want = value("Pinforge-Patch-Sha256").and_then(|v| v.parse::<Sha256>().ok());
    let order = value("Pinforge-Patch-Order").and_then(|v| v.parse::<usize>().ok());
    let note = crate::git::read_patch_note(repo, oid)
        .filter(|_| value("Pinforge-Patch").is_some())
        .filter(|b| want.is_some_and(|w| w == Sha256::of_bytes(b)))
        .filter(|b| order.is_some_and(|o| trust::note_makes_commit(repo, c, &id, o, b)));
    let (bytes, from) = match note {
        Some(b) => (b, ExportedFrom::Note),
        None => (
            from_commit(repo, c, &trailers, subject)?,
            ExportedFrom::Commit,
        ),
    };
    refuse_dataless_binary(&what, id.as_str(), &bytes)?;
    let parsed = PatchFile::from_bytes(id.clone(), id.as_str().into(), bytes.clone());
    Ok(Exported {
        file: id.as_str().to_string(),
        commit: crate::git::git_oid(oid),
        from,
        sha256: parsed.sha256,
        findings: parsed.findings,
        bytes,
    })
}

/// The refusal for a checkout with nothing above its base, pointing at the patched twin when
/// this is a pristine vendor tree (`NAME` beside `NAME+DIGEST`).
fn nothing_above(repo_path: &Path, base_spec: &str) -> Error {
    let twin = patched_twin(repo_path);
    let hint = match twin {
        Some(t) => format!(
            "this is the pristine tree; export its patched twin {} instead, or pass --allow-empty to write an empty series on purpose",
            text::shown(&t.display().to_string())
        ),
        None => "commit the changes to export in the checkout first, or pass --allow-empty to write an empty series on purpose".to_string(),
    };
    Error::input(
        repo_path.display(),
        format!(
            "no commit above the base `{}`: the export would be an empty series, wiping the bundle",
            text::shown(base_spec)
        ),
    )
    .with_hint(hint)
}

/// A folder beside `repo_path` named `NAME+…`: the patched tree pinforge made from this one.
fn patched_twin(repo_path: &Path) -> Option<std::path::PathBuf> {
    let full = std::fs::canonicalize(repo_path).ok()?;
    let prefix = format!("{}+", full.file_name()?.to_str()?);
    let mut twins: Vec<std::path::PathBuf> = std::fs::read_dir(full.parent()?)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .collect();
    twins.sort();
    twins.into_iter().next()
}

/// A binary change must travel as data (`GIT binary patch`): a `Binary files … differ` line
/// applies nowhere, so a file holding one is refused, naming it, instead of exported.
fn refuse_dataless_binary(what: &str, file: &str, bytes: &[u8]) -> Result<()> {
    for line in bytes.split(|b| *b == b'\n') {
        if line.starts_with(b"Binary files ") && line.ends_with(b" differ") {
            return Err(Error::input(
                format!("{what}: {file}"),
                format!(
                    "holds a binary change without its data ({})",
                    text::shown_bytes(line)
                ),
            )
            .with_hint("a binary change needs a `GIT binary patch` section (`git format-patch --binary`); amend the commit or leave the binary file out of the series"));
        }
    }
    Ok(())
}

/// The last paragraph's `Key: value` lines.
fn trailers(c: &Commit) -> Vec<(String, String)> {
    let msg = String::from_utf8_lossy(c.message_bytes()).into_owned();
    let last = msg
        .trim_end()
        .rsplit("\n\n")
        .next()
        .unwrap_or("")
        .to_string();
    let mut out = Vec::new();
    for line in last.lines() {
        match line.split_once(": ") {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-') =>
            {
                out.push((k.to_string(), v.trim().to_string()))
            }
            _ => return Vec::new(),
        }
    }
    out
}

/// `NNNN-slug.patch` from a subject, as `git format-patch` names files.
fn file_name(n: usize, subject: &str) -> String {
    let mut slug = String::new();
    for ch in subject.chars() {
        if ch.is_ascii_alphanumeric() || ch == '.' || ch == '_' {
            slug.push(ch);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug: String = slug.trim_matches(['-', '.']).chars().take(52).collect();
    format!(
        "{n:04}-{}.patch",
        if slug.is_empty() { "patch" } else { &slug }
    )
}

fn rfc2822(t: git2::Time) -> String {
    pinforge_base::time::rfc2822(t.seconds(), t.offset_minutes())
}

/// A patch file rebuilt from a commit: mail header, attribution from its trailers, the body as
/// `Description`, the diff against its parent.
fn from_commit(
    repo: &Repository,
    c: &Commit,
    trailers: &[(String, String)],
    subject: &str,
) -> Result<Vec<u8>> {
    let author = c.author();
    let mut s = format!(
        "From: {} <{}>\nDate: {}\nSubject: [PATCH] {}\n",
        author.name().unwrap_or("unknown"),
        author.email().unwrap_or("unknown@invalid"),
        rfc2822(author.when()),
        c.summary().unwrap_or("")
    );
    let msg = String::from_utf8_lossy(c.message_bytes()).into_owned();
    let mut paragraphs: Vec<&str> = msg.trim_end().split("\n\n").collect();
    if !trailers.is_empty() {
        paragraphs.pop();
    }
    let body: Vec<&str> = paragraphs.iter().skip(1).flat_map(|p| p.lines()).collect();
    if !body.is_empty() {
        s.push_str(&format!("Description: {}\n", body[0].trim()));
        for l in &body[1..] {
            let l = l.trim();
            s.push_str(if l.is_empty() { " .\n" } else { " " });
            if !l.is_empty() {
                s.push_str(l);
                s.push('\n');
            }
        }
    }
    for f in FIELDS {
        for (k, v) in trailers {
            if k.eq_ignore_ascii_case(f) {
                s.push_str(&format!("{f}: {v}\n"));
            }
        }
    }
    s.push_str("\n---\n");
    let parent = c.parent(0).and_then(|p| p.tree()).git_at(&subject)?;
    let tree = c.tree().git_at(&subject)?;
    // Binary changes as data git apply accepts (`GIT binary patch`, full index lines), the
    // way `git format-patch --binary` writes them.
    let mut opts = git2::DiffOptions::new();
    opts.show_binary(true);
    let diff = repo
        .diff_tree_to_tree(Some(&parent), Some(&tree), Some(&mut opts))
        .git_at(&subject)?;
    let mut bytes = s.into_bytes();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            bytes.push(line.origin() as u8);
        }
        bytes.extend_from_slice(line.content());
        true
    })
    .git_at(&subject)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_and_dates_follow_git_format_patch() {
        assert_eq!(
            file_name(3, "kv-cache: fix can_shift() check"),
            "0003-kv-cache-fix-can_shift-check.patch"
        );
        assert_eq!(file_name(1, "!!!"), "0001-patch.patch");
        assert_eq!(
            rfc2822(git2::Time::new(1_795_996_800, 60)),
            "Mon, 30 Nov 2026 01:00:00 +0100"
        );
    }

    // issue #19 class 5: a binary change without its data never leaves as a patch.
    #[test]
    fn a_binary_section_without_data_is_refused_naming_the_file() {
        let dataless = b"Subject: x\n---\ndiff --git a/m.bin b/m.bin\nindex 1..2 100644\nBinary files a/m.bin and b/m.bin differ\n";
        let e =
            refuse_dataless_binary("co: commit 1", "0001-x.patch", dataless).expect_err("refused");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("0001-x.patch"), "{e}");
        let with_data = b"diff --git a/m.bin b/m.bin\nGIT binary patch\nliteral 3\nKcmZ?d00001\n\n";
        assert!(refuse_dataless_binary("c", "f", with_data).is_ok());
    }
}
