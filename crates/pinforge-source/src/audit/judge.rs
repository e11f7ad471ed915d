//! One patch judged against the new tree: the content probes (reverse-apply, three-way
//! cherry-pick, placement, what upstream changed around the hunks), the verdict reached from them
//! and the history evidence by one rule ([`ruling`]), and the refreshed bytes of a carried patch.

use super::refresh::{refreshed, tree_diff};
use super::{
    content, Behaviour, CheckFinding, Evidence, EvidenceKind, Outcome, PatchAudit, RevertPair,
    Strength, Verdict,
};
use crate::git::GitContext;
use crate::git::OidExt;
use crate::patch::apply::{self, HunkOffset};
use crate::patch::diff::FilePatch;
use crate::patch::PatchFile;
use git2::Repository;
use pinforge_base::digest::GitOid;
use pinforge_base::error::{Error, Result};
use std::path::Path;

/// Judge one patch on the scratch tree (`work`, whose HEAD is the new base plus the patches
/// carried so far): probe the content, decide the verdict from all the evidence by
/// [`ruling`], and carry the patch onto the scratch tree when it stays in the series and
/// `carry`.
#[allow(clippy::too_many_arguments)]
pub(super) fn judge(
    repo: &Repository,
    work: &Path,
    p: &PatchFile,
    vendor_commit: GitOid,
    old_base: &git2::Tree,
    new_base: &git2::Tree,
    mut ev: Vec<Evidence>,
    reverts: Vec<RevertPair>,
    check: Option<&CheckFinding>,
    onto: &str,
    today: &str,
    carry: bool,
) -> Result<PatchAudit> {
    let subject = p.origin.display().to_string();
    let pr = probe(repo, work, p, vendor_commit, old_base, new_base, &mut ev)?;
    let dropped = |how: &str| Outcome::Dropped {
        applied_upstream: format!("{onto} ({how})"),
    };
    let content = content_says(&pr);
    let history = history_says(&ev);
    let behaviour = check.map(|c| c.behaviour);
    if let Some(c) = check {
        ev.push(c.behaviour.evidence(c.detail.clone()));
    }
    let by_text = ruling(&content, &history, None);
    let rule = ruling(&content, &history, behaviour);
    if let Some(e) = contradiction(&content, &history, rule) {
        ev.push(e);
    }
    if let Some(e) = behaviour_contradiction(by_text, rule, all_superseded(&pr)) {
        ev.push(e);
    }
    let (verdict, outcome) = match rule {
        Ruling::Merged => {
            let how = match content {
                Content::Present(how) => format!("content: {how}"),
                _ => "content".into(),
            };
            (Verdict::Merged, dropped(&applied_from(&ev).unwrap_or(how)))
        }
        Ruling::MergedByHistory => {
            for v in &pr.versions {
                ev.push(Evidence::new(
                    EvidenceKind::Superseded,
                    v.shown.clone(),
                    Strength::Moderate,
                ));
            }
            if pr.conflicted {
                ev.push(conflict_evidence(repo, &pr.index, Strength::Note));
            }
            let how = applied_from(&ev).unwrap_or_else(|| "history".into());
            (Verdict::Merged, dropped(&how))
        }
        // Upstream took the change back: whatever the content allows, a person decides.
        Ruling::Reverted => {
            let (_, outcome) = by_content(repo, p, &pr, &subject, &mut ev, today, None)?;
            (Verdict::Reverted, outcome)
        }
        Ruling::NotMerged => by_content(repo, p, &pr, &subject, &mut ev, today, None)?,
        Ruling::Content => by_content(repo, p, &pr, &subject, &mut ev, today, Some(&dropped))?,
        // The behaviour says the defect is gone; the text could not drop the patch on its
        // own (it applies, or upstream rewrote its lines): dropped on that evidence, with what
        // the text said kept beside it.
        Ruling::FixedUpstream => {
            ev.push(text_beside_behaviour(&content, &history));
            let how = applied_from(&ev).map_or_else(
                || "behaviour: without the patch the Pinforge-Check runs clean".to_string(),
                |c| format!("behaviour: without the patch the Pinforge-Check runs clean; {c}"),
            );
            (Verdict::FixedUpstream, dropped(&how))
        }
        // The text may say the change is there; the behaviour says the defect is: never a
        // drop. Carried as the content allows; the change already in the tree is a review.
        Ruling::StillNeeded => match content {
            Content::Present(_) => (Verdict::Merged, Outcome::Stopped),
            _ => by_content(repo, p, &pr, &subject, &mut ev, today, None)?,
        },
    };
    let (verdict, outcome) = held(rule, verdict, outcome);
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
        reverts,
        check: behaviour,
        merged_by_text: matches!(by_text, Ruling::Merged | Ruling::MergedByHistory),
        outcome,
    })
}

/// The rule's guarantee, applied to the verdict reached (issue #26 §2): under a
/// `still-needed` ruling nothing leaves the series — a `merged` or `superseded` verdict, or
/// any drop, becomes `carries-review` with nothing decided (a person refreshes or drops it).
fn held(rule: Ruling, verdict: Verdict, outcome: Outcome) -> (Verdict, Outcome) {
    let drops = matches!(outcome, Outcome::Dropped { .. });
    match rule {
        Ruling::StillNeeded
            if drops || matches!(verdict, Verdict::Merged | Verdict::Superseded) =>
        {
            (Verdict::CarriesReview, Outcome::Stopped)
        }
        _ => (verdict, outcome),
    }
}

/// Every hunk that no longer applies looks superseded (what `by_content` drops as superseded).
fn all_superseded(pr: &Probe) -> bool {
    pr.forward.is_err()
        && !pr.three_way_clean
        && !pr.versions.is_empty()
        && pr.versions.iter().all(|v| v.superseded)
}

/// The evidence naming what disagreed when the behaviour overruled the text: the text alone
/// would have dropped the patch (merged, or superseded), the check says it is still needed.
fn behaviour_contradiction(by_text: Ruling, rule: Ruling, superseded: bool) -> Option<Evidence> {
    let said = match (by_text, rule) {
        (Ruling::Merged | Ruling::MergedByHistory, Ruling::StillNeeded) => "merged",
        (Ruling::Content, Ruling::StillNeeded) if superseded => "superseded",
        _ => return None,
    };
    Some(Evidence::new(
        EvidenceKind::Contradicted,
        format!(
            "the text evidence says {said}, but the new pin without the patch still shows the defect (Pinforge-Check): not {said}, the patch stays until a person decides (upstream's fix may be incomplete, or not the same fix)"
        ),
        Strength::Strong,
    ))
}

/// What the content says about the patch's change in the new tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Content {
    /// The change is there: how that shows.
    Present(&'static str),
    /// The change is not there: why.
    Absent(String),
    /// The patch no longer applies and upstream rewrote every line it touches: the change
    /// may be there in other words.
    Unclear,
}

/// What the history says, from its strongest evidence (the first line of it kept, to name it).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Says {
    /// Ancestry, a cherry-pick line or a log reference that no revert undid.
    Merged(String),
    /// The commits that carried the change were reverted, and nothing else says merged.
    Reverted(String),
    /// Nothing strong.
    Silent,
}

/// The verdict's basis, decided in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ruling {
    /// The content shows the change in the new tree.
    Merged,
    /// History says merged and the content cannot tell otherwise (upstream rewrote the lines).
    MergedByHistory,
    /// A standing revert: a person decides.
    Reverted,
    /// History says merged, the content says absent: the content decides, never a drop.
    NotMerged,
    /// No history either way: the content decides alone.
    Content,
    /// The check shows the defect on the new pin: whatever the text says, the patch stays.
    StillNeeded,
    /// The check shows the defect on the old pin and not on the new one, and the text does not
    /// show the change itself (nor a revert): the behaviour drops the patch.
    FixedUpstream,
}

/// The one rule over the whole verdict (issue #26 §1): the content showing the change decides
/// `merged` on its own; ancestry, a log reference or a cherry-pick line never does when the
/// content says the change is absent; a standing revert always asks for a decision. And
/// behaviour outranks text (issue #26 §2): a check that still shows the defect on the new pin
/// rules `still-needed`, which [`held`] keeps from ever being `merged` or `superseded`.
fn ruling(content: &Content, history: &Says, behaviour: Option<Behaviour>) -> Ruling {
    if behaviour == Some(Behaviour::StillNeeded) {
        return Ruling::StillNeeded;
    }
    let by_text = match (content, history) {
        (Content::Present(_), _) => Ruling::Merged,
        (_, Says::Reverted(_)) => Ruling::Reverted,
        (Content::Absent(_), Says::Merged(_)) => Ruling::NotMerged,
        (Content::Unclear, Says::Merged(_)) => Ruling::MergedByHistory,
        (_, Says::Silent) => Ruling::Content,
    };
    // Behaviour outranks text the other way too (issue #39 §1): a defect the old pin shows
    // and the new pin does not is fixed upstream, whether or not the same lines are there.
    // The content showing the change stays `merged` (the stronger word), and a standing revert
    // still asks a person: a check covers one scenario, a revert says upstream took it back.
    let fixed = behaviour == Some(Behaviour::FixedUpstream);
    if fixed && !matches!(by_text, Ruling::Merged | Ruling::Reverted) {
        Ruling::FixedUpstream
    } else {
        by_text
    }
}

/// What the text said, kept beside a drop decided by behaviour, so a reader sees both.
fn text_beside_behaviour(content: &Content, history: &Says) -> Evidence {
    let text = match content {
        Content::Absent(why) => format!("the text alone would keep the patch ({why})"),
        Content::Unclear => {
            "the text alone cannot tell: upstream rewrote every line the patch touches".into()
        }
        Content::Present(how) => format!("the text shows the change too ({how})"),
    };
    let history = match history {
        Says::Merged(h) => format!("; the history says merged ({h})"),
        Says::Reverted(h) => format!("; the history names a revert ({h})"),
        Says::Silent => String::new(),
    };
    Evidence::new(
        EvidenceKind::Contradicted,
        format!(
            "{text}{history}; the Pinforge-Check decides: the old pin without the patch shows the defect and the new pin without it runs clean, so upstream fixed it (in other words, or elsewhere) and the patch leaves the series (if it was defence in depth, carry it with `rebase` without --check)"
        ),
        Strength::Strong,
    )
}

/// The evidence naming what disagreed, when the ruling overrode one side.
fn contradiction(content: &Content, history: &Says, rule: Ruling) -> Option<Evidence> {
    let detail = match (content, history, rule) {
        (Content::Present(how), Says::Reverted(h), Ruling::Merged) => format!(
            "the history says upstream reverted the change ({h}), but the content says it is in the new tree ({how}): merged on content (re-landed in another commit)"
        ),
        (Content::Absent(why), Says::Merged(h), Ruling::NotMerged) => format!(
            "the history says upstream merged it ({h}), but the content says the change is absent from the new tree ({why}); no revert was recognized: not merged, decide (upstream's fix may be partial, in other words, or undone by a revert this history does not name)"
        ),
        _ => return None,
    };
    Some(Evidence::new(
        EvidenceKind::Contradicted,
        detail,
        Strength::Strong,
    ))
}

/// What the probes say about the change being in the new tree.
fn content_says(pr: &Probe) -> Content {
    if pr.reverse {
        return Content::Present("the patch reverse-applies");
    }
    if pr.empty {
        return Content::Present("a three-way cherry-pick is empty");
    }
    if pr.forward.is_ok() {
        return Content::Absent("the patch still applies to the new tree".into());
    }
    if pr.three_way_clean {
        return Content::Absent("a three-way merge of the patch still changes the new tree".into());
    }
    if let Some(v) = pr.versions.iter().find(|v| !v.superseded) {
        return Content::Absent(format!(
            "{} keeps the lines the patch removes and lacks the lines it adds",
            v.shown
                .lines()
                .next()
                .unwrap_or_default()
                .trim_end_matches(':')
        ));
    }
    Content::Unclear
}

/// What the history evidence says, strongest first.
fn history_says(ev: &[Evidence]) -> Says {
    let first = |kinds: &[EvidenceKind]| {
        ev.iter()
            .find(|e| e.strength == Strength::Strong && kinds.contains(&e.kind))
            .map(|e| e.detail.lines().next().unwrap_or_default().to_string())
    };
    // A standing revert speaks first: another strong reference (a later commit naming the
    // same PR, a follow-up) does not undo it, so unless the content shows the change in the new
    // tree a person decides; history alone never drops a reverted change.
    if let Some(d) = first(&[EvidenceKind::Reverted]) {
        return Says::Reverted(d);
    }
    match first(&[
        EvidenceKind::UpstreamCommitAncestor,
        EvidenceKind::CherryPicked,
        EvidenceKind::LogReference,
    ]) {
        Some(d) => Says::Merged(d),
        None => Says::Silent,
    }
}

/// The verdict the content reaches when history does not decide: carried as it applies,
/// carried for review after a clean three-way merge, superseded (only given `may_supersede`,
/// the drop it would be: never against history that says otherwise), or a conflict.
fn by_content(
    repo: &Repository,
    p: &PatchFile,
    pr: &Probe,
    subject: &str,
    ev: &mut Vec<Evidence>,
    today: &str,
    may_supersede: Option<&dyn Fn(&str) -> Outcome>,
) -> Result<(Verdict, Outcome)> {
    if let Ok((diff, offsets)) = &pr.forward {
        return Ok(carried(
            p,
            diff,
            offsets,
            &pr.review,
            pr.history_merged,
            ev,
            today,
        ));
    }
    if pr.three_way_clean {
        return three_way(repo, p, pr, subject, ev, today);
    }
    let all_superseded = !pr.versions.is_empty() && pr.versions.iter().all(|v| v.superseded);
    if let Some(drop_as) = may_supersede.filter(|_| all_superseded) {
        // Every hunk that no longer applies must look superseded: one real conflict beside a
        // superseded hunk is a conflict, never a drop.
        for v in &pr.versions {
            ev.push(Evidence::new(
                EvidenceKind::Superseded,
                format!("upstream changed the lines this patch changes, differently; confirm the fix is equivalent:\n{}", v.shown),
                Strength::Moderate,
            ));
        }
        if pr.conflicted {
            ev.push(conflict_evidence(repo, &pr.index, Strength::Moderate));
        }
        return Ok((
            Verdict::Superseded,
            drop_as("superseded: upstream changed these lines, confirmed by the operator"),
        ));
    }
    ev.push(conflict_evidence(repo, &pr.index, Strength::Strong));
    Ok((Verdict::Conflicts, Outcome::Stopped))
}

/// What the content checks find for one patch on the scratch tree.
struct Probe<'r> {
    /// The scratch tree's HEAD: the new base plus the patches carried so far.
    head: git2::Commit<'r>,
    /// The patch reverse-applies: its change is already there.
    reverse: bool,
    /// The patch placed on the new tree (its diff and how far each hunk moved), or why not.
    forward: Result<(Vec<u8>, Vec<HunkOffset>)>,
    /// The three-way cherry-pick of its vendor commit onto HEAD.
    index: git2::Index,
    conflicted: bool,
    merged_tree: Option<git2::Oid>,
    /// The cherry-pick changes nothing.
    empty: bool,
    /// What upstream did in the functions the patch touches, between the pins.
    review: Vec<String>,
    /// The three versions of every hunk that no longer matches, when it does not apply.
    versions: Vec<content::Versions>,
    /// Strong history evidence says upstream merged it.
    history_merged: bool,
    three_way_clean: bool,
}

/// Probe `p` on the scratch tree; the content evidence found on the way goes into `ev`.
fn probe<'r>(
    repo: &'r Repository,
    work: &Path,
    p: &PatchFile,
    vendor_commit: GitOid,
    old_base: &git2::Tree,
    new_base: &git2::Tree,
    ev: &mut Vec<Evidence>,
) -> Result<Probe<'r>> {
    let subject = p.origin.display().to_string();
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&work.display())?;
    let files = crate::patch::diff::parse(
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
    let picked = repo.find_commit(vendor_commit.to_git()).git_at(&subject)?;
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

    let review = upstream_review(repo, &files, old_base, new_base);

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
    let versions = if forward.is_err() && !reverse && !empty {
        stale_versions(repo, &files, &picked, &head, &subject)?
    } else {
        Vec::new()
    };

    Ok(Probe {
        head,
        reverse,
        forward,
        index,
        conflicted,
        merged_tree,
        empty,
        review,
        versions,
        history_merged,
        three_way_clean,
    })
}

/// What upstream did in the functions the patch touches, between the two pins (one shown
/// region per changed function).
fn upstream_review(
    repo: &Repository,
    files: &[FilePatch],
    old_base: &git2::Tree,
    new_base: &git2::Tree,
) -> Vec<String> {
    let mut review = Vec::new();
    for f in files {
        let Some(path) = f.new_path.as_ref().or(f.old_path.as_ref()) else {
            continue;
        };
        let path = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
        let old = crate::git::blob_at(repo, old_base, path);
        let new = crate::git::blob_at(repo, new_base, path);
        if let (Some(o), Some(n)) = (&old, &new) {
            if let Some(shown) = content::region_changes(f, o, n) {
                review.push(shown);
            }
        }
    }
    review
}

/// The three versions (base, patch, upstream) of every hunk that no longer matches.
fn stale_versions(
    repo: &Repository,
    files: &[FilePatch],
    picked: &git2::Commit,
    head: &git2::Commit,
    subject: &str,
) -> Result<Vec<content::Versions>> {
    let mut versions = Vec::new();
    let parent = picked.parent(0).and_then(|c| c.tree()).git_at(&subject)?;
    let ours = head.tree().git_at(&subject)?;
    for f in files {
        let Some(path) = f.old_path.as_ref().or(f.new_path.as_ref()) else {
            continue;
        };
        let path = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
        if let (Some(b), Some(o)) = (
            crate::git::blob_at(repo, &parent, path),
            crate::git::blob_at(repo, &ours, path),
        ) {
            versions.extend(content::hunk_versions(f, &b, &o));
        }
    }
    Ok(versions)
}

/// A patch that still applies: carried (refreshed when only its position moved), for review
/// when upstream touched the same function or the history says it merged.
fn carried(
    p: &PatchFile,
    diff: &[u8],
    offsets: &[HunkOffset],
    review: &[String],
    history_merged: bool,
    ev: &mut Vec<Evidence>,
    today: &str,
) -> (Verdict, Outcome) {
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
    for r in review {
        ev.push(Evidence::new(
            EvidenceKind::RegionChanged,
            format!("upstream changed the function this patch lands in, between the pins; review that the patch is still right there:\n{r}"),
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
}

/// A patch that does not apply as written but merges cleanly three-way: carried for review,
/// its diff regenerated from the merge.
fn three_way(
    repo: &Repository,
    p: &PatchFile,
    pr: &Probe,
    subject: &str,
    ev: &mut Vec<Evidence>,
    today: &str,
) -> Result<(Verdict, Outcome)> {
    let merged = pr
        .merged_tree
        .ok_or_else(|| Error::Internal("invariant: clean merge has a tree".into()))?;
    let merged = repo.find_tree(merged).git_at(&subject)?;
    let diff = tree_diff(repo, &pr.head.tree().git_at(&subject)?, &merged, subject)?;
    ev.push(Evidence::new(
        EvidenceKind::ThreeWay,
        "does not apply as written, but a three-way merge onto the new base is clean: the context changed; the refreshed patch is regenerated from the merge",
        Strength::Moderate,
    ));
    for r in &pr.review {
        ev.push(Evidence::new(
            EvidenceKind::RegionChanged,
            format!("upstream changed the function this patch lands in, between the pins:\n{r}"),
            Strength::Moderate,
        ));
    }
    Ok((
        Verdict::CarriesReview,
        Outcome::Carried {
            bytes: refreshed(p, &diff, today),
        },
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn merged() -> Says {
        Says::Merged("Upstream-Commit abc is an ancestor of the new pin".into())
    }
    fn reverted() -> Says {
        Says::Reverted("Upstream-Commit abc …, but def reverted it".into())
    }
    fn absent() -> Content {
        Content::Absent("the patch still applies to the new tree".into())
    }

    // issue #26 §1: the whole table of the one rule.
    #[test]
    fn history_alone_never_rules_merged_against_content_that_says_absent() {
        let present = Content::Present("the patch reverse-applies");
        for h in [merged(), reverted(), Says::Silent] {
            assert_eq!(ruling(&present, &h, None), Ruling::Merged, "{h:?}");
        }
        for c in [absent(), Content::Unclear] {
            assert_eq!(ruling(&c, &reverted(), None), Ruling::Reverted, "{c:?}");
            assert_eq!(ruling(&c, &Says::Silent, None), Ruling::Content, "{c:?}");
        }
        assert_eq!(ruling(&absent(), &merged(), None), Ruling::NotMerged);
        assert_eq!(
            ruling(&Content::Unclear, &merged(), None),
            Ruling::MergedByHistory
        );
    }

    // Review finding: a strong log reference to a follow-up commit beside a standing revert of
    // the patch's own commit must not read as "merged" (and be dropped) on history alone.
    #[test]
    fn a_standing_revert_outranks_another_strong_reference() {
        let ev = vec![
            Evidence::new(
                EvidenceKind::LogReference,
                "fix warning after #12 (#13) names PR #12",
                Strength::Strong,
            ),
            Evidence::new(
                EvidenceKind::Reverted,
                "Upstream-Commit abc was reverted by def",
                Strength::Strong,
            ),
        ];
        let h = history_says(&ev);
        assert!(matches!(h, Says::Reverted(_)), "{h:?}");
        assert_eq!(ruling(&Content::Unclear, &h, None), Ruling::Reverted);
    }

    #[test]
    fn the_evidence_names_what_disagreed_when_one_side_is_overruled() {
        let e = contradiction(&absent(), &merged(), Ruling::NotMerged).expect("contradicted");
        assert_eq!(
            (e.kind, e.strength),
            (EvidenceKind::Contradicted, Strength::Strong)
        );
        assert!(
            e.detail
                .contains("history says upstream merged it (Upstream-Commit abc")
                && e.detail.contains("the patch still applies")
                && e.detail.contains("not merged"),
            "{}",
            e.detail
        );
        let present = Content::Present("the patch reverse-applies");
        let e = contradiction(&present, &reverted(), Ruling::Merged).expect("contradicted");
        assert!(
            e.detail.contains("reverted the change") && e.detail.contains("reverse-applies"),
            "{}",
            e.detail
        );
        // Agreement adds nothing.
        assert!(contradiction(&absent(), &reverted(), Ruling::Reverted).is_none());
        assert!(contradiction(&present, &merged(), Ruling::Merged).is_none());
        assert!(contradiction(&absent(), &Says::Silent, Ruling::Content).is_none());
    }

    // issue #26 §2: still-needed outranks every text evidence, and nothing it rules is dropped.
    #[test]
    fn still_needed_forbids_merged_and_superseded_whatever_the_text_says() {
        let present = Content::Present("the patch reverse-applies");
        for c in [present, absent(), Content::Unclear] {
            for h in [merged(), reverted(), Says::Silent] {
                let rule = ruling(&c, &h, Some(Behaviour::StillNeeded));
                assert_eq!(rule, Ruling::StillNeeded, "{c:?} {h:?}");
                // The other findings leave the text's ruling as it was.
                for b in [
                    None,
                    Some(Behaviour::CheckInvalid),
                    Some(Behaviour::Undetermined),
                ] {
                    assert_eq!(ruling(&c, &h, b), ruling(&c, &h, None), "{c:?} {h:?} {b:?}");
                }
            }
        }
        let drop = || Outcome::Dropped {
            applied_upstream: "crate:x@1 (content)".into(),
        };
        for v in [
            Verdict::Merged,
            Verdict::Superseded,
            Verdict::Carries,
            Verdict::CarriesReview,
            Verdict::Conflicts,
            Verdict::Reverted,
        ] {
            for o in [drop(), Outcome::Stopped] {
                let (verdict, outcome) = held(Ruling::StillNeeded, v, o);
                assert!(
                    !matches!(verdict, Verdict::Merged | Verdict::Superseded),
                    "{v:?} stayed {verdict:?}"
                );
                assert!(!matches!(outcome, Outcome::Dropped { .. }), "{v:?} dropped");
            }
        }
        // A carried patch stays carried, as it was.
        let (v, o) = held(
            Ruling::StillNeeded,
            Verdict::Carries,
            Outcome::Carried { bytes: vec![1] },
        );
        assert!(matches!(
            (v, o),
            (Verdict::Carries, Outcome::Carried { .. })
        ));
        // Without still-needed the verdict is the text's.
        let (v, o) = held(Ruling::Content, Verdict::Superseded, drop());
        assert!(matches!(
            (v, o),
            (Verdict::Superseded, Outcome::Dropped { .. })
        ));
    }

    // issue #39 §1: a check that shows the defect gone drops the patch the text would keep
    // (it applies, or upstream rewrote its lines, or history alone says merged); the content
    // showing the change stays `merged`, and a standing revert still asks a person.
    #[test]
    fn fixed_upstream_drops_what_the_text_cannot_and_never_overrides_a_revert() {
        let present = Content::Present("the patch reverse-applies");
        let fixed = Some(Behaviour::FixedUpstream);
        for h in [merged(), reverted(), Says::Silent] {
            assert_eq!(ruling(&present, &h, fixed), Ruling::Merged, "{h:?}");
        }
        for c in [absent(), Content::Unclear] {
            assert_eq!(ruling(&c, &reverted(), fixed), Ruling::Reverted, "{c:?}");
            for h in [merged(), Says::Silent] {
                assert_eq!(ruling(&c, &h, fixed), Ruling::FixedUpstream, "{c:?} {h:?}");
            }
        }
        let e = text_beside_behaviour(&absent(), &merged());
        assert_eq!(
            (e.kind, e.strength),
            (EvidenceKind::Contradicted, Strength::Strong)
        );
        assert!(
            e.detail
                .contains("would keep the patch (the patch still applies")
                && e.detail
                    .contains("history says merged (Upstream-Commit abc")
                && e.detail.contains("leaves the series"),
            "{}",
            e.detail
        );
        let e = text_beside_behaviour(&Content::Unclear, &Says::Silent);
        assert!(e.detail.contains("cannot tell"), "{}", e.detail);
    }

    #[test]
    fn the_evidence_names_the_text_verdict_the_behaviour_overruled() {
        for (by_text, sup, said) in [
            (Ruling::Merged, false, "merged"),
            (Ruling::MergedByHistory, false, "merged"),
            (Ruling::Content, true, "superseded"),
        ] {
            let e = behaviour_contradiction(by_text, Ruling::StillNeeded, sup).expect("said");
            assert_eq!(e.kind, EvidenceKind::Contradicted);
            assert!(
                e.detail.contains(&format!("text evidence says {said}")),
                "{}",
                e.detail
            );
        }
        assert!(behaviour_contradiction(Ruling::Content, Ruling::StillNeeded, false).is_none());
        assert!(behaviour_contradiction(Ruling::Merged, Ruling::Merged, false).is_none());
    }
}
