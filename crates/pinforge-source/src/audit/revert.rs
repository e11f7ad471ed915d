//! Revert recognition in the log between two pins (issue #26 §1), by every signal git users
//! rely on, because a history synced from another repository (ggml's from llama.cpp) breaks
//! the one `git revert` writes:
//! - the message: `This reverts commit X.` with X a commit of this history;
//! - the subject: `Revert "S"` (git's `Reapply "S"` for a revert of a revert) whose S is the
//!   reverted commit's subject modulo the suffixes sync tools add — `(#N)`, `(owner/repo#N)`,
//!   `(llama/N)` — which is all that ties a synced revert to its commit when X names a commit
//!   of the *other* repository;
//! - the content: the commit's diff is the exact reverse of the other's (same patch-id, which
//!   ignores line numbers, so a revert made after upstream moved the lines still counts).
//!
//! A revert of a revert restores the commit; the chain is followed to its end.

use git2::{Oid, Repository};
use std::collections::BTreeSet;

/// How a revert was recognized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Signal {
    /// Its message says `This reverts commit X` and X is the commit.
    MessageId,
    /// Its subject is `Revert "S"` for the commit's subject S (modulo sync suffixes).
    Subject,
    /// Its diff is the exact reverse of the commit's.
    Content,
}

impl Signal {
    /// Why the revert counts, for a person.
    pub(crate) fn says(self) -> &'static str {
        match self {
            Signal::MessageId => "its message says `This reverts commit` naming it",
            Signal::Subject => "its `Revert \"…\"` subject names this commit's subject",
            Signal::Content => "its diff is the exact reverse of this commit's",
        }
    }
}

/// One revert in a chain: `by` reverted the commit before it in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    /// The reverting commit.
    pub by: Oid,
    /// Its subject.
    pub subject: String,
    /// How it was recognized.
    pub signal: Signal,
    /// The id its message names when that is no commit of this history (a synced revert
    /// names the other repository's commit).
    pub foreign: Option<String>,
}

/// The reverts that followed a commit: `chain[0]` reverted it, `chain[1]` reverted
/// `chain[0]`, and so on. An odd length leaves the commit reverted; an even one (a revert of
/// the revert) restores it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fate {
    /// The chain, first revert first.
    pub chain: Vec<Step>,
}

impl Fate {
    /// Whether the commit's change is undone at the tip.
    pub(crate) fn reverted(&self) -> bool {
        self.chain.len() % 2 == 1
    }

    /// The chain for a person: `X "S" reverted it (subject), Y "T" restored it (message)`.
    pub(crate) fn shown(&self) -> String {
        self.chain
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let did = match (i, i % 2) {
                    (0, _) => "reverted it",
                    (_, 1) => "restored it",
                    _ => "reverted it again",
                };
                let foreign = s
                    .foreign
                    .as_deref()
                    .map(|x| {
                        format!(
                            "; the commit its message names, {}, is not in this history",
                            x.get(..9).unwrap_or(x)
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "{} \"{}\" {did} ({}{foreign})",
                    short(s.by),
                    pinforge_base::text::shown(&s.subject),
                    s.signal.says()
                )
            })
            .collect::<Vec<_>>()
            .join(", then ")
    }
}

/// What a log commit says about reverting, read once.
#[derive(Debug, Clone, Default)]
pub(crate) struct Marks {
    /// Its subject as `(revert depth, core)` ([`subject_key`]).
    pub key: (usize, String),
    /// `This reverts commit X`: X as written.
    pub names: Option<String>,
    /// X, when it is a commit of this history.
    pub names_here: Option<Oid>,
}

impl Marks {
    /// Read a commit's marks; X is resolved in `repo` (a foreign id resolves to nothing).
    pub(crate) fn read(repo: &Repository, subject: &str, body: &str) -> Marks {
        let names = named_revert(body);
        let names_here = names
            .as_deref()
            .and_then(|x| crate::git::resolve_commit(repo, x));
        Marks {
            key: subject_key(subject),
            names,
            names_here,
        }
    }

    /// Whether the commit presents itself as a revert (it never counts as a merge reference).
    pub(crate) fn is_revert(&self) -> bool {
        self.key.0 > 0 || self.names.is_some()
    }
}

/// `X` of a body's `This reverts commit X.` line (git's wording; abbreviated ids too).
fn named_revert(body: &str) -> Option<String> {
    body.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("This reverts commit ")?;
        let id: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
        (id.len() >= 7).then_some(id.to_ascii_lowercase())
    })
}

/// Whether `inner` (what is between the parentheses) is a reference a sync tool appends:
/// `#N`, `repo#N`, `owner/repo#N`, `llama/N` (any `name/N`).
fn is_sync_ref(inner: &str) -> bool {
    let name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((path, n)) = inner.rsplit_once('#') {
        if !number(n) {
            return false;
        }
        return path.is_empty()
            || match path.split_once('/') {
                Some((o, r)) => name(o) && name(r),
                None => name(path),
            };
    }
    matches!(inner.split_once('/'), Some((n, num)) if name(n) && number(num))
}

/// `s` without the sync references at its end: `fix foo (#123) (llama/456)` → `fix foo`.
pub(crate) fn strip_sync_suffix(s: &str) -> &str {
    split_sync_suffix(s).0
}

/// `s` split into its core and the sync references at its end, last first:
/// `fix foo (#123) (llama/456)` → (`fix foo`, [`llama/456`, `#123`]).
pub(crate) fn split_sync_suffix(s: &str) -> (&str, Vec<&str>) {
    let mut s = s.trim_end();
    let mut refs = Vec::new();
    while let Some(head) = s.strip_suffix(')') {
        let Some(open) = head.rfind('(') else { break };
        if !is_sync_ref(&head[open + 1..]) {
            break;
        }
        refs.push(&head[open + 1..]);
        s = head[..open].trim_end();
    }
    (s, refs)
}

/// A subject as `(depth, core)`: how many reverts deep it is and the subject they revert,
/// sync suffixes removed at every level. `fix (#1)` → (0, `fix`); `Revert "fix (#1)" (llama/2)`
/// → (1, `fix`); `Revert "Revert "fix""` and `Reapply "fix"` → (2, `fix`).
pub(crate) fn subject_key(subject: &str) -> (usize, String) {
    let mut depth = 0usize;
    let mut cur = strip_sync_suffix(subject.trim());
    // Bounded: each turn removes at least the 8 characters of `Revert ""`.
    loop {
        let quoted = |prefix: &str| {
            cur.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix('"'))
                .map(|r| strip_sync_suffix(r.trim()))
        };
        if let Some(inner) = quoted("Revert \"") {
            depth += 1;
            cur = inner;
        } else if let Some(inner) = quoted("Reapply \"") {
            depth += 2;
            cur = inner;
        } else {
            break;
        }
    }
    (depth, cur.to_string())
}

/// Whether a subject keyed `rev` reverts one keyed `target`.
pub(crate) fn subject_reverts(rev: &(usize, String), target: &(usize, String)) -> bool {
    rev.0 == target.0 + 1 && rev.1 == target.1 && !rev.1.is_empty()
}

/// One commit of the log as revert recognition needs it.
pub(crate) struct Candidate<'a> {
    /// The commit.
    pub id: Oid,
    /// Its subject.
    pub subject: &'a str,
    /// What it says about reverting.
    pub marks: &'a Marks,
}

/// The reverts of `target` among `log` (commits after it), and theirs, to the chain's end.
/// A commit reverted twice is reverted while any one revert stands.
pub(crate) fn fate(repo: &Repository, log: &[Candidate], target: Oid) -> Fate {
    let mut seen = BTreeSet::from([target]);
    Fate {
        chain: chain(repo, log, target, &mut seen, 0),
    }
}

fn chain(
    repo: &Repository,
    log: &[Candidate],
    target: Oid,
    seen: &mut BTreeSet<Oid>,
    depth: usize,
) -> Vec<Step> {
    // Real histories have revert chains of two or three; the bound only stops a cycle of
    // look-alike subjects from recursing forever.
    if depth > 8 {
        return Vec::new();
    }
    let mut restored_first: Option<Vec<Step>> = None;
    for step in reverts_of(repo, log, target, seen) {
        seen.insert(step.by);
        let rest = chain(repo, log, step.by, seen, depth + 1);
        let mut full = vec![step];
        let standing = rest.len() % 2 == 0;
        full.extend(rest);
        if standing {
            return full;
        }
        restored_first.get_or_insert(full);
    }
    restored_first.unwrap_or_default()
}

/// The commits of `log` that revert `target` directly, by any signal.
fn reverts_of(
    repo: &Repository,
    log: &[Candidate],
    target: Oid,
    seen: &BTreeSet<Oid>,
) -> Vec<Step> {
    let Ok(t) = repo.find_commit(target) else {
        return Vec::new();
    };
    let t_subject = String::from_utf8_lossy(t.summary_bytes().unwrap_or_default()).into_owned();
    let t_key = subject_key(&t_subject);
    let mut reverse_id: Option<Option<(Oid, Vec<std::path::PathBuf>)>> = None;
    let mut out = Vec::new();
    for c in log {
        if seen.contains(&c.id) || c.id == target {
            continue;
        }
        let signal = match c.marks.names_here {
            // The message names a commit of this history: it decides, whatever the subject.
            Some(named) if named == target => Some(Signal::MessageId),
            Some(_) => None,
            None if subject_reverts(&c.marks.key, &t_key) => Some(Signal::Subject),
            None => {
                let rev = reverse_id.get_or_insert_with(|| reverse_patch_id(repo, &t));
                rev.as_ref()
                    .filter(|(id, paths)| patch_id_if_touches(repo, c.id, paths) == Some(*id))
                    .map(|_| Signal::Content)
            }
        };
        // Ancestry last: it walks the graph, the signals above are cheap.
        if let Some(signal) = signal.filter(|_| crate::git::is_ancestor(repo, target, c.id)) {
            out.push(Step {
                by: c.id,
                subject: c.subject.to_string(),
                signal,
                foreign: c
                    .marks
                    .names
                    .clone()
                    .filter(|_| c.marks.names_here.is_none()),
            });
        }
    }
    out
}

/// The patch-id of `c`'s diff reversed, and the paths it touches; None for a merge or root
/// commit, or one that changes nothing.
fn reverse_patch_id(repo: &Repository, c: &git2::Commit) -> Option<(Oid, Vec<std::path::PathBuf>)> {
    if c.parent_count() != 1 {
        return None;
    }
    let (tree, parent) = (c.tree().ok()?, c.parent(0).ok()?.tree().ok()?);
    let diff = repo
        .diff_tree_to_tree(Some(&tree), Some(&parent), None)
        .ok()?;
    let paths: Vec<std::path::PathBuf> = diff
        .deltas()
        .filter_map(|d| d.new_file().path().or(d.old_file().path()).map(Into::into))
        .collect();
    if paths.is_empty() {
        return None;
    }
    Some((diff.patchid(None).ok()?, paths))
}

/// The patch-id of `id`'s diff when it touches every one of `paths` (the cheap tree-entry
/// check runs first: most commits of a range touch none of them).
fn patch_id_if_touches(repo: &Repository, id: Oid, paths: &[std::path::PathBuf]) -> Option<Oid> {
    let c = repo.find_commit(id).ok()?;
    if c.parent_count() != 1 {
        return None;
    }
    let (tree, parent) = (c.tree().ok()?, c.parent(0).ok()?.tree().ok()?);
    let entry = |t: &git2::Tree, p: &std::path::Path| t.get_path(p).ok().map(|e| e.id());
    if !paths.iter().all(|p| entry(&tree, p) != entry(&parent, p)) {
        return None;
    }
    repo.diff_tree_to_tree(Some(&parent), Some(&tree), None)
        .ok()?
        .patchid(None)
        .ok()
}

fn short(o: Oid) -> String {
    o.to_string()[..9].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A linear history: `(file content, message)` per commit after a root with `x = 0`.
    fn history(steps: &[(&str, &str)]) -> (tempfile::TempDir, Repository, Vec<Oid>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let sig =
            git2::Signature::new("t", "t@example.invalid", &git2::Time::new(0, 0)).expect("sig");
        let mut ids = Vec::new();
        let mut parent: Option<Oid> = None;
        let all = [("line 1\nx = 0\nline 3\n", "root")];
        for (content, msg) in all.iter().chain(steps) {
            let blob = repo.blob(content.as_bytes()).expect("blob");
            let mut tb = repo.treebuilder(None).expect("tb");
            tb.insert("f", blob, 0o100644).expect("insert");
            let tree = repo.find_tree(tb.write().expect("tree")).expect("tree");
            let parents: Vec<git2::Commit> = parent
                .map(|p| repo.find_commit(p).expect("p"))
                .into_iter()
                .collect();
            let refs: Vec<&git2::Commit> = parents.iter().collect();
            let id = repo
                .commit(Some("HEAD"), &sig, &sig, msg, &tree, &refs)
                .expect("commit");
            parent = Some(id);
            ids.push(id);
        }
        (dir, repo, ids)
    }

    fn fate_of(repo: &Repository, ids: &[Oid], target: Oid) -> Fate {
        let msgs: Vec<(Oid, String, Marks)> = ids
            .iter()
            .map(|&id| {
                let c = repo.find_commit(id).expect("commit");
                let msg = c.message().expect("utf8").to_string();
                let (s, b) = msg.split_once('\n').unwrap_or((&msg, ""));
                (id, s.to_string(), Marks::read(repo, s, b))
            })
            .collect();
        let log: Vec<Candidate> = msgs
            .iter()
            .map(|(id, s, m)| Candidate {
                id: *id,
                subject: s,
                marks: m,
            })
            .collect();
        fate(repo, &log, target)
    }

    // issue #26 §1: each signal on its own, and a chain of three.
    #[test]
    fn every_signal_finds_the_revert_and_a_chain_ends_where_its_parity_says() {
        let foreign = "4f1c2d3e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d";
        let (_d, repo, ids) = history(&[
            ("line 1\nx = 1\nline 3\n", "fix x (llama/10)"),
            // Subject only: the body names a commit of another repository.
            (
                "line 1\nx = 0\nline 3\n",
                &format!("Revert \"fix x (#10)\" (llama/11)\n\nThis reverts commit {foreign}.\n"),
            ),
            // Content only: an unrelated subject, the exact reverse of the revert.
            ("line 1\nx = 1\nline 3\n", "tidy x"),
        ]);
        let all = &ids[1..];
        let f = fate_of(&repo, all, ids[1]);
        assert_eq!(
            f.chain.iter().map(|s| (s.by, s.signal)).collect::<Vec<_>>(),
            [(ids[2], Signal::Subject), (ids[3], Signal::Content)]
        );
        assert!(!f.reverted(), "restored by the content revert");
        assert!(f.shown().contains("restored it"), "{}", f.shown());
        // Without the last commit, the revert stands.
        assert!(fate_of(&repo, &ids[1..3], ids[1]).reverted());
    }

    #[test]
    fn a_message_naming_a_commit_of_this_history_decides_over_the_subject() {
        let (_d, repo, ids) = history(&[
            ("line 1\nx = 1\nline 3\n", "fix x"),
            ("line 1\nx = 2\nline 3\n", "fix x"),
        ]);
        // Same subject twice; the revert names the second by id.
        let sig =
            git2::Signature::new("t", "t@example.invalid", &git2::Time::new(0, 0)).expect("sig");
        let head = repo.find_commit(ids[2]).expect("head");
        let blob = repo.blob(b"line 1\nx = 1\nline 3\n").expect("blob");
        let mut tb = repo.treebuilder(None).expect("tb");
        tb.insert("f", blob, 0o100644).expect("insert");
        let tree = repo.find_tree(tb.write().expect("tree")).expect("tree");
        let rev = repo
            .commit(
                Some("HEAD"),
                &sig,
                &sig,
                &format!("Revert \"fix x\"\n\nThis reverts commit {}.\n", ids[2]),
                &tree,
                &[&head],
            )
            .expect("revert");
        let log = [ids[1], ids[2], rev];
        assert!(
            !fate_of(&repo, &log, ids[1]).reverted(),
            "named the other one"
        );
        let f = fate_of(&repo, &log, ids[2]);
        assert_eq!(f.chain[0].signal, Signal::MessageId);
        assert!(f.reverted());
        // A `Reapply` of it, by subject: restored.
        let reapply = repo
            .commit(
                Some("HEAD"),
                &sig,
                &sig,
                "Reapply \"fix x\"",
                &repo.find_commit(ids[2]).expect("c").tree().expect("tree"),
                &[&repo.find_commit(rev).expect("rev")],
            )
            .expect("reapply");
        let f = fate_of(&repo, &[ids[1], ids[2], rev, reapply], ids[2]);
        assert_eq!(f.chain.len(), 2, "{f:?}");
        assert!(!f.reverted());
    }

    #[test]
    fn sync_suffixes_of_every_spelling_are_removed_and_nothing_else() {
        assert_eq!(strip_sync_suffix("fix foo (#123)"), "fix foo");
        assert_eq!(
            strip_sync_suffix("fix foo (ggml-org/llama.cpp#123)"),
            "fix foo"
        );
        assert_eq!(strip_sync_suffix("fix foo (llama/456)"), "fix foo");
        assert_eq!(strip_sync_suffix("fix foo (ggml/1234)"), "fix foo");
        assert_eq!(strip_sync_suffix("fix foo (whisper#12)"), "fix foo");
        assert_eq!(strip_sync_suffix("fix foo (#123) (llama/456)"), "fix foo");
        assert_eq!(strip_sync_suffix("fix foo  (#123)  "), "fix foo");
        // Not references: kept.
        assert_eq!(strip_sync_suffix("fix foo (bar)"), "fix foo (bar)");
        assert_eq!(strip_sync_suffix("call f(x)"), "call f(x)");
        assert_eq!(strip_sync_suffix("fix (#12a)"), "fix (#12a)");
        assert_eq!(strip_sync_suffix("fix (a/b/c#1)"), "fix (a/b/c#1)");
        assert_eq!(strip_sync_suffix("fix (llama/)"), "fix (llama/)");
        assert_eq!(strip_sync_suffix("fix (#123) for x"), "fix (#123) for x");
    }

    #[test]
    fn a_revert_subject_matches_its_commit_modulo_sync_suffixes() {
        let merged = subject_key("ggml : fix foo (llama/19928)");
        assert_eq!(merged, (0, "ggml : fix foo".to_string()));
        for rev in [
            "Revert \"ggml : fix foo (#19928)\" (llama/20001)",
            "Revert \"ggml : fix foo (#19928)\" (#20001)",
            "Revert \"ggml : fix foo (ggml-org/llama.cpp#19928)\"",
            "Revert \"ggml : fix foo\"",
            "Revert \"ggml : fix foo (llama/19928)\"",
        ] {
            assert!(subject_reverts(&subject_key(rev), &merged), "{rev}");
        }
        for other in [
            "Revert \"ggml : fix bar (#19928)\"",
            "ggml : fix foo (#19928)",
            "Revert ggml : fix foo",
            "Revert \"Revert \"ggml : fix foo (#19928)\"\"",
        ] {
            assert!(!subject_reverts(&subject_key(other), &merged), "{other}");
        }
        // A revert of the revert, in both of git's spellings, reverts the revert.
        let first = subject_key("Revert \"ggml : fix foo (#19928)\" (llama/20001)");
        for again in [
            "Revert \"Revert \"ggml : fix foo (#19928)\"\" (llama/20002)",
            "Reapply \"ggml : fix foo (#19928)\" (#20002)",
        ] {
            assert_eq!(subject_key(again).0, 2, "{again}");
            assert!(subject_reverts(&subject_key(again), &first), "{again}");
        }
        assert!(!subject_reverts(
            &subject_key("Revert \"\""),
            &subject_key("")
        ));
    }

    #[test]
    fn the_message_id_is_read_from_gits_wording() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            named_revert(&format!("\nThis reverts commit {id}.\n")).as_deref(),
            Some(id)
        );
        assert_eq!(
            named_revert("x\nThis reverts commit ABCDEF1234, reversing\n").as_deref(),
            Some("abcdef1234")
        );
        assert_eq!(named_revert("This reverts commit abc."), None);
        assert_eq!(named_revert("It reverts commit 0123456789."), None);
    }
}
