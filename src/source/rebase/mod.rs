//! Moving a recipe's pin and its bundle onto a newer upstream (issue #9), on top of the audit:
//! carried patches are written back refreshed (the header byte for byte, only `Last-Update`
//! changes, and only when the diff did: hunk numbers or a three-way-regenerated diff), merged
//! and confirmed-superseded patches leave the series for the ledger, and anything that needs
//! a person stops the rebase before a byte is written.
//!
//! The ledger, `ledger.toml` in the bundle folder, is append-only: one `[[dropped]]` table per
//! patch that left the series, appended by each rebase and never rewritten (appending a table
//! to a TOML file keeps it valid). Each entry names the file and its SHA-256 as it was in the
//! series, the verdict, `applied-upstream` (from the strongest evidence: the upstream commit, or
//! the new pin and the content check), the old and the new pin, the date, the evidence (one line
//! each, strongest first) and `kept-as`: the patch itself is kept under `dropped/` with its
//! `Applied-Upstream` field filled, so the attribution trail survives the move.
//!
//! Writing: the whole new bundle folder is staged beside the old one, checked (it loads and
//! every carried patch lints clean), and exchanged with the old folder in one atomic exchange
//! ([`fsx::exchange`]); then the lock (git pins) and last the recipe, the commit point, are
//! replaced atomically. The lock and the recipe are staged as temp files before the exchange, so
//! only renames follow it; a failed one swaps the old bundle back and restores the lock. A
//! stopped or failed rebase writes nothing.

mod commit;
mod text;

pub(crate) use text::with_applied_upstream;

use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::base::workspace::Workspace;
use crate::source::audit::{self, Outcome, Verdict};
use crate::source::patch::lint::Severity;
use crate::source::patch::Bundle;
use crate::source::recipe::{PinSource, Recipe};
use commit::{commit_swap, copy_flat, stage_file};
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
pub(crate) struct Decisions {
    /// Leave the series (confirms `superseded`; drops a `carries-review` or `conflicts` one).
    pub drop: BTreeSet<String>,
    /// Carry a `carries-review` patch after review.
    pub keep: BTreeSet<String>,
}

/// What a rebase does with one patch (serialized in lower case, as before it was typed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
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
pub(crate) struct Moved {
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
}

/// The result of a completed rebase.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct Report {
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
pub(crate) struct Stop {
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
pub(crate) enum Rebased {
    /// Everything written.
    Done(Report),
    /// Nothing written.
    Stopped(Stop),
}

/// One ledger entry (`[[dropped]]`).
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
struct LedgerEntry {
    file: String,
    // Written as `sha256:HEX` (the digest's display form), as ledgers always have been.
    #[serde(serialize_with = "as_display")]
    #[schemars(with = "String")]
    sha256: Sha256,
    verdict: String,
    applied_upstream: String,
    from: String,
    onto: String,
    date: String,
    kept_as: String,
    evidence: Vec<String>,
}

/// Serialize a value through its `Display` form.
fn as_display<T: std::fmt::Display, S: serde::Serializer>(
    v: &T,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(v)
}

#[derive(Serialize, schemars::JsonSchema)]
struct LedgerDoc {
    dropped: Vec<LedgerEntry>,
}

/// Rebase `recipe` (loaded from `recipe_path`) onto `onto`: check the decisions, audit, decide
/// every patch, stage the new bundle and recipe, and commit them (nothing is written when a
/// patch still needs a decision).
pub(crate) fn rebase(
    ws: &Workspace,
    recipe_path: &Path,
    recipe: &Recipe,
    onto: &audit::Onto,
    decisions: &Decisions,
    today: &str,
) -> Result<Rebased> {
    let dir = recipe.patches_dir.clone().ok_or_else(|| {
        Error::input(
            recipe.path.display(),
            "the embedded recipe's bundle cannot be rebased in place",
        )
        .with_hint("copy recipes/ and patches/ into a workspace and rebase that recipe")
    })?;
    let bundle = Bundle::load(&dir)?;
    check_decisions(&bundle, decisions)?;
    let session = audit::run(ws, recipe, &bundle, onto, today, &decisions.drop)?;
    let report = &session.audit;
    check_no_merged_keep(report, decisions)?;

    // Every decision is made before anything is written.
    let (rows, blocked) = decide(report, &bundle, decisions);
    if !blocked.is_empty() {
        return Ok(Rebased::Stopped(stopped(report, &blocked, &dir)));
    }

    // Stage the new bundle folder beside the old one.
    let parent = fsx::parent_of(&dir);
    let stage = tempfile::Builder::new()
        .prefix(".rebase-")
        .tempdir_in(&parent)
        .at("create temp dir in", &parent)?;
    let new_dir = stage.path().join("bundle");
    copy_flat(&dir, &new_dir)?;
    let ledger_entries = stage_patches(&new_dir, &bundle, report, &rows, today)?;
    let dropped: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.action == Action::Dropped)
        .map(|r| r.file.as_str())
        .collect();
    if bundle.series_path.exists() {
        stage_series(&bundle.series_path, &new_dir, &dropped)?;
    }
    let ledger_path = dir.join(LEDGER);
    if !ledger_entries.is_empty() {
        stage_ledger(&ledger_path, &new_dir, ledger_entries)?;
    }
    check_staged(&new_dir)?;

    // The new recipe text, validated before anything moves.
    let old_text = fsx::read_to_string(recipe_path)?;
    let new_text = moved_recipe_text(
        &old_text,
        recipe_path,
        &session.new_tree.pin,
        onto,
        report,
        today,
    )?;
    let base_dir = fsx::parent_of(&fsx::absolute(recipe_path)?);
    Recipe::parse(&new_text, recipe_path, Some(&base_dir))?;

    // Everything after the exchange is a rename: the lock and the recipe are staged as temp
    // files in their own folders first, so a full disk or a bad folder fails before anything moved.
    let mut staged_files = Vec::new();
    if let (PinSource::Git { url, tag, .. }, Some(commit), Some(lock)) = (
        &onto.source,
        session.new_tree.pin.git_commit,
        recipe.lock_path(),
    ) {
        let text = crate::source::upstream::git_lock_text(&lock, url, tag.as_deref(), commit)?;
        staged_files.push((stage_file(&lock, text.as_bytes())?, lock));
    }
    staged_files.push((
        stage_file(recipe_path, new_text.as_bytes())?,
        recipe_path.to_path_buf(),
    ));
    // Commit: the bundle (one exchange), the lock, then the recipe (the commit point).
    commit_swap(stage, &dir, staged_files)?;
    Ok(Rebased::Done(Report {
        from: report.from.clone(),
        onto: report.onto.clone(),
        recipe: recipe_path.display().to_string(),
        ledger: (!dropped.is_empty()).then(|| ledger_path.display().to_string()),
        patches: rows,
        audit: session.audit.clone(),
    }))
}

/// Every `--drop`/`--keep` names a patch of the series, and none is both.
fn check_decisions(bundle: &Bundle, decisions: &Decisions) -> Result<()> {
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
    let Some(p) = report
        .patches
        .iter()
        .find(|p| p.verdict == Verdict::Merged && decisions.keep.contains(&p.file))
    else {
        return Ok(());
    };
    Err(Error::input(
        format!("--keep {}", p.file),
        format!(
            "the audit finds the patch merged upstream in {}: it leaves the series, a keep cannot carry it",
            report.onto
        ),
    )
    .with_hint(format!(
        "remove `--keep {}`; if upstream's version is wrong, refresh the patch as a new fix (`pinforge patch export`) and rebase again",
        p.file
    )))
}

/// One row per patch in series order, and the patches that still need a decision.
fn decide<'a>(
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
            (Outcome::Dropped { applied_upstream }, Verdict::Merged, _, _) => {
                (Action::Dropped, Some(applied_upstream.clone()))
            }
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
               or refresh a conflicting patch against the new tree (a checkout of it: `pinforge patch apply`, fix, commit, `pinforge patch export`) \
               and run the rebase again"
            .into(),
        stopped: names,
        audit: report.clone(),
    }
}

/// In the staged bundle `new_dir`: refreshed patches rewritten, dropped ones moved under
/// `dropped/` with their `Applied-Upstream` filled. Returns the ledger entries to append.
fn stage_patches(
    new_dir: &Path,
    bundle: &Bundle,
    report: &audit::Audit,
    rows: &[Moved],
    today: &str,
) -> Result<Vec<LedgerEntry>> {
    let mut ledger_entries = Vec::new();
    for (row, p) in rows.iter().zip(&report.patches) {
        let Some(file) = bundle.files.iter().find(|(id, _)| id.as_str() == p.file) else {
            continue;
        };
        let (_, original) = file;
        match (&p.outcome, row.action) {
            (Outcome::Carried { bytes }, Action::Refreshed) => {
                fsx::write_atomic_keep_mode(&new_dir.join(&p.file), bytes)?;
            }
            (_, Action::Dropped) => {
                let applied = row.applied_upstream.clone().unwrap_or_default();
                let kept = with_applied_upstream(original, &applied);
                let rel = format!("{DROPPED_DIR}/{}", p.file);
                fsx::create_dir_all(&new_dir.join(DROPPED_DIR))?;
                let mode = fsx::mode_of(&new_dir.join(&p.file)).unwrap_or(0o644);
                fsx::write_atomic_mode(&new_dir.join(&rel), &kept, mode)?;
                std::fs::remove_file(new_dir.join(&p.file)).at("remove", &new_dir.join(&p.file))?;
                ledger_entries.push(LedgerEntry {
                    file: p.file.clone(),
                    sha256: original.sha256,
                    verdict: p.verdict.as_str().into(),
                    applied_upstream: applied,
                    from: report.from.clone(),
                    onto: report.onto.clone(),
                    date: today.into(),
                    kept_as: rel,
                    evidence: p
                        .evidence
                        .iter()
                        .map(|e| {
                            format!(
                                "{} {}: {}",
                                audit::word(&e.strength),
                                audit::word(&e.kind),
                                e.detail.lines().next().unwrap_or_default()
                            )
                        })
                        .collect(),
                });
            }
            _ => {}
        }
    }
    Ok(ledger_entries)
}

/// The staged `series` without the dropped patches' lines (comments and order kept).
fn stage_series(series_path: &Path, new_dir: &Path, dropped: &BTreeSet<&str>) -> Result<()> {
    let text = fsx::read_to_string(series_path)?;
    let mut out = String::new();
    for line in text.lines() {
        let name = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        if name.is_some_and(|n| dropped.contains(n)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    fsx::write_atomic_keep_mode(&new_dir.join("series"), out.as_bytes())
}

/// The staged ledger: the old one (or its header comment) with the new tables appended.
fn stage_ledger(ledger_path: &Path, new_dir: &Path, entries: Vec<LedgerEntry>) -> Result<()> {
    let mut text = if ledger_path.exists() {
        fsx::read_to_string(ledger_path)?
    } else {
        "# pinforge ledger: patches that left the series, append-only (one [[dropped]] table per patch).\n".into()
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(
        &toml::to_string(&LedgerDoc { dropped: entries })
            .map_err(|e| Error::Internal(e.to_string()))?,
    );
    fsx::write_atomic_keep_mode(&new_dir.join(LEDGER), text.as_bytes())
}

/// The staged bundle must load, and every carried patch lint clean.
fn check_staged(new_dir: &Path) -> Result<()> {
    let staged = Bundle::load(new_dir)?;
    for (path, f) in staged.lint() {
        if f.severity == Severity::Error {
            return Err(Error::Internal(format!(
                "{}:{}: the rebased patch does not lint clean: {}",
                path.display(),
                f.line,
                f.message
            )));
        }
    }
    Ok(())
}
