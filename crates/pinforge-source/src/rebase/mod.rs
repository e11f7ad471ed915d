//! Moving a recipe's pin and its bundle onto a newer upstream (issue #9), on top of the audit:
//! carried patches are written back refreshed (the header byte for byte, only `Last-Update`
//! changes, and only when the diff did: hunk numbers or a three-way-regenerated diff), merged
//! and confirmed-superseded patches leave the series for the ledger, and anything that needs
//! a person stops the rebase before a byte is written.
//!
//! The ledger, `ledger.toml` in the bundle folder, is append-only: one `[[dropped]]` table per
//! patch that left the series, appended by each rebase and never rewritten; it is parsed and
//! validated before anything is appended ([`ledger`]). Each entry names the file and its SHA-256
//! as it was in the series, the verdict, `applied-upstream` (from the strongest evidence: the
//! upstream commit, or the new pin and the content check), the old and the new pin, the date,
//! the evidence (one line each, strongest first) and `kept-as`: the patch itself is kept under
//! `dropped/` with its `Applied-Upstream` field filled (under a name of its own digest when an
//! older drop holds the plain name), so the attribution trail survives the move.
//!
//! Writing is a journaled transaction ([`commit`] states the protocol): the workspace lock is
//! held from the first read of the recipe to the last write, the whole new bundle folder is
//! staged beside the old one and checked, the recipe's new text is made with a TOML editor and
//! parsed before it is staged, and the exchange and renames that follow are settled from the
//! journal by the next command when a rebase is killed ([`recovery`]): all old or all new. A
//! stopped or failed rebase writes nothing.

mod commit;
mod journal;
mod ledger;
mod recovery;
mod resolve;
mod stage;
mod text;

pub use commit::RebaseStep;
pub use recovery::recover;
pub use resolve::{abort, resume, Resolving};
pub(crate) use text::with_applied_upstream;

use crate::audit::{self, Outcome, Verdict};
use crate::patch::Bundle;
use crate::recipe::{PinSource, Recipe};
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;
use text::moved_recipe_text;

/// The ledger file's name inside the bundle folder.
pub(crate) const LEDGER: &str = "ledger.toml";
/// Where dropped patches are kept, inside the bundle folder.
pub(crate) const DROPPED_DIR: &str = "dropped";

/// The operator's decisions for patches the audit cannot decide alone.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    /// Leave the series (confirms `superseded`; drops a `carries-review` or `conflicts` one).
    pub drop: BTreeSet<String>,
    /// Carry a `carries-review` patch after review.
    pub keep: BTreeSet<String>,
}

/// What a rebase does with one patch (serialized in lower case, as before it was typed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Carried byte for byte.
    Carried,
    /// Carried, its diff rewritten against the new upstream.
    Refreshed,
    /// Left the series for the ledger.
    Dropped,
    /// Needs a decision: the rebase stops (never in a completed report).
    Stopped,
}

impl Action {
    /// The word reports print (the serialized spelling).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Carried => "carried",
            Action::Refreshed => "refreshed",
            Action::Dropped => "dropped",
            Action::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to one patch.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Moved {
    /// Patch file name.
    pub file: String,
    /// The audit's verdict.
    pub verdict: Verdict,
    /// `carried`, `refreshed` (carried, diff rewritten) or `dropped`.
    // The schema keeps the plain string it has always published.
    #[schemars(with = "String")]
    pub action: Action,
    /// For a dropped patch: its `Applied-Upstream`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_upstream: Option<String>,
    /// Taken from the operator's commit in a `--resolve` checkout (present only then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resolved: bool,
}

/// The result of a completed rebase.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// The old pin.
    pub from: String,
    /// The new pin as given.
    pub onto: String,
    /// The recipe written.
    pub recipe: String,
    /// The ledger appended to (when anything was dropped).
    pub ledger: Option<String>,
    /// One row per patch, in series order.
    pub patches: Vec<Moved>,
    /// The audit it rests on.
    pub audit: audit::Audit,
}

/// A rebase that stopped before writing anything: what needs a decision, and how to give it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stop {
    /// One line: what stopped and that nothing was written.
    pub message: String,
    /// Every blocked patch with its evidence.
    pub detail: String,
    /// What to do.
    pub hint: String,
    /// The blocked patches.
    pub stopped: Vec<String>,
    /// The audit it rests on.
    pub audit: audit::Audit,
}

/// How a rebase ended.
#[derive(Debug, Clone)]
pub enum Rebased {
    /// Everything written.
    Done(Report),
    /// Nothing written.
    Stopped(Stop),
    /// Nothing of the bundle or the recipe written: a conflict waits in a checkout for the
    /// operator (`--resolve`, `--continue`).
    Resolving(Resolving),
}
/// Rebase the recipe at `recipe_path` onto `onto`, holding the workspace lock from the first
/// read to the last write: settle a leftover rebase, load the recipe and its bundle, check the
/// decisions, audit, decide every patch, then stage and commit the new bundle, lock and recipe
/// as one journaled transaction ([`commit`]). Nothing is written when a patch still needs a
/// decision. With `resolve`, a stop where every blocked patch conflicts leaves a checkout of
/// the new pin with the conflict in it instead ([`resolve`]); still nothing of the bundle or
/// the recipe is written.
pub fn rebase(
    ws: &Workspace,
    recipe_path: &Path,
    onto: &audit::Onto,
    decisions: &Decisions,
    today: &str,
    resolve: bool,
) -> Result<Rebased> {
    // `--onto`, `--drop` and `--keep` were refused at input when they hold a control character
    // (`cli::rebase`); the values this writes are checked again where they become text
    // (`text::pin_keys`, the `Applied-Upstream` line in `stage`).
    let _lock = ws.lock()?;
    recovery::recover_locked(ws)?;
    let l = Loaded::read(recipe_path)?;
    resolve::refuse_in_progress(ws, &l)?;
    check_decisions(&l.bundle, decisions)?;
    let session = audit::run_locked(ws, &l.recipe, &l.bundle, onto, today, &decisions.drop)?;
    let report = &session.audit;
    check_no_merged_keep(report, decisions)?;

    // Every decision is made before anything is written.
    let (rows, blocked) = decide(report, &l.bundle, decisions);
    if !blocked.is_empty() {
        if resolve && blocked.iter().all(|p| p.verdict == Verdict::Conflicts) {
            return resolve::start(ws, &l, onto, decisions, &session, rows, today);
        }
        return Ok(Rebased::Stopped(stopped(report, &blocked, &l.dir)));
    }
    let report = session.audit.clone();
    finish(ws, &l, onto, &session, report, rows, today).map(Rebased::Done)
}

/// What a rebase reads under its lock before anything else: the recipe (its bytes as read,
/// which the journal's digest and the rewrite use) and its bundle.
pub(super) struct Loaded {
    /// The recipe (absolute).
    pub recipe_path: std::path::PathBuf,
    /// Its bytes.
    pub old_bytes: Vec<u8>,
    /// Its folder.
    pub base_dir: std::path::PathBuf,
    /// Parsed.
    pub recipe: Recipe,
    /// The bundle folder.
    pub dir: std::path::PathBuf,
    /// The bundle.
    pub bundle: Bundle,
    /// The bundle folder's digest when it was read: the commit refuses a bundle that changed
    /// on disk since (a `patch export` or a hand edit while the audit ran).
    pub bundle_digest: pinforge_base::digest::Sha256,
}

impl Loaded {
    /// One read of the recipe, then its bundle.
    pub(super) fn read(recipe_path: &Path) -> Result<Loaded> {
        let recipe_path = fsx::absolute(recipe_path)?;
        let old_bytes = fsx::read(&recipe_path).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::input(recipe_path.display(), "recipe not found")
                    .with_hint("give the path of a recipe TOML file, e.g. recipes/mrope-cpu.toml")
            }
            other => other,
        })?;
        let base_dir = fsx::parent_of(&recipe_path);
        let recipe = Recipe::parse_bytes(&old_bytes, &recipe_path, Some(&base_dir))?;
        let dir = recipe.patches_dir.clone().ok_or_else(|| {
            Error::input(
                recipe.path.display(),
                "the embedded recipe's bundle cannot be rebased in place",
            )
            .with_hint("copy recipes/ and patches/ into a workspace and rebase that recipe")
        })?;
        refuse_unjournaled_stages(&dir)?;
        let bundle_digest = journal::bundle_digest(&dir)?;
        let bundle = Bundle::load(&dir)?;
        Ok(Loaded {
            recipe_path,
            old_bytes,
            base_dir,
            recipe,
            dir,
            bundle,
            bundle_digest,
        })
    }
}

/// The end every completed rebase shares, with or without a resolution: the new recipe text
/// (parsed as a recipe before anything moves), the lock, and the one journaled transaction
/// that swaps the staged bundle in ([`commit`]). `report` is the audit with the outcome of
/// every carried patch as it is to be written.
pub(super) fn finish(
    ws: &Workspace,
    l: &Loaded,
    onto: &audit::Onto,
    session: &audit::Session,
    report: audit::Audit,
    rows: Vec<Moved>,
    today: &str,
) -> Result<Report> {
    let recipe_path = &l.recipe_path;
    let old_text = std::str::from_utf8(&l.old_bytes)
        .map_err(|_| Error::input(recipe_path.display(), "recipe is not UTF-8 text"))?;
    let new_text = moved_recipe_text(
        old_text,
        recipe_path,
        &session.new_tree.pin,
        onto,
        &report.from,
        today,
    )?;
    let moved = Recipe::parse(&new_text, recipe_path, Some(&l.base_dir))?;
    if !pins_match(&moved.pin.source, &onto.source, &session.new_tree.pin)
        || moved.patches_dir != l.recipe.patches_dir
    {
        return Err(Error::Internal(format!(
            "{}: the rewritten recipe does not pin {}",
            recipe_path.display(),
            onto.spec
        )));
    }
    let lock = match (
        &onto.source,
        session.new_tree.pin.git_commit,
        l.recipe.lock_path(),
    ) {
        (PinSource::Git { url, tag, .. }, Some(commit), Some(lock)) => {
            let text = crate::upstream::git_lock_text(&lock, url, tag.as_deref(), commit)?;
            Some((lock, text.into_bytes()))
        }
        _ => None,
    };
    let change = commit::Change {
        recipe: recipe_path.clone(),
        old_recipe: l.old_bytes.clone(),
        new_recipe: new_text.into_bytes(),
        lock,
        bundle: l.dir.clone(),
        bundle_read: l.bundle_digest,
    };
    commit::run(ws, &change, |new_dir| {
        stage::fill(new_dir, &l.bundle, &report, &rows, today)
    })?;
    let dropped = rows.iter().any(|r| r.action == Action::Dropped);
    Ok(Report {
        from: report.from.clone(),
        onto: report.onto.clone(),
        recipe: recipe_path.display().to_string(),
        ledger: dropped.then(|| l.dir.join(LEDGER).display().to_string()),
        patches: rows,
        audit: report,
    })
}

/// Whether the rewritten recipe's pin is the one named: same kind and digest (a git pin: the
/// URL, tag and the commit as resolved). Paths are compared through their digests, since the
/// recipe resolves a relative one against its folder.
fn pins_match(parsed: &PinSource, onto: &PinSource, pin: &crate::upstream::ResolvedPin) -> bool {
    match (parsed, onto) {
        (
            PinSource::Git { url, tag, commit },
            PinSource::Git {
                url: u2, tag: t2, ..
            },
        ) => url == u2 && tag == t2 && pin.git_commit.is_some_and(|c| c.to_string() == *commit),
        (PinSource::Crate { .. }, PinSource::Crate { .. }) => parsed == onto,
        (PinSource::Tarball { sha256: a, .. }, PinSource::Tarball { sha256: b, .. }) => a == b,
        (PinSource::Dir { tree_sha256: a, .. }, PinSource::Dir { tree_sha256: b, .. }) => a == b,
        _ => false,
    }
}

/// A `.rebase-*` folder beside the bundle that no journal names (the journaled one was settled
/// under this lock already) is left by a pinforge from before rebases were journaled, or by a
/// rebase of another workspace sharing the bundle: it may hold the only copy of a bundle, so it
/// is refused, never removed or guessed at.
fn refuse_unjournaled_stages(dir: &Path) -> Result<()> {
    let parent = fsx::parent_of(dir);
    for e in std::fs::read_dir(&parent).at("read directory", &parent)? {
        let e = e.at("read directory", &parent)?;
        if e.file_name().to_string_lossy().starts_with(".rebase-") {
            return Err(Error::input(
                e.path().display(),
                "a stage folder of an interrupted rebase that no journal names",
            )
            .with_hint(format!(
                "it holds a bundle from before or after that rebase: compare its bundle/ with {} and the recipe's pin, keep the one that matches, then remove the folder",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Every `--drop`/`--keep` names a patch of the series, and none is both.
pub(super) fn check_decisions(bundle: &Bundle, decisions: &Decisions) -> Result<()> {
    for name in decisions.drop.iter().chain(&decisions.keep) {
        if !bundle.series.iter().any(|e| e.id.as_str() == name) {
            return Err(Error::input(
                format!("--drop/--keep {name}"),
                "no such patch in the series",
            )
            .with_hint(format!("the series is {}", bundle.series_path.display())));
        }
    }
    if let Some(both) = decisions.drop.intersection(&decisions.keep).next() {
        return Err(Error::input(
            format!("--drop {both} --keep {both}"),
            "the patch is both dropped and kept",
        )
        .with_hint(format!("pass one of `--drop {both}` or `--keep {both}`")));
    }
    Ok(())
}

/// A kept patch upstream already has would be dropped anyway: say so, never ignore it.
fn check_no_merged_keep(report: &audit::Audit, decisions: &Decisions) -> Result<()> {
    let Some(p) = report.patches.iter().find(|p| {
        matches!(p.verdict, Verdict::Merged | Verdict::FixedUpstream)
            && decisions.keep.contains(&p.file)
    }) else {
        return Ok(());
    };
    let found = match p.verdict {
        Verdict::FixedUpstream => {
            "the defect fixed upstream (its Pinforge-Check runs clean without it)"
        }
        _ => "the patch merged upstream",
    };
    Err(Error::input(
        format!("--keep {}", p.file),
        format!(
            "the audit finds {found} in {}: it leaves the series, a keep cannot carry it",
            report.onto
        ),
    )
    .with_hint(format!(
        "remove `--keep {}`; if upstream's version is wrong, refresh the patch as a new fix (`pinforge patch export`) and rebase again",
        p.file
    )))
}

/// One row per patch in series order, and the patches that still need a decision.
pub(super) fn decide<'a>(
    report: &'a audit::Audit,
    bundle: &Bundle,
    decisions: &Decisions,
) -> (Vec<Moved>, Vec<&'a audit::PatchAudit>) {
    let mut rows = Vec::new();
    let mut blocked = Vec::new();
    for p in &report.patches {
        let drop = decisions.drop.contains(&p.file);
        let keep = decisions.keep.contains(&p.file);
        let (action, applied) = match (&p.outcome, p.verdict, drop, keep) {
            (
                Outcome::Dropped { applied_upstream },
                Verdict::Merged | Verdict::FixedUpstream,
                _,
                _,
            ) => (Action::Dropped, Some(applied_upstream.clone())),
            (Outcome::Dropped { applied_upstream }, Verdict::Superseded, true, _) => {
                (Action::Dropped, Some(applied_upstream.clone()))
            }
            (
                _,
                Verdict::CarriesReview | Verdict::Conflicts | Verdict::Carries | Verdict::Reverted,
                true,
                _,
            ) => (
                Action::Dropped,
                Some(format!(
                    "{} (dropped by the operator: {})",
                    report.onto,
                    p.verdict.as_str()
                )),
            ),
            (Outcome::Carried { bytes }, Verdict::Carries, _, _)
            | (Outcome::Carried { bytes }, Verdict::CarriesReview | Verdict::Reverted, _, true) => {
                let original = bundle
                    .files
                    .iter()
                    .find(|(id, _)| id.as_str() == p.file)
                    .map(|(_, f)| &f.bytes);
                if original == Some(bytes) {
                    (Action::Carried, None)
                } else {
                    (Action::Refreshed, None)
                }
            }
            _ => {
                blocked.push(p);
                (Action::Stopped, None)
            }
        };
        rows.push(Moved {
            file: p.file.clone(),
            verdict: p.verdict,
            action,
            applied_upstream: applied,
            resolved: false,
        });
    }
    (rows, blocked)
}

/// The stop: every blocked patch with its evidence, and how to decide it.
fn stopped(report: &audit::Audit, blocked: &[&audit::PatchAudit], dir: &Path) -> Stop {
    let mut detail = String::new();
    for p in blocked {
        detail.push_str(&format!("{}: {}\n", p.file, p.verdict.as_str()));
        for e in &p.evidence {
            for l in e.detail.lines() {
                detail.push_str(&format!("  {l}\n"));
            }
        }
    }
    let names: Vec<String> = blocked.iter().map(|p| p.file.clone()).collect();
    Stop {
        message: format!(
            "rebase onto {}: stopped: {} patch(es) need a decision ({}); nothing was written (the recipe, its lock and {} are as they were)",
            report.onto,
            blocked.len(),
            names.join(", "),
            dir.display()
        ),
        detail: detail.trim_end().to_string(),
        hint: "for each: `--drop FILE` if upstream has the fix (confirms superseded), `--keep FILE` \
               to carry a carries-review patch after review (or a reverted one upstream took back), \
               or resolve a conflicting one: run the rebase again with `--resolve` (a checkout of the new pin \
               with the conflict in it; edit, `git add`, `git commit`, then `pinforge rebase RECIPE --continue`)"
            .into(),
        stopped: names,
        audit: report.clone(),
    }
}
