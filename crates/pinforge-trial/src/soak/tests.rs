//! The soak verdict rule, the rows-needed formula and the agreement of repeats.

use super::*;
use crate::validate::summary::Timing;

const SIG: &str = "heap-buffer-overflow in llama_kv_cache::apply_ubatch";

fn run(rows: u64, crash: u64, error: u64, sigs: &[(&str, u64, u64)]) -> SoakRun {
    let mut counts: BTreeMap<String, u64> = ["ok", "crash", "token-budget", "mismatch", "error"]
        .iter()
        .map(|o| (o.to_string(), 0))
        .collect();
    counts.insert("ok".into(), rows - crash - error);
    counts.insert("crash".into(), crash);
    counts.insert("error".into(), error);
    SoakRun {
        variant: "v".into(),
        run: Some("r".into()),
        run_dir: None,
        evidence: None,
        rows,
        counts,
        onset_row: sigs.iter().map(|s| s.2).min(),
        signatures: sigs
            .iter()
            .map(|(s, n, first)| SoakSignature {
                signature: s.to_string(),
                rows: *n,
                first_row: *first,
                framed: has_frame(s),
            })
            .collect(),
        timing: None,
        error: None,
        forced: None,
    }
}

fn clean(rows: u64) -> SoakRun {
    run(rows, 0, 0, &[])
}

// issue #21: supported / falsified / invalid from the crash-class rows of two soaks.
#[test]
fn the_soak_verdict_rule() {
    let every_row = run(100, 100, 0, &[(SIG, 100, 0)]);
    let (v, why) = decide(&every_row, &clean(100), None);
    assert_eq!(v, FlipVerdict::Supported, "{why}");
    assert!(
        why.contains("onset row 0") && why.contains("absent in all 100 rows"),
        "{why}"
    );

    // The production shape: onset at row 39 on one side, 20 on the other.
    let late = run(100, 3, 0, &[(SIG, 3, 39)]);
    let other = run(100, 5, 0, &[(SIG, 5, 20)]);
    let (v, why) = decide(&late, &other, None);
    assert_eq!(v, FlipVerdict::Falsified, "{why}");
    assert!(
        why.contains("onset row 39") && why.contains("row 20 on the to side"),
        "{why}"
    );

    // Never shown on the from side: invalid, the rate unknown.
    let (v, why) = decide(&clean(100), &clean(100), None);
    assert_eq!(v, FlipVerdict::Invalid);
    assert!(
        why.contains("never showed") && why.contains("unknown (0 of 100)"),
        "{why}"
    );
    // ... or known from other repeats: the formula with its inputs.
    let rate = Rate {
        rows: 2,
        of: 200,
        p: 0.01,
    };
    let (_, why) = decide(&clean(100), &clean(100), Some(rate));
    assert!(
        why.contains("ln(1-0.95)/ln(1-p) with p = 2/200 = 0.0100: 299 rows"),
        "{why}"
    );

    // A rare onset and a short to side: clean by chance too likely, so not supported.
    let rare = run(100, 2, 0, &[(SIG, 2, 40)]);
    let (v, why) = decide(&rare, &clean(100), None);
    assert_eq!(v, FlipVerdict::Invalid, "{why}");
    assert!(
        why.contains("by chance") && why.contains("149 rows"),
        "{why}"
    );

    // Another signature, a frameless one, a diverged decode, a failed or empty run.
    let other_sig = run(100, 1, 0, &[("heap-use-after-free in llama_decode", 1, 7)]);
    let (v, why) = decide(&every_row, &other_sig, None);
    assert_eq!(v, FlipVerdict::Invalid);
    assert!(why.contains("another signature"), "{why}");
    let signal = run(100, 1, 0, &[("killed by signal 11 (SIGSEGV)", 1, 3)]);
    assert!(decide(&every_row, &signal, None).1.contains("no frame"));
    assert!(decide(&signal, &clean(100), None).1.contains("no frame"));
    let mut diverged = clean(100);
    diverged.counts.insert("mismatch".into(), 4);
    assert!(decide(&every_row, &diverged, None).1.contains("mismatch"));
    let mut failed = clean(0);
    failed.error = Some("the shim did not compile".into());
    assert!(decide(&every_row, &failed, None)
        .1
        .contains("to side's soak could not run: the shim"));
    let errors = run(10, 0, 10, &[]);
    assert!(decide(&errors, &clean(10), None)
        .1
        .contains("from side compared no rows (10 harness error rows)"));
    // Harness-error rows are not rows the signature was absent in.
    let (v, why) = decide(&every_row, &run(100, 0, 40, &[]), None);
    assert_eq!(v, FlipVerdict::Supported);
    assert!(why.contains("absent in all 60 rows"), "{why}");
}

#[test]
fn rows_needed_is_the_least_n_with_the_stated_confidence() {
    assert_eq!(rows_needed(1.0, 0.95), 1);
    assert_eq!(rows_needed(0.5, 0.95), 5); // 1 - 0.5^5 = 0.969 ≥ 0.95 > 1 - 0.5^4
    assert_eq!(rows_needed(1.0 / 39.0, 0.95), 116);
    assert_eq!(rows_needed(0.0, 0.95), u64::MAX);
    for p in [0.01, 0.05, 0.2] {
        let n = rows_needed(p, 0.95);
        assert!(1.0 - (1.0 - p).powf(n as f64) >= 0.95);
        assert!(1.0 - (1.0 - p).powf((n - 1) as f64) < 0.95);
    }
}

fn repeat(n: u32, verdict: FlipVerdict) -> SoakRepeat {
    SoakRepeat {
        repeat: n,
        runs: Pair {
            from: clean(1),
            to: clean(1),
        },
        verdict,
        reason: format!("reason {n}"),
    }
}

#[test]
fn repeats_must_all_agree_else_inconclusive_with_the_table() {
    use FlipVerdict::*;
    let (v, why) = overall(&[repeat(1, Supported)]);
    assert_eq!((v, why.as_str()), (Supported, "reason 1"));
    let (v, why) = overall(&[
        repeat(1, Falsified),
        repeat(2, Falsified),
        repeat(3, Falsified),
    ]);
    assert_eq!(v, Falsified);
    assert!(why.starts_with("all 3 interleaved repeats agree"), "{why}");
    let (v, why) = overall(&[
        repeat(1, Supported),
        repeat(2, Invalid),
        repeat(3, Supported),
    ]);
    assert_eq!(v, Inconclusive);
    assert!(
        why.contains("repeat 1 supported, repeat 2 invalid, repeat 3 supported"),
        "{why}"
    );
    assert_eq!(overall(&[]).0, Invalid);
}

#[test]
fn the_forced_clean_hook_reads_crash_rows_as_clean_and_says_so() {
    let mut r = run(10, 10, 0, &[(SIG, 10, 0)]);
    force_clean(&mut r);
    assert_eq!(
        (r.count("crash"), r.count("ok"), r.onset_row),
        (0, 10, None)
    );
    assert!(r.signatures.is_empty());
    assert!(r
        .forced
        .as_deref()
        .is_some_and(|f| f.contains("10 crash row(s)")));
}

#[test]
fn timing_leaves_out_failed_runs_crash_rows_and_error_rows() {
    let timed = |rows, crash, error, wall| {
        let mut r = run(rows, crash, error, &[]);
        r.timing = Some(Timing {
            mean_wall_ms: wall,
            mean_engine_ms: wall,
            mean_decode_ms: wall / 2.0,
            harness_overhead: 0.0,
        });
        r
    };
    let mut failed = timed(10, 0, 0, 1000.0);
    failed.error = Some("x".into());
    let runs = [timed(10, 2, 0, 10.0), timed(10, 0, 4, 20.0), failed];
    let t = timing(runs.iter());
    assert_eq!((t.rows, t.excluded_rows, t.excluded_runs), (14, 6, 1));
    // (8 × 10 + 6 × 20) / 14
    assert_eq!(t.mean_wall_ms, Some(14.286));
}
