//! `pinforge bisect` (issue #39 §2), the part that needs no build: the range of pins (crate
//! releases, or the commits of a git repository's line: [`git`]), what each release vendors
//! and the order to probe them in ([`order`]), the search ([`search`]), and the
//! `Applied-Upstream` line a result names. The probes themselves (build and smoke of
//! the patch's `Pinforge-Check`) are `trial::bisect`'s.

pub mod git;
pub mod order;
pub mod search;

use crate::audit::Onto;
use crate::recipe::PinSource;
use crate::upstream::index;
use order::{GitlinkHistory, Placed, SetBy};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::workspace::Workspace;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a range's pins are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RangeKind {
    /// Releases of a registry crate (`crate:NAME@OLD..NEW`).
    #[default]
    Crate,
    /// Commits of a git repository (`git:URL@OLD..NEW`).
    Git,
}

/// One pin of the range: a crate release, or a commit of a git range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RangePin {
    /// `crate:NAME@VERSION` or `git:URL@COMMIT`.
    pub spec: String,
    /// The version (a git range: the commit's first 12 hex digits).
    pub version: String,
    /// The `.crate`'s SHA-256, from the registry index (crate releases only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub sha256: Option<Sha256>,
    /// Yanked in the index (still probed: an exact pin fetches it).
    pub yanked: bool,
    /// The tags on this commit (git ranges), `bNNNN` and semver alike, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The crate repository's commit it was packaged from (`.cargo_vcs_info.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crate_commit: Option<String>,
    /// The upstream commit it vendors (the gitlink at that commit), when `--vcs-repo` has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The crate repository's first commit that vendored that upstream commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_vendored: Option<SetBy>,
}

impl RangePin {
    /// The pin as `audit` and the builds take it.
    pub fn onto(&self, plan: &Plan) -> Result<Onto> {
        match (plan.kind, &plan.git_url, &self.upstream, self.sha256) {
            (RangeKind::Git, Some(url), Some(commit), _) => Ok(Onto {
                spec: self.spec.clone(),
                source: PinSource::Git {
                    url: url.clone(),
                    tag: None,
                    commit: commit.clone(),
                },
                sha256_from: None,
                subdir: Some(plan.subdir.clone()),
            }),
            (RangeKind::Crate, _, _, Some(sha256)) => Ok(Onto {
                spec: self.spec.clone(),
                source: PinSource::Crate {
                    name: plan.crate_name.clone().unwrap_or_default(),
                    version: self.version.clone(),
                    sha256,
                },
                sha256_from: Some(format!("sha256 {sha256} taken from the registry index")),
                subdir: None,
            }),
            _ => Err(Error::Internal(format!(
                "bisect pin {} has neither a crate digest nor a git commit",
                self.spec
            ))),
        }
    }

    /// How a person reads it: `0.1.140 (vendors c5a778891ba0)`, or `c5a778891ba0 (b8233)`.
    pub fn label(&self) -> String {
        if let Some(t) = self.tags.first() {
            return format!("{} ({t})", self.version);
        }
        match &self.upstream {
            Some(u) if !u.starts_with(&self.version) => {
                format!("{} (vendors {})", self.version, &u[..u.len().min(12)])
            }
            _ => self.version.clone(),
        }
    }
}

/// The pins to bisect, grouped and in probe order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Plan {
    /// What the pins are (the recorded runs before git ranges were crate ranges).
    #[serde(default)]
    pub kind: RangeKind,
    /// The crate (crate ranges).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crate_name: Option<String>,
    /// The repository (git ranges).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    /// The folder of the tree inside each commit (git ranges; none: the repository's root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
    /// The range as written.
    pub range: String,
    /// Every release in it, in version order.
    pub pins: Vec<RangePin>,
    /// The probe order: groups of releases (indices into `pins`) vendoring one upstream
    /// commit, oldest upstream first.
    pub groups: Vec<Vec<usize>>,
    /// `upstream` (by the crate repository's vendoring history) or `version` (upstream order
    /// unknown).
    pub order: String,
    /// Whether version order and the probe order agree.
    pub order_matches_versions: bool,
    /// What the order rests on, and every place where a later release vendors an older
    /// upstream.
    pub notes: Vec<String>,
}

/// A parsed `--range`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Range {
    /// `crate:NAME@OLD..NEW`.
    Crate(String, semver::Version, semver::Version),
    /// `git:URL@OLD..NEW`.
    Git(git::GitRange),
}

/// Parse `crate:NAME@OLD..NEW` or `git:URL@OLD..NEW`.
pub fn parse_range(spec: &str) -> Result<Range> {
    if let Some(rest) = spec.strip_prefix("git:") {
        return git::parse(spec, rest).map(Range::Git);
    }
    let (n, a, b) = parse_crate_range(spec)?;
    Ok(Range::Crate(n, a, b))
}

/// Parse `crate:NAME@FROM..TO`.
fn parse_crate_range(spec: &str) -> Result<(String, semver::Version, semver::Version)> {
    let bad = |why: &str| {
        Error::input(format!("--range {spec}"), why.to_string())
            .with_hint("write crate:NAME@OLD..NEW (e.g. crate:llama-cpp-sys-2@0.1.137..0.1.144) or git:URL@OLD..NEW (two tags or commits of a repository)")
    };
    let rest = spec.strip_prefix("crate:").ok_or_else(|| {
        bad("a range is of crate releases (crate:) or of a git repository's commits (git:)")
    })?;
    let (name, versions) = rest
        .split_once('@')
        .ok_or_else(|| bad("no `@` before the versions"))?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(bad("not a crate name"));
    }
    let (a, b) = versions
        .split_once("..")
        .ok_or_else(|| bad("no `..` between the versions"))?;
    let parse = |v: &str| semver::Version::parse(v).map_err(|e| bad(&format!("`{v}`: {e}")));
    Ok((name.to_string(), parse(a)?, parse(b)?))
}

/// The plan for a crate range: the releases the index lists, what each vendors when
/// `vcs_repo` (a clone of the crate's source repository) has it, and the order. `subdir` is the
/// recipe's folder of the vendored tree inside the crate (`llama.cpp`): the gitlink read is
/// `path_in_vcs/subdir`.
pub fn plan(
    ws: &Workspace,
    range: &str,
    vcs_repo: Option<&Path>,
    subdir: Option<&str>,
) -> Result<Plan> {
    let (name, from, to) = match parse_range(range)? {
        Range::Crate(n, a, b) => (n, a, b),
        Range::Git(g) => {
            if let Some(p) = vcs_repo {
                return Err(Error::input(
                    format!("--vcs-repo {}", p.display()),
                    "orders crate releases by what they vendor; a git range is already in upstream order",
                )
                .with_hint("leave --vcs-repo out for a git: range"));
            }
            return git::plan(ws, range, &g, subdir);
        }
    };
    // The repository is opened before the registry is read, so a wrong path costs no fetch.
    let repo = vcs_repo.map(open_vcs_repo).transpose()?;
    let releases = index::releases(&name, &from, &to)?;
    let mut pins: Vec<RangePin> = releases
        .iter()
        .map(|r| RangePin {
            spec: format!("crate:{name}@{}", r.version),
            version: r.version.to_string(),
            sha256: Some(r.sha256),
            yanked: r.yanked,
            tags: Vec::new(),
            crate_commit: None,
            upstream: None,
            first_vendored: None,
        })
        .collect();
    let mut notes = Vec::new();
    let mut history = GitlinkHistory::default();
    match (repo.as_ref().zip(vcs_repo), subdir) {
        (Some((repo, repo_path)), Some(sub)) => {
            history = read_vendoring(ws, &name, &mut pins, repo, repo_path, sub, &mut notes)?;
        }
        (Some(_), None) => notes.push(
            "the recipe names no subfolder of the crate: its tree is the crate itself, so no gitlink names an upstream commit; releases stay in version order".into(),
        ),
        (None, _) => notes.push(
            "upstream order unknown (no --vcs-repo): releases are probed in version order, and a later release may vendor an older upstream".into(),
        ),
    }
    let placed: Vec<Placed> = pins
        .iter()
        .enumerate()
        .map(|(i, p)| Placed {
            release: i,
            upstream: p.upstream.clone(),
        })
        .collect();
    let (groups, by_upstream) = order::groups(&placed, &history);
    let inversions = order::inversions(&groups);
    for (older, newer) in &inversions {
        notes.push(inversion_note(&pins[*older], &pins[*newer], &history));
    }
    if vcs_repo.is_some() && subdir.is_some() && !by_upstream {
        notes.push("some release's upstream commit is unknown (see above): releases are probed in version order".into());
    }
    Ok(Plan {
        kind: RangeKind::Crate,
        crate_name: Some(name),
        git_url: None,
        subdir: None,
        range: range.into(),
        pins,
        order: if by_upstream { "upstream" } else { "version" }.into(),
        order_matches_versions: inversions.is_empty(),
        groups,
        notes,
    })
}

/// Fill each pin's crate commit, upstream commit and first vendoring from `repo_path`.
fn open_vcs_repo(repo_path: &Path) -> Result<git2::Repository> {
    git2::Repository::open(repo_path).map_err(|e| {
        Error::input(
            format!("--vcs-repo {}", repo_path.display()),
            format!("not a git repository: {}", e.message()),
        )
        .with_hint("name a clone of the crate's source repository (for llama-cpp-sys-2: https://github.com/utilityai/llama-cpp-rs)")
    })
}

#[allow(clippy::too_many_arguments)]
fn read_vendoring(
    ws: &Workspace,
    name: &str,
    pins: &mut [RangePin],
    repo: &git2::Repository,
    repo_path: &Path,
    subdir: &str,
    notes: &mut Vec<String>,
) -> Result<GitlinkHistory> {
    let mut link: Option<PathBuf> = None;
    for p in pins.iter_mut() {
        let Some(sha256) = p.sha256 else { continue };
        let Some(v) = index::vcs_info(ws, name, &p.version, sha256)? else {
            notes.push(format!(
                "{}: the crate carries no .cargo_vcs_info.json, so what it vendors is unknown",
                p.version
            ));
            continue;
        };
        let path = Path::new(&v.path_in_vcs).join(subdir);
        p.upstream = order::gitlink_at(repo, &v.sha1, &path)?;
        if p.upstream.is_none() {
            notes.push(format!(
                "{}: {} has no commit {} with a gitlink at {}",
                p.version,
                repo_path.display(),
                &v.sha1[..12],
                path.display()
            ));
        }
        p.crate_commit = Some(v.sha1);
        link.get_or_insert(path);
    }
    let tips: Vec<String> = pins.iter().filter_map(|p| p.crate_commit.clone()).collect();
    let history = match &link {
        Some(path) => order::gitlink_history(repo, &tips, path)?,
        None => GitlinkHistory::default(),
    };
    for p in pins.iter_mut() {
        if let Some(u) = &p.upstream {
            p.first_vendored = history.first_set(u).map(|(_, s)| s.clone());
        }
    }
    if let Some(path) = &link {
        notes.push(format!(
            "ordered by when {} first vendored each upstream commit (the gitlink {}), which is upstream order as long as its bumps move forward",
            repo_path.display(),
            path.display()
        ));
    }
    Ok(history)
}

fn inversion_note(older: &RangePin, newer: &RangePin, h: &GitlinkHistory) -> String {
    let first = |p: &RangePin| {
        p.first_vendored
            .as_ref()
            .map(|s| {
                format!(
                    ", first vendored by {} {} “{}”",
                    s.commit, s.date, s.subject
                )
            })
            .unwrap_or_default()
    };
    let back = newer
        .upstream
        .as_deref()
        .and_then(|u| h.set_back(u))
        .map(|s| {
            format!(
                "; the repository set it back in {} {} “{}”",
                s.commit, s.date, s.subject
            )
        })
        .unwrap_or_default();
    format!(
        "release order is not upstream order: {} {}{} vendors an older upstream than {} {}{}{back}",
        newer.version,
        newer
            .upstream
            .as_deref()
            .map(|u| format!("(vendors {})", &u[..12.min(u.len())]))
            .unwrap_or_default(),
        first(newer),
        older.version,
        older
            .upstream
            .as_deref()
            .map(|u| format!("(vendors {})", &u[..12.min(u.len())]))
            .unwrap_or_default(),
        first(older),
    )
}

/// The first release (by version) among the groups from `first_good` on: the first crate
/// version without the defect when the order is upstream's (a later group can hold an
/// earlier version).
pub fn first_fixed_release(plan: &Plan, first_good: usize) -> Option<&RangePin> {
    if plan.kind == RangeKind::Git {
        // A git range's order is upstream's: the first good commit is the first fixed one.
        return plan.groups.get(first_good).map(|g| &plan.pins[g[0]]);
    }
    plan.groups[first_good..]
        .iter()
        .flatten()
        .map(|&i| &plan.pins[i])
        .min_by(|a, b| {
            let v = |p: &RangePin| semver::Version::parse(&p.version).ok();
            v(a).cmp(&v(b))
        })
}

/// The `Applied-Upstream:` value a bisect names: the first tag (the bump's own claim) and the
/// upstream commit when the order is upstream's, the first fixed release, and how it was found.
pub fn applied_upstream(plan: &Plan, first_good: usize, today: &str) -> String {
    if plan.kind == RangeKind::Git {
        return git::applied_upstream(plan, first_good, today);
    }
    let group = &plan.groups[first_good];
    let head = &plan.pins[group[0]];
    let fixed = first_fixed_release(plan, first_good).unwrap_or(head);
    let krate = format!(
        "crate {} {}",
        plan.crate_name.as_deref().unwrap_or_default(),
        fixed.version
    );
    match (&head.upstream, plan.order.as_str()) {
        (Some(u), "upstream") => {
            let by = head.first_vendored.as_ref();
            let tag = by.and_then(|s| s.tag_claim.clone());
            let commit = &u[..12.min(u.len())];
            let named = match (&tag, by) {
                (Some(t), Some(s)) => format!(
                    "{t} (llama.cpp {commit}, tag as named by the crate's bump {}",
                    s.commit
                ),
                _ => format!("llama.cpp {commit} (no tag named by the crate's bump"),
            };
            format!("{named}; first {krate}; pinforge bisect {today})")
        }
        _ => format!("{krate} (pinforge bisect {today}, in version order: upstream order unknown)"),
    }
}

/// `bisect --write`: set the patch's `Applied-Upstream` to `value` in the recipe's bundle
/// folder, through the bundle's transactional rewrite, under the workspace lock. `bisected`
/// is the patch as the bisect read it: a patch edited while the probes ran is refused, since
/// the answer is about the text (and the check) that was read.
pub fn write_applied_upstream(
    ws: &Workspace,
    recipe: &crate::recipe::Recipe,
    file: &str,
    bisected: &[u8],
    value: &str,
) -> Result<PathBuf> {
    let dir = recipe.patches_dir.clone().ok_or_else(|| {
        Error::input(
            format!("recipe {}", recipe.name),
            "uses the bundle embedded in pinforge, which cannot be written",
        )
        .with_hint("point the recipe's `patches` at a folder (e.g. patches = \"../patches\") and bisect again")
    })?;
    pinforge_base::text::refuse_control(&format!("Applied-Upstream of {file}"), value)?;
    let _lock = ws.lock()?;
    let bundle = crate::patch::Bundle::load(&dir)?;
    let p = bundle
        .files
        .iter()
        .find(|(id, _)| id.as_str() == file)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            Error::input(dir.join(file).display(), "is not a patch of the bundle")
                .with_hint("name a patch the series lists")
        })?;
    if p.bytes != bisected {
        return Err(Error::input(
            dir.join(file).display(),
            "changed while the bisect ran; its answer is about the text it read, so nothing was written",
        )
        .with_hint("bisect again (the probe builds are cached) with --write"));
    }
    let bytes = crate::rebase::with_applied_upstream(p, value);
    crate::patch::export::rewrite_patches(&dir, &[(file.to_string(), bytes)])?;
    Ok(dir.join(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P1: &str = "0001-batch-size-ubatch-reserve-pos-for-mrope.patch";

    /// The shipped recipe and bundle, copied: `--write` rewrites the copy.
    fn shipped() -> (tempfile::TempDir, crate::recipe::Recipe) {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let d = tempfile::tempdir().expect("tempdir");
        for sub in ["recipes", "patches"] {
            std::fs::create_dir_all(d.path().join(sub)).expect("mkdir");
            for e in std::fs::read_dir(root.join(sub)).expect("read") {
                let e = e.expect("entry");
                if e.path().is_file() {
                    std::fs::copy(e.path(), d.path().join(sub).join(e.file_name())).expect("copy");
                }
            }
        }
        let r =
            crate::recipe::Recipe::load(&d.path().join("recipes/mrope-cpu.toml")).expect("load");
        (d, r)
    }

    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .expect("read")
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_sets_the_header_of_that_patch_only_and_refuses_a_patch_edited_meanwhile() {
        let (d, recipe) = shipped();
        std::fs::create_dir_all(d.path().join("ws")).expect("mkdir ws");
        let ws = Workspace::new(&d.path().join("ws")).expect("ws");
        let patches = d.path().join("patches");
        let read = std::fs::read(patches.join(P1)).expect("read");
        let before = snapshot(&patches);
        let value = "b8233 (llama.cpp c5a778891ba0; first crate llama-cpp-sys-2 0.1.139; pinforge bisect 2026-12-07)";

        // Edited while the probes ran: refused, nothing changes.
        let stale = [read.as_slice(), b"\n"].concat();
        let e = write_applied_upstream(&ws, &recipe, P1, &stale, value).expect_err("stale");
        assert!(
            e.to_string().contains("changed while the bisect ran"),
            "{e}"
        );
        assert_eq!(snapshot(&patches), before);

        // A value with a control character would forge a header line.
        let e = write_applied_upstream(&ws, &recipe, P1, &read, "b1\nFixes: #1").expect_err("ctl");
        assert!(e.to_string().contains("Applied-Upstream"), "{e}");
        assert_eq!(snapshot(&patches), before);

        // Not in the series.
        let e = write_applied_upstream(&ws, &recipe, "9999-nope.patch", &read, value)
            .expect_err("unknown");
        assert!(
            e.to_string().contains("is not a patch of the bundle"),
            "{e}"
        );

        write_applied_upstream(&ws, &recipe, P1, &read, value).expect("write");
        let after = snapshot(&patches);
        assert_eq!(after.len(), before.len());
        for ((n, a), (_, b)) in before.iter().zip(&after) {
            if n == P1 {
                let text = String::from_utf8_lossy(b);
                assert!(
                    text.lines()
                        .any(|l| l == format!("Applied-Upstream: {value}")),
                    "{text}"
                );
                // Only the header changed: the diff itself is byte for byte the same.
                let tail = |t: &[u8]| {
                    let s = String::from_utf8_lossy(t).into_owned();
                    s[s.find("\n---").unwrap_or(0)..].to_string()
                };
                assert_eq!(tail(a), tail(b));
            } else {
                assert_eq!(a, b, "{n} changed");
            }
        }
        // And the bundle still loads with the field read back.
        let b = crate::patch::Bundle::load(&patches).expect("reload");
        assert!(b.files.iter().any(|(id, p)| id.as_str() == P1
            && String::from_utf8_lossy(&p.bytes).contains("Applied-Upstream: b8233")));
    }
}
