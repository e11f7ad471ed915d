//! `verify` of a soak flip's or a soak ablation's record: every run the record links is found where the workspace
//! keeps it (derived from the run id, never taken verbatim from the record), its evidence
//! manifest has the digest the record holds, and the validation's own re-check passes (every
//! run file re-hashed, the summary recomputed from the rows).

use crate::record::SCHEMA;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;

// An ablation record's schema id: the soak ablation's records are verified here too.
use crate::validate::{self, EvidenceCheck};
use pinforge_record::schema_id::ABLATE as ABLATE_SCHEMA;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One linked run as re-checked.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LinkedRun {
    /// `from#1`, `to#2`, … (an ablation's: `none#1`, `0001+0002#2`, …)
    pub side: String,
    /// The validate run id.
    pub run: String,
    /// Its evidence manifest (where the workspace keeps it).
    pub evidence: PathBuf,
    /// The digest the flip record holds.
    pub recorded_sha256: Sha256,
    /// The digest found (None: not there).
    pub actual_sha256: Option<Sha256>,
    /// The validation's re-check of that run (None when the manifest is gone or differs).
    pub check: Option<EvidenceCheck>,
    /// What is wrong, if anything.
    pub problem: Option<String>,
}

/// What `verify` found in a soak flip record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SoakCheck {
    /// Every linked run matched and re-checked clean.
    pub ok: bool,
    /// The record.
    pub record: PathBuf,
    /// Every linked run.
    pub runs: Vec<LinkedRun>,
    /// Runs that failed when the flip ran (nothing was recorded to check).
    pub failed_runs: Vec<String>,
}

fn record_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("record.json")
    } else {
        path.to_path_buf()
    }
}

/// Whether `path` is a flip or ablation record with a soak trial (or a record folder holding
/// one).
pub fn is_soak_record(path: &Path) -> bool {
    let p = record_path(path);
    let Ok(f) = fsx::open_regular(&p, "file", true) else {
        return false;
    };
    let mut head = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 16 << 20), &mut head);
    serde_json::from_slice::<serde_json::Value>(&head)
        .ok()
        .is_some_and(|v| {
            (v["schema"] == SCHEMA || v["schema"] == ABLATE_SCHEMA) && v["soak"].is_object()
        })
}

/// Every run a record links, with its label: a flip's per repeat and side, an ablation's per
/// subset and repeat. Also the folder kind the record must sit in.
fn linked_runs(v: &serde_json::Value) -> (&'static str, Vec<(String, serde_json::Value)>) {
    let arr = |x: &serde_json::Value| x.as_array().cloned().unwrap_or_default();
    if v["schema"] == ABLATE_SCHEMA {
        let mut out = Vec::new();
        for s in arr(&v["subsets"]) {
            let label = s["label"].as_str().unwrap_or("?").to_string();
            for (run, k) in arr(&s["soak"]["runs"]).into_iter().zip(1..) {
                out.push((format!("{label}#{k}"), run));
            }
        }
        return ("ablations", out);
    }
    let mut out = Vec::new();
    for r in arr(&v["soak"]["repeats"]) {
        let n = r["repeat"].as_u64().unwrap_or(0);
        for side in ["from", "to"] {
            out.push((format!("{side}#{n}"), r["runs"][side].clone()));
        }
    }
    ("flips", out)
}

/// Re-check every run a soak flip's or ablation's record links.
pub fn verify_record(path: &Path) -> Result<SoakCheck> {
    let rec_path = fsx::absolute(&record_path(path))?;
    let bad = |why: String| Error::input(rec_path.display(), why);
    let v: serde_json::Value = serde_json::from_slice(&fsx::read(&rec_path)?)
        .map_err(|e| bad(format!("not a flip or ablation record: {e}")))?;
    let (kind, linked) = linked_runs(&v);
    // The record lives at WS/KIND/ID/record.json; the runs at WS/validate/RUN/.
    let rec_dir = fsx::parent_of(&rec_path);
    let flips = fsx::parent_of(&rec_dir);
    if flips.file_name().and_then(|n| n.to_str()) != Some(kind) {
        return Err(
            bad(format!("is not in a workspace's {kind}/ folder")).with_hint(format!(
                "verify the record where it was written: WORKSPACE/{kind}/ID/record.json"
            )),
        );
    }
    let vroot = fsx::parent_of(&flips).join("validate");
    let mut out = SoakCheck {
        ok: true,
        record: rec_path.clone(),
        runs: Vec::new(),
        failed_runs: Vec::new(),
    };
    for (label, run) in linked {
        if run["evidence"].is_null() {
            out.failed_runs.push(label);
            continue;
        }
        out.runs
            .push(check_run(&vroot, label, &run).map_err(|e| bad(e.to_string()))?);
    }
    out.ok = !out.runs.is_empty()
        && out
            .runs
            .iter()
            .all(|r| r.problem.is_none() && r.check.as_ref().is_some_and(|c| c.ok));
    Ok(out)
}

/// One linked run: its id checked, its manifest found where the workspace keeps it, its
/// digest compared, then the validation's own re-check.
fn check_run(vroot: &Path, side: String, run: &serde_json::Value) -> Result<LinkedRun> {
    let id = run["run"].as_str().unwrap_or("");
    validate::check_run_id(id)?;
    let recorded: Sha256 = run["evidence"]["sha256"]
        .as_str()
        .unwrap_or("")
        .parse()
        .map_err(|_| Error::input(&side, "the record's evidence digest is not a sha256"))?;
    let evidence = vroot.join(id).join("evidence.json");
    let mut out = LinkedRun {
        side,
        run: id.to_string(),
        evidence: evidence.clone(),
        recorded_sha256: recorded,
        actual_sha256: None,
        check: None,
        problem: None,
    };
    if run["evidence"]["manifest"].as_str() != evidence.to_str() {
        out.problem = Some(format!(
            "the record names the evidence at {}, not at {} where run {id} is kept",
            pinforge_base::text::shown(run["evidence"]["manifest"].as_str().unwrap_or("?")),
            evidence.display()
        ));
        return Ok(out);
    }
    if crate::record::real_folder(&vroot.join(id)).ok() != Some(true) {
        out.problem = Some(format!("run {id} is not there (or not a real folder)"));
        return Ok(out);
    }
    match Sha256::of_file(&evidence) {
        Ok((got, _)) => out.actual_sha256 = Some(got),
        Err(e) => {
            out.problem = Some(format!("the evidence cannot be read: {e}"));
            return Ok(out);
        }
    }
    if out.actual_sha256 != Some(recorded) {
        out.problem = Some("the evidence manifest changed since the flip recorded it".into());
        return Ok(out);
    }
    out.check = Some(validate::verify_evidence(&evidence)?);
    Ok(out)
}
