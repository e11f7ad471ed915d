//! History evidence for a patch against a git pin: is its `Upstream-Commit` an ancestor of the
//! new pin, was it cherry-picked, and does the log between the old and the new pin reference
//! its PR or issue number — and was any of that reverted since.

use super::{Evidence, EvidenceKind, Strength};
use crate::patch::lint::Attribution;
use git2::{Oid, Repository};
use std::collections::{BTreeMap, BTreeSet};

/// One commit of the range, read once.
struct LogCommit {
    id: Oid,
    subject: String,
    body: String,
}

/// The log between two pins, read once for every patch of the bundle.
pub struct Log {
    commits: Vec<LogCommit>,
    /// Commit → the revert that undid it (from `This reverts commit X`).
    reverted_by: BTreeMap<Oid, Oid>,
    /// Subjects named by `Revert "SUBJECT"` commits → the revert.
    reverted_subjects: BTreeMap<String, Oid>,
    /// Commits that are themselves reverts (they never count as a merge reference).
    reverts: BTreeSet<Oid>,
    /// What the range is, for evidence details ("b7992..b8148", "all history up to X").
    pub range: String,
}

impl Log {
    /// Read `tip`'s history, stopping at `base` when it is known (and an ancestor).
    pub fn read(repo: &Repository, base: Option<Oid>, tip: Oid) -> Result<Log, git2::Error> {
        let mut walk = repo.revwalk()?;
        walk.push(tip)?;
        let range = match base {
            Some(b) if crate::git::is_ancestor(repo, b, tip) => {
                walk.hide(b)?;
                format!("{}..{}", short(b), short(tip))
            }
            _ => format!(
                "all history up to {} (the old pin is not in it)",
                short(tip)
            ),
        };
        let mut log = Log {
            commits: Vec::new(),
            reverted_by: BTreeMap::new(),
            reverted_subjects: BTreeMap::new(),
            reverts: BTreeSet::new(),
            range,
        };
        for id in walk {
            let id = id?;
            let c = repo.find_commit(id)?;
            let msg = String::from_utf8_lossy(c.message_bytes()).into_owned();
            let (subject, body) = match msg.split_once('\n') {
                Some((s, b)) => (s.trim().to_string(), b.to_string()),
                None => (msg.trim().to_string(), String::new()),
            };
            if let Some(inner) = subject
                .strip_prefix("Revert \"")
                .and_then(|s| s.strip_suffix('"'))
            {
                log.reverts.insert(id);
                log.reverted_subjects.insert(inner.to_string(), id);
                for word in body.split_whitespace() {
                    let w = word.trim_end_matches(['.', ',']);
                    if w.len() == 40 {
                        if let Ok(o) = Oid::from_str(w) {
                            log.reverted_by.insert(o, id);
                        }
                    }
                }
            }
            log.commits.push(LogCommit { id, subject, body });
        }
        Ok(log)
    }

    /// Number of commits in the range.
    pub fn len(&self) -> usize {
        self.commits.len()
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
    }

    fn revert_of(&self, c: &LogCommit) -> Option<Oid> {
        self.reverted_by
            .get(&c.id)
            .or_else(|| self.reverted_subjects.get(&c.subject))
            .copied()
    }

    fn subject_of(&self, id: Oid) -> String {
        self.commits
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.subject.clone())
            .unwrap_or_default()
    }
}

fn short(o: Oid) -> String {
    o.to_string()[..9].to_string()
}

/// Whether `text` names `#n` as a whole number (`(#19928)`, `#19928,`, not `#199280`), or the
/// GitHub URL of issue/PR `n`.
pub fn mentions(text: &str, n: u64) -> bool {
    let needle = format!("#{n}");
    let mut from = 0usize;
    while let Some(at) = text[from..].find(&needle) {
        let end = from + at + needle.len();
        if !text[end..].starts_with(|c: char| c.is_ascii_digit()) {
            return true;
        }
        from = end;
    }
    [format!("/pull/{n}"), format!("/issues/{n}")]
        .iter()
        .any(|u| {
            text.match_indices(u.as_str())
                .any(|(i, m)| !text[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
        })
}

/// The history evidence for one patch.
pub fn evidence(repo: &Repository, log: &Log, tip: Oid, a: &Attribution) -> Vec<Evidence> {
    let mut out = Vec::new();
    // 1. The patch's upstream commit: an ancestor of the new pin, or cherry-picked into it.
    if let Some(spec) = &a.commit {
        match crate::git::resolve_commit(repo, spec) {
            Some(c) if crate::git::is_ancestor(repo, c, tip) => {
                match log.commits.iter().find(|lc| lc.id == c).and_then(|lc| log.revert_of(lc)) {
                    Some(rev) => out.push(Evidence::new(
                        EvidenceKind::Reverted,
                        format!(
                            "Upstream-Commit {spec} is an ancestor of the new pin, but {} \"{}\" reverted it",
                            short(rev),
                            log.subject_of(rev)
                        ),
                        Strength::Strong,
                    )),
                    None => out.push(Evidence::new(
                        EvidenceKind::UpstreamCommitAncestor,
                        format!("Upstream-Commit {spec} ({}) is an ancestor of the new pin {}", short(c), short(tip)),
                        Strength::Strong,
                    )),
                }
            }
            Some(c) => out.push(Evidence::new(
                EvidenceKind::UpstreamCommitAncestor,
                format!(
                    "Upstream-Commit {spec} ({}) exists but is not an ancestor of the new pin",
                    short(c)
                ),
                Strength::Note,
            )),
            None => out.push(Evidence::new(
                EvidenceKind::UpstreamCommitAncestor,
                format!("Upstream-Commit {spec} is not in the fetched history"),
                Strength::Note,
            )),
        }
        let picked = log.commits.iter().find(|lc| {
            !log.reverts.contains(&lc.id)
                && lc.body.lines().any(|l| {
                    l.trim()
                        .strip_prefix("(cherry picked from commit ")
                        .is_some_and(|r| r.trim_end_matches(')').starts_with(spec.as_str()))
                })
        });
        if let Some(lc) = picked {
            match log.revert_of(lc) {
                Some(rev) => out.push(Evidence::new(
                    EvidenceKind::Reverted,
                    format!(
                        "{} \"{}\" cherry-picked Upstream-Commit {spec}, but {} reverted it",
                        short(lc.id),
                        lc.subject,
                        short(rev)
                    ),
                    Strength::Strong,
                )),
                None => out.push(Evidence::new(
                    EvidenceKind::CherryPicked,
                    format!(
                        "{} \"{}\" is a cherry-pick of Upstream-Commit {spec}",
                        short(lc.id),
                        lc.subject
                    ),
                    Strength::Strong,
                )),
            }
        }
    }
    // 2. The log references the PR (squash merges put `(#NNNN)` in the subject) or the issue.
    let numbers: Vec<(u64, &str)> = a
        .prs
        .iter()
        .map(|p| (p.number, "PR"))
        .chain(a.issues.iter().map(|i| (i.number, "issue")))
        .collect();
    for (n, what) in numbers {
        let mut in_subject = false;
        let mut body_only: Vec<&LogCommit> = Vec::new();
        for lc in &log.commits {
            if log.reverts.contains(&lc.id) {
                continue;
            }
            if mentions(&lc.subject, n) {
                in_subject = true;
                match log.revert_of(lc) {
                    Some(rev) => out.push(Evidence::new(
                        EvidenceKind::Reverted,
                        format!(
                            "{} \"{}\" references {what} #{n}, but {} \"{}\" reverted it",
                            short(lc.id),
                            lc.subject,
                            short(rev),
                            log.subject_of(rev)
                        ),
                        Strength::Strong,
                    )),
                    None => out.push(Evidence::new(
                        EvidenceKind::LogReference,
                        format!(
                            "{} \"{}\" references {what} #{n} in its subject ({})",
                            short(lc.id),
                            lc.subject,
                            log.range
                        ),
                        if what == "PR" {
                            Strength::Strong
                        } else {
                            Strength::Moderate
                        },
                    )),
                }
            } else if mentions(&lc.body, n) {
                body_only.push(lc);
            }
        }
        if !in_subject {
            for lc in body_only {
                out.push(Evidence::new(
                    EvidenceKind::LogReferenceBody,
                    format!(
                        "{} \"{}\" mentions {what} #{n} only in its body: not evidence of a merge on its own",
                        short(lc.id),
                        lc.subject
                    ),
                    Strength::Weak,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_matches_whole_numbers_and_urls_only() {
        assert!(mentions("kv-cache : fix can_shift (#19928)", 19928));
        assert!(!mentions("bump (#199280)", 19928));
        assert!(!mentions("bump (#1992)", 19928));
        assert!(mentions("see https://github.com/o/r/issues/20093.", 20093));
        assert!(!mentions("see https://github.com/o/r/issues/200931", 20093));
    }
}
