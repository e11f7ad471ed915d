//! History evidence for a patch against a git pin: is its `Upstream-Commit` an ancestor of the
//! new pin, was it cherry-picked, and does the log between the old and the new pin reference
//! its PR or issue number — and was any of that reverted since.

use super::revert::{self, Candidate, Fate, Marks};
use super::{Evidence, EvidenceKind, RevertPair, Strength};
use crate::patch::lint::Attribution;
use git2::{Oid, Repository};
use pinforge_base::text::shown;
use std::collections::BTreeSet;

/// One commit of the range, read once.
struct LogCommit {
    id: Oid,
    subject: String,
    body: String,
    /// What it says about reverting ([`revert::Marks`]).
    marks: Marks,
}

/// The log between two pins, read once for every patch of the bundle.
pub(crate) struct Log {
    commits: Vec<LogCommit>,
    /// What the range is, for evidence details ("b7992..b8148", "all history up to X").
    pub range: String,
}

impl Log {
    /// Read `tip`'s history, stopping at `base` when it is known (and an ancestor).
    pub(crate) fn read(repo: &Repository, base: Option<Oid>, tip: Oid) -> Result<Log, git2::Error> {
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
            let marks = Marks::read(repo, &subject, &body);
            log.commits.push(LogCommit {
                id,
                subject,
                body,
                marks,
            });
        }
        Ok(log)
    }

    /// Number of commits in the range.
    pub(crate) fn len(&self) -> usize {
        self.commits.len()
    }

    /// The reverts that followed `id` in the range, by every signal, to the chain's end.
    fn fate(&self, repo: &Repository, id: Oid) -> Fate {
        let log: Vec<Candidate> = self
            .commits
            .iter()
            .map(|c| Candidate {
                id: c.id,
                subject: &c.subject,
                marks: &c.marks,
            })
            .collect();
        revert::fate(repo, &log, id)
    }
}

/// The subject of `id` in `repo` (a commit before the range too).
fn subject_in(repo: &Repository, id: Oid) -> String {
    repo.find_commit(id)
        .ok()
        .and_then(|c| {
            c.summary_bytes()
                .map(|b| String::from_utf8_lossy(b).into_owned())
        })
        .unwrap_or_default()
}

/// The record of a standing revert of `commit`, for the report.
fn pair(repo: &Repository, commit: Oid, fate: &Fate) -> Option<RevertPair> {
    let last = fate.chain.last()?;
    Some(RevertPair {
        commit: commit.to_string(),
        subject: subject_in(repo, commit),
        reverted_by: last.by.to_string(),
        reverted_by_subject: last.subject.clone(),
        signal: last.signal,
        chain: fate.chain.len(),
    })
}

/// `; reverted by X, then restored by Y` for a commit whose reverts were all undone.
fn restored_note(fate: &Fate) -> String {
    if fate.chain.is_empty() {
        String::new()
    } else {
        format!("; {}: its change stands", fate.shown())
    }
}

fn short(o: Oid) -> String {
    o.to_string()[..9].to_string()
}

/// `owner/repo` (lowercase, `.git` removed) of a git URL whose form names one: `https://host/o/r`,
/// `ssh://host/o/r`, `git@host:o/r`, `file:///…/o/r`. A bare local path names none.
pub(crate) fn repo_slug(url: &str) -> Option<String> {
    let rest = match url.split_once("://") {
        Some((_, r)) => r.split_once('/').map(|(_, p)| p)?,
        None => {
            let (host, path) = url.split_once(':')?;
            if host.contains('/') || host.is_empty() {
                return None;
            }
            path
        }
    };
    let parts: Vec<&str> = rest
        .trim_end_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let [.., owner, repo] = parts.as_slice() else {
        return None;
    };
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    Some(format!("{owner}/{repo}").to_ascii_lowercase())
}

/// `owner/repo` of an issue or PR URL (`https://github.com/o/r/pull/1`).
pub(crate) fn ref_slug(url: &str) -> Option<String> {
    let parts: Vec<&str> = url.split('/').collect();
    let at = parts
        .iter()
        .rposition(|p| *p == "pull" || *p == "issues" || *p == "pulls")?;
    let (owner, repo) = (parts.get(at.checked_sub(2)?)?, parts.get(at - 1)?);
    if owner.is_empty() || repo.is_empty() || owner.contains(':') {
        return None;
    }
    Some(format!("{owner}/{repo}").to_ascii_lowercase())
}

/// Whether `text` names `#n` as a whole number (`(#19928)`, `#19928,`, not `#199280`), or the
/// GitHub URL of issue/PR `n`. A `#n` glued to a name (`ggml#1234`, `org/repo#1234`) is another
/// repository's number, and so is a URL naming another `owner/repo` than `slug` (when known).
pub(crate) fn mentions(text: &str, n: u64, slug: Option<&str>) -> bool {
    let needle = format!("#{n}");
    let foreign = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.');
    let mut from = 0usize;
    while let Some(at) = text[from..].find(&needle) {
        let start = from + at;
        let end = start + needle.len();
        let glued = text[..start].chars().next_back().is_some_and(foreign);
        if !glued && !text[end..].starts_with(|c: char| c.is_ascii_digit()) {
            return true;
        }
        from = end;
    }
    [format!("/pull/{n}"), format!("/issues/{n}")]
        .iter()
        .any(|u| {
            text.match_indices(u.as_str()).any(|(i, m)| {
                if text[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()) {
                    return false;
                }
                // The URL starts after the last separator (a multi-byte space included).
                let url_start = text[..i]
                    .char_indices()
                    .rev()
                    .find(|(_, c)| c.is_whitespace() || matches!(c, '(' | '<' | '['))
                    .map(|(j, c)| j + c.len_utf8())
                    .unwrap_or(0);
                let named = ref_slug(&text[url_start..i + m.len()]);
                !matches!((slug, named.as_deref()), (Some(a), Some(b)) if a != b)
            })
        })
}

/// The history evidence for one patch, and the standing reverts of the commits it rests on.
///
/// `pin_url` is the new pin's git URL: a PR or issue whose URL names another `owner/repo` than
/// it (both known) is another repository's number, so a log reference to it is at most weak
/// and never decides `merged` (`ggml-org/ggml#1234` is not llama.cpp's `#1234`).
pub(crate) fn evidence(
    repo: &Repository,
    log: &Log,
    tip: Oid,
    a: &Attribution,
    pin_url: &str,
) -> (Vec<Evidence>, Vec<RevertPair>) {
    let pin_slug = repo_slug(pin_url);
    let mut out = Vec::new();
    let mut reverts = Vec::new();
    // 1. The patch's upstream commit: an ancestor of the new pin, or cherry-picked into it.
    if let Some(spec) = &a.commit {
        commit_evidence(repo, log, tip, spec, &mut out, &mut reverts);
    }
    // 2. The log references the PR (squash merges put `(#NNNN)` in the subject) or the issue.
    let numbers: Vec<(&crate::patch::lint::IssueRef, &str)> = a
        .prs
        .iter()
        .map(|p| (p, "PR"))
        .chain(a.issues.iter().map(|i| (i, "issue")))
        .collect();
    for (r, what) in numbers {
        let mut found = Vec::new();
        reference_evidence(
            repo,
            log,
            r,
            what,
            pin_slug.as_deref(),
            &mut out,
            &mut found,
        );
        reverts.extend(found);
    }
    reverts.sort_by(|a, b| (&a.commit, &a.reverted_by).cmp(&(&b.commit, &b.reverted_by)));
    reverts.dedup();
    (out, reverts)
}

/// The evidence of `Upstream-Commit` `spec`: an ancestor of the new pin (or reverted since),
/// or a commit of the log that cherry-picked it.
fn commit_evidence(
    repo: &Repository,
    log: &Log,
    tip: Oid,
    spec: &str,
    out: &mut Vec<Evidence>,
    reverts: &mut Vec<RevertPair>,
) {
    match crate::git::resolve_commit(repo, spec) {
        Some(c) if crate::git::is_ancestor(repo, c, tip) => {
            let fate = log.fate(repo, c);
            if fate.reverted() {
                reverts.extend(pair(repo, c, &fate));
                out.push(Evidence::new(
                    EvidenceKind::Reverted,
                    format!(
                        "Upstream-Commit {spec} ({} \"{}\") is an ancestor of the new pin, but {}",
                        short(c),
                        shown(&subject_in(repo, c)),
                        fate.shown()
                    ),
                    Strength::Strong,
                ));
            } else {
                out.push(Evidence::new(
                    EvidenceKind::UpstreamCommitAncestor,
                    format!(
                        "Upstream-Commit {spec} ({}) is an ancestor of the new pin {}{}",
                        short(c),
                        short(tip),
                        restored_note(&fate)
                    ),
                    Strength::Strong,
                ));
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
        !lc.marks.is_revert()
            && lc.body.lines().any(|l| {
                l.trim()
                    .strip_prefix("(cherry picked from commit ")
                    .is_some_and(|r| r.trim_end_matches(')').starts_with(spec))
            })
    });
    if let Some(lc) = picked {
        let fate = log.fate(repo, lc.id);
        if fate.reverted() {
            reverts.extend(pair(repo, lc.id, &fate));
            out.push(Evidence::new(
                EvidenceKind::Reverted,
                format!(
                    "{} \"{}\" cherry-picked Upstream-Commit {spec}, but {}",
                    short(lc.id),
                    shown(&lc.subject),
                    fate.shown()
                ),
                Strength::Strong,
            ));
        } else {
            out.push(Evidence::new(
                EvidenceKind::CherryPicked,
                format!(
                    "{} \"{}\" is a cherry-pick of Upstream-Commit {spec}{}",
                    short(lc.id),
                    shown(&lc.subject),
                    restored_note(&fate)
                ),
                Strength::Strong,
            ));
        }
    }
}

/// The evidence of one PR or issue: the log commits that name it in their subject (reverted or
/// not), else those that only mention it in their body (weak). A reference to another
/// repository's number is capped at weak, and its reverts are not recorded. A commit that
/// reverts another referencing commit is that commit's revert, never a reference of its own.
fn reference_evidence(
    repo: &Repository,
    log: &Log,
    r: &crate::patch::lint::IssueRef,
    what: &str,
    pin_slug: Option<&str>,
    out: &mut Vec<Evidence>,
    reverts: &mut Vec<RevertPair>,
) {
    let n = r.number;
    let foreign = match (pin_slug, ref_slug(&r.url)) {
        (Some(pin), Some(named)) if pin != named => Some(named),
        _ => None,
    };
    let cap = |s: Strength| if foreign.is_some() { Strength::Weak } else { s };
    let whose = foreign
        .as_deref()
        .map(|f| format!(" (of {f}, not of the pinned repository: not evidence of a merge)"))
        .unwrap_or_default();
    let mut body_only: Vec<&LogCommit> = Vec::new();
    let mut in_subject: Vec<(&LogCommit, Fate)> = Vec::new();
    for lc in &log.commits {
        if lc.marks.is_revert() {
            continue;
        }
        if mentions(&lc.subject, n, pin_slug) {
            in_subject.push((lc, log.fate(repo, lc.id)));
        } else if mentions(&lc.body, n, pin_slug) {
            body_only.push(lc);
        }
    }
    // A content-only revert may name the number too; it is in another commit's chain.
    let in_chains: BTreeSet<Oid> = in_subject
        .iter()
        .flat_map(|(_, f)| f.chain.iter().map(|s| s.by))
        .collect();
    let any_subject = !in_subject.is_empty();
    // A PR in a subject is strong, an issue moderate; its revert weighs the same.
    let weight = if what == "PR" {
        Strength::Strong
    } else {
        Strength::Moderate
    };
    for (lc, fate) in in_subject
        .iter()
        .filter(|(lc, _)| !in_chains.contains(&lc.id))
    {
        if fate.reverted() {
            if cap(weight) == Strength::Strong {
                reverts.extend(pair(repo, lc.id, fate));
            }
            out.push(Evidence::new(
                EvidenceKind::Reverted,
                format!(
                    "{} \"{}\" references {what} #{n}{whose}, but {}",
                    short(lc.id),
                    shown(&lc.subject),
                    fate.shown()
                ),
                cap(weight),
            ));
        } else {
            out.push(Evidence::new(
                EvidenceKind::LogReference,
                format!(
                    "{} \"{}\" references {what} #{n}{whose} in its subject ({}){}",
                    short(lc.id),
                    shown(&lc.subject),
                    log.range,
                    restored_note(fate)
                ),
                cap(weight),
            ));
        }
    }
    if !any_subject {
        for lc in body_only {
            out.push(Evidence::new(
                EvidenceKind::LogReferenceBody,
                format!(
                    "{} \"{}\" mentions {what} #{n} only in its body: not evidence of a merge on its own",
                    short(lc.id),
                    shown(&lc.subject)
                ),
                Strength::Weak,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_matches_whole_numbers_and_urls_only() {
        assert!(mentions("kv-cache : fix can_shift (#19928)", 19928, None));
        assert!(!mentions("bump (#199280)", 19928, None));
        assert!(!mentions("bump (#1992)", 19928, None));
        assert!(mentions(
            "see https://github.com/o/r/issues/20093.",
            20093,
            None
        ));
        assert!(!mentions(
            "see https://github.com/o/r/issues/200931",
            20093,
            None
        ));
    }

    // review item 2: another repository's number is not this repository's.
    #[test]
    fn a_number_glued_to_a_name_or_a_foreign_url_is_not_a_mention() {
        let me = Some("ggml-org/llama.cpp");
        assert!(!mentions("sync ggml (ggml#1234)", 1234, me));
        assert!(!mentions("sync (ggml-org/ggml#1234)", 1234, me));
        assert!(mentions("fix (#1234)", 1234, me));
        assert!(!mentions(
            "see https://github.com/ggml-org/ggml/pull/1234",
            1234,
            me
        ));
        assert!(mentions(
            "see https://github.com/ggml-org/llama.cpp/pull/1234",
            1234,
            me
        ));
        assert!(!mentions(
            "see\u{3000}https://github.com/ggml-org/ggml/pull/1234",
            1234,
            me
        ));
        assert!(mentions("\u{3000}/pull/1234", 1234, me));
        assert_eq!(
            repo_slug("https://github.com/ggml-org/llama.cpp.git").as_deref(),
            me
        );
        assert_eq!(
            repo_slug("git@github.com:ggml-org/llama.cpp").as_deref(),
            me
        );
        assert_eq!(repo_slug("/srv/git/upstream"), None);
        assert_eq!(
            ref_slug("https://github.com/ggml-org/ggml/pull/1234").as_deref(),
            Some("ggml-org/ggml")
        );
    }

    fn attribution(pr: &str, n: u64) -> Attribution {
        Attribution {
            summary: "x".into(),
            description: String::new(),
            body: String::new(),
            status: crate::patch::header::UpstreamStatus::Pending,
            issues: Vec::new(),
            prs: vec![crate::patch::lint::IssueRef {
                number: n,
                url: pr.into(),
            }],
            commit: None,
            authors: Vec::new(),
            reporters: Vec::new(),
            from: None,
            origin: None,
            applied_upstream: None,
            last_update: None,
            date: None,
            check: None,
        }
    }

    // review item 2: a git history where llama.cpp's log carries `#1234` of its own, while the
    // patch's PR is ggml's #1234: no strong reference, so the audit cannot call it merged.
    #[test]
    fn a_pr_of_another_repository_never_gives_strong_history_evidence() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let sig = git2::Signature::now("t", "t@example.invalid").expect("sig");
        let mut parent: Option<Oid> = None;
        let mut commit = |msg: &str| {
            let tree_id = repo.treebuilder(None).expect("tb").write().expect("tree");
            let tree = repo.find_tree(tree_id).expect("tree");
            let parents: Vec<git2::Commit> = parent
                .map(|p| repo.find_commit(p).expect("parent"))
                .into_iter()
                .collect();
            let refs: Vec<&git2::Commit> = parents.iter().collect();
            let id = repo
                .commit(Some("HEAD"), &sig, &sig, msg, &tree, &refs)
                .expect("commit");
            parent = Some(id);
            id
        };
        let base = commit("v1");
        commit("server: unrelated fix (#1234)");
        let tip = commit("sync ggml (ggml#1234)");
        let log = Log::read(&repo, Some(base), tip).expect("log");
        let pin = "https://github.com/ggml-org/llama.cpp";
        let foreign = attribution("https://github.com/ggml-org/ggml/pull/1234", 1234);
        let (ev, _) = evidence(&repo, &log, tip, &foreign, pin);
        assert!(ev.iter().all(|e| e.strength != Strength::Strong), "{ev:?}");
        assert!(
            ev.iter().any(|e| e.detail.contains("of ggml-org/ggml")),
            "{ev:?}"
        );
        // The same number of the pinned repository is a strong reference, but only its own
        // `(#1234)`, not ggml's.
        let own = attribution("https://github.com/ggml-org/llama.cpp/pull/1234", 1234);
        let (ev, _) = evidence(&repo, &log, tip, &own, pin);
        let strong: Vec<_> = ev
            .iter()
            .filter(|e| e.strength == Strength::Strong)
            .collect();
        assert_eq!(strong.len(), 1, "{ev:?}");
        assert!(strong[0].detail.contains("unrelated fix"), "{ev:?}");
    }
}
