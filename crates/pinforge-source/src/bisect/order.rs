//! The order a bisect probes pins in (issue #39 §2). A crate release vendors one upstream
//! commit, and release order is not upstream order: a later release can vendor an older
//! upstream (a bump that was reverted), and several releases can vendor the same one. With the
//! crate's source repository at hand (`--vcs-repo`), each release's `.cargo_vcs_info.json`
//! commit is looked up there and the gitlink of the vendored tree read at it; the vendored
//! commits are then ordered by when that repository first vendored each (the oldest commit of
//! its history that set the gitlink to it), which is upstream order as long as its bumps move
//! forward — and a bump back to an earlier value is named as such. Releases vendoring the same
//! commit are one probe. Without the repository, releases stay in version order, and the
//! report says that upstream order is unknown.

use git2::{Oid, Repository, Sort};
use pinforge_base::error::{Error, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// One commit of the crate's repository that set the gitlink to a new value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SetBy {
    /// The commit (12 hex digits).
    pub commit: String,
    /// Its committer date, `YYYY-MM-DD` (UTC).
    pub date: String,
    /// Its subject line.
    pub subject: String,
    /// An upstream tag its subject names (`b8233`, `v0.6.0`): the bump's own claim, shown as
    /// such, never parsed into an order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_claim: Option<String>,
}

/// The history of one gitlink: every change, oldest first, and the value it set.
#[derive(Debug, Clone, Default)]
pub struct GitlinkHistory {
    /// `(upstream commit, the change)` in history order.
    pub changes: Vec<(String, SetBy)>,
}

impl GitlinkHistory {
    /// The first change that set `upstream`, and its place in the history.
    pub fn first_set(&self, upstream: &str) -> Option<(usize, &SetBy)> {
        self.changes
            .iter()
            .enumerate()
            .find(|(_, (u, _))| u == upstream)
            .map(|(i, (_, s))| (i, s))
    }

    /// A later change that set `upstream` again after another value: a bump back.
    pub fn set_back(&self, upstream: &str) -> Option<&SetBy> {
        let (first, _) = self.first_set(upstream)?;
        self.changes[first + 1..]
            .iter()
            .skip_while(|(u, _)| u == upstream)
            .find(|(u, _)| u == upstream)
            .map(|(_, s)| s)
    }
}

/// The gitlink at `path` in `commit`'s tree (the submodule commit it names), if any.
pub fn gitlink_at(repo: &Repository, commit: &str, path: &Path) -> Result<Option<String>> {
    let oid = Oid::from_str(commit).map_err(|e| Error::Internal(format!("{commit}: {e}")))?;
    let Ok(c) = repo.find_commit(oid) else {
        return Ok(None);
    };
    let tree = c.tree().map_err(|e| git_err(repo, e))?;
    Ok(match tree.get_path(path) {
        Ok(e) if e.kind() == Some(git2::ObjectType::Commit) => Some(e.id().to_string()),
        _ => None,
    })
}

/// Every change of the gitlink at `path` in the history of `tips`, oldest first (parents
/// before children, then by time). A merge counts as a change only against its first parent.
pub fn gitlink_history(repo: &Repository, tips: &[String], path: &Path) -> Result<GitlinkHistory> {
    let mut walk = repo.revwalk().map_err(|e| git_err(repo, e))?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME | Sort::REVERSE)
        .map_err(|e| git_err(repo, e))?;
    let mut pushed = false;
    for t in tips {
        if let Ok(oid) = Oid::from_str(t) {
            if repo.find_commit(oid).is_ok() {
                walk.push(oid).map_err(|e| git_err(repo, e))?;
                pushed = true;
            }
        }
    }
    let mut out = GitlinkHistory::default();
    if !pushed {
        return Ok(out);
    }
    let mut value: HashMap<Oid, Option<Oid>> = HashMap::new();
    for oid in walk {
        let oid = oid.map_err(|e| git_err(repo, e))?;
        let c = repo.find_commit(oid).map_err(|e| git_err(repo, e))?;
        let here = c
            .tree()
            .ok()
            .and_then(|t| t.get_path(path).ok())
            .filter(|e| e.kind() == Some(git2::ObjectType::Commit))
            .map(|e| e.id());
        let before = c
            .parent_ids()
            .next()
            .and_then(|p| value.get(&p).copied().flatten());
        value.insert(oid, here);
        if let (Some(v), true) = (here, here != before) {
            let subject = c.summary().unwrap_or_default().to_string();
            out.changes.push((
                v.to_string(),
                SetBy {
                    commit: oid.to_string()[..12].to_string(),
                    date: date_of(c.committer().when().seconds()),
                    tag_claim: tag_claim(&subject),
                    subject,
                },
            ));
        }
    }
    Ok(out)
}

fn git_err(repo: &Repository, e: git2::Error) -> Error {
    Error::input(
        repo.path().display(),
        format!("reading the crate's source repository: {}", e.message()),
    )
    .with_hint("name a clone of the crate's source repository with --vcs-repo")
}

/// `YYYY-MM-DD` of a Unix time (UTC), without a date library: the civil-from-days rule.
pub(crate) fn date_of(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The upstream tag a bump's subject names: a `bNNNN` build tag (llama.cpp's tags until it
/// moved to semver) or a `vX.Y.Z` tag. The first one, as written.
pub(crate) fn tag_claim(subject: &str) -> Option<String> {
    subject
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .map(|w| w.trim_end_matches('.'))
        .find(|w| {
            let build =
                w.len() >= 5 && w.starts_with('b') && w[1..].bytes().all(|b| b.is_ascii_digit());
            let semver = w
                .strip_prefix('v')
                .is_some_and(|v| semver::Version::parse(v).is_ok());
            build || semver
        })
        .map(str::to_string)
}

/// A release and what it vendors, as ordered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Its index in version order.
    pub release: usize,
    /// The upstream commit it vendors, when known.
    pub upstream: Option<String>,
}

/// The groups to probe, oldest upstream first: each group holds the releases (indices in
/// version order) that vendor the same upstream commit. With every release's upstream known
/// and found in `history`, ordered by first vendoring; otherwise in version order, each release
/// its own group unless it shares a known commit with its neighbour. The second value says
/// whether upstream order was used.
pub fn groups(placed: &[Placed], history: &GitlinkHistory) -> (Vec<Vec<usize>>, bool) {
    let keyed: Option<Vec<(usize, usize)>> = placed
        .iter()
        .map(|p| {
            let u = p.upstream.as_deref()?;
            history.first_set(u).map(|(k, _)| (k, p.release))
        })
        .collect();
    match keyed {
        Some(mut k) if !k.is_empty() => {
            k.sort();
            let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
            for (key, r) in k {
                match out.last_mut() {
                    Some((last, g)) if *last == key => g.push(r),
                    _ => out.push((key, vec![r])),
                }
            }
            (out.into_iter().map(|(_, g)| g).collect(), true)
        }
        _ => {
            let mut out: Vec<Vec<usize>> = Vec::new();
            for (i, p) in placed.iter().enumerate() {
                let same = i > 0 && p.upstream.is_some() && placed[i - 1].upstream == p.upstream;
                match out.last_mut() {
                    Some(g) if same => g.push(p.release),
                    _ => out.push(vec![p.release]),
                }
            }
            (out, false)
        }
    }
}

/// The places where version order disagrees with upstream order: `(older release, newer
/// release)` pairs (indices in version order) where the newer release's group comes first.
/// Only the first newer release of each inversion is named.
pub fn inversions(groups: &[Vec<usize>]) -> Vec<(usize, usize)> {
    let mut rank = HashMap::new();
    for (g, members) in groups.iter().enumerate() {
        for &r in members {
            rank.insert(r, g);
        }
    }
    let mut releases: Vec<usize> = rank.keys().copied().collect();
    releases.sort();
    let mut out = Vec::new();
    for (i, &newer) in releases.iter().enumerate() {
        // The oldest release that sorts after this newer one upstream.
        if let Some(&older) = releases[..i].iter().find(|&&o| rank[&o] > rank[&newer]) {
            out.push((older, newer));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(1_772_928_000), "2026-03-08");
        assert_eq!(date_of(951_782_400), "2000-02-29");
        assert_eq!(date_of(-86_400), "1969-12-31");
    }

    #[test]
    fn a_bumps_subject_claims_build_and_semver_tags_only() {
        assert_eq!(tag_claim("chore: dump to b8233"), Some("b8233".into()));
        assert_eq!(
            tag_claim("chore: update llama.cpp to b8148 amend wrappers"),
            Some("b8148".into())
        );
        assert_eq!(tag_claim("bump-llama-cpp-b10200"), Some("b10200".into()));
        assert_eq!(tag_claim("update to v0.6.0."), Some("v0.6.0".into()));
        for none in [
            "Update to latest master",
            "bump 0.1.140",
            "b12 fix",
            "bab",
            "",
        ] {
            assert_eq!(tag_claim(none), None, "{none}");
        }
    }

    fn hist(values: &[&str]) -> GitlinkHistory {
        GitlinkHistory {
            changes: values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        v.to_string(),
                        SetBy {
                            commit: format!("c{i}"),
                            date: String::new(),
                            subject: String::new(),
                            tag_claim: None,
                        },
                    )
                })
                .collect(),
        }
    }

    // The real case (llama-cpp-rs): 0.1.137/138 vendor A, 0.1.139 C, 0.1.140/141 B (a bump
    // back: B was vendored before C), 0.1.142 D.
    #[test]
    fn releases_are_grouped_and_ordered_by_first_vendoring() {
        let h = hist(&["A", "B", "C", "B", "D"]);
        let placed: Vec<Placed> = ["A", "A", "C", "B", "B", "D"]
            .iter()
            .enumerate()
            .map(|(i, u)| Placed {
                release: i,
                upstream: Some(u.to_string()),
            })
            .collect();
        let (g, upstream) = groups(&placed, &h);
        assert!(upstream);
        assert_eq!(g, vec![vec![0, 1], vec![3, 4], vec![2], vec![5]]);
        assert_eq!(inversions(&g), vec![(2, 3), (2, 4)]);
        assert_eq!(h.set_back("B").map(|s| s.commit.as_str()), Some("c3"));
        assert!(h.set_back("A").is_none());
        // One release of unknown upstream: version order, neighbours with one commit joined.
        let mut p = placed.clone();
        p[5].upstream = None;
        let (g, upstream) = groups(&p, &h);
        assert!(!upstream);
        assert_eq!(g, vec![vec![0, 1], vec![2], vec![3, 4], vec![5]]);
        assert!(inversions(&g).is_empty());
    }
}
