//! `pinforge validate merge RUN… [-o OUT]`: the shards of a fleet soak (`validate --shard I/N`,
//! see [`super::shard`]) joined into one ordinary run folder that `verify` accepts.
//!
//! Refusals, before anything is written: a shard whose evidence does not verify now (exit 1,
//! a check failed); a folder that is not a shard, or is itself a merge; shards whose settings
//! differ (the differing settings named); the same folder twice, or two folders with the same
//! shard index; a missing shard (its indices named) — exit 2, the input is wrong.
//!
//! What is compared: every setting except the shard itself and the model's *path* (each shard
//! of the generated tiny model has its own copy, and hosts of a fleet mount a given model at
//! paths of their own); the model's sha256 is compared. The rows of each shard are taken from
//! the bytes whose digest its verified evidence records, so a row file changed after `verify`
//! is refused rather than merged.
//!
//! Commit protocol (the parent folder locked throughout, from the first read of a shard's
//! files to the rename): stage every file in a fresh `.NAME.merge-PID` folder beside OUT
//! (hook `merge:1` after the prompts, `merge:2` after the rows, summary and evidence), fsync
//! it, then one `renameat2(RENAME_NOREPLACE)` to OUT (the commit point, `merge:3` after it)
//! and fsync of the parent. A crash before the rename leaves OUT absent and only a dot-folder
//! a rerun ignores; a merge never replaces an existing folder.
//!
//! Re-running a merge is a no-op (a scheduler's merge job re-run after a failure elsewhere, or
//! the kill after the commit point): when OUT already holds the merge of exactly these shards
//! (the same shard evidence by sha256, the same settings, rows and summary, and its own evidence
//! verifies now) nothing is written and the report says `unchanged`. Any other folder at OUT is
//! refused with the difference named.
//!
//! A shard may be given as its run folder, its `evidence.json`, or the `validate --json`
//! document it printed (`shards/INDEX.json` of a Slurm array or Kubernetes Indexed Job), whose
//! `run_dir` names the folder: the merge job then needs no JSON tool to find the runs.

use super::evidence::{self, EvidenceManifest, EvidenceRef, ShardEvidence};
use super::rows::{self, Row};
use super::run_dir::{canonical, differing_keys, RunDir, Settings};
use super::shard::Shard;
use super::summary::{self, Derived};
use crate::record;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::txn::Step;
use pinforge_base::{fsx, text::shown};
use pinforge_record::sign::record::Signer;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What to merge.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// The shard run folders (or their evidence.json, or the `validate --json` document each
    /// shard printed).
    pub runs: Vec<PathBuf>,
    /// The merged run folder to create (default: a new run under `<workspace>/validate/`).
    pub out: Option<PathBuf>,
    /// The workspace root.
    pub workspace: PathBuf,
}

/// What a merge wrote.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MergeReport {
    /// The merged run's id (its folder name).
    pub run: String,
    /// The merged run folder.
    pub run_dir: PathBuf,
    /// The summary, recomputed from every shard's rows.
    #[serde(flatten)]
    pub derived: Derived,
    /// The merged run's evidence manifest.
    pub evidence: EvidenceRef,
    /// The shards merged, by index.
    pub shards: Vec<ShardEvidence>,
    /// OUT already held the merge of exactly these shards: nothing was written. Not in the
    /// JSON document, whose shape is the same either way (the CLI says it on stderr).
    #[serde(skip)]
    pub unchanged: bool,
}

/// One shard, verified and read.
struct Loaded {
    /// The folder as given (shown in messages).
    given: String,
    dir: PathBuf,
    ev: EvidenceManifest,
    ev_sha: Sha256,
    shard: Shard,
    rows: Vec<Row>,
}

/// Merge the shards into one run folder.
pub fn merge(opts: &MergeOptions) -> Result<MergeReport> {
    if opts.runs.len() < 2 {
        return Err(Error::input(
            "validate merge",
            "give the run folders of every shard (at least two)",
        ));
    }
    let (out, id) = out_path(opts)?;
    let parent = fsx::parent_of(&out);
    if !record::real_folder(&parent)? {
        fsx::create_dir_all(&parent)?;
    }
    let _lock = fsx::DirLock::acquire(&parent)?;
    // Whether OUT exists is decided under the lock; the shards are verified either way, so a
    // re-run merge checks everything a first one does before it may call itself a no-op.
    let exists = std::fs::symlink_metadata(&out).is_ok();
    let shards = load_all(&opts.runs)?;
    check_consistent(&shards)?;
    let plan = plan(&shards, &out)?;
    if exists {
        return match existing_merge(&plan, &out, &id)? {
            Ok(evidence) => Ok(plan.report(&out, &id, evidence, true)),
            Err(why) => Err(Error::input(
                out.display(),
                format!(
                    "already exists and is not the merge of these shards ({why}); a merge never replaces it"
                ),
            )
            .with_hint("give another -o, or move that folder away")),
        };
    }
    write(&shards, plan, &out, &id)
}

/// The merged folder and its id: `-o OUT`, or `<workspace>/validate/STAMP-DIGEST-merged`.
fn out_path(opts: &MergeOptions) -> Result<(PathBuf, String)> {
    if let Some(o) = &opts.out {
        let abs = fsx::absolute(o)?;
        let id = abs
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| Error::input(o.display(), "-o must name a folder to create"))?;
        super::check_run_id(&id).map_err(|_| {
            Error::input(
                o.display(),
                "the folder's name must be a run id (letters, digits, `-`, `_`, `.`)",
            )
        })?;
        return Ok((abs, id));
    }
    let stamp = pinforge_record::manifest::now_rfc3339().replace([':', '-'], "");
    let digest = Sha256::of_bytes(format!("{:?}", opts.runs).as_bytes());
    let id = format!("{stamp}-{}-merged", digest.short(8));
    Ok((opts.workspace.join("validate").join(&id), id))
}

/// Every run given, each once, each verified and read.
fn load_all(runs: &[PathBuf]) -> Result<Vec<Loaded>> {
    let mut seen: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut out = Vec::new();
    for given in runs {
        let shown_given = shown(&given.display().to_string()).into_owned();
        let dir = shard_dir(given, &shown_given)?;
        if !record::real_folder(&dir)? {
            return Err(Error::input(&shown_given, "no run folder here"));
        }
        let canon = canon_dir(&dir)?;
        if let Some(first) = seen.insert(canon, shown_given.clone()) {
            return Err(Error::input(
                &shown_given,
                format!("is given twice (also as {first}): each shard is merged once"),
            ));
        }
        out.push(load(&canon_dir(&dir)?, shown_given)?);
    }
    Ok(out)
}

/// The largest `validate --json` document read as a shard (its summary and two arms').
const MAX_DOCUMENT: u64 = 16 << 20;

/// The run folder of a shard as given: the folder itself, its `evidence.json`, or a file
/// holding the `validate --json` document the shard printed (its `run_dir`).
fn shard_dir(given: &Path, shown_given: &str) -> Result<PathBuf> {
    if given.file_name().is_some_and(|n| n == "evidence.json") {
        return Ok(fsx::parent_of(given));
    }
    // Anything but a regular file is checked as a folder (a link or FIFO is refused there).
    let Some(meta) = std::fs::symlink_metadata(given)
        .ok()
        .filter(|m| m.is_file())
    else {
        return Ok(given.to_path_buf());
    };
    let not_a_shard = |why: String| {
        Error::input(
            shown_given,
            format!("is not a shard's `validate --json` document: {why}"),
        )
        .with_hint(
            "give each shard's run folder, its evidence.json, or the file its `validate --shard I/N --json` wrote",
        )
    };
    // A document is a few KiB; a model or rows file given by mistake is not read whole.
    if meta.len() > MAX_DOCUMENT {
        return Err(not_a_shard(format!(
            "it is {} bytes, more than a document's {MAX_DOCUMENT}",
            meta.len()
        )));
    }
    let bytes = fsx::read(given)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        // A shard that failed before its document (exit 2 or 3) leaves its output file empty;
        // why is on its stderr (Slurm: the array's --error file).
        return Err(not_a_shard(
            "it is empty (that shard printed no document: its error output says why)".into(),
        ));
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| not_a_shard(format!("not JSON ({e})")))?;
    let schema = doc.get("schema").and_then(|v| v.as_str()).unwrap_or("");
    if schema != pinforge_record::schema_id::VALIDATE {
        return Err(not_a_shard(format!(
            "its schema is {:?}, not {}",
            shown(schema),
            pinforge_record::schema_id::VALIDATE
        )));
    }
    let run_dir = doc
        .get("run_dir")
        .and_then(|v| v.as_str())
        .ok_or_else(|| not_a_shard("it has no run_dir".into()))?;
    Ok(PathBuf::from(run_dir))
}

/// The folder with every link resolved (`real_folder` found it a real folder, not a link).
fn canon_dir(dir: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(dir).at("resolve", dir)
}

/// Why evidence that did not verify failed: its mismatching files, or a missing run file.
fn not_verified(check: &evidence::EvidenceCheck) -> String {
    let what: Vec<String> = check
        .mismatches
        .iter()
        .map(|m| format!("{} ({})", m.path, m.role))
        .collect();
    format!(
        "its evidence does not verify: {}",
        if what.is_empty() {
            "a required run file is missing".to_string()
        } else {
            shown(&what.join(", ")).into_owned()
        }
    )
}

/// Verify one shard's evidence now, then read its manifest and rows (the rows' bytes must be
/// the ones the manifest records).
fn load(dir: &Path, given: String) -> Result<Loaded> {
    let check = evidence::verify_evidence(dir)?;
    if !check.ok {
        return Err(
            Error::check(&given, not_verified(&check)).with_hint(format!(
                "`pinforge verify {given}` shows every finding; rerun that shard"
            )),
        );
    }
    let ev_bytes = fsx::read(&dir.join("evidence.json"))?;
    let ev: EvidenceManifest = serde_json::from_slice(&ev_bytes)
        .map_err(|e| Error::input(&given, format!("not a validate evidence manifest: {e}")))?;
    let Some(shard) = ev.settings.shard else {
        return Err(
            Error::input(&given, "is not a shard: its settings have no --shard")
                .with_hint("merge the runs of `validate --shard I/N`, one per index"),
        );
    };
    if !ev.shards.is_empty() {
        return Err(Error::input(&given, "is itself a merged run"));
    }
    let rows_path = dir.join("rows.jsonl");
    let rows_bytes = fsx::read(&rows_path)?;
    if ev.files.get("rows.jsonl") != Some(&Sha256::of_bytes(&rows_bytes)) {
        return Err(Error::check(
            rows_path.display(),
            "changed while it was being merged (its sha256 is not the evidence's)",
        ));
    }
    let rows = rows::parse_rows(&rows_bytes, &rows_path)?.rows;
    let want = shard.rows(ev.settings.rows).count() * ev.settings.arms.len();
    if rows.len() != want {
        return Err(Error::check(
            &given,
            format!(
                "shard {shard} holds {} rows, not the {want} of its arms and indices",
                rows.len()
            ),
        )
        .with_hint("resume that shard (`validate --resume RUN`) until it is complete"));
    }
    Ok(Loaded {
        given,
        dir: dir.to_path_buf(),
        ev_sha: Sha256::of_bytes(&ev_bytes),
        ev,
        shard,
        rows,
    })
}

/// The settings as shards must share them: without the shard and the model's path.
fn comparable(s: &Settings) -> Settings {
    Settings {
        shard: None,
        model: PathBuf::new(),
        ..s.clone()
    }
}

/// Same settings, same shard count, each index once, none missing.
fn check_consistent(shards: &[Loaded]) -> Result<()> {
    let first = &shards[0];
    let want = comparable(&first.ev.settings);
    let count = first.shard.count;
    for s in &shards[1..] {
        if s.shard.count != count {
            return Err(Error::input(
                &s.given,
                format!(
                    "its settings differ from {}'s in: shard (a split into {} shards, not {count})",
                    first.given, s.shard.count
                ),
            ));
        }
        let got = comparable(&s.ev.settings);
        if got != want {
            return Err(Error::input(
                &s.given,
                format!(
                    "its settings differ from {}'s in: {}",
                    first.given,
                    differing_keys(&want, &got).join(", ")
                ),
            )
            .with_hint(
                "every shard must run the same arms, rows, seed/prompts, budget, row kind, schema and model",
            ));
        }
    }
    let mut by_index: BTreeMap<u64, &str> = BTreeMap::new();
    for s in shards {
        if let Some(other) = by_index.insert(s.shard.index, &s.given) {
            return Err(Error::input(
                &s.given,
                format!("shard {} is given twice: {other} and {}", s.shard, s.given),
            )
            .with_hint("keep one run per shard index"));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|i| !by_index.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Error::input(
            "validate merge",
            format!(
                "missing shard(s) {} of {count}: no run given for them",
                missing.join(", ")
            ),
        )
        .with_hint(format!(
            "run `validate --shard I/{count}` for each missing index, then merge again"
        )));
    }
    Ok(())
}

/// A file of the first shard, checked against the digest its evidence records.
fn checked_copy(from: &Path, want: Sha256, to: &Path) -> Result<()> {
    let bytes = fsx::read(from)?;
    let got = Sha256::of_bytes(&bytes);
    if got != want {
        return Err(Error::check(
            from.display(),
            format!("has sha256 {got}, its evidence recorded {want}"),
        ));
    }
    fsx::write_atomic(to, &bytes)
}

/// What a merge of `shards` into `out` holds, computed before anything is written: what a
/// fresh merge stages and what a re-run compares an existing folder with.
struct Plan {
    settings: Settings,
    settings_bytes: Vec<u8>,
    rows_bytes: Vec<u8>,
    derived: Derived,
    summary_bytes: Vec<u8>,
    refs: Vec<ShardEvidence>,
    jobs: u32,
    /// The generated tiny model lives in the first shard's folder (the merge gets its copy).
    own_model: bool,
}

impl Plan {
    fn report(self, out: &Path, id: &str, evidence: Sha256, unchanged: bool) -> MergeReport {
        MergeReport {
            run: id.to_string(),
            run_dir: out.to_path_buf(),
            derived: self.derived,
            evidence: EvidenceRef {
                manifest: out.join("evidence.json"),
                sha256: evidence,
            },
            shards: self.refs,
            unchanged,
        }
    }
}

/// The merged settings, rows and summary, and the shard references.
fn plan(shards: &[Loaded], out: &Path) -> Result<Plan> {
    let first = &shards[0];
    let fs = &first.ev.settings;
    let own_model = std::fs::canonicalize(&fs.model).ok() == Some(first.dir.join("model.gguf"));
    let settings = Settings {
        shard: None,
        model: if own_model {
            out.join("model.gguf")
        } else {
            fs.model.clone()
        },
        ..fs.clone()
    };
    let settings_bytes = canonical(&settings)?;
    let order: BTreeMap<&str, usize> = settings
        .arms
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name.as_str(), i))
        .collect();
    let mut all: Vec<&Row> = shards.iter().flat_map(|s| &s.rows).collect();
    all.sort_by_key(|r| {
        (
            r.row,
            order.get(r.arm.as_str()).copied().unwrap_or(usize::MAX),
        )
    });
    let mut rows_bytes = Vec::new();
    for r in &all {
        rows_bytes
            .extend(serde_json::to_vec(r).map_err(|e| Error::Internal(format!("row JSON: {e}")))?);
        rows_bytes.push(b'\n');
    }
    let rows: Vec<Row> = all.into_iter().cloned().collect();
    let derived = summary::derive(&settings.arm_ids(), &rows);
    let summary_bytes = canonical(&derived)?;
    let mut refs: Vec<ShardEvidence> = shards
        .iter()
        .map(|s| {
            Ok(ShardEvidence {
                shard: s.shard,
                run: s.ev.run.clone(),
                evidence: fsx::absolute(&s.dir.join("evidence.json"))?,
                sha256: s.ev_sha,
            })
        })
        .collect::<Result<_>>()?;
    refs.sort_by_key(|r| r.shard);
    Ok(Plan {
        settings,
        settings_bytes,
        rows_bytes,
        derived,
        summary_bytes,
        refs,
        jobs: shards.iter().map(|s| s.ev.jobs).max().unwrap_or(1),
        own_model,
    })
}

/// Whether the existing `out` is the merge `plan` describes: `Ok(sha256 of its evidence)`
/// when it is (merged from the same shard evidence, the same settings, rows and summary, and
/// its evidence verifies now), or `Err(the first difference)`, worded for the refusal.
fn existing_merge(
    plan: &Plan,
    out: &Path,
    id: &str,
) -> Result<std::result::Result<Sha256, String>> {
    if !record::real_folder(out)? {
        return Ok(Err("it is no folder".into()));
    }
    let Some(ev_bytes) = fsx::read_if_present(&out.join("evidence.json"))? else {
        return Ok(Err("it holds no evidence.json".into()));
    };
    let Ok(ev) = serde_json::from_slice::<EvidenceManifest>(&ev_bytes) else {
        return Ok(Err(
            "its evidence.json is not a validate evidence manifest".into()
        ));
    };
    if ev.shards.is_empty() {
        return Ok(Err("it is a run, not a merge".into()));
    }
    if ev.shards != plan.refs {
        return Ok(Err(shards_differ(&ev.shards, &plan.refs)));
    }
    if ev.run != id {
        return Ok(Err(format!("its evidence names run {}", shown(&ev.run))));
    }
    if ev.settings != plan.settings {
        return Ok(Err(format!(
            "its settings differ in: {}",
            differing_keys(&plan.settings, &ev.settings).join(", ")
        )));
    }
    for (file, bytes) in [
        ("settings.json", &plan.settings_bytes),
        ("rows.jsonl", &plan.rows_bytes),
        ("summary.json", &plan.summary_bytes),
    ] {
        if ev.files.get(file) != Some(&Sha256::of_bytes(bytes)) {
            return Ok(Err(format!("its {file} is not the merge of these shards")));
        }
    }
    // The recorded digests match what this merge would write; the files on disk must match
    // the record too (and each shard's evidence its digest), or the folder was changed since.
    // A file there that does not even parse is a difference too, not this merge's error.
    let check = match evidence::verify_evidence(out) {
        Ok(check) => check,
        Err(e) => return Ok(Err(format!("its evidence does not verify: {e}"))),
    };
    if !check.ok {
        return Ok(Err(not_verified(&check)));
    }
    Ok(Ok(Sha256::of_bytes(&ev_bytes)))
}

/// The first shard whose evidence differs between an existing merge and this one.
fn shards_differ(had: &[ShardEvidence], given: &[ShardEvidence]) -> String {
    let count = given.first().map_or(0, |g| g.shard.count);
    if had.iter().any(|h| h.shard.count != count) || had.len() != given.len() {
        let was = had.first().map_or(0, |h| h.shard.count);
        return format!("it was merged from {} shard(s) of {was}", had.len());
    }
    for (h, g) in had.iter().zip(given) {
        if h != g {
            return format!(
                "its shard {} is run {} (evidence sha256 {}), not run {} (sha256 {})",
                g.shard,
                shown(&h.run),
                h.sha256.short(12),
                shown(&g.run),
                g.sha256.short(12)
            );
        }
    }
    "it was merged from other shards".into()
}

/// Stage the merged run beside `out`, then rename it into place.
fn write(shards: &[Loaded], plan: Plan, out: &Path, id: &str) -> Result<MergeReport> {
    let parent = fsx::parent_of(out);
    let stage = parent.join(format!(".{id}.merge-{}", std::process::id()));
    std::fs::create_dir(&stage).at("create", &stage)?;
    let first = &shards[0];
    let fs = &first.ev.settings;
    checked_copy(
        &first.dir.join("prompts.jsonl"),
        fs.prompt_set_sha256,
        &stage.join("prompts.jsonl"),
    )?;
    for (name, want) in [
        ("grammar.gbnf", fs.grammar_sha256),
        ("schema.json", fs.schema_sha256),
    ] {
        if let Some(want) = want {
            checked_copy(&first.dir.join(name), want, &stage.join(name))?;
        }
    }
    if plan.own_model {
        checked_copy(
            &first.dir.join("model.gguf"),
            fs.model_sha256,
            &stage.join("model.gguf"),
        )?;
    }
    MergeStep::ModelStaged.reached();
    fsx::write_atomic(&stage.join("settings.json"), &plan.settings_bytes)?;
    fsx::write_atomic(&stage.join("rows.jsonl"), &plan.rows_bytes)?;
    fsx::write_atomic(&stage.join("summary.json"), &plan.summary_bytes)?;
    let run = RunDir {
        id: id.to_string(),
        dir: stage.clone(),
        settings: plan.settings.clone(),
        _lock: None,
    };
    let staged = evidence::write_with_shards(
        &run,
        plan.jobs,
        plan.refs.clone(),
        // `validate merge` takes no --sign: its evidence is written plainly, as before.
        &Signer::none(),
    )?;
    fsx::sync_dir(&stage)?;
    MergeStep::Staged.reached();
    // The commit point: the staged folder becomes `out`, which must not exist (a plain rename
    // would replace an empty folder there).
    fsx::rename_noreplace(&stage, out)?;
    fsx::sync_dir(&parent)?;
    MergeStep::Committed.reached();
    Ok(plan.report(out, id, staged.sha256, false))
}

pinforge_base::steps! {
    /// The steps of `validate merge`; each is the crash point `merge:<index>`.
    pub enum MergeStep for "merge" {
        /// The stage folder holds the shards' model (or names it).
        ModelStaged = 1,
        /// The merged rows, summary and evidence are staged and synced.
        Staged = 2,
        /// The stage is renamed onto the new run folder: the commit point.
        Committed = 3,
    }
}

#[cfg(test)]
mod tests {
    use super::super::arm::ArmRecord;
    use super::super::rows::{Evidence, Outcome};
    use super::super::summary::ArmId;
    use super::*;

    const ROWS: u64 = 6;

    fn arm(name: &str) -> ArmRecord {
        super::super::arm::test_record(name)
    }

    fn prompts() -> Vec<String> {
        (0..ROWS).map(|i| rows::generated_prompt(3, i)).collect()
    }

    fn row(r: u64, name: &str) -> Row {
        let crash = name == "control" && r >= 3;
        Row {
            row: r,
            arm: name.into(),
            layer_digest: Sha256::of_bytes(name.as_bytes()),
            prompt_digest: Sha256::of_bytes(prompts()[r as usize].as_bytes()),
            tokens_in: 10 + r,
            tokens_out: if crash { 0 } else { 8 },
            wall_ms: 1.0 + r as f64,
            tokens_per_second: 1.0,
            outcome: if crash { Outcome::Crash } else { Outcome::Ok },
            evidence: Evidence {
                signature: crash.then(|| "heap-buffer-overflow".into()),
                ..Evidence::default()
            },
        }
    }

    /// A sealed run folder of `shard` (None: all rows) under `root`, written as `validate`
    /// writes one: inputs, rows, summary, then evidence.
    fn sealed(root: &Path, id: &str, shard: Option<Shard>, budget: u32) -> PathBuf {
        let dir = root.join(id);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (pbytes, psha) = rows::prompt_set_bytes(&prompts());
        std::fs::write(dir.join("prompts.jsonl"), &pbytes).expect("prompts");
        std::fs::write(dir.join("model.gguf"), b"model").expect("model");
        let settings = Settings {
            arms: vec![arm("control"), arm("live")],
            rows: ROWS,
            shard,
            seed: Some(3),
            prompt_set_sha256: psha,
            budget,
            row_kind: Default::default(),
            schema_sha256: None,
            grammar_sha256: None,
            model: std::fs::canonicalize(&dir)
                .expect("canon")
                .join("model.gguf"),
            model_sha256: Sha256::of_bytes(b"model"),
            arch: "qwen2vl".into(),
            n_ctx: 256,
            pinforge_version: "test".into(),
        };
        std::fs::write(
            dir.join("settings.json"),
            canonical(&settings).expect("json"),
        )
        .expect("settings");
        let mut rs = Vec::new();
        let mut bytes = Vec::new();
        for r in (0..ROWS).filter(|r| shard.is_none_or(|s| s.has(*r))) {
            for a in ["control", "live"] {
                bytes.extend(serde_json::to_vec(&row(r, a)).expect("row"));
                bytes.push(b'\n');
                rs.push(row(r, a));
            }
        }
        std::fs::write(dir.join("rows.jsonl"), &bytes).expect("rows");
        let ids: Vec<ArmId> = ["control", "live"]
            .iter()
            .map(|n| ArmId {
                name: n.to_string(),
                digest: Sha256::of_bytes(n.as_bytes()),
            })
            .collect();
        let d = summary::derive(&ids, &rs);
        std::fs::write(dir.join("summary.json"), canonical(&d).expect("json")).expect("sum");
        let run = RunDir {
            id: id.into(),
            dir: dir.clone(),
            settings,
            _lock: None,
        };
        evidence::write(&run, 1, &Signer::none()).expect("evidence");
        assert!(evidence::verify_evidence(&dir).expect("verify").ok, "{id}");
        dir
    }

    fn opts(ws: &Path, runs: &[&PathBuf], out: &str) -> MergeOptions {
        MergeOptions {
            runs: runs.iter().map(|p| p.to_path_buf()).collect(),
            out: Some(ws.join(out)),
            workspace: ws.to_path_buf(),
        }
    }

    fn sh(index: u64, count: u64) -> Option<Shard> {
        Some(Shard { index, count })
    }

    #[test]
    fn merged_shards_equal_the_unsharded_run_and_verify() {
        let ws = tempfile::tempdir().expect("ws");
        let whole = sealed(ws.path(), "whole", None, 16);
        let a = sealed(ws.path(), "s0", sh(0, 2), 16);
        let b = sealed(ws.path(), "s1", sh(1, 2), 16);
        let rep = merge(&opts(ws.path(), &[&b, &a], "merged")).expect("merge");
        let m = ws.path().join("merged");
        let check = evidence::verify_evidence(&m).expect("verify");
        assert!(check.ok, "{:?}", check.mismatches);
        assert_eq!(rep.shards.len(), 2);
        let read = |d: &Path| std::fs::read(d.join("rows.jsonl")).expect("rows");
        assert_eq!(read(&m), read(&whole), "row for row");
        assert_eq!(
            std::fs::read(m.join("summary.json")).expect("s"),
            std::fs::read(whole.join("summary.json")).expect("s")
        );
        // A shard's evidence changed after the merge: verify of the merge names it.
        std::fs::write(a.join("evidence.json"), b"{}").expect("damage");
        let check = evidence::verify_evidence(&m).expect("verify");
        assert!(!check.ok);
        assert!(check
            .mismatches
            .iter()
            .any(|x| x.role.contains("shard 0/2")));
    }

    #[test]
    fn each_refusal_names_its_cause_and_writes_nothing() {
        let ws = tempfile::tempdir().expect("ws");
        let a = sealed(ws.path(), "s0", sh(0, 3), 16);
        let b = sealed(ws.path(), "s1", sh(1, 3), 16);
        let c = sealed(ws.path(), "s2", sh(2, 3), 16);
        let other = sealed(ws.path(), "o1", sh(1, 3), 12);
        let again = sealed(ws.path(), "r1", sh(1, 3), 16);
        let whole = sealed(ws.path(), "whole", None, 16);
        let cases: Vec<(Vec<&PathBuf>, &str, i32)> = vec![
            (vec![&a, &b], "missing shard(s) 2 of 3", 2),
            (vec![&a, &b, &b, &c], "given twice", 2),
            (vec![&a, &b, &again, &c], "shard 1/3 is given twice", 2),
            (vec![&a, &other, &c], "differ", 2),
            (vec![&a, &whole], "not a shard", 2),
        ];
        for (runs, why, code) in cases {
            let e = merge(&opts(ws.path(), &runs, "m")).expect_err(why);
            assert!(e.to_string().contains(why), "{why}: {e}");
            assert_eq!(e.exit_code(), code, "{e}");
            assert!(!ws.path().join("m").exists());
        }
        let e = merge(&opts(ws.path(), &[&a, &other, &c], "m")).expect_err("budget");
        assert!(e.to_string().contains("budget"), "{e}");
        // A shard whose rows were edited does not verify: exit 1.
        let mut rows = std::fs::read(c.join("rows.jsonl")).expect("rows");
        rows.extend(b"");
        let text = String::from_utf8(rows)
            .expect("utf8")
            .replace("\"ok\"", "\"mismatch\"");
        std::fs::write(c.join("rows.jsonl"), text).expect("edit");
        let e = merge(&opts(ws.path(), &[&a, &b, &c], "m")).expect_err("edited");
        assert_eq!(e.exit_code(), 1, "{e}");
        assert!(!ws.path().join("m").exists());
        let left: Vec<_> = std::fs::read_dir(ws.path())
            .expect("ls")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "no staging left behind");
    }

    /// Every file of a folder and its bytes.
    fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").path())
            .map(|p| {
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, std::fs::read(&p).expect("read"))
            })
            .collect()
    }

    #[test]
    fn a_rerun_into_the_same_merge_is_a_no_op_and_any_other_folder_is_refused() {
        let ws = tempfile::tempdir().expect("ws");
        let a = sealed(ws.path(), "s0", sh(0, 2), 16);
        let b = sealed(ws.path(), "s1", sh(1, 2), 16);
        let b_again = sealed(ws.path(), "r1", sh(1, 2), 16);
        let first = merge(&opts(ws.path(), &[&a, &b], "m")).expect("merge");
        assert!(!first.unchanged);
        let m = ws.path().join("m");
        let before = files(&m);
        // The same shards in another order (and one by its evidence.json): nothing written, the
        // same report.
        let ev = b.join("evidence.json");
        let again = merge(&opts(ws.path(), &[&ev, &a], "m")).expect("rerun");
        assert!(again.unchanged);
        assert_eq!(
            serde_json::to_value(&again).expect("json"),
            serde_json::to_value(&first).expect("json"),
            "the same document"
        );
        assert_eq!(files(&m), before, "nothing written");
        // Another run of shard 1: refused, naming it.
        let e = merge(&opts(ws.path(), &[&a, &b_again], "m")).expect_err("other shard");
        assert_eq!(e.exit_code(), 2, "{e}");
        let text = format!("{e} {}", e.hint().unwrap_or_default());
        for want in [
            "already exists",
            "shard 1/2 is run s1",
            "not run r1",
            "give another -o",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        // A folder that is no merge, and a merge changed since: refused, each with its reason.
        std::fs::create_dir(ws.path().join("plain")).expect("mkdir");
        let e = merge(&opts(ws.path(), &[&a, &b], "plain")).expect_err("plain");
        assert!(e.to_string().contains("holds no evidence.json"), "{e}");
        let e = merge(&opts(ws.path(), &[&a, &b], "s0")).expect_err("a run");
        assert!(e.to_string().contains("a run, not a merge"), "{e}");
        std::fs::write(m.join("summary.json"), b"{}").expect("damage");
        let e = merge(&opts(ws.path(), &[&a, &b], "m")).expect_err("changed");
        assert!(e.to_string().contains("does not verify"), "{e}");
        assert_eq!(files(&m).len(), before.len(), "nothing added");
        let staged: Vec<_> = std::fs::read_dir(ws.path())
            .expect("ls")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(staged.is_empty(), "no staging left behind");
    }

    #[test]
    fn a_shard_may_be_given_as_the_document_it_printed() {
        let ws = tempfile::tempdir().expect("ws");
        let a = sealed(ws.path(), "s0", sh(0, 2), 16);
        let b = sealed(ws.path(), "s1", sh(1, 2), 16);
        let doc = |name: &str, body: String| {
            let p = ws.path().join(name);
            std::fs::write(&p, body).expect("doc");
            p
        };
        let of = |dir: &Path| {
            format!(
                "{{\"schema\": \"pinforge.validate/v1\", \"run_dir\": {}}}\n",
                serde_json::to_string(&dir.display().to_string()).expect("json")
            )
        };
        let da = doc("0.json", of(&a));
        let db = doc("1.json", of(&b));
        let rep = merge(&opts(ws.path(), &[&da, &db], "m")).expect("merge");
        assert_eq!(rep.shards.len(), 2);
        assert!(
            evidence::verify_evidence(&ws.path().join("m"))
                .expect("verify")
                .ok
        );
        for (body, why) in [
            (String::new(), "it is empty"),
            ("not json".to_string(), "not JSON"),
            (
                "{\"schema\": \"pinforge.validate-merge/v1\"}".to_string(),
                "not pinforge.validate/v1",
            ),
        ] {
            let bad = doc("bad.json", body);
            let e = merge(&opts(ws.path(), &[&da, &bad], "n")).expect_err(why);
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
            assert!(!ws.path().join("n").exists());
        }
    }
}
