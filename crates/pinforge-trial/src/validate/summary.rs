//! The run's summary, computed from the row file alone (so `verify` can recompute it): counts
//! per outcome and arm, crash onset, signatures, rows that failed on both arms, latency
//! percentiles, the candidate's verdict, and the error rows that every comparison leaves out.

use super::rows::{Outcome, Row};
use pinforge_base::digest::Sha256;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One arm as the summary names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ArmId {
    /// Layer name or manifest variant.
    pub name: String,
    /// Store entry digest or manifest sha256.
    pub digest: Sha256,
}

impl ArmId {
    /// The summary's name for a recorded arm (every summary, written or recomputed, uses it).
    pub(crate) fn of(a: &super::arm::ArmRecord) -> ArmId {
        ArmId {
            name: a.name.clone(),
            digest: a.digest,
        }
    }
}

/// One arm's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArmSummary {
    /// Layer name or manifest variant.
    pub name: String,
    /// Store entry digest or manifest sha256.
    pub digest: Sha256,
    /// Rows recorded.
    pub rows: u64,
    /// Rows per outcome (every outcome present, zero or not).
    pub counts: BTreeMap<String, u64>,
    /// The first crash row.
    pub onset_row: Option<u64>,
    /// Distinct crash signatures (first line), with how often and where first.
    pub signatures: Vec<Signature>,
    /// Whether this is the candidate (the second arm).
    pub candidate: bool,
}

/// A crash signature's occurrences.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Signature {
    /// First line of the signature.
    pub signature: String,
    /// Crash rows with it.
    pub rows: u64,
    /// First such row.
    pub first_row: u64,
}

/// A row that failed on both arms (prompt-specific rather than build-specific).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommonFailure {
    /// Row id.
    pub row: u64,
    /// Outcome per arm name.
    pub outcomes: BTreeMap<String, Outcome>,
}

/// Latency percentiles (ms) of one arm's compared rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// A harness failure, listed apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorRow {
    /// Arm name.
    pub arm: String,
    /// Row id.
    pub row: u64,
    /// What failed.
    pub detail: String,
}

pub use crate::record::schema::Timing;

/// The derived part of the summary (recomputed by `verify`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Derived {
    /// Per arm, baseline first, candidate second.
    pub arms: Vec<ArmSummary>,
    /// Rows that failed on both arms.
    pub common_failures: Vec<CommonFailure>,
    /// Latency per arm name.
    pub latency_ms: BTreeMap<String, Latency>,
    /// Error rows (excluded from every comparison).
    pub errors: Vec<ErrorRow>,
    /// The candidate's verdict.
    pub verdict: String,
    /// Timing per arm name.
    pub timing: BTreeMap<String, Timing>,
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Summarize `rows` for `arms` (baseline, candidate).
pub(crate) fn derive(arms: &[ArmId], rows: &[Row]) -> Derived {
    let mut out = Derived {
        arms: Vec::new(),
        common_failures: Vec::new(),
        latency_ms: BTreeMap::new(),
        errors: Vec::new(),
        verdict: String::new(),
        timing: BTreeMap::new(),
    };
    let mut by_row: BTreeMap<u64, BTreeMap<String, Outcome>> = BTreeMap::new();
    for (i, arm) in arms.iter().enumerate() {
        let mut mine: Vec<&Row> = rows.iter().filter(|r| r.arm == arm.name).collect();
        mine.sort_by_key(|r| r.row);
        let mut counts: BTreeMap<String, u64> = Outcome::ALL
            .iter()
            .map(|o| (o.as_str().to_string(), 0))
            .collect();
        let mut sigs: BTreeMap<String, Signature> = BTreeMap::new();
        let mut lat = Vec::new();
        let (mut wall, mut engine, mut decode, mut n_timed) = (0.0, 0.0, 0.0, 0u64);
        for r in &mine {
            *counts.entry(r.outcome.as_str().to_string()).or_default() += 1;
            by_row
                .entry(r.row)
                .or_default()
                .insert(arm.name.clone(), r.outcome);
            match r.outcome {
                Outcome::Error => out.errors.push(ErrorRow {
                    arm: arm.name.clone(),
                    row: r.row,
                    detail: r.evidence.detail.clone().unwrap_or_default(),
                }),
                Outcome::Crash => {
                    let first = r
                        .evidence
                        .signature
                        .as_deref()
                        .and_then(|s| s.lines().next())
                        .unwrap_or("?")
                        .to_string();
                    let e = sigs.entry(first.clone()).or_insert(Signature {
                        signature: first,
                        rows: 0,
                        first_row: r.row,
                    });
                    e.rows += 1;
                    e.first_row = e.first_row.min(r.row);
                    lat.push(r.wall_ms);
                }
                _ => {
                    lat.push(r.wall_ms);
                    wall += r.wall_ms;
                    engine += r.evidence.engine_ms;
                    decode += r.evidence.decode_ms;
                    n_timed += 1;
                }
            }
        }
        out.latency_ms.insert(arm.name.clone(), latency_of(lat));
        out.timing
            .insert(arm.name.clone(), timing_of(wall, engine, decode, n_timed));
        let mut signatures: Vec<Signature> = sigs.into_values().collect();
        signatures.sort_by(|a, b| b.rows.cmp(&a.rows).then(a.first_row.cmp(&b.first_row)));
        out.arms.push(ArmSummary {
            name: arm.name.clone(),
            digest: arm.digest,
            rows: mine.len() as u64,
            onset_row: mine
                .iter()
                .find(|r| r.outcome == Outcome::Crash)
                .map(|r| r.row),
            counts,
            signatures,
            // The second arm, by its place: a summary of an interrupted run that has only the
            // baseline's rows must not call the baseline the candidate.
            candidate: i == 1,
        });
    }
    let failed =
        |o: &Outcome| matches!(o, Outcome::Crash | Outcome::TokenBudget | Outcome::Mismatch);
    for (row, outcomes) in by_row {
        if outcomes.len() == arms.len() && outcomes.values().all(failed) {
            out.common_failures.push(CommonFailure { row, outcomes });
        }
    }
    out.verdict = verdict_of(out.arms.iter().find(|a| a.candidate));
    out
}

/// Latency percentiles of one arm's timed rows.
fn latency_of(mut lat: Vec<f64>) -> Latency {
    lat.sort_by(f64::total_cmp);
    Latency {
        p50: round3(percentile(&lat, 50.0)),
        p90: round3(percentile(&lat, 90.0)),
        p99: round3(percentile(&lat, 99.0)),
    }
}

/// Mean times of one arm's `n_timed` rows and the share of wall time outside the engine.
fn timing_of(wall: f64, engine: f64, decode: f64, n_timed: u64) -> Timing {
    let n = n_timed.max(1) as f64;
    Timing {
        mean_wall_ms: round3(wall / n),
        mean_engine_ms: round3(engine / n),
        mean_decode_ms: round3(decode / n),
        harness_overhead: if wall > 0.0 {
            round3((wall - engine) / wall)
        } else {
            0.0
        },
    }
}

/// The verdict line, about the candidate (the second arm).
fn verdict_of(candidate: Option<&ArmSummary>) -> String {
    match candidate {
        None => "no candidate rows: the run ended before the candidate arm ran".into(),
        Some(c) => {
            let compared = c.rows - c.counts["error"];
            match (c.onset_row, c.signatures.first()) {
                (Some(onset), Some(sig)) => format!(
                    "{}: crash at row {onset} ({}), {} crash-class row(s) in {compared}",
                    c.name, sig.signature, c.counts["crash"]
                ),
                _ if compared == 0 => format!("{}: no rows compared", c.name),
                _ if c.counts["mismatch"] > 0 => format!(
                    "{}: no crash-class failure in {compared} rows, but {} mismatch row(s)",
                    c.name, c.counts["mismatch"]
                ),
                _ => format!("{}: no crash-class failure in {compared} rows", c.name),
            }
        }
    }
}

/// Whether the candidate passed: rows compared, no crash, no mismatch.
pub fn candidate_passed(d: &Derived) -> bool {
    d.arms.iter().find(|a| a.candidate).is_some_and(|c| {
        c.counts["crash"] == 0 && c.counts["mismatch"] == 0 && c.rows > c.counts["error"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::rows::Evidence;

    fn row(arm: &str, id: u64, outcome: Outcome, wall: f64) -> Row {
        Row {
            row: id,
            arm: arm.into(),
            layer_digest: Sha256::of_bytes(arm.as_bytes()),
            prompt_digest: Sha256::of_bytes(&id.to_le_bytes()),
            tokens_in: 10,
            tokens_out: 4,
            wall_ms: wall,
            tokens_per_second: 1.0,
            outcome,
            evidence: Evidence {
                signature: (outcome == Outcome::Crash)
                    .then(|| "heap-buffer-overflow in x\nframes: y".to_string()),
                detail: (outcome == Outcome::Error).then(|| "boom".to_string()),
                engine_ms: wall / 2.0,
                decode_ms: wall / 4.0,
                ..Default::default()
            },
        }
    }

    fn arms() -> Vec<ArmId> {
        vec![
            ArmId {
                name: "control".into(),
                digest: Sha256::of_bytes(b"c"),
            },
            ArmId {
                name: "live".into(),
                digest: Sha256::of_bytes(b"l"),
            },
        ]
    }

    #[test]
    fn counts_onset_common_failures_and_verdict_come_from_the_rows() {
        let rows = vec![
            row("control", 2, Outcome::Crash, 5.0),
            row("control", 0, Outcome::Ok, 1.0),
            row("control", 1, Outcome::TokenBudget, 2.0),
            row("control", 3, Outcome::Crash, 5.0),
            row("live", 0, Outcome::Ok, 1.0),
            row("live", 1, Outcome::TokenBudget, 2.0),
            row("live", 2, Outcome::Ok, 3.0),
            row("live", 3, Outcome::Error, 9.0),
        ];
        let d = derive(&arms(), &rows);
        assert_eq!(d.arms[0].onset_row, Some(2));
        assert_eq!(d.arms[0].counts["crash"], 2);
        assert_eq!(
            d.arms[0].signatures[0].signature,
            "heap-buffer-overflow in x"
        );
        assert_eq!(d.arms[0].signatures[0].rows, 2);
        assert_eq!(d.arms[1].onset_row, None);
        assert_eq!(d.common_failures.len(), 1);
        assert_eq!(d.common_failures[0].row, 1);
        assert_eq!(
            d.errors,
            vec![ErrorRow {
                arm: "live".into(),
                row: 3,
                detail: "boom".into()
            }]
        );
        assert_eq!(d.verdict, "live: no crash-class failure in 3 rows");
        assert!(candidate_passed(&d));
        // The error row's 9 ms is not a latency of the arm.
        assert_eq!(d.latency_ms["live"].p99, 3.0);
        // The swapped order makes the crashing arm the candidate.
        let swapped: Vec<ArmId> = arms().into_iter().rev().collect();
        let d = derive(&swapped, &rows);
        assert!(
            d.verdict
                .starts_with("control: crash at row 2 (heap-buffer-overflow in x)"),
            "{}",
            d.verdict
        );
        assert!(!candidate_passed(&d));
    }

    #[test]
    fn a_run_with_only_the_baselines_rows_has_no_candidate_and_does_not_pass() {
        let rows = vec![row("control", 0, Outcome::Ok, 1.0)];
        let d = derive(&arms()[..1], &rows);
        assert_eq!(d.arms.len(), 1);
        assert!(!d.arms[0].candidate, "the baseline is never the candidate");
        assert!(d.verdict.starts_with("no candidate rows"), "{}", d.verdict);
        assert!(!candidate_passed(&d));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 90.0), 90.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
