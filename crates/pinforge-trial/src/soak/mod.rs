//! The soak trial of a flip (`flip --trial soak --rows N`, issue #21). One smoke per side
//! settles a defect that shows at the first state restore, but not one with a late or
//! probabilistic onset (in production #20093 showed at row 39 on one toolchain and row 20 on
//! the other). Here each side's evidence is a validation run of N rows over that side's build
//! ([`validate::run_one`], the in-process harness with its own evidence manifest), and the
//! verdict comes from the crash-class rows and their signatures:
//!
//! - `supported`: the from side shows the signature and the to side's N rows are all free of
//!   it, and N rows would have shown it at the from side's observed rate (95% confidence);
//! - `falsified`: the signature survives; both onset rows are recorded;
//! - `invalid`: the from side never shows it within N rows (with the rows a run would need,
//!   `n ≥ ln(1-c)/ln(1-p)`, where the onset rate `p` is known), or the comparison cannot be
//!   made (a failed run, no rows compared, another or a frameless crash, a diverged decode).
//!
//! `--repeats K` runs the sides interleaved, from to from to …, so that drift in the machine
//! or the model cannot masquerade as the axis, and the crashing side is re-run after the
//! candidate (order symmetry). The verdict needs every repeat to agree, else `inconclusive`
//! with the per-repeat table. Runs that failed and harness-error rows stay in the record but
//! never enter the timing comparison; crash rows are left out of it too (their wall time is
//! the engine's death).

use crate::record::schema::{
    Rate, SideTiming, SoakRepeat, SoakRun, SoakSettings, SoakSignature, SoakTrial,
};
use crate::record::{error_text, Pair};
use crate::validate::{self, ArmSource};
use crate::verdict::FlipVerdict;
use pinforge_base::error::{Error, Result};
use pinforge_base::progress::Reporter;
use pinforge_deploy::smoke::signature::{has_frame, normalize_signature};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub mod verify;

/// The confidence a `supported` verdict and a stated row count are computed for.
pub(crate) const CONFIDENCE: f64 = 0.95;

/// How a soak flip runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// Each side's validation (rows, prompts, model, budget, jobs, timeouts). Its `arms` are
    /// set by the trial to the two builds, from then to, whatever the caller put there.
    pub validate: validate::Options,
    /// Interleaved repeats (1: one run per side).
    pub repeats: u32,
}

impl SoakTrial {
    /// The trial as registered: settings, no runs.
    pub(crate) fn registered(opts: &SoakOptions) -> SoakTrial {
        let v = &opts.validate;
        SoakTrial {
            settings: SoakSettings {
                rows: v.rows,
                repeats: opts.repeats,
                seed: v.prompts.is_none().then_some(v.seed),
                prompts: v.prompts.clone(),
                budget: v.budget,
                jobs: v.jobs,
                row_timeout_seconds: v.timeout.as_secs(),
                confidence: CONFIDENCE,
            },
            order: Vec::new(),
            repeats: Vec::new(),
            from_rate: None,
            timing: None,
        }
    }
}

/// Check the soak's own options before anything is registered (the validation checks its
/// own ranges again when it runs).
pub(crate) fn check(opts: &SoakOptions) -> Result<()> {
    if opts.repeats == 0 || opts.repeats > 100 {
        return Err(Error::input(
            format!("--repeats {}", opts.repeats),
            "must be 1 to 100",
        ));
    }
    if opts.validate.rows == 0 || opts.validate.rows > 1_000_000 {
        return Err(Error::input(
            format!("--rows {}", opts.validate.rows),
            "must be 1 to 1000000",
        )
        .with_hint("a soak needs rows enough for a late onset, e.g. --rows 100"));
    }
    Ok(())
}

/// Run the soak over the two built manifests, interleaved, and complete `trial`. Returns the
/// verdict and its reason. A run that fails is recorded as failed (the repeat is then
/// invalid), never an error of the flip.
pub(crate) fn run(
    opts: &SoakOptions,
    manifests: Pair<PathBuf>,
    trial: &mut SoakTrial,
    reporter: &dyn Reporter,
) -> (FlipVerdict, String) {
    let mut v = opts.validate.clone();
    v.arms = [
        ArmSource::Manifest(manifests.from),
        ArmSource::Manifest(manifests.to),
    ];
    v.resume = None;
    let forced = pinforge_base::hooks::soak_force_clean();
    let mut runs: Vec<Pair<SoakRun>> = Vec::new();
    for repeat in 1..=opts.repeats {
        let mut pair = Vec::new();
        for (i, side) in ["from", "to"].into_iter().enumerate() {
            reporter.stage(
                "soak",
                &format!("{side} side, repeat {repeat}/{}", opts.repeats),
            );
            trial.order.push(format!("{side}#{repeat}"));
            let mut r = soak_one(&v, i, reporter);
            if forced.as_ref() == Some(&(side.to_string(), repeat)) {
                force_clean(&mut r);
            }
            pair.push(r);
        }
        let mut pair = pair.into_iter();
        let (Some(from), Some(to)) = (pair.next(), pair.next()) else {
            continue;
        };
        runs.push(Pair { from, to });
    }
    trial.from_rate = pooled_rate(&runs);
    trial.timing = Some(Pair {
        from: timing(runs.iter().map(|p| &p.from)),
        to: timing(runs.iter().map(|p| &p.to)),
    });
    trial.repeats = runs
        .into_iter()
        .zip(1..)
        .map(|(runs, repeat)| {
            let (verdict, reason) = decide(&runs.from, &runs.to, trial.from_rate);
            SoakRepeat {
                repeat,
                runs,
                verdict,
                reason,
            }
        })
        .collect();
    overall(&trial.repeats)
}

/// One validation soak of arm `arm` of `v` (a failed run is recorded as failed, never an
/// error): the unit a flip's side and an ablation's subset both run per repeat.
pub(crate) fn soak_one(v: &validate::Options, arm: usize, reporter: &dyn Reporter) -> SoakRun {
    run_of(validate::run_one(v, arm, reporter))
}

/// What a validation report (or its failure) shows of one side.
fn run_of(report: Result<validate::Report>) -> SoakRun {
    match report {
        Ok(rep) => {
            let arm = rep.derived.arms.first();
            let mut sigs: BTreeMap<String, SoakSignature> = BTreeMap::new();
            for s in arm.map(|a| a.signatures.as_slice()).unwrap_or_default() {
                let n = normalize_signature(&s.signature);
                let e = sigs.entry(n.clone()).or_insert(SoakSignature {
                    framed: has_frame(&n),
                    signature: n,
                    rows: 0,
                    first_row: s.first_row,
                });
                e.rows += s.rows;
                e.first_row = e.first_row.min(s.first_row);
            }
            let mut signatures: Vec<SoakSignature> = sigs.into_values().collect();
            signatures.sort_by(|a, b| b.rows.cmp(&a.rows).then(a.first_row.cmp(&b.first_row)));
            SoakRun {
                variant: arm.map(|a| a.name.clone()).unwrap_or_default(),
                timing: arm.and_then(|a| rep.derived.timing.get(&a.name).cloned()),
                run: Some(rep.run),
                run_dir: Some(rep.run_dir),
                evidence: Some(rep.evidence),
                rows: arm.map(|a| a.rows).unwrap_or(0),
                counts: arm.map(|a| a.counts.clone()).unwrap_or_default(),
                onset_row: arm.and_then(|a| a.onset_row),
                signatures,
                error: None,
                forced: None,
            }
        }
        Err(e) => SoakRun {
            variant: String::new(),
            run: None,
            run_dir: None,
            evidence: None,
            rows: 0,
            counts: BTreeMap::new(),
            onset_row: None,
            signatures: Vec::new(),
            timing: None,
            error: Some(match e.detail() {
                Some(d) => format!("{}\n{d}", error_text(&e)),
                None => error_text(&e),
            }),
            forced: None,
        },
    }
}

/// The test hook's change: the run's crash rows are read as clean (its evidence is untouched,
/// and the record says what was forced).
pub(crate) fn force_clean(r: &mut SoakRun) {
    let crashes = r.count("crash");
    r.counts.insert("crash".into(), 0);
    *r.counts.entry("ok".into()).or_default() += crashes;
    r.signatures.clear();
    r.onset_row = None;
    r.forced = Some(format!(
        "test hook PINFORGE_SOAK_FORCE_CLEAN: {crashes} crash row(s) read as clean"
    ));
}

/// The from side's onset signature (of the first from run that crashed) over every from run
/// that ran: how often it shows per compared row.
fn pooled_rate(runs: &[Pair<SoakRun>]) -> Option<Rate> {
    let target = runs
        .iter()
        .find_map(|p| p.from.onset_signature())?
        .signature
        .clone();
    let (mut k, mut n) = (0, 0);
    for p in runs.iter().filter(|p| p.from.error.is_none()) {
        k += p.from.with(&target).map(|s| s.rows).unwrap_or(0);
        n += p.from.compared();
    }
    (n > 0).then(|| Rate {
        rows: k,
        of: n,
        p: k as f64 / n as f64,
    })
}

/// Rows a run needs to show, with confidence `c`, something that shows per row with
/// probability `p`: the least n with `1-(1-p)^n ≥ c`, i.e. `n ≥ ln(1-c)/ln(1-p)`.
pub(crate) fn rows_needed(p: f64, c: f64) -> u64 {
    if p >= 1.0 {
        return 1;
    }
    if p <= 0.0 {
        return u64::MAX;
    }
    ((1.0 - c).ln() / (1.0 - p).ln()).ceil().max(1.0) as u64
}

/// The formula with its inputs, as the reasons print it.
fn needed_text(rate: Rate, c: f64) -> String {
    format!(
        "n ≥ ln(1-{c})/ln(1-p) with p = {}/{} = {:.4}: {} rows",
        rate.rows,
        rate.of,
        rate.p,
        rows_needed(rate.p, c)
    )
}

fn invalid(why: String) -> (FlipVerdict, String) {
    (FlipVerdict::Invalid, why)
}

/// The verdict of one repeat, from its two runs and the from side's rate over all repeats.
pub(crate) fn decide(from: &SoakRun, to: &SoakRun, pooled: Option<Rate>) -> (FlipVerdict, String) {
    let c = CONFIDENCE;
    for (name, r) in [("from", from), ("to", to)] {
        if let Some(e) = &r.error {
            return invalid(format!("the {name} side's soak could not run: {e}"));
        }
        if r.compared() == 0 {
            return invalid(format!(
                "the {name} side compared no rows ({} harness error rows)",
                r.count("error")
            ));
        }
    }
    let Some(want) = from.onset_signature() else {
        let rate = match pooled.filter(|r| r.rows > 0) {
            Some(rate) => format!(
                "; at the from side's rate over every run a run needs {}",
                needed_text(rate, c)
            ),
            None => format!(
                "; the onset rate is unknown (0 of {n}): at {c} confidence it is below \
                 1-(1-{c})^(1/{n}) = {:.4} per row, so no row count can be stated",
                1.0 - (1.0 - c).powf(1.0 / from.compared() as f64),
                n = from.compared()
            ),
        };
        return invalid(format!(
            "the from side never showed a crash-class row in {} rows{rate}",
            from.compared()
        ));
    };
    if !want.framed {
        return invalid(format!(
            "the from side's signature `{}` has no frame to compare (no sanitizer kind and top \
             function): another failure would read the same",
            want.signature
        ));
    }
    let w = &want.signature;
    if let Some(s) = to.with(w) {
        return (
            FlipVerdict::Falsified,
            format!(
                "the signature `{w}` survived the flip: onset row {} on the from side ({} of {} \
                 rows), row {} on the to side ({} of {} rows)",
                want.first_row,
                want.rows,
                from.compared(),
                s.first_row,
                s.rows,
                to.compared()
            ),
        );
    }
    if let Some(other) = to.onset_signature() {
        return invalid(if other.framed {
            format!(
                "the to side crashed with another signature (`{}` at row {}, the from side \
                 `{w}`): the flip changed the failure instead of keeping or removing it",
                other.signature, other.first_row
            )
        } else {
            format!(
                "the to side crashed with a signature that has no frame to compare (`{}` at row \
                 {}): it cannot be told apart from `{w}` or from another failure",
                other.signature, other.first_row
            )
        });
    }
    if to.count("mismatch") > 0 {
        return invalid(format!(
            "the to side shows no crash but {} mismatch row(s): the decode diverged after the \
             restore, the signature is gone but the result is not clean",
            to.count("mismatch")
        ));
    }
    let rate = Rate {
        rows: want.rows,
        of: from.compared(),
        p: want.rows as f64 / from.compared() as f64,
    };
    let n = to.compared();
    let miss = (1.0 - rate.p).powf(n as f64);
    if miss > 1.0 - c {
        return invalid(format!(
            "the to side is clean in {n} rows, but at the from side's rate that happens by \
             chance with probability (1-p)^{n} = {miss:.3} > {:.2}: a run needs {}",
            1.0 - c,
            needed_text(rate, c)
        ));
    }
    (
        FlipVerdict::Supported,
        format!(
            "the signature `{w}` (from side: onset row {}, {} of {} rows) is absent in all {n} \
             rows on the to side (by chance at the from side's rate: (1-p)^{n} = {miss:.2e})",
            want.first_row,
            want.rows,
            from.compared()
        ),
    )
}

/// Every repeat must agree; else `inconclusive` with the table's gist.
pub(crate) fn overall(repeats: &[SoakRepeat]) -> (FlipVerdict, String) {
    let Some(first) = repeats.first() else {
        return invalid("no repeat ran".into());
    };
    if repeats.iter().all(|r| r.verdict == first.verdict) {
        return match repeats.len() {
            1 => (first.verdict, first.reason.clone()),
            k => (
                first.verdict,
                format!(
                    "all {k} interleaved repeats agree; repeat 1: {}",
                    first.reason
                ),
            ),
        };
    }
    let table: Vec<String> = repeats
        .iter()
        .map(|r| format!("repeat {} {}", r.repeat, r.verdict.as_str()))
        .collect();
    (
        FlipVerdict::Inconclusive,
        format!(
            "the {} repeats disagree ({}): a verdict needs every repeat to agree",
            repeats.len(),
            table.join(", ")
        ),
    )
}

/// The per-repeat table, as text lines (the command and the summary both show it).
pub fn table_lines(t: &SoakTrial) -> Vec<String> {
    let mut out = vec![format!(
        "{:<7} {:<34} {:<34} verdict",
        "repeat", "from", "to"
    )];
    for r in &t.repeats {
        out.push(format!(
            "{:<7} {:<34} {:<34} {}{}",
            r.repeat,
            r.runs.from.word(),
            r.runs.to.word(),
            r.verdict.as_str(),
            if r.runs.from.forced.is_some() || r.runs.to.forced.is_some() {
                " (forced by a test hook)"
            } else {
                ""
            }
        ));
    }
    out
}

/// One side's timing over its runs that ran: completed rows only.
pub(crate) fn timing<'a>(runs: impl Iterator<Item = &'a SoakRun>) -> SideTiming {
    let mut t = SideTiming {
        rows: 0,
        excluded_rows: 0,
        excluded_runs: 0,
        mean_wall_ms: None,
        mean_decode_ms: None,
    };
    let (mut wall, mut decode) = (0.0, 0.0);
    for r in runs {
        let Some(tm) = r.timing.as_ref().filter(|_| r.error.is_none()) else {
            t.excluded_runs += 1;
            continue;
        };
        let left_out = r.count("crash") + r.count("error");
        let timed = r.rows - left_out;
        t.excluded_rows += left_out;
        t.rows += timed;
        wall += tm.mean_wall_ms * timed as f64;
        decode += tm.mean_decode_ms * timed as f64;
    }
    if t.rows > 0 {
        let round = |x: f64| (x / t.rows as f64 * 1000.0).round() / 1000.0;
        t.mean_wall_ms = Some(round(wall));
        t.mean_decode_ms = Some(round(decode));
    }
    t
}

/// The soak section of a flip's Markdown summary: settings, the per-repeat table with each
/// run's evidence, and the timing of the rows that may be compared.
pub(crate) fn summary_section(s: &mut String, t: &SoakTrial) {
    use pinforge_base::text::cell;
    s.push_str(&format!(
        "\n## Soak\n\n{} rows per side and repeat, {} repeat(s), run in the order {}; \
         confidence {}.\n\n| repeat | from | to | verdict | evidence (from, to) |\n|---|---|---|---|---|\n",
        t.settings.rows,
        t.settings.repeats,
        t.order.join(" "),
        t.settings.confidence
    ));
    let ev = |r: &SoakRun| {
        r.evidence
            .as_ref()
            .map(|e| {
                format!(
                    "`{}` {}",
                    r.run.as_deref().unwrap_or("-"),
                    e.sha256.short(12)
                )
            })
            .unwrap_or_else(|| "-".into())
    };
    for r in &t.repeats {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {}, {} |\n",
            r.repeat,
            cell(&r.runs.from.word()),
            cell(&r.runs.to.word()),
            r.verdict.as_str(),
            ev(&r.runs.from),
            ev(&r.runs.to)
        ));
    }
    if let Some(rate) = t.from_rate {
        s.push_str(&format!(
            "\nThe from side's onset signature showed in {} of {} compared rows (p = {:.4}).\n",
            rate.rows, rate.of, rate.p
        ));
    }
    if let Some(tm) = &t.timing {
        s.push_str(
            "\n| side | timed rows | left out (crash, error) | failed runs | mean wall ms | mean decode ms |\n|---|---|---|---|---|---|\n",
        );
        for (side, x) in [("from", &tm.from), ("to", &tm.to)] {
            let ms = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into());
            s.push_str(&format!(
                "| {side} | {} | {} | {} | {} | {} |\n",
                x.rows,
                x.excluded_rows,
                x.excluded_runs,
                ms(x.mean_wall_ms),
                ms(x.mean_decode_ms)
            ));
        }
    }
}

#[cfg(test)]
mod tests;
