//! A served run's evidence: `serve-evidence.json`, written last (the run's commit point), the
//! sha256 of every file of the run folder (router logs and arm records included), and its
//! re-check by `verify RUN`: every file re-hashed, nothing added or removed, no member that is
//! a link, FIFO or folder (each refused before it is opened), no name that is not a file of a
//! served run folder (so nothing outside it is read), every row's class re-derived from its
//! recorded facts, and the summary's counts recomputed from the rows.

use super::rowloop::ServedRow;
use super::{state, tally};
use crate::validate::evidence::{EvidenceCheck, EvidenceMismatch};
use crate::validate::run_dir::{canonical, Settings};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::{fsx, text};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The evidence's schema id.
pub(crate) const EVIDENCE_SCHEMA: &str = "pinforge.validate-serve-evidence/v1";
/// Its file name.
pub(crate) const EVIDENCE: &str = "serve-evidence.json";

/// `serve-evidence.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeEvidence {
    schema: String,
    run: String,
    mode: String,
    files: BTreeMap<String, Sha256>,
}

/// The fixed files of a served run folder.
const FIXED: &[&str] = &[
    "settings.json",
    "serve-settings.json",
    "prompts.jsonl",
    "schema.json",
    "grammar.gbnf",
    "model.gguf",
    "presets.ini",
    "serve-rows.jsonl",
    "serve-summary.json",
];

/// The files no finished served run lacks: its evidence must name each (a folder whose
/// evidence left out its rows or summary would otherwise verify with nothing re-checked).
const REQUIRED: &[&str] = &[
    "settings.json",
    "serve-settings.json",
    "prompts.jsonl",
    "serve-rows.jsonl",
    "serve-summary.json",
];

/// Whether `name` is a file a served run folder holds: a fixed name, or `router-ARM.log` /
/// `serve-arm-ARM.json` of an arm name (letters, digits, `-`, `_`, `.`; never a path).
pub(crate) fn run_file_name(name: &str) -> bool {
    let arm = |a: &str| {
        !a.is_empty()
            && !a.starts_with('.')
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    FIXED.contains(&name)
        || name
            .strip_prefix("router-")
            .and_then(|n| n.strip_suffix(".log"))
            .is_some_and(arm)
        || name
            .strip_prefix("serve-arm-")
            .and_then(|n| n.strip_suffix(".json"))
            .is_some_and(arm)
}

/// Write the evidence over every run file in `dir`: the commit point of the run.
pub(super) fn write(dir: &Path, run: &str, mode: &str) -> Result<(PathBuf, Sha256)> {
    let mut files = BTreeMap::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for e in rd {
        let e = e.map_err(|e| Error::io("list", dir, e))?;
        let Some(n) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if run_file_name(&n) {
            let f = fsx::open_regular(&e.path(), "run file", false)?;
            files.insert(n, Sha256::of_reader(f, &e.path())?.0);
        }
    }
    let doc = canonical(&ServeEvidence {
        schema: EVIDENCE_SCHEMA.into(),
        run: run.into(),
        mode: mode.into(),
        files,
    })?;
    let p = dir.join(EVIDENCE);
    fsx::write_atomic(&p, &doc)?;
    Ok((p, Sha256::of_bytes(&doc)))
}

/// The run folder of `path` when it is a served run's (the folder, or its evidence file): one
/// holding `serve-settings.json` or `serve-evidence.json`.
pub fn served_run_dir(path: &Path) -> Option<PathBuf> {
    let dir = if path.file_name().is_some_and(|n| n == EVIDENCE) {
        fsx::parent_of(path)
    } else {
        path.to_path_buf()
    };
    let real_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
    let marked = [EVIDENCE, "serve-settings.json"]
        .iter()
        .any(|n| std::fs::symlink_metadata(dir.join(n)).is_ok());
    (real_dir && marked).then_some(dir)
}

/// A run file's bytes, never through a link (refused, as a FIFO is, before it is opened).
fn read_regular(p: &Path, what: &str) -> Result<Vec<u8>> {
    let mut f = fsx::open_regular(p, what, false)?;
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut b).map_err(|e| Error::io("read", p, e))?;
    Ok(b)
}

fn mismatch(path: &Path, role: &str, expected: &str, actual: &str) -> EvidenceMismatch {
    EvidenceMismatch {
        path: path.display().to_string(),
        role: role.into(),
        expected: expected.into(),
        actual: actual.into(),
    }
}

/// Re-check a served run folder (see the module's comment).
pub fn verify(dir: &Path) -> Result<EvidenceCheck> {
    let run = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = EvidenceCheck {
        ok: false,
        run,
        checked: Vec::new(),
        mismatches: Vec::new(),
        absent: Vec::new(),
    };
    let ev_path = dir.join(EVIDENCE);
    if std::fs::symlink_metadata(&ev_path).is_err() {
        out.mismatches.push(mismatch(
            &ev_path,
            "evidence",
            "the evidence, written last",
            "no serve-evidence.json: the run did not finish (resume it with --resume)",
        ));
        return Ok(out);
    }
    let ev: ServeEvidence =
        serde_json::from_slice(&read_regular(&ev_path, "evidence")?).map_err(|e| {
            Error::input(
                ev_path.display(),
                format!("not a served run's evidence: {e}"),
            )
        })?;
    if ev.schema != EVIDENCE_SCHEMA {
        return Err(Error::input(
            ev_path.display(),
            format!(
                "schema `{}`, not {EVIDENCE_SCHEMA}",
                ev.schema.escape_debug()
            ),
        ));
    }
    out.run = ev.run.clone();
    for name in ev.files.keys() {
        if !run_file_name(name) {
            return Err(Error::input(
                ev_path.display(),
                format!(
                    "names `{}`, which is not a file of a served run folder",
                    name.escape_debug()
                ),
            ));
        }
    }
    for need in REQUIRED {
        if !ev.files.contains_key(*need) {
            out.mismatches.push(mismatch(
                &dir.join(need),
                "member",
                "a file every served run records",
                "not in the evidence",
            ));
        }
    }
    if !ev.files.keys().any(|n| n.starts_with("serve-arm-")) {
        out.mismatches.push(mismatch(
            &ev_path,
            "member",
            "an arm record (serve-arm-ARM.json)",
            "none in the evidence",
        ));
    }
    check_members(dir, &ev, &mut out)?;
    let settings = load_settings(dir, &mut out)?;
    check_agreement(dir, &ev, settings.as_ref(), &mut out)?;
    if let Some(s) = &settings {
        check_outside_model(dir, s, &mut out)?;
    }
    recheck_rows(dir, settings.as_ref(), &mut out)?;
    out.ok = out.mismatches.is_empty();
    Ok(out)
}

/// Every entry of the folder against the evidence: a regular file it names is re-hashed; an
/// entry it does not name is an addition, a named file gone a removal; a link, FIFO or folder
/// is refused without being opened.
fn check_members(dir: &Path, ev: &ServeEvidence, out: &mut EvidenceCheck) -> Result<()> {
    let mut on_disk = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let e = e.map_err(|e| Error::io("list", dir, e))?;
        let ft = e
            .file_type()
            .map_err(|err| Error::io("inspect", &e.path(), err))?;
        let shown = text::shown(&e.file_name().to_string_lossy()).into_owned();
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            out.mismatches.push(mismatch(
                &dir.join(&shown),
                "member",
                "absent",
                "added: a name that is not UTF-8",
            ));
            continue;
        };
        if name == EVIDENCE {
            continue;
        }
        let kind = if ft.is_file() {
            None
        } else if ft.is_symlink() {
            Some("a symlink")
        } else if ft.is_dir() {
            Some("a folder")
        } else {
            Some(fsx::special_kind(&ft).unwrap_or("not a regular file"))
        };
        if let Some(kind) = kind {
            let actual = format!("{kind}: not followed, not opened");
            out.mismatches.push(mismatch(
                &dir.join(&shown),
                "member",
                "a regular file",
                &actual,
            ));
        } else if !ev.files.contains_key(&name) {
            let actual = "added: not in serve-evidence.json";
            out.mismatches
                .push(mismatch(&dir.join(&shown), "member", "absent", actual));
        }
        on_disk.insert(name, kind.is_none());
    }
    for (name, want) in &ev.files {
        let p = dir.join(name);
        match on_disk.get(name) {
            None => out
                .mismatches
                .push(mismatch(&p, name, &want.to_string(), "missing: removed")),
            Some(false) => {}
            Some(true) => {
                let f = fsx::open_regular(&p, name, false)?;
                let (got, _) = Sha256::of_reader(f, &p)?;
                out.checked.push(p.display().to_string());
                if got != *want {
                    out.mismatches
                        .push(mismatch(&p, name, &want.to_string(), &got.to_string()));
                }
            }
        }
    }
    Ok(())
}

/// `settings.json`, read once for the checks that need it: None when it is absent or not a
/// regular file (a mismatch of the file set already) or not a run's settings (recorded here).
fn load_settings(dir: &Path, out: &mut EvidenceCheck) -> Result<Option<Settings>> {
    let p = dir.join("settings.json");
    if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
        return Ok(None);
    }
    match serde_json::from_slice(&read_regular(&p, "settings")?) {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            out.mismatches
                .push(mismatch(&p, "settings", "a run's settings", &e.to_string()));
            Ok(None)
        }
    }
}

/// A model given with `--model` lives outside the folder: the one the settings record must
/// still be there with its recorded sha256 (its loss is a mismatch, as the run's own files').
fn check_outside_model(dir: &Path, settings: &Settings, out: &mut EvidenceCheck) -> Result<()> {
    // The run's own copy (the folder's `model.gguf`, wherever the folder is now) is one of
    // its files, hashed above.
    let own = settings
        .model
        .file_name()
        .is_some_and(|n| n == "model.gguf")
        && settings.model.parent().and_then(Path::file_name) == fsx::absolute(dir)?.file_name();
    if own {
        return Ok(());
    }
    let m = &settings.model;
    let want = settings.model_sha256.to_string();
    match fsx::open_regular(m, "model", true) {
        Ok(f) => {
            let (got, _) = Sha256::of_reader(f, m)?;
            out.checked.push(m.display().to_string());
            if got != settings.model_sha256 {
                out.mismatches
                    .push(mismatch(m, "model", &want, &got.to_string()));
            }
        }
        Err(e) => out
            .mismatches
            .push(mismatch(m, "model", &want, &e.to_string())),
    }
    Ok(())
}

/// The run's files agree with each other: the evidence's mode is `serve-settings.json`'s, and
/// the prompts, schema, grammar and the run's own model copy are the files whose digests
/// `settings.json` records (the rows ran on those). The files themselves were re-hashed against
/// the evidence by [`check_members`], so the evidence's digests stand for them here: a file
/// swapped and re-hashed into the evidence is named, and nothing is hashed twice.
fn check_agreement(
    dir: &Path,
    ev: &ServeEvidence,
    settings: Option<&Settings>,
    out: &mut EvidenceCheck,
) -> Result<()> {
    let sp = dir.join("serve-settings.json");
    if std::fs::symlink_metadata(&sp).is_ok_and(|m| m.is_file()) {
        let mode = serde_json::from_slice::<serde_json::Value>(&read_regular(&sp, "settings")?)
            .ok()
            .and_then(|v| v["mode"].as_str().map(str::to_string));
        if mode.as_deref() != Some(ev.mode.as_str()) {
            out.mismatches.push(mismatch(
                &sp,
                "mode",
                &format!("mode {} (the evidence's)", ev.mode),
                &format!("mode {}", mode.as_deref().unwrap_or("absent")),
            ));
        }
    }
    let Some(settings) = settings else {
        return Ok(());
    };
    let own_model = settings
        .model
        .file_name()
        .is_some_and(|n| n == "model.gguf");
    let recorded = [
        ("prompts.jsonl", Some(settings.prompt_set_sha256)),
        ("schema.json", settings.schema_sha256),
        ("grammar.gbnf", settings.grammar_sha256),
        ("model.gguf", own_model.then_some(settings.model_sha256)),
    ];
    for (name, want) in recorded {
        let (Some(want), Some(got)) = (want, ev.files.get(name)) else {
            continue;
        };
        if *got != want {
            out.mismatches.push(mismatch(
                &dir.join(name),
                "settings digest",
                &format!("{want} (settings.json)"),
                &got.to_string(),
            ));
        }
    }
    out.checked
        .push("the prompts, schema and model are the files settings.json records".into());
    Ok(())
}

/// The summary as recorded in `serve-summary.json`: per arm, the parts computed from rows.
#[derive(Deserialize)]
struct StoredSummary {
    arms: Vec<StoredArm>,
}

#[derive(Deserialize)]
struct StoredArm {
    name: String,
    rows: u64,
    counts: BTreeMap<String, u64>,
    onset_row: Option<u64>,
    health: BTreeMap<String, u64>,
    #[serde(default)]
    signatures: BTreeMap<String, u64>,
}

/// The summary's arms must be the run's (settings.json's arms; the one `endpoint` arm of a run
/// at an endpoint), in order: a summary that left an arm out, or a rows file cut to a subset of
/// the rows with its counts recomputed to match, would otherwise verify. Returns the rows each
/// arm must hold.
fn recheck_arms(
    settings: &Settings,
    sum_p: &Path,
    names: &[String],
    out: &mut EvidenceCheck,
) -> u64 {
    let want: Vec<String> = if settings.arms.is_empty() {
        vec![super::ENDPOINT_ARM.to_string()]
    } else {
        settings.arms.iter().map(|a| a.name.clone()).collect()
    };
    if want != names {
        out.mismatches.push(mismatch(
            sum_p,
            "summary arms",
            &format!("the run's arms: {}", want.join(", ")),
            &format!("arms {}", names.join(", ")),
        ));
    }
    out.checked.push("the summary's arms are the run's".into());
    settings.rows
}

/// Every row's class from its facts, and the summary's counts from the rows.
fn recheck_rows(dir: &Path, settings: Option<&Settings>, out: &mut EvidenceCheck) -> Result<()> {
    let (rows_p, sum_p) = (dir.join("serve-rows.jsonl"), dir.join("serve-summary.json"));
    let regular = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if !regular(&rows_p) || !regular(&sum_p) {
        // Their absence or kind is already a mismatch of the file set.
        return Ok(());
    }
    let summary: StoredSummary = match serde_json::from_slice(&read_regular(&sum_p, "summary")?) {
        Ok(s) => s,
        Err(e) => {
            out.mismatches.push(mismatch(
                &sum_p,
                "summary",
                "a served run's summary",
                &e.to_string(),
            ));
            return Ok(());
        }
    };
    let names: Vec<String> = summary.arms.iter().map(|a| a.name.clone()).collect();
    let expected_rows = settings.map(|s| recheck_arms(s, &sum_p, &names, out));
    let bytes = read_regular(&rows_p, "rows")?;
    let rec = match state::parse_rows(&bytes, &rows_p, &names) {
        Ok(r) if r.partial == 0 => r,
        Ok(_) => {
            out.mismatches.push(mismatch(
                &rows_p,
                "rows",
                "complete lines",
                "a partial last line",
            ));
            return Ok(());
        }
        Err(e) => {
            out.mismatches.push(mismatch(
                &rows_p,
                "rows",
                "rows of this run's arms",
                &e.to_string(),
            ));
            return Ok(());
        }
    };
    let empty = Vec::new();
    let arms: Vec<&[ServedRow]> = names
        .iter()
        .map(|n| rec.by_arm.get(n).unwrap_or(&empty).as_slice())
        .collect();
    for (n, rows) in names.iter().zip(&arms) {
        for why in tally::recheck(n, rows) {
            out.mismatches.push(mismatch(
                &rows_p,
                "row class",
                "the class its facts give",
                &why,
            ));
        }
    }
    if let Some(want) = expected_rows {
        for (n, rows) in names.iter().zip(&arms) {
            if rows.len() as u64 != want {
                out.mismatches.push(mismatch(
                    &rows_p,
                    "row count",
                    &format!("{want} rows of arm {n} (settings.json `rows`)"),
                    &format!("{} rows", rows.len()),
                ));
            }
        }
        out.checked
            .push("every arm holds the rows its settings asked for".into());
    }
    out.checked
        .push("every row's class from its recorded facts".into());
    for (stored, t) in summary.arms.iter().zip(tally::tallies(&arms)) {
        let got = (
            stored.rows,
            &stored.counts,
            stored.onset_row,
            &stored.health,
        );
        if got != (t.rows, &t.counts, t.onset_row, &t.health) {
            out.mismatches.push(mismatch(
                &sum_p,
                "summary counts",
                &format!(
                    "arm {}: recomputed from serve-rows.jsonl: {} rows, {:?}, onset {:?}",
                    stored.name, t.rows, t.counts, t.onset_row
                ),
                &format!(
                    "stored: {} rows, {:?}, onset {:?}",
                    stored.rows, stored.counts, stored.onset_row
                ),
            ));
        }
    }
    out.checked
        .push("summary counts recomputed from serve-rows.jsonl".into());
    recheck_signatures(dir, &summary, out)?;
    Ok(())
}

/// Each arm's sanitizer signatures recomputed from its router log (a managed run's evidence
/// file): the summary must say what its own log shows. An arm without a log (a run at an
/// endpoint) records none.
fn recheck_signatures(dir: &Path, summary: &StoredSummary, out: &mut EvidenceCheck) -> Result<()> {
    let mut any = false;
    for arm in &summary.arms {
        let name = format!("router-{}.log", arm.name);
        if !run_file_name(&name) {
            // An arm name that is no file name of a run folder (a `/`, a `..`): nothing is
            // opened for it; the evidence's file set check names what is wrong.
            out.mismatches.push(mismatch(
                &dir.join("serve-summary.json"),
                "summary arms",
                "arm names that are file names of a run folder",
                &format!("arm {:?}", arm.name),
            ));
            continue;
        }
        let log = dir.join(name);
        let got = if std::fs::symlink_metadata(&log).is_ok_and(|m| m.is_file()) {
            any = true;
            super::logsig::signatures_in(&log)?
        } else {
            BTreeMap::new()
        };
        if !super::logsig::signatures_agree(&got, &arm.signatures) {
            out.mismatches.push(mismatch(
                &dir.join("serve-summary.json"),
                "summary signatures",
                &format!(
                    "arm {}: from {}: {got:?}",
                    arm.name,
                    log.file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
                ),
                &format!("stored: {:?}", arm.signatures),
            ));
        }
    }
    if any {
        out.checked
            .push("sanitizer signatures recomputed from the router logs".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_of_a_served_run_are_names_the_evidence_may_hold() {
        for ok in [
            "settings.json",
            "router-control.log",
            "serve-arm-live.json",
            "router-a.b_c-1.log",
        ] {
            assert!(run_file_name(ok), "{ok}");
        }
        for bad in [
            "router-../x.log",
            "router-.log",
            "../settings.json",
            "router-a/b.log",
            "serve-arm-..json",
            "/etc/passwd",
            "router-\u{1b}.log",
            "rows.jsonl",
            "serve-evidence.json",
        ] {
            assert!(!run_file_name(bad), "{bad}");
        }
    }
}
