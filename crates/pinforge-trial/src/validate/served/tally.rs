//! The served summary as a function of the rows: each arm's recorded classes with the cross-arm
//! `mismatch` rule applied, counted (one key per class), with the onset (first crash row) and
//! the `/health` samples. `finish` writes what this computes and `verify` recomputes it from
//! `serve-rows.jsonl`; it also re-applies the class rules to every row's recorded facts.

use super::rowloop::ServedRow;
use crate::validate::serve::{against_other_arm, classify, follow_on, Limits, ServeClass};
use std::collections::BTreeMap;

/// One arm's counted rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tally {
    /// Rows per class, every class present.
    pub counts: BTreeMap<String, u64>,
    /// The first crash row (a follow-on is not an onset: it is a crash seen again).
    pub onset_row: Option<u64>,
    /// Rows.
    pub rows: u64,
    /// `/health` samples per status (`none` when nothing answered).
    pub health: BTreeMap<String, u64>,
}

/// The final class of every row of each arm (two arms: the cross-arm rule applied).
pub(super) fn final_classes(arms: &[&[ServedRow]]) -> Vec<Vec<ServeClass>> {
    (0..arms.len())
        .map(|i| {
            let other = (arms.len() == 2).then(|| arms[1 - i]);
            arms[i]
                .iter()
                .map(|r| {
                    let mine = (r.class(), r.response());
                    match other.and_then(|o| o.iter().find(|x| x.row == r.row)) {
                        Some(o) => against_other_arm((mine.0, &mine.1), (o.class(), &o.response())),
                        None => mine.0,
                    }
                })
                .collect()
        })
        .collect()
}

/// Every arm's tally.
pub(super) fn tallies(arms: &[&[ServedRow]]) -> Vec<Tally> {
    final_classes(arms)
        .into_iter()
        .zip(arms)
        .map(|(cls, rows)| {
            let mut counts: BTreeMap<String, u64> = ServeClass::ALL
                .iter()
                .map(|c| (c.as_str().to_string(), 0))
                .collect();
            for c in &cls {
                *counts.entry(c.as_str().to_string()).or_insert(0) += 1;
            }
            let mut health = BTreeMap::new();
            for r in rows.iter() {
                let k = r
                    .health
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "none".into());
                *health.entry(k).or_insert(0) += 1;
            }
            Tally {
                counts,
                onset_row: cls
                    .iter()
                    .zip(rows.iter())
                    .find(|(c, _)| **c == ServeClass::Crash)
                    .map(|(_, r)| r.row),
                rows: cls.len() as u64,
                health,
            }
        })
        .collect()
}

/// What is wrong with one arm's recorded rows, in words (empty: nothing): rows out of order, or
/// a row whose class or follow-on is not what the rules give for its recorded facts.
pub(super) fn recheck(arm: &str, rows: &[ServedRow]) -> Vec<String> {
    let mut out = Vec::new();
    let mut prev: Option<(u64, ServeClass, Option<u64>)> = None;
    for (i, r) in rows.iter().enumerate() {
        if r.row != i as u64 {
            out.push(format!("arm {arm}: row {} where row {i} belongs", r.row));
            break;
        }
        let resp = r.response();
        let limits = Limits {
            max_tokens: r.max_tokens,
            n_ctx: r.n_ctx,
        };
        let (mut want, _) = classify(&resp, limits);
        let origin = follow_on(want, &resp, prev);
        if origin.is_some() {
            want = ServeClass::FollowOn;
        }
        if ServeClass::parse(&r.class) != Some(want) || r.follow_on != origin {
            out.push(format!(
                "arm {arm} row {i}: recorded class {} (follow-on of {:?}); its facts give {} \
                 (follow-on of {origin:?})",
                r.class.escape_debug(),
                r.follow_on,
                want.as_str()
            ));
        }
        prev = Some((r.row, want, origin));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(arm: &str, i: u64, class: &str, content: &str) -> ServedRow {
        let crash = class != "ok";
        ServedRow {
            arm: arm.into(),
            row: i,
            preset: "p".into(),
            class: class.into(),
            rule: String::new(),
            follow_on: (class == "follow-on").then(|| i - 1),
            harness_error: None,
            schema_valid: None,
            status: Some(if crash { 500 } else { 200 }),
            finish_reason: (!crash).then(|| "stop".into()),
            prompt_tokens: 3,
            completion_tokens: 2,
            max_tokens: 8,
            n_ctx: 256,
            content: (!crash).then(|| content.into()),
            cut: None,
            error_body: match class {
                "crash" => Some("proxy error: Failed to read connection".into()),
                "follow-on" => Some("proxy error: Could not establish connection".into()),
                _ => None,
            },
            child_failed: false,
            child_exit: None,
            health: Some(200),
            wall_ms: 1.0,
            timings: None,
            sanitizer: vec![],
            router_stop: vec![],
        }
    }

    #[test]
    fn counts_onset_and_mismatch_follow_from_the_rows_and_a_relabelled_row_is_named() {
        let a = vec![
            row("a", 0, "ok", "x"),
            row("a", 1, "crash", ""),
            row("a", 2, "follow-on", ""),
            row("a", 3, "ok", "y"),
        ];
        let b = vec![
            row("b", 0, "ok", "x"),
            row("b", 1, "ok", "x"),
            row("b", 2, "ok", "x"),
            row("b", 3, "ok", "z"),
        ];
        let t = tallies(&[&a, &b]);
        assert_eq!(t[0].onset_row, Some(1), "a follow-on is not an onset");
        assert_eq!(
            (
                t[0].counts["crash"],
                t[0].counts["follow-on"],
                t[0].counts["mismatch"]
            ),
            (1, 1, 1)
        );
        assert_eq!((t[1].counts["ok"], t[1].counts["mismatch"]), (3, 1));
        assert_eq!(t[1].onset_row, None);
        assert!(recheck("a", &a).is_empty(), "{:?}", recheck("a", &a));
        let mut relabelled = a.clone();
        relabelled[2].class = "crash".into();
        relabelled[2].follow_on = None;
        let why = recheck("a", &relabelled);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("row 2"), "{why:?}");
        let mut gap = a.clone();
        gap.remove(1);
        assert!(recheck("a", &gap)[0].contains("where row 1 belongs"));
    }
}
