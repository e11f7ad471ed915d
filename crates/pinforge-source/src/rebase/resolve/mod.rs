//! A rebase that stops at a conflict and resumes (issue #26 §4). `rebase --resolve` leaves a
//! git checkout of the new pin (`rebase-resolve/NAME/` in the workspace) with the series
//! applied as commits up to the conflicting patch, that patch's conflict written into the
//! files as diff3 markers, and the state recorded ([`state`]); nothing of the bundle or the
//! recipe is written. The operator edits, `git add`s and `git commit`s; `rebase --continue`
//! takes that commit back as the patch file ([`checkout::take_commit`]), replays the rest of
//! the series onto it (stopping again at the next conflict), and ends through the same
//! [`super::finish`] as a rebase without conflicts: ledger, one journaled swap, lock, recipe.
//! `rebase --abort` removes the checkout and the state and writes nothing else.

mod checkout;
mod state;

use super::{check_decisions, decide, finish, recovery, Action, Decisions, Loaded, Moved, Rebased};
use crate::audit::{self, Outcome};
use crate::patch::PatchFile;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use serde::Serialize;
use state::{Paths, State};
use std::path::{Path, PathBuf};

/// A rebase stopped at a conflict, waiting in a checkout for the operator.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Resolving {
    /// One line: what stopped and that nothing of the bundle or the recipe was written.
    pub message: String,
    /// The patch that conflicts.
    pub patch: String,
    /// The checkout of the new pin holding the conflict.
    pub checkout: String,
    /// The files with conflict markers (diff3 style), relative to the checkout.
    pub conflicts: Vec<String>,
    /// The state file.
    pub state: String,
    /// The patches already taken past the first conflict (resolved or carried onto a
    /// resolution), in series order.
    pub resolved: Vec<String>,
    /// What to do.
    pub hint: String,
}

/// The stop the operator sees.
fn resolving(at: &Paths, st: &State, conflicts: Vec<String>) -> Resolving {
    let co = at.checkout.display();
    let recipe = st.recipe.display();
    Resolving {
        message: format!(
            "rebase onto {}: {} conflicts with the new pin; nothing of the bundle or the recipe was written; the conflict waits in {co}",
            st.onto, st.in_progress
        ),
        patch: st.in_progress.clone(),
        checkout: co.to_string(),
        conflicts,
        state: at.state.display().to_string(),
        resolved: st.done.iter().map(|d| d.file.clone()).collect(),
        hint: format!(
            "edit the conflict markers (diff3: ours, ||||||| base, theirs) in {co}, `git -C {co} add FILE...`, `git -C {co} commit`, then `pinforge rebase {recipe} --continue`; `pinforge rebase {recipe} --abort` removes the checkout and writes nothing"
        ),
    }
}

/// A rebase of a recipe whose resolution is in progress would make that resolution stale:
/// refused, with the way to finish or drop it.
pub(super) fn refuse_in_progress(ws: &Workspace, l: &Loaded) -> Result<()> {
    let at = Paths::of(ws, &l.recipe_path)?;
    if !at.exists() {
        return Ok(());
    }
    let recipe = l.recipe_path.display();
    Err(Error::input(
        at.checkout.display(),
        "a stopped rebase of this recipe is waiting for its conflict to be resolved",
    )
    .with_hint(format!(
        "finish it: `pinforge rebase {recipe} --continue`, or drop it: `pinforge rebase {recipe} --abort`"
    )))
}

/// `--resolve` where the plain rebase stopped at conflicts: the checkout with the series up to
/// the first conflicting patch, its conflict, the state. Nothing is left of the checkout when
/// this fails.
pub(super) fn start(
    ws: &Workspace,
    l: &Loaded,
    onto: &audit::Onto,
    decisions: &Decisions,
    session: &audit::Session,
    rows: Vec<Moved>,
    today: &str,
) -> Result<Rebased> {
    let at = Paths::of(ws, &l.recipe_path)?;
    let made = (|| {
        let repo = checkout::create(&at, &session.new_tree)?;
        let first = rows
            .iter()
            .position(|r| r.action == Action::Stopped)
            .unwrap_or(rows.len());
        // The patches before the conflict, as the rebase would write them.
        let before: Vec<PatchFile> = session.audit.patches[..first]
            .iter()
            .zip(&l.bundle.select(None)?)
            .filter_map(|(a, p)| match &a.outcome {
                Outcome::Carried { bytes } => Some(PatchFile::from_bytes(
                    p.id.clone(),
                    p.origin.clone(),
                    bytes.clone(),
                )),
                _ => None,
            })
            .collect();
        let before: Vec<&PatchFile> = before.iter().collect();
        crate::patch::apply::apply_series(&repo, &before)?;
        let head = repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .map_err(|e| Error::git(at.checkout.display(), e))?;
        let mut st = State::new(l, &onto.spec, decisions, crate::git::git_oid(head.id()))?;
        st.onto_base = Some(session.new_tree.base_commit);
        let stop = checkout::replay(ws, &repo, &at, &mut st, l, &rows, first, today)?;
        Ok::<_, Error>((stop, st))
    })();
    match made {
        Ok((Some(stop), _)) => Ok(Rebased::Resolving(stop)),
        // Every patch went on in the checkout after all: the rebase ends as any other.
        Ok((None, st)) => {
            let (report, rows) = with_taken(&session.audit, rows, &st, l)?;
            let done = finish(ws, l, onto, session, report, rows, today)?;
            at.remove()?;
            Ok(Rebased::Done(done))
        }
        Err(e) => {
            let _ = at.remove();
            Err(e)
        }
    }
}

/// `rebase RECIPE --continue`: under the workspace lock, refuse a missing or stale state or a
/// checkout that is not committed clean, take the operator's commit as the patch, audit
/// again with the recorded decisions, replay the rest of the series (stopping again at the
/// next conflict), and end as a rebase without conflicts ends; then remove the resolution.
pub fn resume(ws: &Workspace, recipe_path: &Path, today: &str) -> Result<Rebased> {
    let _lock = ws.lock()?;
    recovery::recover_locked(ws)?;
    let abs = fsx::absolute(recipe_path)?;
    let at = Paths::of(ws, &abs)?;
    let mut st = State::load(&at, &abs)?;
    let l = Loaded::read(recipe_path)?;
    st.check_fresh(&at, &l)?;
    let onto = audit::parse_onto(&st.onto)?;
    let decisions = st.decisions();
    check_decisions(&l.bundle, &decisions)?;
    let repo = checkout::open(&at)?;
    let before = st.clone();
    checkout::take_commit(&repo, &at, &mut st, &l, today)?;
    // Saved before anything more is committed: a --continue killed from here on is undone
    // back to the operator's commit by the next one.
    st.save(&at)?;
    let taken = st.resumed_from;
    let ended = carry_on(ws, &repo, &at, &mut st, &l, &onto, &decisions, today);
    if ended.is_err() {
        // A --continue that failed (not one that was killed) leaves the checkout at the
        // operator's commit and the state as it found it: the operator may amend the
        // resolution before the next --continue, which takes it afresh.
        if let Some(c) = taken {
            let _ = checkout::reset_to(&repo, &at, c);
        }
        let _ = before.save(&at);
    }
    ended
}

/// The rest of a `--continue` once the operator's commit is taken: audit again with the
/// recorded decisions, replay the rest of the series, and end as a plain rebase ends.
#[allow(clippy::too_many_arguments)]
fn carry_on(
    ws: &Workspace,
    repo: &git2::Repository,
    at: &Paths,
    st: &mut State,
    l: &Loaded,
    onto: &audit::Onto,
    decisions: &Decisions,
    today: &str,
) -> Result<Rebased> {
    let session = audit::run_locked(ws, &l.recipe, &l.bundle, onto, today, &decisions.drop)?;
    if st
        .onto_base
        .is_some_and(|b| b != session.new_tree.base_commit)
    {
        return Err(Error::input(
            format!("--onto {}", st.onto),
            "now resolves to another tree than the one the resolution was made on; nothing was written",
        )
        .with_hint("run `pinforge rebase RECIPE --abort`, then rebase again onto the pin as it is now"));
    }
    let (rows, _) = decide(&session.audit, &l.bundle, decisions);
    let last = st
        .done
        .last()
        .and_then(|d| session.audit.patches.iter().position(|p| p.file == d.file))
        .ok_or_else(|| Error::Internal("the resolved patch is not in the audit".into()))?;
    if let Some(stop) = checkout::replay(ws, repo, at, st, l, &rows, last + 1, today)? {
        return Ok(Rebased::Resolving(stop));
    }
    // Killed here, the checkout holds this run's commits past the operator's; the state names
    // the operator's commit, so the next --continue undoes them first.
    pinforge_base::hooks::crash_named("rebase-resolve:replayed");
    let (report, rows) = with_taken(&session.audit, rows, st, l)?;
    let done = finish(ws, l, onto, &session, report, rows, today)?;
    at.remove()?;
    Ok(Rebased::Done(done))
}

/// The audit and rows with every patch taken past the first conflict as it is to be written:
/// carried byte for byte when its bytes did not change, refreshed otherwise.
fn with_taken(
    audit: &audit::Audit,
    mut rows: Vec<Moved>,
    st: &State,
    l: &Loaded,
) -> Result<(audit::Audit, Vec<Moved>)> {
    let mut report = audit.clone();
    for d in &st.done {
        let i = report
            .patches
            .iter()
            .position(|p| p.file == d.file)
            .ok_or_else(|| Error::Internal(format!("{} is not in the audit", d.file)))?;
        let bytes = d.patch.as_bytes().to_vec();
        let same = l
            .bundle
            .files
            .iter()
            .any(|(id, f)| id.as_str() == d.file && f.bytes == bytes);
        report.patches[i].outcome = Outcome::Carried { bytes };
        rows[i].action = if same {
            Action::Carried
        } else {
            Action::Refreshed
        };
        rows[i].applied_upstream = None;
        rows[i].resolved = d.resolved;
    }
    if let Some(r) = rows.iter().find(|r| r.action == Action::Stopped) {
        return Err(Error::Internal(format!(
            "{} still needs a decision after the resolution",
            r.file
        )));
    }
    Ok((report, rows))
}

/// `rebase RECIPE --abort`: the checkout and the state removed, nothing else written. Returns
/// the checkout removed.
pub fn abort(ws: &Workspace, recipe_path: &Path) -> Result<PathBuf> {
    let _lock = ws.lock()?;
    recovery::recover_locked(ws)?;
    let abs = fsx::absolute(recipe_path)?;
    let at = Paths::of(ws, &abs)?;
    if !at.exists() {
        return Err(Error::input(
            recipe_path.display(),
            format!(
                "no stopped rebase to abort: {} does not exist",
                at.checkout.display()
            ),
        ));
    }
    // A state of another recipe with the same file name is not this one's to remove.
    if at.state.exists() {
        let st = State::load(&at, &abs)?;
        if st.recipe != abs {
            return Err(Error::input(
                at.state.display(),
                format!(
                    "the resolution is of {}, not of this recipe",
                    st.recipe.display()
                ),
            )
            .with_hint(format!(
                "abort it as `pinforge rebase {} --abort`",
                st.recipe.display()
            )));
        }
    }
    at.remove()?;
    Ok(at.checkout)
}
