//! The plan of a bisect over a range of one git repository's commits (`git:URL@OLD..NEW`,
//! issue #39 §2): every commit on the first-parent line from OLD to NEW, both included, in
//! that order. First-parent order is the order upstream made its history in (llama.cpp merges
//! every PR as one commit on `master`), so no release order can disagree with it and each
//! commit is its own group. The tags on the line (llama.cpp's `bNNNN` build tags and, since
//! it moved to semver, `vX.Y.Z` or `X.Y.Z`) are read as they are and never compared: the
//! first tag at or after the first fixed commit is the one an operator can pin.

use super::{Plan, RangePin};
use crate::git::GitContext;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use std::collections::BTreeMap;
use std::path::Path;

/// The most commits a range may hold: enough for a year of llama.cpp (about 4,000 commits,
/// 12 probes), few enough that a wrong pair of ends is refused before a walk of all history.
pub const MAX_COMMITS: usize = 20_000;

/// A parsed `git:URL@OLD..NEW`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRange {
    /// The repository URL or path, as written.
    pub url: String,
    /// The oldest end (a tag or commit id).
    pub from: String,
    /// The newest end.
    pub to: String,
}

/// Parse the part after `git:`. The URL may hold `@` (`ssh://git@host/…`): the last one
/// starts the revisions.
pub fn parse(spec: &str, rest: &str) -> Result<GitRange> {
    let bad = |why: &str| {
        Error::input(format!("--range {spec}"), why.to_string()).with_hint(
            "write git:URL@OLD..NEW with two tags or commit ids, e.g. git:../llama.cpp@b8148..b8233",
        )
    };
    let (url, revs) = rest
        .rsplit_once('@')
        .ok_or_else(|| bad("no `@` before the revisions"))?;
    if url.is_empty() || url.chars().any(char::is_control) {
        return Err(bad("no repository URL, or one with a control character"));
    }
    let (from, to) = revs
        .split_once("..")
        .ok_or_else(|| bad("no `..` between the revisions"))?;
    for r in [from, to] {
        if r.is_empty()
            || r.starts_with('-')
            || r.contains("..")
            || r.ends_with(".lock")
            || r.chars()
                .any(|c| c.is_whitespace() || c.is_control() || ":^~?*[\\@{".contains(c))
        {
            return Err(bad(&format!("`{r}` is not a tag name or a commit id")));
        }
    }
    Ok(GitRange {
        url: url.into(),
        from: from.into(),
        to: to.into(),
    })
}

/// The repository's short name (`llama.cpp` for `…/ggml-org/llama.cpp.git`), for the header.
fn repo_name(url: &str) -> String {
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or(url);
    let name = last.strip_suffix(".git").unwrap_or(last);
    if name.is_empty() {
        "upstream".into()
    } else {
        name.into()
    }
}

/// Fetch every branch and tag of `url` into the workspace's cache repository for it (the one
/// git pins build from, so the probes fetch nothing), under the workspace lock.
fn fetch_all(ws: &Workspace, url: &str) -> Result<git2::Repository> {
    let _lock = ws.lock()?;
    let path = crate::upstream::git_cache_repo(ws, url);
    let fresh = !path.exists();
    let repo = if fresh {
        fsx::create_dir_all(&ws.git_cache())?;
        git2::Repository::init_bare(&path).git_at(&path.display())?
    } else {
        git2::Repository::open_bare(&path).git_at(&path.display())?
    };
    if let Err(e) = fetch_into(&repo, url) {
        if fresh {
            // A URL that cannot be fetched leaves no empty cache repository behind it.
            drop(repo);
            let _ = std::fs::remove_dir_all(&path);
        }
        return Err(e);
    }
    Ok(repo)
}

fn fetch_into(repo: &git2::Repository, url: &str) -> Result<()> {
    let mut remote = repo.remote_anonymous(url).git_at(&url)?;
    let mut opts = git2::FetchOptions::new();
    opts.download_tags(git2::AutotagOption::None);
    // The whole history: a range's commits are only known once its ends' ancestry is here.
    let refspecs = [
        "+refs/heads/*:refs/remotes/bisect/*",
        "+refs/tags/*:refs/tags/*",
    ];
    remote
        .fetch(&refspecs, Some(&mut opts), None)
        .map_err(|e| {
            Error::input(url, format!("cannot fetch its branches and tags: {}", e.message()))
                .with_hint("check the URL, and that the repository is reachable; a local clone (git:PATH@…) is fastest, since a range needs the history between its ends")
        })?;
    Ok(())
}

/// A revision of the range: a tag, a branch as fetched, or a commit id (full or abbreviated).
fn resolve<'r>(repo: &'r git2::Repository, rev: &str, spec: &str) -> Result<git2::Commit<'r>> {
    let names = [
        format!("refs/tags/{rev}"),
        format!("refs/remotes/bisect/{rev}"),
    ];
    for n in &names {
        if let Ok(c) = repo.find_reference(n).and_then(|r| r.peel_to_commit()) {
            return Ok(c);
        }
    }
    let oid_like = rev.len() >= 7 && rev.bytes().all(|b| b.is_ascii_hexdigit());
    if oid_like {
        if let Ok(c) = repo.revparse_single(rev).and_then(|o| o.peel_to_commit()) {
            return Ok(c);
        }
    }
    Err(Error::input(
        format!("--range {spec}"),
        format!("`{rev}` is no tag, branch or commit of the repository"),
    )
    .with_hint("name a tag (b8233, v0.6.0) or a commit id of at least 7 hex digits that the repository has"))
}

/// The tags of every commit, each commit's sorted by name (deterministic).
fn tags_by_commit(repo: &git2::Repository) -> Result<BTreeMap<git2::Oid, Vec<String>>> {
    let mut map: BTreeMap<git2::Oid, Vec<String>> = BTreeMap::new();
    let refs = repo.references_glob("refs/tags/*").git_at(&"tags")?;
    for r in refs.flatten() {
        let (Some(name), Ok(c)) = (r.shorthand().map(str::to_string), r.peel_to_commit()) else {
            continue; // a tag of a tree or blob, or a name that is not UTF-8
        };
        map.entry(c.id()).or_default().push(name);
    }
    for v in map.values_mut() {
        v.sort();
    }
    Ok(map)
}

/// The first-parent line from `from` to `to`, oldest first, both included.
fn line<'r>(
    from: &git2::Commit<'r>,
    to: &git2::Commit<'r>,
    r: &GitRange,
    spec: &str,
) -> Result<Vec<git2::Commit<'r>>> {
    let mut chain = vec![to.clone()];
    while chain.last().map(|c| c.id()) != Some(from.id()) {
        if chain.len() > MAX_COMMITS {
            return Err(Error::input(
                format!("--range {spec}"),
                format!(
                    "more than {MAX_COMMITS} commits from {} back to {} on the first-parent line",
                    r.to, r.from
                ),
            )
            .with_hint("narrow the range: bisect between two tags a few thousand commits apart"));
        }
        let Some(c) = chain.last().and_then(|c| c.parent(0).ok()) else {
            return Err(Error::input(
                format!("--range {spec}"),
                format!(
                    "{} is not on the first-parent line of {}: the range runs backwards, or {} was merged from a side branch",
                    r.from, r.to, r.from
                ),
            )
            .with_hint("write the older revision first, and name commits of the main line (as `git log --first-parent` lists them)"));
        };
        chain.push(c);
    }
    chain.reverse();
    Ok(chain)
}

/// The plan of a git range. `subdir` is the recipe's folder of the tree inside its pin: kept
/// when the oldest commit has that folder, else the repository's root is the tree (a crate's
/// `llama.cpp/` is the whole of llama.cpp's own repository), and the notes say which.
pub fn plan(ws: &Workspace, spec: &str, r: &GitRange, subdir: Option<&str>) -> Result<Plan> {
    let repo = fetch_all(ws, &r.url)?;
    let from = resolve(&repo, &r.from, spec)?;
    let to = resolve(&repo, &r.to, spec)?;
    let chain = line(&from, &to, r, spec)?;
    let tags = tags_by_commit(&repo)?;
    let mut notes = vec![format!(
        "{} commits on the first-parent line from {} to {} (both included), in the order upstream made them",
        chain.len(),
        r.from,
        r.to
    )];
    let tree_dir = match subdir {
        Some(s) => {
            let has = from
                .tree()
                .ok()
                .and_then(|t| t.get_path(Path::new(s)).ok())
                .is_some_and(|e| e.kind() == Some(git2::ObjectType::Tree));
            if has {
                Some(s.to_string())
            } else {
                notes.push(format!(
                    "the recipe's tree folder `{s}` is not in {} at {}: the repository's root is the tree",
                    r.url, r.from
                ));
                None
            }
        }
        None => None,
    };
    let pins: Vec<RangePin> = chain
        .iter()
        .map(|c| {
            let full = c.id().to_string();
            RangePin {
                spec: format!("git:{}@{full}", r.url),
                version: full[..12].to_string(),
                sha256: None,
                yanked: false,
                tags: tags.get(&c.id()).cloned().unwrap_or_default(),
                crate_commit: None,
                upstream: Some(full),
                first_vendored: None,
            }
        })
        .collect();
    Ok(Plan {
        kind: super::RangeKind::Git,
        crate_name: None,
        git_url: Some(r.url.clone()),
        subdir: tree_dir,
        range: spec.into(),
        groups: (0..pins.len()).map(|i| vec![i]).collect(),
        pins,
        order: "upstream".into(),
        order_matches_versions: true,
        notes,
    })
}

/// The `Applied-Upstream:` value of a git bisect: the first tag at or after the first fixed
/// commit on the range's line (llama.cpp tags each build, so this is the release an operator
/// can pin), and the commit itself.
pub fn applied_upstream(plan: &Plan, first_good: usize, today: &str) -> String {
    let name = repo_name(plan.git_url.as_deref().unwrap_or_default());
    let first = &plan.pins[plan.groups[first_good][0]];
    let tagged = plan.groups[first_good..]
        .iter()
        .map(|g| &plan.pins[g[0]])
        .find(|p| !p.tags.is_empty());
    match tagged {
        Some(t) if t.version == first.version => format!(
            "{} ({name} {}, the first fixed commit; pinforge bisect {today})",
            t.tags[0], first.version
        ),
        Some(t) => format!(
            "{} ({name} {}; first fixed commit {name} {}; pinforge bisect {today})",
            t.tags[0], t.version, first.version
        ),
        None => format!(
            "{name} {} (the first fixed commit; no tag at or after it up to {}; pinforge bisect {today})",
            first.version,
            plan.pins.last().map(|p| p.version.as_str()).unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(
        repo: &git2::Repository,
        parent: Option<git2::Oid>,
        file: &str,
        text: &str,
    ) -> git2::Oid {
        let sig = git2::Signature::new("t", "t@t.invalid", &git2::Time::new(1_700_000_000, 0))
            .expect("sig");
        let mut b = repo.treebuilder(None).expect("tb");
        let blob = repo.blob(text.as_bytes()).expect("blob");
        b.insert(file, blob, 0o100644).expect("insert");
        let tree = repo.find_tree(b.write().expect("write")).expect("tree");
        let parents: Vec<git2::Commit> = parent
            .map(|p| repo.find_commit(p).expect("parent"))
            .into_iter()
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, text, &tree, &refs)
            .expect("commit")
    }

    /// A line of five commits tagged b1 (first), v0.6.0 (fourth) and 0.6.1 (fifth).
    fn upstream() -> (tempfile::TempDir, Vec<git2::Oid>) {
        let d = tempfile::tempdir().expect("tempdir");
        let repo = git2::Repository::init(d.path()).expect("init");
        let mut ids = Vec::new();
        for i in 0..5 {
            let id = commit(&repo, ids.last().copied(), "f", &format!("c{i}"));
            ids.push(id);
        }
        for (i, t) in [(0, "b1"), (3, "v0.6.0"), (4, "0.6.1")] {
            let o = repo.find_object(ids[i], None).expect("obj");
            repo.tag_lightweight(t, &o, false).expect("tag");
        }
        (d, ids)
    }

    #[test]
    fn parse_takes_the_last_at_and_refuses_what_git_would_not_name() {
        let r = parse("git:ssh://git@h/x@b1..v0.6.0", "ssh://git@h/x@b1..v0.6.0").expect("ok");
        assert_eq!(
            (r.url.as_str(), r.from.as_str(), r.to.as_str()),
            ("ssh://git@h/x", "b1", "v0.6.0")
        );
        for bad in [
            "x@b1", "@a..b", "x@a..", "x@-a..b", "x@a..b~1", "x@a b..c", "x\n@a..b",
        ] {
            let e = parse(&format!("git:{bad}"), bad).expect_err(bad);
            assert!(e.to_string().contains("--range git:"), "{e}");
        }
    }

    #[test]
    fn the_plan_is_the_first_parent_line_with_its_tags_and_both_tag_schemes() {
        let (d, ids) = upstream();
        let ws_dir = tempfile::tempdir().expect("ws");
        let ws = Workspace::new(ws_dir.path()).expect("ws");
        let url = d.path().to_str().expect("utf8");
        let spec = format!("git:{url}@b1..0.6.1");
        let r = parse(&spec, &spec[4..]).expect("parse");
        let p = plan(&ws, &spec, &r, Some("llama.cpp")).expect("plan");
        assert_eq!(p.pins.len(), 5);
        assert_eq!(p.groups.len(), 5);
        assert_eq!(p.order, "upstream");
        assert!(p.order_matches_versions);
        assert_eq!(
            p.pins[0].upstream.as_deref(),
            Some(ids[0].to_string().as_str())
        );
        assert_eq!(p.pins[3].tags, ["v0.6.0"]);
        assert_eq!(p.pins[4].tags, ["0.6.1"]);
        // The recipe's crate folder is not in the repository: its root is the tree.
        assert_eq!(p.subdir, None);
        assert!(
            p.notes.iter().any(|n| n.contains("root is the tree")),
            "{:?}",
            p.notes
        );
        // The first fixed commit untagged: the first tag after it names the release.
        let line = applied_upstream(&p, 1, "2026-12-07");
        assert!(
            line.starts_with(&format!(
                "v0.6.0 ({} {}",
                Path::new(url)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default(),
                &ids[3].to_string()[..12]
            )),
            "{line}"
        );
        assert!(line.contains(&ids[1].to_string()[..12]), "{line}");
        // Fixed at a tagged commit: that tag.
        assert!(applied_upstream(&p, 4, "2026-12-07").starts_with("0.6.1 ("));
        // An abbreviated commit works as an end, and the range can be one commit.
        let short = &ids[2].to_string()[..9];
        let spec = format!("git:{url}@{short}..{short}");
        let p = plan(&ws, &spec, &parse(&spec, &spec[4..]).expect("parse"), None).expect("one");
        assert_eq!(p.pins.len(), 1);
        assert!(
            applied_upstream(&p, 0, "d").contains("no tag at or after it"),
            "{}",
            applied_upstream(&p, 0, "d")
        );
    }

    #[test]
    fn a_backwards_range_an_unknown_end_and_a_bad_url_are_refused_by_name() {
        let (d, _) = upstream();
        let ws_dir = tempfile::tempdir().expect("ws");
        let ws = Workspace::new(ws_dir.path()).expect("ws");
        let url = d.path().to_str().expect("utf8");
        for (revs, says) in [
            ("0.6.1..b1", "is not on the first-parent line"),
            ("b1..b99", "`b99` is no tag, branch or commit"),
        ] {
            let spec = format!("git:{url}@{revs}");
            let e =
                plan(&ws, &spec, &parse(&spec, &spec[4..]).expect("parse"), None).expect_err(revs);
            assert!(e.to_string().contains(says), "{e}");
            assert!(e.to_string().contains(&spec), "{e}");
        }
        let missing = d.path().join("nope");
        let spec = format!("git:{}@b1..b2", missing.display());
        let e = plan(&ws, &spec, &parse(&spec, &spec[4..]).expect("parse"), None).expect_err("url");
        assert!(e.to_string().contains("cannot fetch"), "{e}");
        assert!(
            !crate::upstream::git_cache_repo(&ws, &missing.display().to_string()).exists(),
            "a failed fetch leaves no cache repository"
        );
    }

    #[test]
    fn the_repository_name_comes_from_the_url() {
        assert_eq!(
            repo_name("https://github.com/ggml-org/llama.cpp.git"),
            "llama.cpp"
        );
        assert_eq!(repo_name("git@github.com:ggml-org/llama.cpp"), "llama.cpp");
        assert_eq!(repo_name("/src/whisper.cpp/"), "whisper.cpp");
        assert_eq!(repo_name(""), "upstream");
    }
}
