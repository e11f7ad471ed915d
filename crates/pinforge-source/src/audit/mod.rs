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
//!   counts against, not for — a revert is recognized by its message, its subject (modulo the
//!   suffixes sync tools add) or its content, and a revert of the revert restores the commit
//!   ([`revert`]).
//! - content (every pin): the patch reverse-applies on the new tree; a three-way cherry-pick of
//!   its vendor commit onto the new base (libgit2 `cherrypick_commit`) is empty; it applies
//!   (and whether it moved); upstream changed the function it lands in; or the hunk's lines
//!   changed upstream (the three versions are shown) or conflict (the diff3 region is shown).
//!
//! One rule over the whole verdict ([`judge`]'s `ruling`): history alone never makes a patch
//! `merged` when the content says its change is absent from the new tree; such a patch is
//! `reverted` (a standing revert explains it) or `carries-review` / `conflicts`, and a
//! `contradicted` evidence names the two pieces of evidence that disagree.
//!
//! Behaviour (issue #26 §2, `audit --check`, run by `trial::check`): a patch's
//! `Pinforge-Check` is built and smoked on both pins without the patch, and what it showed
//! comes in as a [`CheckFinding`]. In the same rule, `still-needed` (the new pin still shows
//! the defect) outranks every text evidence: such a patch is never `merged` or `superseded`.
//!
//! A carried patch is committed onto the scratch tree before the next patch is examined, so
//! that a later patch is judged against what it would really apply on.

mod content;
pub(crate) mod history;
mod judge;
mod onto;
mod refresh;
pub(crate) mod revert;

// A resolved rebase (`rebase --continue`) refreshes the operator's patch by the same rule.
pub use onto::{moved_recipe, parse_onto, Onto};
pub(crate) use refresh::{refreshed, tree_diff};

use crate::git::GitContext;
use crate::git::OidExt;
use crate::patch::Bundle;
use crate::recipe::{PinSource, Recipe};
use crate::upstream::{self, ResolvedPin, Tree};
use git2::Repository;
use pinforge_base::digest::GitOid;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::workspace::Workspace;
use serde::Serialize;

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
    /// Upstream merged the change and reverted it since (both commits in `reverts`): a person
    /// decides whether to carry a fix upstream took back. Never dropped without `--drop`.
    Reverted,
    /// The patch's `Pinforge-Check` proves the defect gone: the old pin without the patch shows
    /// it, the new pin without the patch runs clean. The patch leaves the series on that
    /// evidence, whatever the text shows (upstream fixed it in other words, or elsewhere).
    FixedUpstream,
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
            Verdict::Reverted => "reverted",
            Verdict::FixedUpstream => "fixed-upstream",
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
    /// History and content disagree (history says merged or reverted, the content says
    /// otherwise), or the text says merged/superseded and the check says still needed: which
    /// said what, and which one the verdict follows.
    Contradicted,
    /// `Pinforge-Check`: the new pin without the patch still shows the defect's signature.
    StillNeeded,
    /// `Pinforge-Check`: the old pin without the patch shows the signature, the new one runs
    /// clean.
    FixedUpstream,
    /// `Pinforge-Check`: the old pin without the patch does not show the signature either: the
    /// check does not show this defect, and says nothing about the new pin.
    CheckInvalid,
    /// `Pinforge-Check`: a build or smoke gave no answer, or the new pin fails otherwise.
    CheckUndetermined,
}

/// What a patch's `Pinforge-Check` showed on the two pins (issue #26 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// The new pin without the patch still shows the signature: the patch is needed, whatever
    /// the text says.
    StillNeeded,
    /// The old pin shows the signature and the new one runs clean.
    FixedUpstream,
    /// The old pin does not show the signature: the check is wrong, not the patch.
    CheckInvalid,
    /// No answer: a build or smoke failed, or the new pin crashes otherwise.
    Undetermined,
}

impl Behaviour {
    /// The evidence kind and weight it is recorded as: still-needed and fixed-upstream are
    /// observed behaviour (strong); an invalid check is worth a look (moderate); no answer is
    /// context.
    pub(crate) fn evidence(self, detail: String) -> Evidence {
        let (kind, strength) = match self {
            Behaviour::StillNeeded => (EvidenceKind::StillNeeded, Strength::Strong),
            Behaviour::FixedUpstream => (EvidenceKind::FixedUpstream, Strength::Strong),
            Behaviour::CheckInvalid => (EvidenceKind::CheckInvalid, Strength::Moderate),
            Behaviour::Undetermined => (EvidenceKind::CheckUndetermined, Strength::Note),
        };
        Evidence::new(kind, detail, strength)
    }
}

/// A patch's check as `trial::check` ran it: what it showed and how (pins, smokes, cost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFinding {
    /// What it showed.
    pub behaviour: Behaviour,
    /// For a person: both smokes and what each build cost.
    pub detail: String,
}

/// One build a check made (shared by every patch that declares the same variant) and its cost.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CheckBuild {
    /// `old` or `new`.
    pub side: String,
    /// The pin it was built from.
    pub pin: String,
    /// The declared variant.
    pub variant: String,
    /// The build folder's recipe and variant (`build/RECIPE/VARIANT`).
    pub built_as: String,
    /// Wall seconds of the build call (a current build: the check of its stamp). This counts
    /// any wait for the workspace lock another command held: the build's own time is in its
    /// build folder's stamp.
    pub seconds: f64,
    /// Nothing was rebuilt: the outputs equal the previous build's.
    pub cached: bool,
    /// Compile-cache hits and misses of this build.
    pub compile_cache_hits: u64,
    /// Compile-cache misses.
    pub compile_cache_misses: u64,
    /// Smoke runs made on it (one per distinct smoke setting).
    pub smokes: Vec<CheckSmoke>,
}

/// One smoke of a check build.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CheckSmoke {
    /// The smoke settings (`arch=qwen2vl tokens=16` or `model=FILE tokens=N`).
    pub settings: String,
    /// Smoke verdict (`ok`, `crash`, `mismatch`, `error`).
    pub verdict: String,
    /// The normalized crash signature, if it crashed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Why it gave no answer (a failed build or smoke).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Wall seconds.
    pub seconds: f64,
}

/// What `audit --check` spent: every build and smoke, and the totals.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CheckCost {
    /// The builds, old pin first.
    pub builds: Vec<CheckBuild>,
    /// Seconds spent building.
    pub build_seconds: f64,
    /// Seconds spent smoking.
    pub smoke_seconds: f64,
    /// Builds that were already current.
    pub cached_builds: usize,
    /// Compile-cache hits over all builds.
    pub compile_cache_hits: u64,
    /// Compile-cache misses over all builds.
    pub compile_cache_misses: u64,
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
    pub(crate) fn new(
        kind: EvidenceKind,
        detail: impl Into<String>,
        strength: Strength,
    ) -> Evidence {
        Evidence {
            kind,
            detail: detail.into(),
            strength,
        }
    }
}

/// An upstream commit that carried the patch's change, and the revert standing against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RevertPair {
    /// The commit that carried the change (full id).
    pub commit: String,
    /// Its subject.
    pub subject: String,
    /// The revert in force at the new pin (full id): the last of the chain.
    pub reverted_by: String,
    /// Its subject.
    pub reverted_by_subject: String,
    /// How that revert was recognized.
    pub signal: revert::Signal,
    /// How many reverts the chain holds (odd: reverted; 3 = reverted, restored, reverted again).
    pub chain: usize,
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
    /// The upstream commits that carried its change and were reverted since (history evidence;
    /// a `reverted` verdict has at least one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reverts: Vec<RevertPair>,
    /// What its `Pinforge-Check` showed (`audit --check`); absent when it was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<Behaviour>,
    /// The text evidence alone (history and content, without the check) would drop it as
    /// merged: what a rebase without `--check` does.
    #[serde(skip)]
    pub merged_by_text: bool,
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
    /// What `--check` built and smoked, and its cost; absent without `--check`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckCost>,
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
    /// The scratch tree: the new base with every carried patch committed. Held, not read:
    /// the folder lives as long as the session that the rebase works from.
    #[allow(
        dead_code,
        reason = "held for its lifetime: dropping it removes the scratch tree"
    )]
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
    // vendor/ is shared with builds: one materialization at a time.
    let _lock = ws.lock()?;
    run_locked(ws, recipe, bundle, onto, today, dropping)
}

/// [`run`] for a caller that already holds the workspace lock (a rebase holds it from its
/// first read to its last write, issue #19; taking it again here would wait on itself).
pub(crate) fn run_locked(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    onto: &Onto,
    today: &str,
    dropping: &std::collections::BTreeSet<String>,
) -> Result<Session> {
    run_checked(
        ws,
        recipe,
        bundle,
        onto,
        today,
        dropping,
        &Checks::default(),
    )
}

/// What `audit --check` found per patch file, and what it cost.
#[derive(Debug, Clone, Default)]
pub struct Checks {
    /// Per patch file.
    pub findings: std::collections::BTreeMap<String, CheckFinding>,
    /// The builds and smokes; None when no check ran.
    pub cost: Option<CheckCost>,
}

/// [`run_locked`] with the checks' findings folded into each patch's evidence and verdict
/// (the caller holds the workspace lock).
pub fn run_checked(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    onto: &Onto,
    today: &str,
    dropping: &std::collections::BTreeSet<String>,
    checks: &Checks,
) -> Result<Session> {
    let patches = bundle.select(None)?;
    let old_tree = upstream::pristine(ws, recipe)?;
    let old_patched = upstream::patched(ws, &old_tree, &patches)?;
    let new_recipe = onto.moved(recipe);
    let new_tree = upstream::pristine(ws, &new_recipe)?;

    let (history, history_note) = read_history(ws, onto, &old_tree, &new_tree)?;

    let scratch = tempfile::Builder::new()
        .prefix(".tmp-audit-")
        .tempdir_in(ws.vendor())
        .at("create temp dir in", &ws.vendor())?;
    let work = scratch.path().join("tree");
    let repo = Repository::clone(&new_tree.path.to_string_lossy(), &work)
        .git_at(&new_tree.path.display())?;
    crate::git::borrow_objects(&repo, &old_patched.path)?;
    let old_repo = Repository::open(&old_patched.path).git_at(&old_patched.path.display())?;
    let old_base_tree = old_repo
        .find_commit(old_tree.base_commit.to_git())
        .and_then(|c| c.tree())
        .git_at(&old_patched.path.display())?;
    let new_base_tree = repo
        .find_commit(new_tree.base_commit.to_git())
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
        let mut reverts = Vec::new();
        match &history {
            Some((hrepo, log, tip)) => {
                ev.push(Evidence::new(
                    EvidenceKind::History,
                    format!("read {} commit(s): {}", log.len(), log.range),
                    Strength::Note,
                ));
                let (found, reverted) = history::evidence(hrepo, log, tip.to_git(), a, pin_url);
                ev.extend(found);
                reverts = reverted;
            }
            None => ev.push(Evidence::new(
                EvidenceKind::NoHistory,
                history_note.clone().unwrap_or_default(),
                Strength::Note,
            )),
        }
        let row = judge::judge(
            &repo,
            &work,
            p,
            record.commit,
            &old_base_tree,
            &new_base_tree,
            ev,
            reverts,
            checks.findings.get(p.id.as_str()),
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
        check: checks.cost.clone(),
    };
    Ok(Session {
        audit,
        scratch,
        new_tree,
    })
}

/// Today's date (UTC, `YYYY-MM-DD`) for `Last-Update` ([`pinforge_base::time::today`]).
pub fn today() -> String {
    pinforge_base::time::today()
}

/// The history between the pins: only a git pin has any, and only what was fetched of it.
/// Without one, the note that says why the verdicts rest on content.
#[allow(clippy::type_complexity)]
fn read_history(
    ws: &Workspace,
    onto: &Onto,
    old_tree: &Tree,
    new_tree: &Tree,
) -> Result<(Option<(Repository, history::Log, GitOid)>, Option<String>)> {
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
                let base = old_tree.pin.git_commit.map(|c| c.to_git());
                let log = history::Log::read(&repo, base, tip.to_git()).git_at(&path.display())?;
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
    Ok((history, history_note))
}

#[cfg(test)]
mod tests {
    use super::*;

    // review item 7: the date comes from time.rs's clock, so a pinned clock pins it.
    #[test]
    fn today_reads_the_injectable_clock() {
        let t = pinforge_base::time::with_clock(
            &pinforge_base::time::FixedClock(1_795_996_800 + 3600),
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
