//! The evidence of a run: the manifest written last (`evidence.json`, the sha256 of every run
//! file it covers and the settings), and its re-check by `verify` (every file re-hashed, the
//! model and both arms' manifests where they still are, and the summary recomputed from the
//! rows).

use super::rows;
use super::run_dir::{canonical, RunDir, Settings};
use super::summary::{self, Derived};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_record::sign::record::Signer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::record::schema::EvidenceRef;

/// The evidence manifest.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct EvidenceManifest {
    /// `pinforge.validate-evidence/v1`.
    pub schema: String,
    /// Run id.
    pub run: String,
    /// pinforge's version.
    pub pinforge_version: String,
    /// The settings (both arms' manifests and digests, model, prompt set, budget, grammar).
    pub settings: Settings,
    /// sha256 of every file of the run folder it covers.
    pub files: BTreeMap<String, Sha256>,
    /// Jobs used by the last invocation.
    pub jobs: u32,
    /// A merged run: the evidence of every shard it was merged from (`validate merge`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardEvidence>,
}

/// One shard's evidence, as a merged run references it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShardEvidence {
    /// The shard.
    pub shard: super::shard::Shard,
    /// The shard's run id.
    pub run: String,
    /// Its evidence.json, as given to the merge (absolute).
    pub evidence: PathBuf,
    /// sha256 of that evidence.json when it was merged.
    pub sha256: Sha256,
}

/// Evidence schema id.
pub(crate) const EVIDENCE_SCHEMA: &str = "pinforge.validate-evidence/v1";

/// The run folder files an evidence manifest may name (never a path taken from the file).
const RUN_FILES: &[&str] = &[
    "settings.json",
    "prompts.jsonl",
    "rows.jsonl",
    "summary.json",
    "grammar.gbnf",
    "schema.json",
    "model.gguf",
];

/// Write `evidence.json`: the sha256 of every run file present (the summary is written
/// before, so it is covered), the settings, and the jobs of this invocation.
pub(super) fn write(run: &RunDir, jobs: u32, signer: &Signer) -> Result<EvidenceRef> {
    write_with_shards(run, jobs, Vec::new(), signer)
}

/// [`write`] for a merged run, which also names the evidence of every shard it holds.
pub(super) fn write_with_shards(
    run: &RunDir,
    jobs: u32,
    shards: Vec<ShardEvidence>,
    signer: &Signer,
) -> Result<EvidenceRef> {
    let mut files = BTreeMap::new();
    for name in RUN_FILES {
        let p = run.dir.join(name);
        if p.is_file() {
            files.insert(name.to_string(), Sha256::of_file(&p)?.0);
        }
    }
    let evidence = EvidenceManifest {
        schema: EVIDENCE_SCHEMA.into(),
        run: run.id.clone(),
        pinforge_version: env!("CARGO_PKG_VERSION").into(),
        settings: run.settings.clone(),
        files,
        jobs,
        shards,
    };
    let ev_bytes = canonical(&evidence)?;
    let ev_path = run.dir.join("evidence.json");
    // Signed with `--sign`: sidecars first, the evidence last (its commit point).
    signer.write_record(&ev_path, &ev_bytes)?;
    Ok(EvidenceRef {
        manifest: ev_path,
        sha256: Sha256::of_bytes(&ev_bytes),
    })
}

/// What `verify` found in a run's evidence.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvidenceCheck {
    /// Everything matched.
    pub ok: bool,
    /// Run id.
    pub run: String,
    /// What was re-checked.
    pub checked: Vec<String>,
    /// What differs.
    pub mismatches: Vec<EvidenceMismatch>,
    /// Recorded files no longer on disk (not a mismatch: a layer's manifest after a gc).
    pub absent: Vec<String>,
}

/// One difference.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvidenceMismatch {
    /// The file.
    pub path: String,
    /// What it is.
    pub role: String,
    /// Recorded.
    pub expected: String,
    /// Found.
    pub actual: String,
}

/// Whether `path` is a validate evidence manifest (or a run folder holding one).
pub fn is_evidence(path: &Path) -> bool {
    let p = if path.is_dir() {
        path.join("evidence.json")
    } else {
        path.to_path_buf()
    };
    let Ok(f) = fsx::open_regular(&p, "file", true) else {
        return false;
    };
    let mut head = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut head);
    serde_json::from_slice::<serde_json::Value>(&head)
        .ok()
        .and_then(|v| {
            v.get("schema")
                .and_then(|s| s.as_str())
                .map(|s| s == EVIDENCE_SCHEMA)
        })
        .unwrap_or(false)
}

impl EvidenceCheck {
    /// Re-hash one recorded file. `required`: a file of the run's own set, whose loss is a
    /// mismatch; only the arms' build manifests (which gc may remove) may be absent.
    fn check_file(&mut self, p: &Path, role: &str, want: Sha256, required: bool) -> Result<()> {
        if let Err(e) = std::fs::symlink_metadata(p) {
            if e.kind() == std::io::ErrorKind::NotFound {
                if required {
                    self.mismatches.push(EvidenceMismatch {
                        path: p.display().to_string(),
                        role: role.into(),
                        expected: want.to_string(),
                        actual: "missing".into(),
                    });
                } else {
                    self.absent.push(p.display().to_string());
                }
                return Ok(());
            }
        }
        let f = fsx::open_regular(p, role, false)?;
        let (got, _) = Sha256::of_reader(f, p)?;
        self.checked.push(p.display().to_string());
        if got != want {
            self.mismatches.push(EvidenceMismatch {
                path: p.display().to_string(),
                role: role.into(),
                expected: want.to_string(),
                actual: got.to_string(),
            });
        }
        Ok(())
    }
}

/// Re-check a run's evidence manifest: every run file it names re-hashed, the model and both
/// arms' manifests re-hashed where they still are, and the summary recomputed from the rows.
pub fn verify_evidence(path: &Path) -> Result<EvidenceCheck> {
    let ev_path = if path.is_dir() {
        path.join("evidence.json")
    } else {
        path.to_path_buf()
    };
    let dir = fsx::parent_of(&fsx::absolute(&ev_path)?);
    let ev: EvidenceManifest = serde_json::from_slice(&fsx::read(&ev_path)?).map_err(|e| {
        Error::input(
            ev_path.display(),
            format!("not a validate evidence manifest: {e}"),
        )
    })?;
    let mut out = EvidenceCheck {
        ok: true,
        run: ev.run.clone(),
        checked: Vec::new(),
        mismatches: Vec::new(),
        absent: Vec::new(),
    };
    check_files(&ev, &ev_path, &dir, &mut out)?;
    // Without these there is nothing to recompute: the missing file is the finding.
    if ["settings.json", "rows.jsonl", "summary.json"]
        .iter()
        .any(|n| !dir.join(n).exists())
    {
        out.ok = false;
        return Ok(out);
    }
    recheck_settings_and_summary(&ev, &dir, &mut out)?;
    out.ok = out.mismatches.is_empty();
    Ok(out)
}

/// Re-hash every file the evidence names, the grammar, schema and model the settings record,
/// and both arms' manifests.
fn check_files(
    ev: &EvidenceManifest,
    ev_path: &Path,
    dir: &Path,
    out: &mut EvidenceCheck,
) -> Result<()> {
    for (name, want) in &ev.files {
        if !RUN_FILES.contains(&name.as_str()) {
            return Err(Error::input(
                ev_path.display(),
                format!("names `{}`, which is not a run file", name.escape_debug()),
            ));
        }
        out.check_file(&dir.join(name), name, *want, true)?;
    }
    // The grammar, schema and model the engine used must be the ones the settings record,
    // not only the ones the manifest lists.
    for (name, want) in [
        ("grammar.gbnf", ev.settings.grammar_sha256),
        ("schema.json", ev.settings.schema_sha256),
    ] {
        if let Some(want) = want.filter(|w| ev.files.get(name) != Some(w)) {
            out.check_file(&dir.join(name), name, want, true)?;
        }
    }
    for required in [
        "rows.jsonl",
        "summary.json",
        "settings.json",
        "prompts.jsonl",
    ] {
        if !ev.files.contains_key(required) {
            return Err(Error::check(
                ev_path.display(),
                format!("does not cover {required}"),
            ));
        }
    }
    let model_listed = ev
        .files
        .iter()
        .any(|(n, w)| dir.join(n) == ev.settings.model && *w == ev.settings.model_sha256);
    if !model_listed {
        out.check_file(&ev.settings.model, "model", ev.settings.model_sha256, true)?;
    }
    // A merged run's shards: their evidence where it still is (a shard folder left on another
    // host is absent, not a mismatch; one changed since the merge is).
    for sh in &ev.shards {
        out.check_file(
            &sh.evidence,
            &format!("evidence of shard {}", sh.shard),
            sh.sha256,
            false,
        )?;
    }
    for a in &ev.settings.arms {
        out.check_file(
            &a.manifest,
            &format!("manifest of arm {}", a.name),
            a.manifest_sha256,
            false,
        )?;
    }
    Ok(())
}

/// Every row must be one the settings give (the check `--resume` makes, in the same place):
/// a row edited or brought in from another run is a mismatch, even when the summary and the
/// evidence were recomputed over it. The rows' prompts are the run's `prompts.jsonl`, which
/// must be the prompt set the settings record.
fn recheck_rows(
    ev: &EvidenceManifest,
    dir: &Path,
    rows: &[rows::Row],
    out: &mut EvidenceCheck,
) -> Result<()> {
    let prompts_path = dir.join("prompts.jsonl");
    // A missing prompt file is already a mismatch of the run's own file set: nothing to
    // check the rows against, and not an I/O failure.
    let Some(prompt_bytes) = fsx::read_if_present(&prompts_path)? else {
        return Ok(());
    };
    let got = Sha256::of_bytes(&prompt_bytes);
    if got != ev.settings.prompt_set_sha256 {
        out.mismatches.push(EvidenceMismatch {
            path: prompts_path.display().to_string(),
            role: "prompt set".into(),
            expected: ev.settings.prompt_set_sha256.to_string(),
            actual: got.to_string(),
        });
        return Ok(());
    }
    let prompts = rows::read_prompts(&prompts_path)?;
    let rows_path = dir.join("rows.jsonl");
    out.checked
        .push("every row of rows.jsonl against the settings".into());
    if let Err(e) = ev.settings.row_rules(&prompts).check(rows, &rows_path) {
        out.mismatches.push(EvidenceMismatch {
            path: rows_path.display().to_string(),
            role: "rows".into(),
            expected: "rows of this run's arms, row range, prompts, grammar and budget".into(),
            actual: e.to_string(),
        });
    }
    Ok(())
}

/// The settings file must be the settings the evidence states, and the stored summary must
/// be the one recomputed from the rows (the summary is a function of the rows).
fn recheck_settings_and_summary(
    ev: &EvidenceManifest,
    dir: &Path,
    out: &mut EvidenceCheck,
) -> Result<()> {
    let settings_file: Settings =
        serde_json::from_slice(&fsx::read(&dir.join("settings.json"))?)
            .map_err(|e| Error::input(dir.join("settings.json").display(), e.to_string()))?;
    if settings_file != ev.settings {
        out.mismatches.push(EvidenceMismatch {
            path: dir.join("settings.json").display().to_string(),
            role: "settings".into(),
            expected: "the evidence's settings".into(),
            actual: "other settings".into(),
        });
    }
    // The summary is a function of the rows: recompute it.
    let rows_path = dir.join("rows.jsonl");
    let rows_bytes = fsx::read(&rows_path)?;
    let rec = rows::parse_rows(&rows_bytes, &rows_path)?;
    recheck_rows(ev, dir, &rec.rows, out)?;
    let recomputed = summary::derive(&ev.settings.arm_ids(), &rec.rows);
    let stored: Derived = serde_json::from_slice(&fsx::read(&dir.join("summary.json"))?)
        .map_err(|e| Error::input(dir.join("summary.json").display(), e.to_string()))?;
    out.checked
        .push("summary recomputed from rows.jsonl".into());
    if canonical(&recomputed)? != canonical(&stored)? {
        out.mismatches.push(EvidenceMismatch {
            path: dir.join("summary.json").display().to_string(),
            role: "summary".into(),
            expected: format!("recomputed: {}", recomputed.verdict),
            actual: format!("stored: {}", stored.verdict),
        });
    }
    Ok(())
}
