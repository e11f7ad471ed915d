//! A served run folder's own state, beside the validate run folder's (`settings.json` and the
//! inputs, [`crate::validate::run_dir`]): `serve-settings.json` (what decides the served
//! rows besides the validate settings: mode, URL, streaming, preset switching, prompt-cache
//! and slot settings), `serve-arm-ARM.json` (an arm's server, URL and identity, written when
//! its round starts and again when it ends), and `serve-rows.jsonl` read back for `--resume`.
//!
//! The run folder is one transaction: claimed with one `mkdir`, written as it goes (settings,
//! then rows appended one complete line at a time, the arm records, the summary) and committed
//! by `serve-evidence.json`, written last. A folder without it is a run that did not finish:
//! `verify` says so (exit 1) and `--resume` continues it from each arm's last complete row.

use super::rowloop::ServedRow;
use super::Identity;
use crate::validate::run_dir::canonical;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// `serve-settings.json`'s schema id.
pub(crate) const SETTINGS_SCHEMA: &str = "pinforge.validate-serve-settings/v1";

/// What decides a served run's rows besides the validate settings (a resume must match it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeSettings {
    /// [`SETTINGS_SCHEMA`].
    pub schema: String,
    /// `serve` or `endpoint`.
    pub mode: String,
    /// The endpoint's URL (mode `endpoint`).
    pub endpoint: Option<String>,
    /// SSE requests.
    pub stream: bool,
    /// Rows per preset before switching.
    pub switch_every: u64,
    /// `--cache-ram` of each child (managed).
    pub cache_ram_mib: Option<u64>,
    /// `--slot-prompt-similarity` of each child (managed).
    pub slot_prompt_similarity: Option<f64>,
}

/// The settings keys whose values differ, for the resume refusal.
fn differing(old: &ServeSettings, new: &ServeSettings) -> Vec<String> {
    let (a, b) = (serde_json::to_value(old), serde_json::to_value(new));
    match (a, b) {
        (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) => a
            .iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect(),
        _ => vec!["serve-settings.json".into()],
    }
}

/// Write `serve-settings.json` of a fresh run, or check a resumed run's against `s` (a
/// different setting is exit 2 naming it). A resumed folder without one was killed before it
/// was written: it is written now.
pub(super) fn settle(dir: &Path, s: &ServeSettings, resuming: Option<&str>) -> Result<()> {
    let p = dir.join("serve-settings.json");
    if let (Some(id), Some(bytes)) = (resuming, fsx::read_if_present(&p)?) {
        let old: ServeSettings = serde_json::from_slice(&bytes)
            .map_err(|e| Error::input(p.display(), format!("not a served run's settings: {e}")))?;
        if old != *s {
            return Err(Error::input(
                format!("--resume {id}"),
                format!(
                    "this command's served settings differ from the run's in: {}",
                    differing(&old, s).join(", ")
                ),
            )
            .with_hint("resume with the same --serve/--endpoint, --stream, --switch-every, --cache-ram and --slot-prompt-similarity"));
        }
        return Ok(());
    }
    fsx::write_atomic(&p, &canonical(s)?)
}

/// An arm's record: what served it and the identity around its round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ArmRecord {
    /// Arm name.
    pub name: String,
    /// `serve` or `endpoint`.
    pub mode: String,
    /// The binary (managed) or the URL (endpoint).
    pub server: String,
    /// The URL the rows went to (of the round that started last).
    pub url: String,
    /// The presets the rows alternate over.
    pub presets: Vec<String>,
    /// Identity when the arm's first round started.
    pub identity_before: Identity,
    /// Identity when its last round ended (None: the round did not end).
    pub identity_after: Option<Identity>,
}

/// `serve-arm-ARM.json`.
pub(crate) fn arm_file(dir: &Path, arm: &str) -> std::path::PathBuf {
    dir.join(format!("serve-arm-{arm}.json"))
}

/// The arm's record in `dir`, when one was written.
pub(super) fn read_arm(dir: &Path, arm: &str) -> Result<Option<ArmRecord>> {
    let p = arm_file(dir, arm);
    match fsx::read_if_present(&p)? {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| Error::input(p.display(), format!("not a served arm's record: {e}"))),
    }
}

/// Write the arm's record.
pub(super) fn write_arm(dir: &Path, rec: &ArmRecord) -> Result<()> {
    fsx::write_atomic(&arm_file(dir, &rec.name), &canonical(rec)?)
}

/// `serve-rows.jsonl` read back: every complete row per arm, and the bytes of a partial last
/// line (a run killed while appending it), which the caller drops.
pub(crate) struct RecordedRows {
    /// Rows per arm, in file order.
    pub by_arm: BTreeMap<String, Vec<ServedRow>>,
    /// Length of the complete lines.
    pub complete_len: u64,
    /// Bytes after the last complete line.
    pub partial: u64,
}

/// Parse `bytes` (the rows file at `path`): one JSON row per line; a row that does not parse
/// is an input error naming its line, and so is a row of an arm not in `arms` or one out of
/// order (each arm's rows are 0, 1, 2, … in file order).
pub(crate) fn parse_rows(bytes: &[u8], path: &Path, arms: &[String]) -> Result<RecordedRows> {
    let complete_len = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut by_arm: BTreeMap<String, Vec<ServedRow>> = BTreeMap::new();
    for (n, line) in bytes[..complete_len].split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let at = format!("{}:{}", path.display(), n + 1);
        let row: ServedRow = serde_json::from_slice(line)
            .map_err(|e| Error::input(&at, format!("not a served row: {e}")))?;
        if !arms.contains(&row.arm) {
            return Err(Error::input(
                &at,
                format!(
                    "a row of arm `{}`, not an arm of this run",
                    row.arm.escape_debug()
                ),
            ));
        }
        let rows = by_arm.entry(row.arm.clone()).or_default();
        if row.row != rows.len() as u64 {
            return Err(Error::input(
                &at,
                format!(
                    "row {} of arm {} where row {} belongs",
                    row.row,
                    row.arm,
                    rows.len()
                ),
            ));
        }
        rows.push(row);
    }
    Ok(RecordedRows {
        by_arm,
        complete_len: complete_len as u64,
        partial: (bytes.len() - complete_len) as u64,
    })
}

/// The rows a resumed run already has; a partial last line is cut off the file (said by the
/// caller). None of the file: no rows yet.
pub(super) fn resume_rows(path: &Path, arms: &[String]) -> Result<RecordedRows> {
    let Some(bytes) = fsx::read_if_present(path)? else {
        return Ok(RecordedRows {
            by_arm: BTreeMap::new(),
            complete_len: 0,
            partial: 0,
        });
    };
    let rec = parse_rows(&bytes, path, arms)?;
    if rec.partial > 0 {
        fsx::write_atomic(path, &bytes[..rec.complete_len as usize])?;
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(arm: &str, i: u64) -> String {
        let r = ServedRow {
            arm: arm.into(),
            row: i,
            preset: "tiny-a".into(),
            class: "ok".into(),
            rule: "finish_reason stop".into(),
            follow_on: None,
            harness_error: None,
            schema_valid: None,
            status: Some(200),
            finish_reason: Some("stop".into()),
            prompt_tokens: 3,
            completion_tokens: 2,
            max_tokens: 8,
            n_ctx: 256,
            content: Some("hi".into()),
            cut: None,
            error_body: None,
            child_failed: false,
            child_exit: None,
            health: Some(200),
            wall_ms: 1.0,
            timings: None,
            sanitizer: vec![],
            router_stop: vec![],
        };
        serde_json::to_string(&r).expect("json") + "\n"
    }

    #[test]
    fn a_partial_last_row_is_dropped_and_rows_out_of_order_are_refused_naming_the_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("serve-rows.jsonl");
        let arms = vec!["control".to_string(), "live".to_string()];
        let whole = format!(
            "{}{}{}",
            row("control", 0),
            row("control", 1),
            row("live", 0)
        );
        let cut = &row("live", 1)[..40];
        fsx::write_atomic(&p, format!("{whole}{cut}").as_bytes()).expect("write");
        let rec = resume_rows(&p, &arms).expect("rows");
        assert_eq!(rec.partial, 40);
        assert_eq!(rec.by_arm["control"].len(), 2);
        assert_eq!(rec.by_arm["live"].len(), 1);
        assert_eq!(
            fsx::read(&p).expect("read"),
            whole.as_bytes(),
            "the tail is cut off"
        );
        let skipped = format!("{}{}", row("control", 0), row("control", 2));
        let e = parse_rows(skipped.as_bytes(), &p, &arms)
            .err()
            .expect("gap");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("serve-rows.jsonl:2"), "{e}");
        let foreign = row("other", 0);
        let e = parse_rows(foreign.as_bytes(), &p, &arms)
            .err()
            .expect("foreign");
        assert!(e.to_string().contains("not an arm of this run"), "{e}");
        let e = parse_rows(b"{\"arm\":1}\n", &p, &arms).err().expect("bad");
        assert!(e.to_string().contains(":1"), "{e}");
    }

    #[test]
    fn a_resume_with_other_served_settings_is_refused_naming_them() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = ServeSettings {
            schema: SETTINGS_SCHEMA.into(),
            mode: "serve".into(),
            endpoint: None,
            stream: false,
            switch_every: 4,
            cache_ram_mib: Some(8192),
            slot_prompt_similarity: Some(0.3),
        };
        settle(dir.path(), &s, None).expect("write");
        settle(dir.path(), &s, Some("r")).expect("same");
        let other = ServeSettings {
            cache_ram_mib: Some(0),
            ..s.clone()
        };
        let e = settle(dir.path(), &other, Some("r")).expect_err("differs");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("cache_ram_mib"), "{e}");
    }
}
