//! Applying a patch series onto a vendor repository with libgit2: exact context (no fuzz),
//! path safety checked before anything is written, one deterministic commit per patch whose
//! message carries the attribution as trailers, and a readable "expected vs found" when a
//! hunk does not match the tree.

use super::PatchFile;
use crate::digest::GitOid;
use crate::error::{Error, GitContext, Result};
use git2::{ApplyLocation, Delta, Diff, FileMode, Repository, Signature, Time};
use std::path::{Component, Path};

/// The committer of every commit pinforge makes: fixed, so that commit ids depend only on
/// content and attribution, never on who ran the tool or when.
pub const COMMITTER_NAME: &str = "pinforge";
/// Committer e-mail (a reserved domain: it names the tool, not a person).
pub const COMMITTER_EMAIL: &str = "pinforge@pinforge.invalid";

/// A patch applied as a commit.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Which patch.
    pub id: super::PatchId,
    /// The commit it became.
    pub commit: GitOid,
}

/// Apply `patches` in order on top of HEAD of `repo`, committing each.
pub fn apply_series(repo: &Repository, patches: &[&PatchFile]) -> Result<Vec<Applied>> {
    let mut out = Vec::with_capacity(patches.len());
    for (order, p) in patches.iter().enumerate() {
        let commit = apply_one(repo, p, order + 1)?;
        out.push(Applied {
            id: p.id.clone(),
            commit,
        });
    }
    Ok(out)
}

/// Apply a bundle's series onto an existing checkout (like `git am` of the whole series): the
/// repository must have a HEAD and no uncommitted changes, so that every patch becomes exactly
/// one commit and nothing of the user's is mixed in.
pub fn apply_to_checkout(repo_path: &Path, patches: &[&PatchFile]) -> Result<Vec<Applied>> {
    let repo = Repository::open(repo_path).map_err(|e| {
        Error::input(
            repo_path.display(),
            format!("not a git repository: {}", e.message()),
        )
    })?;
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(|_| {
        Error::input(
            repo_path.display(),
            "repository has no commit to apply onto",
        )
    })?;
    crate::upstream::check_clean(repo_path, GitOid::new(head.id())).map_err(|e| {
        Error::input(repo_path.display(), format!("uncommitted changes: {e}"))
            .with_hint("commit or stash them first")
    })?;
    for p in patches {
        parse_diff(p)?;
    }
    apply_series(&repo, patches)
}

fn subject(p: &PatchFile) -> String {
    p.origin.display().to_string()
}

/// Parse the diff part of a patch, refusing unsafe paths and modes.
pub fn parse_diff(p: &PatchFile) -> Result<Diff<'static>> {
    let offset = p.header.diff_offset.ok_or_else(|| {
        Error::input(subject(p), "no diff found after the header")
            .with_hint("append the output of `git diff`")
    })?;
    let diff = Diff::from_buffer(&p.bytes[offset..])
        .map_err(|e| Error::input(subject(p), format!("not a valid git diff: {}", e.message())))?;
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            let Some(path) = file.path() else { continue };
            if delta.status() == Delta::Added && std::ptr::eq(&file, &delta.old_file()) {
                continue;
            }
            check_path(p, path)?;
            match file.mode() {
                FileMode::Link => {
                    return Err(Error::input(
                        subject(p),
                        format!("refused: `{}` would become a symbolic link", path.display()),
                    )
                    .with_hint("patches may change regular files only"))
                }
                FileMode::Commit => {
                    return Err(Error::input(
                        subject(p),
                        format!("refused: `{}` is a submodule entry", path.display()),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(diff)
}

/// A path a patch touches must stay inside the tree and away from `.git`.
fn check_path(p: &PatchFile, path: &Path) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::input(
            subject(p),
            format!("refused: path `{}` {why}", path.display()),
        )
        .with_hint("a patch may only touch files inside the source tree"))
    };
    if path.as_os_str().is_empty() {
        return bad("is empty");
    }
    for c in path.components() {
        match c {
            Component::Normal(name) => {
                if name.to_string_lossy().eq_ignore_ascii_case(".git") {
                    return bad("touches the repository's .git");
                }
            }
            Component::ParentDir => return bad("escapes the tree with `..`"),
            Component::RootDir | Component::Prefix(_) => return bad("is absolute"),
            Component::CurDir => {}
        }
    }
    Ok(())
}

/// Refuse writing through a symlink that already exists in the tree (a parent that is a link
/// could point anywhere).
fn check_no_symlink_parents(repo: &Repository, p: &PatchFile, diff: &Diff) -> Result<()> {
    let Some(workdir) = repo.workdir() else {
        return Err(Error::Internal("vendor repository has no work tree".into()));
    };
    for delta in diff.deltas() {
        let Some(path) = delta.new_file().path() else {
            continue;
        };
        let mut cur = workdir.to_path_buf();
        for c in path.components() {
            cur.push(c);
            if std::fs::symlink_metadata(&cur)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false)
            {
                return Err(Error::input(
                    subject(p),
                    format!(
                        "refused: `{}` goes through the symbolic link `{}`",
                        path.display(),
                        cur.strip_prefix(workdir).unwrap_or(&cur).display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn apply_one(repo: &Repository, p: &PatchFile, order: usize) -> Result<GitOid> {
    let attribution = p.require_attribution()?;
    let diff = parse_diff(p)?;
    check_no_symlink_parents(repo, p, &diff)?;
    if let Err(e) = repo.apply(&diff, ApplyLocation::Both, None) {
        return Err(diagnose(repo, p, &diff, &e));
    }
    let mut index = repo.index().git_at(&subject(p))?;
    let tree_oid = index.write_tree().git_at(&subject(p))?;
    let tree = repo.find_tree(tree_oid).git_at(&subject(p))?;
    let parent = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&"vendor repository HEAD")?;

    let when = commit_time(attribution);
    let (name, email) = attribution
        .from
        .as_deref()
        .and_then(split_mailbox)
        .unwrap_or((COMMITTER_NAME.to_string(), COMMITTER_EMAIL.to_string()));
    let author = Signature::new(&name, &email, &when).git_at(&subject(p))?;
    let committer = Signature::new(COMMITTER_NAME, COMMITTER_EMAIL, &when).git_at(&subject(p))?;

    let mut message = format!("{}\n", attribution.summary);
    if !attribution.description.is_empty() && attribution.description != attribution.summary {
        message.push('\n');
        message.push_str(&attribution.description);
        message.push('\n');
    }
    message.push('\n');
    for (k, v) in attribution.trailers() {
        message.push_str(&format!("{k}: {v}\n"));
    }
    message.push_str(&format!("Pinforge-Patch: {}\n", p.id));
    message.push_str(&format!("Pinforge-Patch-Order: {order}\n"));
    message.push_str(&format!("Pinforge-Patch-Sha256: {}\n", p.sha256));
    let oid = repo
        .commit(
            Some("HEAD"),
            &author,
            &committer,
            &message,
            &tree,
            &[&parent],
        )
        .git_at(&subject(p))?;
    Ok(GitOid::new(oid))
}

/// `Name <email>` → (name, email).
fn split_mailbox(s: &str) -> Option<(String, String)> {
    let open = s.find('<')?;
    let close = s.rfind('>')?;
    (close > open).then(|| {
        (
            s[..open].trim().trim_matches('"').to_string(),
            s[open + 1..close].trim().to_string(),
        )
    })
}

/// The commit time: the patch's `Date:`, else its `Last-Update` at midnight UTC, else the
/// epoch. Never the wall clock: the same bundle must give the same commit ids everywhere.
fn commit_time(a: &super::lint::Attribution) -> Time {
    let secs = a.date.as_deref().and_then(parse_rfc2822).or_else(|| {
        a.last_update
            .as_deref()
            .and_then(|d| parse_ymd(d).map(|(s, _)| s))
    });
    match secs {
        Some((s, off)) => Time::new(s, off),
        None => Time::new(0, 0),
    }
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn parse_ymd(s: &str) -> Option<((i64, i32), ())> {
    let mut it = s.split('-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    Some(((days_from_civil(y, m, d) * 86400, 0), ()))
}

/// Parse `[Day, ]DD Mon YYYY HH:MM:SS +ZZZZ` into (epoch seconds, offset minutes).
fn parse_rfc2822(s: &str) -> Option<(i64, i32)> {
    let s = s.split_once(',').map(|(_, r)| r).unwrap_or(s);
    let parts: Vec<&str> = s.split_whitespace().collect();
    if parts.len() < 5 {
        return None;
    }
    let day: u32 = parts[0].parse().ok()?;
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let month = MONTHS
        .iter()
        .position(|m| parts[1].to_ascii_lowercase().starts_with(m))? as u32
        + 1;
    let year: i64 = parts[2].parse().ok()?;
    let hms: Vec<i64> = parts[3]
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if hms.len() != 3 {
        return None;
    }
    let tz = parts[4];
    let sign = if tz.starts_with('-') { -1 } else { 1 };
    let digits = tz.trim_start_matches(['+', '-']);
    if digits.len() != 4 {
        return None;
    }
    let hh: i32 = digits[..2].parse().ok()?;
    let mm: i32 = digits[2..].parse().ok()?;
    let off_min = sign * (hh * 60 + mm);
    let local = days_from_civil(year, month, day) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2];
    Some((local - off_min as i64 * 60, off_min))
}

/// Explain why a patch did not apply: name the file and the hunk, and show the lines the hunk
/// expects next to the lines the tree has there.
fn diagnose(repo: &Repository, p: &PatchFile, diff: &Diff, e: &git2::Error) -> Error {
    let Some(workdir) = repo.workdir() else {
        return Error::Internal("vendor repository has no work tree".into());
    };
    for (idx, delta) in diff.deltas().enumerate() {
        let Some(path) = delta.old_file().path().or(delta.new_file().path()) else {
            continue;
        };
        let file_path = workdir.join(path);
        let current = std::fs::read(&file_path).ok();
        match (delta.status(), &current) {
            (Delta::Added, Some(_)) => {
                return Error::input(
                    subject(p),
                    format!(
                        "does not apply: it creates `{}`, which already exists",
                        path.display()
                    ),
                )
                .with_hint("the file exists upstream now: rebase the patch")
            }
            (Delta::Added, None) => continue,
            (_, None) => {
                return Error::input(
                    subject(p),
                    format!(
                        "does not apply: `{}` does not exist in the tree",
                        path.display()
                    ),
                )
                .with_hint("the file was moved or removed upstream: rebase the patch")
            }
            _ => {}
        }
        let text = String::from_utf8_lossy(current.as_deref().unwrap_or_default()).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let Ok(Some(patch)) = git2::Patch::from_diff(diff, idx) else {
            continue;
        };
        for h in 0..patch.num_hunks() {
            let Ok((hunk, n_lines)) = patch.hunk(h) else {
                continue;
            };
            let expected: Vec<String> = (0..n_lines)
                .filter_map(|l| patch.line_in_hunk(h, l).ok())
                .filter(|l| l.origin() == ' ' || l.origin() == '-')
                .map(|l| {
                    String::from_utf8_lossy(l.content())
                        .trim_end_matches(['\n', '\r'])
                        .to_string()
                })
                .collect();
            let start = (hunk.old_start() as usize).saturating_sub(1);
            let found_anywhere = (0..lines.len().saturating_sub(expected.len()) + 1).any(|at| {
                lines
                    .get(at..at + expected.len())
                    .is_some_and(|w| w.iter().zip(&expected).all(|(a, b)| *a == b.as_str()))
            });
            if found_anywhere {
                continue;
            }
            let end = (start + expected.len()).min(lines.len());
            let found: Vec<&str> = lines
                .get(start.min(lines.len())..end)
                .unwrap_or(&[])
                .to_vec();
            let header = String::from_utf8_lossy(hunk.header()).trim().to_string();
            let exp_text = expected.join("\n") + "\n";
            let found_text = found.join("\n") + "\n";
            let shown = similar::TextDiff::from_lines(&exp_text, &found_text)
                .unified_diff()
                .context_radius(3)
                .header("expected (patch)", "found (tree)")
                .to_string();
            return Error::input(
                subject(p),
                format!(
                    "does not apply: {}, hunk {} ({header}): the context does not match",
                    path.display(),
                    h + 1
                ),
            )
            .with_detail(shown)
            .with_hint("upstream changed these lines: refresh the patch against this tree");
        }
    }
    Error::input(subject(p), format!("does not apply: {}", e.message()))
        .with_hint("refresh the patch against this tree")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2822_dates_parse_to_utc_seconds() {
        assert_eq!(
            parse_rfc2822("Thu, 1 Jan 1970 00:00:00 +0000"),
            Some((0, 0))
        );
        assert_eq!(
            parse_rfc2822("Mon, 30 Nov 2026 01:00:00 +0100"),
            Some((1_795_996_800, 60))
        );
        assert_eq!(parse_rfc2822("yesterday"), None);
    }

    #[test]
    fn mailbox_splits() {
        assert_eq!(
            split_mailbox("\"A B\" <a@b.c>"),
            Some(("A B".into(), "a@b.c".into()))
        );
        assert_eq!(split_mailbox("nobody"), None);
    }
}
