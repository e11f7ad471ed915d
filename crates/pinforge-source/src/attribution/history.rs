//! The claims a git history can prove or refute: the commit exists and is in the pin's history,
//! its message names the header's PR, the earliest tag that contains it, its author, and
//! whether a patch still called `Pending` has landed after all.

use super::{field_line, Finding, PatchCheck};
use crate::audit::history::{mentions, ref_slug};
use crate::audit::revert;
use crate::git::GitContext;
use crate::git::{is_ancestor, resolve_commit};
use crate::patch::header::UpstreamStatus;
use crate::patch::lint::Attribution;
use crate::patch::PatchFile;
use git2::{Oid, Repository};
use pinforge_base::error::{Error, Result};
use pinforge_base::workspace::Workspace;
use std::collections::HashMap;

/// A tag of the pin's history.
struct Tag {
    name: String,
    commit: Oid,
    /// Commit time of the tagged commit: "earliest first" is by this, then by name.
    time: i64,
}

/// The upstream history up to the pin, read once for the whole bundle.
pub(super) struct History {
    repo: Repository,
    url: String,
    tip: Oid,
    rev: String,
    /// Tags whose commit is in the pin's history, earliest first.
    tags: Vec<Tag>,
    /// Every commit of the pin's history with its message (children before parents).
    log: Vec<(Oid, String)>,
    /// Each commit of the history → its position in `log`.
    in_history: HashMap<Oid, usize>,
    /// Each commit → the index in `tags` of the earliest tag whose history contains it.
    first_tag: HashMap<Oid, usize>,
}

impl History {
    /// Open the upstream at `url` (a local repository or mirror is read in place; a remote one
    /// is fetched whole, tags included, into the workspace's git cache) and resolve `rev`.
    pub(super) fn open(ws: &Workspace, url: &str, rev: &str) -> Result<History> {
        let repo = open_repo(ws, url)?;
        let tip = resolve_rev(&repo, rev).ok_or_else(|| {
            Error::input(
                format!("--upstream {url}@{rev}"),
                "no such tag or commit in that repository",
            )
            .with_hint("name a tag of the upstream (b8233) or a full commit id")
        })?;
        // One walk of the pin's history, children before parents: it gives the log, the set of
        // commits in the history, and (below) the earliest tag containing each commit, so no
        // claim costs an ancestry query per tag (300 tags × 3000 commits took 20 s that way).
        let mut log = Vec::new();
        let mut parents: Vec<Vec<Oid>> = Vec::new();
        let mut walk = repo.revwalk().git_at(&url)?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL).git_at(&url)?;
        walk.push(tip).git_at(&url)?;
        for id in walk {
            let id = id.git_at(&url)?;
            let c = repo.find_commit(id).git_at(&url)?;
            parents.push(c.parent_ids().collect());
            log.push((id, String::from_utf8_lossy(c.message_bytes()).into_owned()));
        }
        let position: HashMap<Oid, usize> = log
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (*id, i))
            .collect();
        let mut tags = Vec::new();
        for name in repo.tag_names(None).git_at(&url)?.iter().flatten() {
            let Ok(c) = repo
                .find_reference(&format!("refs/tags/{name}"))
                .and_then(|r| r.peel_to_commit())
            else {
                continue;
            };
            if position.contains_key(&c.id()) {
                tags.push(Tag {
                    name: name.to_string(),
                    commit: c.id(),
                    time: c.time().seconds(),
                });
            }
        }
        tags.sort_by(|a, b| (a.time, &a.name).cmp(&(b.time, &b.name)));
        let first_tag = earliest_tags(&log, &parents, &position, &tags);
        Ok(History {
            repo,
            url: url.to_string(),
            tip,
            rev: rev.to_string(),
            tags,
            first_tag,
            in_history: position,
            log,
        })
    }

    /// What was read, for the report.
    pub(super) fn describe(&self) -> String {
        format!(
            "{} commit(s) and {} tag(s) of {} up to {} ({})",
            self.log.len(),
            self.tags.len(),
            self.url,
            self.rev,
            short(self.tip)
        )
    }

    /// Every check of one patch.
    pub(super) fn check(&self, p: &PatchFile) -> Result<PatchCheck> {
        let a = p.require_attribution()?;
        let mut row = PatchCheck {
            file: p.id.to_string(),
            commit_claimed: a.commit.clone(),
            commit_found: None,
            commit: None,
            upstream_author: None,
            first_tag: None,
            content: None,
            findings: Vec::new(),
        };
        let mut found = None;
        if let Some(spec) = &a.commit {
            found = self.check_commit(p, spec, &mut row);
        }
        if let Some(oid) = found {
            self.check_commit_claims(p, a, oid, &mut row)?;
        }
        if matches!(
            a.status,
            UpstreamStatus::Pending | UpstreamStatus::Submitted(_)
        ) {
            self.check_still_pending(p, a, &mut row);
        }
        Ok(row)
    }

    /// `Upstream-Commit`: present in the pin's history? Returns it when it is.
    fn check_commit(&self, p: &PatchFile, spec: &str, row: &mut PatchCheck) -> Option<Oid> {
        let line = field_line(p, "Upstream-Commit");
        let Some(oid) = resolve_commit(&self.repo, spec) else {
            row.commit_found = Some(false);
            row.findings.push(Finding {
                line,
                field: "Upstream-Commit".into(),
                claimed: spec.into(),
                found: format!("no commit {spec} in {}", self.url),
                hint: "name the commit as upstream has it (`git log --oneline` of the upstream); an id from a fork or a rewritten branch does not count".into(),
            });
            return None;
        };
        if !self.in_history.contains_key(&oid) {
            row.commit_found = Some(false);
            row.findings.push(Finding {
                line,
                field: "Upstream-Commit".into(),
                claimed: spec.into(),
                found: format!(
                    "{} exists but is not in the history of {}",
                    short(oid),
                    self.rev
                ),
                hint: "check against a pin that contains it, or correct the id".into(),
            });
            return None;
        }
        row.commit_found = Some(true);
        row.commit = Some(oid.to_string());
        Some(oid)
    }

    /// The claims about a commit that exists: its PR, its author, the tag it first shipped in.
    fn check_commit_claims(
        &self,
        p: &PatchFile,
        a: &Attribution,
        oid: Oid,
        row: &mut PatchCheck,
    ) -> Result<()> {
        let c = self.repo.find_commit(oid).git_at(&self.url)?;
        let message = String::from_utf8_lossy(c.message_bytes()).into_owned();
        let author = c.author();
        let author_name = String::from_utf8_lossy(author.name_bytes()).into_owned();
        let author_email = String::from_utf8_lossy(author.email_bytes()).into_owned();
        row.upstream_author = Some(format!("{author_name} <{author_email}>"));
        for pr in &a.prs {
            if !names_number(&message, pr.number, ref_slug(&pr.url).as_deref()) {
                let named = numbers_named(&message);
                row.findings.push(Finding {
                    line: field_line(p, "Upstream-PR"),
                    field: "Upstream-PR".into(),
                    claimed: format!("#{}", pr.number),
                    found: if named.is_empty() {
                        format!("the message of {} names no PR", short(oid))
                    } else {
                        format!("the message of {} names {}", short(oid), named.join(", "))
                    },
                    hint: "name the PR the commit was merged from (its `(#N)` subject suffix)"
                        .into(),
                });
            }
        }
        let from_email = a
            .from
            .as_deref()
            .and_then(crate::patch::mail::split_from)
            .map(|(_, e)| e);
        if !from_email
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case(&author_email))
        {
            row.findings.push(Finding {
                line: field_line(p, "From"),
                field: "From".into(),
                claimed: a.from.clone().unwrap_or_else(|| "(none)".into()),
                found: format!("{author_name} <{author_email}>"),
                hint: "a backport keeps git's author: `From:` is the upstream commit's author (the bundle maintainer is the committer, as cherry-pick does)".into(),
            });
        }
        row.first_tag = self.first_tag_containing(oid).map(|t| t.name.clone());
        if let Some(claim) = &a.applied_upstream {
            self.check_applied(p, claim, oid, row);
        }
        Ok(())
    }

    /// `Applied-Upstream`: its first word is the claim, a tag or a commit; the rest is comment.
    fn check_applied(&self, p: &PatchFile, claim: &str, oid: Oid, row: &mut PatchCheck) {
        let word = claim.split_whitespace().next().unwrap_or("");
        let word = word.trim_end_matches([',', ';', '.']);
        let line = field_line(p, "Applied-Upstream");
        let first = row.first_tag.clone();
        let mut refute = |found: String, hint: &str| {
            row.findings.push(Finding {
                line,
                field: "Applied-Upstream".into(),
                claimed: claim.to_string(),
                found,
                hint: hint.into(),
            })
        };
        if let Some(tag) = self.tags.iter().find(|t| t.name == word) {
            if !is_ancestor(&self.repo, oid, tag.commit) {
                refute(
                    format!(
                        "tag {} does not contain {}; the first tag that does is {}",
                        tag.name,
                        short(oid),
                        first.as_deref().unwrap_or("(none up to the pin)")
                    ),
                    "write the first tag that contains the commit, or the commit itself",
                );
            } else if first.as_deref() != Some(tag.name.as_str()) {
                refute(
                    format!(
                        "{} contains it, but the first tag that does is {}",
                        tag.name,
                        first.as_deref().unwrap_or("?")
                    ),
                    "write the first tag that contains the commit",
                );
            }
        } else if let Some(c) = resolve_commit(&self.repo, word) {
            if !is_ancestor(&self.repo, oid, c) {
                refute(
                    format!(
                        "{} does not contain the upstream commit {}",
                        short(c),
                        short(oid)
                    ),
                    "name the commit (or a tag) that carries the fix",
                );
            }
        } else {
            refute(
                format!("`{word}` is neither a tag nor a commit of {} up to {}", self.url, self.rev),
                "start the field with the tag or commit that carries the fix (free text may follow)",
            );
        }
    }

    /// A patch still called `Pending`/`Submitted`: did its PR land, or did a commit close its
    /// issue?
    fn check_still_pending(&self, p: &PatchFile, a: &Attribution, row: &mut PatchCheck) {
        let line = field_line(p, "Upstream-Status");
        for pr in &a.prs {
            let slug = ref_slug(&pr.url);
            // A revert names the PR too (`Revert "foo (#N)"`): it is not a landing, and a
            // landing that a revert undid leaves the patch pending after all.
            let landed = self.log.iter().find(|(_, m)| {
                let (subject, body) = m.split_once('\n').unwrap_or((m, ""));
                names_number(subject, pr.number, slug.as_deref())
                    && !revert::Marks::read(&self.repo, subject, body).is_revert()
            });
            let landed = landed.filter(|(id, _)| !self.reverted(*id));
            if let Some((id, m)) = landed {
                row.findings.push(Finding {
                    line,
                    field: "Upstream-Status".into(),
                    claimed: a.status.word().into(),
                    found: format!(
                        "PR #{} landed as {} \"{}\"{}",
                        pr.number,
                        short(*id),
                        m.lines().next().unwrap_or(""),
                        self.in_tag(*id)
                    ),
                    hint: "audit the patch against that pin (`pinforge audit --onto`); set `Upstream-Status: Backport` with `Upstream-Commit`, or drop it".into(),
                });
            }
        }
        for issue in &a.issues {
            let slug = ref_slug(&issue.url);
            if let Some((id, m)) = self
                .log
                .iter()
                .find(|(_, m)| closes(m, issue.number, slug.as_deref()))
            {
                row.findings.push(Finding {
                    line,
                    field: "Upstream-Status".into(),
                    claimed: a.status.word().into(),
                    found: format!(
                        "issue #{} is closed by {} \"{}\"{}",
                        issue.number,
                        short(*id),
                        m.lines().next().unwrap_or(""),
                        self.in_tag(*id)
                    ),
                    hint: "audit the patch against that pin (`pinforge audit --onto`): upstream may have fixed it differently".into(),
                });
            }
        }
    }

    /// Whether a revert in the history undid `id` (and no revert of that revert restored it),
    /// by the audit's own revert rule.
    fn reverted(&self, id: Oid) -> bool {
        let marks: Vec<revert::Marks> = self
            .log
            .iter()
            .map(|(_, m)| {
                let (subject, body) = m.split_once('\n').unwrap_or((m, ""));
                revert::Marks::read(&self.repo, subject, body)
            })
            .collect();
        let candidates: Vec<revert::Candidate> = self
            .log
            .iter()
            .zip(&marks)
            .map(|((oid, m), marks)| revert::Candidate {
                id: *oid,
                subject: m.lines().next().unwrap_or(""),
                marks,
            })
            .collect();
        revert::fate(&self.repo, &candidates, id).reverted()
    }

    fn first_tag_containing(&self, oid: Oid) -> Option<&Tag> {
        self.first_tag.get(&oid).and_then(|&i| self.tags.get(i))
    }

    fn in_tag(&self, oid: Oid) -> String {
        self.first_tag_containing(oid)
            .map(|t| format!(", first in {}", t.name))
            .unwrap_or_else(|| ", in no tag yet".into())
    }
}

/// The earliest tag (index into `tags`, which is sorted earliest first) containing each commit:
/// a commit's own tag, or the earliest of its children's, computed children first in one pass
/// over the topologically ordered log.
fn earliest_tags(
    log: &[(Oid, String)],
    parents: &[Vec<Oid>],
    position: &HashMap<Oid, usize>,
    tags: &[Tag],
) -> HashMap<Oid, usize> {
    let mut best: Vec<Option<usize>> = vec![None; log.len()];
    for (i, t) in tags.iter().enumerate() {
        if let Some(&p) = position.get(&t.commit) {
            // Tags are sorted earliest first: the first one seen at a commit is its earliest.
            if best[p].is_none() {
                best[p] = Some(i);
            }
        }
    }
    // Children come before parents in `log`: by the time a commit is reached, every child has
    // passed its best on to it.
    for (i, ps) in parents.iter().enumerate() {
        let Some(mine) = best[i] else { continue };
        for parent in ps {
            if let Some(&p) = position.get(parent) {
                best[p] = Some(best[p].map_or(mine, |b| b.min(mine)));
            }
        }
    }
    best.iter()
        .enumerate()
        .filter_map(|(i, b)| b.map(|b| (log[i].0, b)))
        .collect()
}

/// A local path (or `file://` URL) is read in place; a remote URL is fetched whole into the
/// workspace's git cache, all tags included (a full llama.cpp history is over 1 GB).
fn open_repo(ws: &Workspace, url: &str) -> Result<Repository> {
    let local = url
        .strip_prefix("file://")
        .or((!url.contains("://")).then_some(url));
    if let Some(path) = local {
        return Repository::open_ext(path, git2::RepositoryOpenFlags::NO_SEARCH, &[] as &[&str])
            .map_err(|e| {
                Error::input(
                    format!("--upstream git:{url}"),
                    format!("not a git repository: {}", e.message()),
                )
                .with_hint("name the upstream repository or a mirror of it (a clone with its tags)")
            });
    }
    let path = crate::upstream::git_cache_repo(ws, url);
    pinforge_base::fsx::create_dir_all(&ws.git_cache())?;
    let repo = match Repository::open_bare(&path) {
        Ok(r) => r,
        Err(_) => Repository::init_bare(&path).git_at(&path.display())?,
    };
    {
        let mut remote = repo.remote_anonymous(url).git_at(&url)?;
        let mut opts = git2::FetchOptions::new();
        opts.download_tags(git2::AutotagOption::All);
        remote
            .fetch(
                &[
                    "+refs/heads/*:refs/remotes/upstream/*",
                    "+refs/tags/*:refs/tags/*",
                ],
                Some(&mut opts),
                None,
            )
            .map_err(|e| {
                Error::input(url, format!("cannot fetch the history: {}", e.message()))
                    .with_hint("check the URL, or name a local mirror (`git clone --mirror`)")
            })?;
    }
    Ok(repo)
}

fn resolve_rev(repo: &Repository, rev: &str) -> Option<Oid> {
    if let Ok(c) = repo
        .find_reference(&format!("refs/tags/{rev}"))
        .and_then(|r| r.peel_to_commit())
    {
        return Some(c.id());
    }
    if rev.len() == 40 {
        return resolve_commit(repo, rev);
    }
    None
}

/// Whether `text` names PR or issue `n`: `(#n)` as squash merges write it, the GitHub URL, or
/// a sync suffix of a history synced from the other repository (`(llama/n)` in ggml's), read
/// by the audit's own suffix rule (`revert::split_sync_suffix`).
pub(crate) fn names_number(text: &str, n: u64, slug: Option<&str>) -> bool {
    let n_text = n.to_string();
    mentions(text, n, slug)
        || text.lines().any(|line| {
            revert::split_sync_suffix(line)
                .1
                .iter()
                .any(|r| r.split_once('/').is_some_and(|(_, num)| num == n_text))
        })
}

/// The `#N` numbers a message names, for a finding that says what it names instead.
fn numbers_named(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'#' && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let digits: String = text[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if !digits.is_empty() {
                let n = format!("#{digits}");
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        i += 1;
    }
    out
}

/// Whether `message` closes issue `n` with one of GitHub's closing keywords (`fix #n`,
/// `fixes #n`, `closes #n`, `resolved #n`, ...), case-insensitive.
fn closes(message: &str, n: u64, slug: Option<&str>) -> bool {
    const KEYWORDS: [&str; 9] = [
        "close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved",
    ];
    let lower = message.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    words.windows(2).any(|w| {
        let kw = w[0].trim_start_matches(['(', '[']).trim_end_matches(':');
        KEYWORDS.contains(&kw) && mentions(w[1], n, slug)
    })
}

fn short(o: Oid) -> String {
    o.to_string()[..9].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_is_named_by_suffix_url_or_synced_spelling() {
        assert!(names_number(
            "kv-cache : fix can_shift (#19928)",
            19928,
            None
        ));
        assert!(names_number(
            "sync: kv-cache fix (llama/19928)",
            19928,
            None
        ));
        assert!(!names_number("kv-cache fix (#199280)", 19928, None));
        assert!(!names_number("ggml#19928 fix", 19928, None));
        assert_eq!(numbers_named("x (#12) see #34, not a#56"), ["#12", "#34"]);
    }

    /// R ─ M1 (tag early, t=200) ─ M2 merge (tag merge, t=400)
    ///  └─ X1 (tag late, t=300) ──────┘
    #[test]
    fn the_earliest_tag_is_found_across_branches_and_merges() {
        let dir = tempfile::tempdir().expect("tmp");
        let repo = Repository::init(dir.path()).expect("init");
        let tree = {
            let mut idx = repo.index().expect("index");
            repo.find_tree(idx.write_tree().expect("tree"))
                .expect("tree")
        };
        let commit = |msg: &str, t: i64, parents: &[Oid]| -> Oid {
            let sig = git2::Signature::new("a", "a@x", &git2::Time::new(t, 0)).expect("sig");
            let ps: Vec<git2::Commit> = parents
                .iter()
                .map(|p| repo.find_commit(*p).expect("p"))
                .collect();
            let refs: Vec<&git2::Commit> = ps.iter().collect();
            repo.commit(None, &sig, &sig, msg, &tree, &refs)
                .expect("commit")
        };
        let r = commit("root", 100, &[]);
        let m1 = commit("m1", 200, &[r]);
        let x1 = commit("x1", 300, &[r]);
        let m2 = commit("merge", 400, &[m1, x1]);
        for (name, at) in [("early", m1), ("late", x1), ("merge", m2)] {
            repo.tag_lightweight(name, &repo.find_object(at, None).expect("obj"), false)
                .expect("tag");
        }
        let ws = pinforge_base::workspace::Workspace::new(dir.path()).expect("ws");
        let h =
            History::open(&ws, &dir.path().display().to_string(), &m2.to_string()).expect("open");
        let first = |o: Oid| h.first_tag_containing(o).map(|t| t.name.as_str());
        assert_eq!(first(r), Some("early"));
        assert_eq!(first(m1), Some("early"));
        assert_eq!(first(x1), Some("late"));
        assert_eq!(first(m2), Some("merge"));
        // Against a pin before the merge, the side branch is not in the history.
        let h =
            History::open(&ws, &dir.path().display().to_string(), &m1.to_string()).expect("open");
        assert!(!h.in_history.contains_key(&x1));
        assert_eq!(h.tags.len(), 1);
    }

    #[test]
    fn closing_keywords_close_and_mere_mentions_do_not() {
        assert!(closes("kv-cache : fix M-RoPE\n\nfix #20093", 20093, None));
        assert!(closes("Fixes: #20093.", 20093, None));
        assert!(closes("(closes #20093)", 20093, None));
        assert!(!closes("see #20093 for context", 20093, None));
        assert!(!closes("fix #200930", 20093, None));
    }
}
