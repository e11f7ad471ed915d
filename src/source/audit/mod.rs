//! The patch bundle against a newer upstream (issue #9): for every patch in series order a
//! verdict — merged, superseded, carries, carries-review, conflicts — with the evidence it
//! rests on, strongest first. Nothing is ever dropped silently: every verdict names its
//! evidence and how strong it is.
//!
//! How a verdict is reached. The old pin's tree and its patched tree (one commit per patch)
//! and the new pin's tree are materialized and verified exactly as a recipe's pin is. A scratch
//! clone of the new tree then takes the patches in order; for each one:
//! - history (git pins only): the patch's `Upstream-Commit` is an ancestor of the new pin or
//!   was cherry-picked into it; the log between the pins names its PR (strong) or issue
//!   (moderate) in a subject; a body-only mention is weak and never decides; a reverted commit
//!   counts against, not for.
//! - content (every pin): the patch reverse-applies on the new tree; a three-way cherry-pick of
//!   its vendor commit onto the new base (libgit2 `cherrypick_commit`) is empty; it applies
//!   (and whether it moved); upstream changed the function it lands in; or the hunk's lines
//!   changed upstream (the three versions are shown) or conflict (the diff3 region is shown).
//!
//! A carried patch is committed onto the scratch tree before the next patch is examined, so
//! that a later patch is judged against what it would really apply on.

mod content;
pub mod history;

use crate::base::digest::GitOid;
use crate::base::error::{Error, GitContext, IoContext, Result};
use crate::base::workspace::Workspace;
use crate::source::patch::{apply, Bundle, PatchFile};
use crate::source::recipe::{PinSource, Recipe};
use crate::source::upstream::{self, ResolvedPin, Tree};
use git2::Repository;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The verdict for one patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Upstream has the change: the patch leaves the series.
    Merged,
    /// Upstream changed exactly these lines, differently: a person confirms the fix is there.
    Superseded,
    /// Applies cleanly on the new base.
    Carries,
    /// Applies, but upstream changed the function or region it lands in: review before
    /// carrying.
    CarriesReview,
    /// A three-way merge conflicts.
    Conflicts,
}

impl Verdict {
    /// The word shown and written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Merged => "merged",
            Verdict::Superseded => "superseded",
            Verdict::Carries => "carries",
            Verdict::CarriesReview => "carries-review",
            Verdict::Conflicts => "conflicts",
        }
    }
}

/// How much a piece of evidence weighs. Ordered strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Strength {
    /// Decides on its own.
    Strong,
    /// Supports a verdict, does not decide it.
    Moderate,
    /// A hint only; never decides.
    Weak,
    /// Context: what was or could not be looked at.
    Note,
}

/// What a piece of evidence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EvidenceKind {
    /// The patch's `Upstream-Commit` is (or is not) an ancestor of the new pin.
    UpstreamCommitAncestor,
    /// A commit of the new pin's history is a cherry-pick of the patch's upstream commit.
    CherryPicked,
    /// A commit subject between the pins references the patch's PR or issue.
    LogReference,
    /// Only a commit body references it.
    LogReferenceBody,
    /// A referenced or ancestor commit was reverted later.
    Reverted,
    /// The history range that was read (a note).
    History,
    /// No history to consult (registry tree, tarball, folder, shallow fetch).
    NoHistory,
    /// The patch reverse-applies on the new tree.
    ReverseApplies,
    /// A three-way cherry-pick onto the new base changes nothing.
    CherryPickEmpty,
    /// The patch applies on the new base.
    Applies,
    /// It applies, at other lines.
    Moved,
    /// It applies only by a three-way merge.
    ThreeWay,
    /// Upstream changed the function or region the patch lands in.
    RegionChanged,
    /// Upstream changed the patch's lines: the three versions.
    Superseded,
    /// A three-way merge conflicts: the conflict.
    Conflict,
}

/// One piece of evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Evidence {
    /// What it is.
    pub kind: EvidenceKind,
    /// What was found, for a person.
    pub detail: String,
    /// How much it weighs.
    pub strength: Strength,
}

impl Evidence {
    /// Evidence of `kind`.
    pub fn new(kind: EvidenceKind, detail: impl Into<String>, strength: Strength) -> Evidence {
        Evidence {
            kind,
            detail: detail.into(),
            strength,
        }
    }
}

/// What the rebase does with a patch.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Carried: the patch file as it is to be written (the original bytes when nothing moved).
    Carried {
        /// The file's bytes.
        bytes: Vec<u8>,
    },
    /// Leaves the series: `Applied-Upstream` as the evidence says.
    Dropped {
        /// The value for `Applied-Upstream`.
        applied_upstream: String,
    },
    /// Needs a person.
    Stopped,
}

/// The audit of one patch.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PatchAudit {
    /// Patch file name.
    pub file: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Evidence, strongest first.
    pub evidence: Vec<Evidence>,
    /// What a rebase does with it.
    #[serde(skip)]
    pub outcome: Outcome,
}

/// The audit of a bundle.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Audit {
    /// The new pin as given.
    pub onto: String,
    /// The old pin (the recipe's).
    pub from: String,
    /// The new pin, verified.
    pub pin: ResolvedPin,
    /// Where the new pin's SHA-256 came from (crate pins named on the command line: the
    /// registry index; tarball and folder pins: the file itself, now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256_from: Option<String>,
    /// The history range read (git pins), or why there was none.
    pub history: String,
    /// One entry per patch, in series order.
    pub patches: Vec<PatchAudit>,
}

impl Audit {
    /// Whether every patch carries cleanly (exit 0); anything else needs a decision.
    pub fn all_carry(&self) -> bool {
        self.patches.iter().all(|p| p.verdict == Verdict::Carries)
    }
}

/// The JSON word of a unit enum value (`strong`, `reverse-applies`), for human output.
pub fn word<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A pin named on the command line, with where its digest came from.
#[derive(Debug, Clone)]
pub struct Onto {
    /// As written.
    pub spec: String,
    /// The pin source.
    pub source: PinSource,
    /// Where the digest came from, when not from the user.
    pub sha256_from: Option<String>,
}

/// Parse `crate:NAME@VERSION`, `git:URL@REV`, `tarball:PATH` or `dir:PATH`. A crate's SHA-256
/// is taken from the registry index the way cargo takes it; a tarball's or folder's is computed
/// now (trust on first use, recorded in the rebased recipe).
pub fn parse_onto(spec: &str) -> Result<Onto> {
    let bad = |why: &str| {
        Error::input(format!("--onto {spec}"), why.to_string()).with_hint(
            "write crate:NAME@VERSION, git:URL@REV (a full commit id or a tag), tarball:PATH or dir:PATH",
        )
    };
    let (kind, rest) = spec.split_once(':').ok_or_else(|| bad("no pin kind"))?;
    match kind {
        "crate" => {
            let (name, version) = rest
                .split_once('@')
                .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                .ok_or_else(|| bad("a crate pin is crate:NAME@VERSION"))?;
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                || semver::Version::parse(version).is_err()
            {
                return Err(bad("not a crate name and exact version"));
            }
            let sha256 = upstream::registry_cksum(name, version)?;
            Ok(Onto {
                spec: spec.into(),
                source: PinSource::Crate {
                    name: name.into(),
                    version: version.into(),
                    sha256,
                },
                sha256_from: Some(format!(
                    "sha256 {sha256} taken from the registry index (the `cksum` cargo records as `checksum`)"
                )),
            })
        }
        "git" => {
            let (url, rev) = rest
                .rsplit_once('@')
                .filter(|(u, r)| !u.is_empty() && !r.is_empty())
                .ok_or_else(|| bad("a git pin is git:URL@REV"))?;
            let full = rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit());
            let source = if full {
                PinSource::Git {
                    url: url.into(),
                    tag: None,
                    commit: rev.to_ascii_lowercase(),
                }
            } else {
                if rev.starts_with('-')
                    || rev.contains("..")
                    || rev.ends_with(".lock")
                    || rev
                        .chars()
                        .any(|c| c.is_whitespace() || c.is_control() || ":^~?*[\\@{".contains(c))
                {
                    return Err(bad("not a commit id or a tag name"));
                }
                // A tag resolves to whatever commit it names now; the rebased recipe records it.
                PinSource::Git {
                    url: url.into(),
                    tag: Some(rev.into()),
                    commit: String::new(),
                }
            };
            Ok(Onto {
                spec: spec.into(),
                source,
                sha256_from: None,
            })
        }
        "tarball" | "dir" => {
            if rest.is_empty() {
                return Err(bad("no path"));
            }
            let path = crate::base::fsx::absolute(Path::new(rest))?;
            let (_, sha256) = upstream::pin_digest(&path)?;
            let source = if kind == "tarball" {
                if path.is_dir() {
                    return Err(bad("a tarball pin names a file"));
                }
                PinSource::Tarball { path, sha256 }
            } else {
                if !path.is_dir() {
                    return Err(bad("a dir pin names a folder"));
                }
                PinSource::Dir {
                    path,
                    tree_sha256: sha256,
                }
            };
            Ok(Onto {
                spec: spec.into(),
                source,
                sha256_from: Some(format!(
                    "digest {sha256} computed from {rest} now (trust on first use)"
                )),
            })
        }
        _ => Err(bad("unknown pin kind")),
    }
}

/// The recipe with its pin moved to `onto`: subfolder and build settings carry over; the build
/// number and commit string are facts about a pin and are derived from the new one.
pub fn moved_recipe(recipe: &Recipe, onto: &PinSource) -> Recipe {
    let mut r = recipe.clone();
    r.pin.source = onto.clone();
    r.pin.build_number = None;
    r.pin.build_commit = None;
    // No lock file is read or written for the new pin while auditing: the recipe's lock moves
    // only when a rebase completes.
    r.embedded = true;
    r
}

fn pin_label(p: &ResolvedPin) -> String {
    match (&p.git_commit, &p.tag) {
        (Some(c), Some(t)) => format!("{} {t} ({})", p.uri, c.short(9)),
        (Some(c), None) => format!("{} {}", p.uri, c.short(9)),
        _ => p.uri.clone(),
    }
}

/// Everything the audit materialized, kept for the rebase.
pub struct Session {
    /// The report.
    pub audit: Audit,
    /// The scratch tree: the new base with every carried patch committed.
    pub scratch: tempfile::TempDir,
    /// The new pristine tree.
    pub new_tree: Tree,
}

/// Audit `bundle` (the recipe's) against `onto`. Patches named in `dropping` (the operator's
/// decision in a rebase) are judged but not carried onto the scratch tree, so that the patches
/// after them are judged against what the rebased series will really be.
pub fn run(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    onto: &Onto,
    today: &str,
    dropping: &std::collections::BTreeSet<String>,
) -> Result<Session> {
    let patches = bundle.select(None)?;
    // vendor/ is shared with builds: one materialization at a time.
    let _lock = ws.lock()?;
    let old_tree = upstream::pristine(ws, recipe)?;
    let old_patched = upstream::patched(ws, &old_tree, &patches)?;
    let new_recipe = moved_recipe(recipe, &onto.source);
    let new_tree = upstream::pristine(ws, &new_recipe)?;

    // History: only a git pin has any, and only what was fetched of it.
    let mut history_note = None;
    let history = match (&onto.source, new_tree.pin.git_commit) {
        (PinSource::Git { url, .. }, Some(tip)) => {
            let path = upstream::git_cache_repo(ws, url);
            let repo = Repository::open_bare(&path).git_at(&path.display())?;
            if repo.is_shallow() {
                history_note = Some(format!(
                    "{} was fetched shallow (one commit): no history to consult; the verdict rests on content",
                    pin_label(&new_tree.pin)
                ));
                None
            } else {
                let base = old_tree.pin.git_commit.map(|c| c.raw());
                let log = history::Log::read(&repo, base, tip.raw()).git_at(&path.display())?;
                Some((repo, log, tip))
            }
        }
        _ => {
            history_note = Some(format!(
                "{} is a {} tree with no git history: the verdict rests on content alone{}",
                pin_label(&new_tree.pin),
                match new_tree.pin.kind.as_str() {
                    "crate" => "registry",
                    k => k,
                },
                onto.sha256_from
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            ));
            None
        }
    };

    let scratch = tempfile::Builder::new()
        .prefix(".tmp-audit-")
        .tempdir_in(ws.vendor())
        .at("create temp dir in", &ws.vendor())?;
    let work = scratch.path().join("tree");
    let repo = Repository::clone(&new_tree.path.to_string_lossy(), &work)
        .git_at(&new_tree.path.display())?;
    crate::base::git::borrow_objects(&repo, &old_patched.path)?;
    let old_repo = Repository::open(&old_patched.path).git_at(&old_patched.path.display())?;
    let old_base_tree = old_repo
        .find_commit(old_tree.base_commit.raw())
        .and_then(|c| c.tree())
        .git_at(&old_patched.path.display())?;
    let new_base_tree = repo
        .find_commit(new_tree.base_commit.raw())
        .and_then(|c| c.tree())
        .git_at(&work.display())?;

    let pin_url = match &onto.source {
        PinSource::Git { url, .. } => url.as_str(),
        _ => "",
    };
    let mut rows = Vec::new();
    for (i, p) in patches.iter().enumerate() {
        let record = old_patched
            .patches
            .get(i)
            .ok_or_else(|| Error::Internal(format!("patched tree has no commit for {}", p.id)))?;
        let a = p.require_attribution()?;
        let mut ev: Vec<Evidence> = Vec::new();
        match &history {
            Some((hrepo, log, tip)) => {
                ev.push(Evidence::new(
                    EvidenceKind::History,
                    format!("read {} commit(s): {}", log.len(), log.range),
                    Strength::Note,
                ));
                ev.extend(history::evidence(hrepo, log, tip.raw(), a, pin_url));
            }
            None => ev.push(Evidence::new(
                EvidenceKind::NoHistory,
                history_note.clone().unwrap_or_default(),
                Strength::Note,
            )),
        }
        let row = judge(
            &repo,
            &work,
            p,
            record.commit,
            &old_base_tree,
            &new_base_tree,
            ev,
            &onto.spec,
            today,
            !dropping.contains(p.id.as_str()),
        )?;
        rows.push(row);
    }
    let audit = Audit {
        onto: onto.spec.clone(),
        from: pin_label(&old_tree.pin),
        pin: new_tree.pin.clone(),
        sha256_from: onto.sha256_from.clone(),
        history: match &history {
            Some((_, log, _)) => format!("{} commit(s): {}", log.len(), log.range),
            None => history_note.unwrap_or_default(),
        },
        patches: rows,
    };
    Ok(Session {
        audit,
        scratch,
        new_tree,
    })
}

#[allow(clippy::too_many_arguments)]
fn judge(
    repo: &Repository,
    work: &Path,
    p: &PatchFile,
    vendor_commit: GitOid,
    old_base: &git2::Tree,
    new_base: &git2::Tree,
    mut ev: Vec<Evidence>,
    onto: &str,
    today: &str,
    carry: bool,
) -> Result<PatchAudit> {
    let subject = p.origin.display().to_string();
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&work.display())?;
    let files = crate::source::patch::diff::parse(
        p.bytes
            .get(p.header.diff_offset.unwrap_or(0)..)
            .unwrap_or_default(),
    )
    .map_err(|e| Error::input(&subject, format!("not a valid diff: {}", e.message)))?;

    let reverse = apply::already_applied(work, p);
    if reverse {
        ev.push(Evidence::new(
            EvidenceKind::ReverseApplies,
            "the patch reverse-applies on the new tree: its change is already there",
            Strength::Strong,
        ));
    }
    let forward = apply::placed_diff(work, p);
    let picked = repo.find_commit(vendor_commit.raw()).git_at(&subject)?;
    let mut index = repo
        .cherrypick_commit(&picked, &head, 0, None)
        .git_at(&subject)?;
    let conflicted = index.has_conflicts();
    let merged_tree = if conflicted {
        None
    } else {
        Some(index.write_tree_to(repo).git_at(&subject)?)
    };
    let empty = merged_tree == Some(head.tree_id());
    if empty {
        ev.push(Evidence::new(
            EvidenceKind::CherryPickEmpty,
            format!(
                "a three-way cherry-pick of the patch's vendor commit {} onto the new base changes nothing",
                vendor_commit.short(9)
            ),
            Strength::Strong,
        ));
    }

    // What upstream did in the functions the patch touches, between the two pins.
    let mut review = Vec::new();
    for f in &files {
        let Some(path) = f.new_path.as_ref().or(f.old_path.as_ref()) else {
            continue;
        };
        let path = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
        let old = crate::base::git::blob_at(repo, old_base, path);
        let new = crate::base::git::blob_at(repo, new_base, path);
        if let (Some(o), Some(n)) = (&old, &new) {
            if let Some(shown) = content::region_changes(f, o, n) {
                review.push(shown);
            }
        }
    }

    let history_merged = ev.iter().any(|e| {
        e.strength == Strength::Strong
            && matches!(
                e.kind,
                EvidenceKind::UpstreamCommitAncestor
                    | EvidenceKind::CherryPicked
                    | EvidenceKind::LogReference
            )
    });
    let three_way_clean = !conflicted && !empty;

    // The three versions of every hunk that no longer matches, when it does not apply.
    let mut versions = Vec::new();
    if forward.is_err() && !reverse && !empty {
        let parent = picked.parent(0).and_then(|c| c.tree()).git_at(&subject)?;
        let ours = head.tree().git_at(&subject)?;
        for f in &files {
            let Some(path) = f.old_path.as_ref().or(f.new_path.as_ref()) else {
                continue;
            };
            let path =
                Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
            if let (Some(b), Some(o)) = (
                crate::base::git::blob_at(repo, &parent, path),
                crate::base::git::blob_at(repo, &ours, path),
            ) {
                versions.extend(content::hunk_versions(f, &b, &o));
            }
        }
    }

    let dropped = |how: &str| Outcome::Dropped {
        applied_upstream: format!("{onto} ({how})"),
    };
    let (verdict, outcome) = if reverse || empty {
        let how = if reverse {
            "content: the patch reverse-applies"
        } else {
            "content: a three-way cherry-pick is empty"
        };
        (
            Verdict::Merged,
            dropped(&applied_from(&ev).unwrap_or_else(|| how.into())),
        )
    } else if history_merged && forward.is_err() && !three_way_clean {
        for v in &versions {
            ev.push(Evidence::new(
                EvidenceKind::Superseded,
                v.shown.clone(),
                Strength::Moderate,
            ));
        }
        if conflicted {
            ev.push(conflict_evidence(repo, &index, Strength::Note));
        }
        let how = applied_from(&ev).unwrap_or_else(|| "history".into());
        (Verdict::Merged, dropped(&how))
    } else if let Ok((diff, offsets)) = &forward {
        if offsets.is_empty() {
            ev.push(Evidence::new(
                EvidenceKind::Applies,
                "applies cleanly on the new base at the lines it states",
                Strength::Strong,
            ));
        } else {
            ev.push(Evidence::new(
                EvidenceKind::Moved,
                format!(
                    "applies cleanly on the new base; only the position moved: {}",
                    offsets
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Strength::Strong,
            ));
        }
        for r in &review {
            ev.push(Evidence::new(
                EvidenceKind::RegionChanged,
                format!("upstream changed the function this patch lands in, between the pins; review that the patch is still right there:\n{r}"),
                Strength::Moderate,
            ));
        }
        if history_merged {
            ev.push(Evidence::new(
                EvidenceKind::RegionChanged,
                "the history says upstream merged this fix, yet the patch still applies: upstream's fix is in other words or partial; review",
                Strength::Moderate,
            ));
        }
        let bytes = if offsets.is_empty() {
            p.bytes.clone()
        } else {
            refreshed(p, diff, today)
        };
        let verdict = if review.is_empty() && !history_merged {
            Verdict::Carries
        } else {
            Verdict::CarriesReview
        };
        (verdict, Outcome::Carried { bytes })
    } else if three_way_clean {
        let merged = merged_tree
            .ok_or_else(|| Error::Internal("invariant: clean merge has a tree".into()))?;
        let diff = tree_diff(repo, &head.tree().git_at(&subject)?, merged, &subject)?;
        ev.push(Evidence::new(
            EvidenceKind::ThreeWay,
            "does not apply as written, but a three-way merge onto the new base is clean: the context changed; the refreshed patch is regenerated from the merge",
            Strength::Moderate,
        ));
        for r in &review {
            ev.push(Evidence::new(
                EvidenceKind::RegionChanged,
                format!(
                    "upstream changed the function this patch lands in, between the pins:\n{r}"
                ),
                Strength::Moderate,
            ));
        }
        (
            Verdict::CarriesReview,
            Outcome::Carried {
                bytes: refreshed(p, &diff, today),
            },
        )
    } else if !versions.is_empty() && versions.iter().all(|v| v.superseded) {
        // Every hunk that no longer applies must look superseded: one real conflict beside a
        // superseded hunk is a conflict, never a drop.
        for v in &versions {
            ev.push(Evidence::new(
                EvidenceKind::Superseded,
                format!("upstream changed the lines this patch changes, differently; confirm the fix is equivalent:\n{}", v.shown),
                Strength::Moderate,
            ));
        }
        if conflicted {
            ev.push(conflict_evidence(repo, &index, Strength::Moderate));
        }
        (
            Verdict::Superseded,
            dropped("superseded: upstream changed these lines, confirmed by the operator"),
        )
    } else {
        ev.push(conflict_evidence(repo, &index, Strength::Strong));
        (Verdict::Conflicts, Outcome::Stopped)
    };
    ev.sort_by_key(|e| e.strength);

    // A carried patch goes onto the scratch tree, so the next patch sees what it would.
    if let (Outcome::Carried { bytes }, true) = (&outcome, carry) {
        let carried = PatchFile::from_bytes(p.id.clone(), p.origin.clone(), bytes.clone());
        apply::apply_series(repo, &[&carried]).map_err(|e| {
            Error::Internal(format!(
                "{}: the refreshed patch does not apply to the scratch tree: {e}",
                p.id
            ))
        })?;
    }
    Ok(PatchAudit {
        file: p.id.to_string(),
        verdict,
        evidence: ev,
        outcome,
    })
}

/// The three-way merge's conflicts, shown: attached whenever the merge conflicts, whatever the
/// verdict, so a person confirming a drop sees what did not merge.
fn conflict_evidence(repo: &Repository, index: &git2::Index, strength: Strength) -> Evidence {
    Evidence::new(
        EvidenceKind::Conflict,
        format!(
            "a three-way merge of the patch onto the new base conflicts:\n{}",
            content::render_conflicts(repo, index)
        ),
        strength,
    )
}

/// `Applied-Upstream` from the strongest history evidence: the commit that carries the fix.
fn applied_from(ev: &[Evidence]) -> Option<String> {
    ev.iter()
        .filter(|e| e.strength == Strength::Strong)
        .find(|e| {
            matches!(
                e.kind,
                EvidenceKind::UpstreamCommitAncestor
                    | EvidenceKind::CherryPicked
                    | EvidenceKind::LogReference
            )
        })
        .map(|e| {
            let first = e.detail.split_whitespace().next().unwrap_or_default();
            let commit = if first == "Upstream-Commit" {
                e.detail.split_whitespace().nth(1).unwrap_or_default()
            } else {
                first
            };
            format!("commit {commit}")
        })
}

/// The patch's header with `Last-Update` set to `today`, over `diff`.
pub fn refreshed(p: &PatchFile, diff: &[u8], today: &str) -> Vec<u8> {
    let at = p
        .header
        .diff_offset
        .unwrap_or(p.bytes.len())
        .min(p.bytes.len());
    let head = &p.bytes[..at];
    let line = p
        .header
        .fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("Last-Update"))
        .map(|f| f.line);
    let mut out = Vec::with_capacity(p.bytes.len());
    for (i, l) in head.split_inclusive(|&b| b == b'\n').enumerate() {
        if Some(i + 1) == line {
            let name_len = l.iter().position(|&b| b == b':').unwrap_or(0);
            out.extend_from_slice(&l[..name_len]);
            out.extend_from_slice(format!(": {today}\n").as_bytes());
        } else {
            out.extend_from_slice(l);
        }
    }
    out.extend_from_slice(diff);
    out
}

/// A git diff of two trees (what `git diff A B` prints), for a patch regenerated from a merge.
fn tree_diff(
    repo: &Repository,
    from: &git2::Tree,
    to: git2::Oid,
    subject: &str,
) -> Result<Vec<u8>> {
    let to = repo.find_tree(to).git_at(&subject)?;
    let diff = repo
        .diff_tree_to_tree(Some(from), Some(&to), None)
        .git_at(&subject)?;
    let mut out = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    })
    .git_at(&subject)?;
    Ok(out)
}

/// Today's date (UTC, `YYYY-MM-DD`) for `Last-Update` ([`crate::base::time::today`]).
pub fn today() -> String {
    crate::base::time::today()
}

/// Where a path in the scratch tree would be shown.
pub fn scratch_path(s: &Session) -> PathBuf {
    s.scratch.path().join("tree")
}

#[cfg(test)]
mod tests {
    use super::*;

    // review item 7: the date comes from time.rs's clock, so a pinned clock pins it.
    #[test]
    fn today_reads_the_injectable_clock() {
        let t = crate::base::time::with_clock(
            &crate::base::time::FixedClock(1_795_996_800 + 3600),
            today,
        );
        if std::env::var_os("SOURCE_DATE_EPOCH").is_none() {
            assert_eq!(t, "2026-11-30");
        }
    }

    #[test]
    fn onto_specs_are_checked_before_anything_is_fetched() {
        for bad in [
            "nope",
            "crate:x",
            "crate:@1.0.0",
            "crate:x@notaversion",
            "git:only",
            "git:u@-x",
            "weird:x",
        ] {
            let e = parse_onto(bad).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        let o = parse_onto("git:/tmp/x@v1").expect("tag");
        assert!(matches!(o.source, PinSource::Git { tag: Some(ref t), .. } if t == "v1"));
    }
}
