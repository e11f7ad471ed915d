//! The soak trial of an ablation (`ablate --trial soak --rows N [--repeats K]`, issue #21).
//! A smoke settles a defect that shows at the first state restore; a subset whose defect has a
//! late onset needs rows. Here every subset that built is run as a validation soak of N rows
//! ([`crate::soak::soak_one`], the same unit a soak flip's side runs, with its own
//! evidence), the subsets interleaved per repeat (`none#1 0001#1 … none#2 0001#2 …`) so that
//! drift in the machine cannot masquerade as a patch's effect. A subset's class comes from its
//! runs: every repeat must give the same class, else it is undetermined; a subset clean in
//! fewer rows than the unpatched subset's onset rate needs (at the soak's confidence) is
//! undetermined too, never `clean`. Failed runs and crash or harness-error rows stay in the
//! record but never enter a subset's timing.

use super::Class;
use crate::record::schema::{AblationSoak, Rate, SoakRun, SoakTrial, SubsetSoak};
use crate::record::{self, AblationRecord};
use crate::soak::{self, rows_needed, SoakOptions, CONFIDENCE};
use crate::validate::ArmSource;
use pinforge_base::error::Result;
use pinforge_base::progress::Reporter;

/// The settings as registered: no runs yet.
pub(crate) fn registered(opts: &SoakOptions) -> AblationSoak {
    AblationSoak {
        settings: SoakTrial::registered(opts).settings,
        order: Vec::new(),
        target_rate: None,
    }
}

/// The class one soak run gives.
pub(crate) fn run_class(r: &SoakRun) -> Class {
    if let Some(e) = &r.error {
        let first = e.lines().next().unwrap_or("");
        return Class::Undetermined(format!("the soak run failed: {first}"));
    }
    if r.compared() == 0 {
        return Class::Undetermined(format!(
            "the soak compared no rows ({} harness error rows)",
            r.count("error")
        ));
    }
    if let Some(s) = r.onset_signature() {
        return if s.framed {
            Class::Crash(s.signature.clone())
        } else {
            Class::Undetermined(format!(
                "a crash at row {} whose signature `{}` has no frame to compare",
                s.first_row, s.signature
            ))
        };
    }
    if r.count("mismatch") > 0 {
        return Class::Undetermined(format!(
            "no crash but {} mismatch row(s): the decode diverged",
            r.count("mismatch")
        ));
    }
    Class::Clean
}

fn class_word(c: &Class) -> String {
    match c {
        Class::Clean => "clean".into(),
        Class::Crash(s) => format!("crash `{s}`"),
        Class::Undetermined(_) => "undetermined".into(),
    }
}

/// A subset's class from its runs: every repeat must agree, and a clean result must be one
/// that the target's rate (over the unpatched subset's runs) would not give by chance.
pub(crate) fn subset_class(runs: &[SoakRun], target: Option<Rate>) -> Class {
    let classes: Vec<Class> = runs.iter().map(run_class).collect();
    let Some(first) = classes.first() else {
        return Class::Undetermined("no soak run".into());
    };
    if let Some(why) = classes.iter().find_map(|c| match c {
        Class::Undetermined(w) => Some(w.clone()),
        _ => None,
    }) {
        return Class::Undetermined(why);
    }
    if classes.iter().any(|c| c != first) {
        let table: Vec<String> = classes
            .iter()
            .zip(1..)
            .map(|(c, k)| format!("repeat {k} {}", class_word(c)))
            .collect();
        return Class::Undetermined(format!(
            "the {} repeats disagree ({}): a class needs every repeat to agree",
            classes.len(),
            table.join(", ")
        ));
    }
    if *first == Class::Clean {
        if let Some(rate) = target.filter(|r| r.rows > 0) {
            let n: u64 = runs.iter().map(SoakRun::compared).sum();
            let miss = (1.0 - rate.p).powf(n as f64);
            if miss > 1.0 - CONFIDENCE {
                return Class::Undetermined(format!(
                    "clean in {n} rows, but at the unpatched subset's rate (p = {}/{} = {:.4}) \
                     that happens by chance with probability {miss:.3}: a soak needs {} rows \
                     for {CONFIDENCE} confidence",
                    rate.rows,
                    rate.of,
                    rate.p,
                    rows_needed(rate.p, CONFIDENCE)
                ));
            }
        }
    }
    first.clone()
}

/// The target signature's rate over the runs of the unpatched subset (index 0 of `results`,
/// the empty subset, when it crashed with a framed signature in every repeat).
fn target_rate(runs: &[SoakRun], target: &str) -> Option<Rate> {
    let (mut k, mut n) = (0, 0);
    for r in runs.iter().filter(|r| r.error.is_none()) {
        k += r.with(target).map(|s| s.rows).unwrap_or(0);
        n += r.compared();
    }
    (n > 0).then(|| Rate {
        rows: k,
        of: n,
        p: k as f64 / n as f64,
    })
}

/// Run every built subset's soak, interleaved per repeat, and set each subset's class (in
/// `results`, index for index with `record.subsets`). The record is written after every
/// repeat: an interrupted ablation keeps the runs it has.
pub(crate) fn run(
    opts: &SoakOptions,
    record: &mut AblationRecord,
    results: &mut [(Vec<usize>, Class)],
    reporter: &dyn Reporter,
    signer: &pinforge_record::sign::record::Signer,
) -> Result<()> {
    let mut v = opts.validate.clone();
    v.resume = None;
    let forced = pinforge_base::hooks::soak_force_clean();
    let mut order = Vec::new();
    for repeat in 1..=opts.repeats {
        for rec in record.subsets.iter_mut() {
            let Some(m) = rec.manifest.clone() else {
                continue;
            };
            reporter.stage(
                "soak",
                &format!("{} repeat {repeat}/{}", rec.label, opts.repeats),
            );
            order.push(format!("{}#{repeat}", rec.label));
            v.arms = [ArmSource::Manifest(m.clone()), ArmSource::Manifest(m)];
            let mut r = soak::soak_one(&v, 0, reporter);
            if forced.as_ref() == Some(&(rec.label.clone(), repeat)) {
                soak::force_clean(&mut r);
            }
            rec.soak
                .get_or_insert(SubsetSoak {
                    runs: Vec::new(),
                    timing: None,
                })
                .runs
                .push(r);
        }
        if let Some(s) = record.soak.as_mut() {
            s.order = order.clone();
        }
        record::write_json(&record.record, &*record, signer)?;
    }
    // The empty subset is first (subsets are sorted by size): its class names the target.
    let empty = record.subsets.first().and_then(|r| r.soak.as_ref());
    let rate = empty.and_then(|s| match subset_class(&s.runs, None) {
        Class::Crash(sig) => target_rate(&s.runs, &sig),
        _ => None,
    });
    if let Some(s) = record.soak.as_mut() {
        s.target_rate = rate;
    }
    for (rec, (_, class)) in record.subsets.iter_mut().zip(results.iter_mut()) {
        let Some(s) = rec.soak.as_mut() else {
            continue;
        };
        s.timing = Some(soak::timing(s.runs.iter()));
        *class = subset_class(&s.runs, rate);
        rec.reason = match class {
            Class::Undetermined(why) => Some(why.clone()),
            _ => None,
        };
    }
    Ok(())
}

/// One subset's runs as a table cell: each repeat's word, `; `-joined.
pub fn runs_word(s: &SubsetSoak) -> String {
    s.runs
        .iter()
        .map(|r| {
            let w = r.word();
            if r.forced.is_some() {
                format!("{w} (forced)")
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn run(crash_rows: u64, rows: u64, first: u64, sig: &str) -> SoakRun {
        let mut counts = BTreeMap::new();
        counts.insert("crash".to_string(), crash_rows);
        counts.insert("ok".to_string(), rows - crash_rows);
        SoakRun {
            variant: "v".into(),
            run: Some("r".into()),
            run_dir: None,
            evidence: None,
            rows,
            counts,
            onset_row: (crash_rows > 0).then_some(first),
            signatures: if crash_rows > 0 {
                vec![crate::record::schema::SoakSignature {
                    signature: sig.into(),
                    rows: crash_rows,
                    first_row: first,
                    framed: true,
                }]
            } else {
                Vec::new()
            },
            timing: None,
            error: None,
            forced: None,
        }
    }

    const SIG: &str = "heap-buffer-overflow in f";

    #[test]
    fn repeats_that_disagree_leave_the_subset_undetermined_with_the_table() {
        let c = subset_class(&[run(2, 10, 4, SIG), run(0, 10, 0, SIG)], None);
        let Class::Undetermined(why) = c else {
            panic!("{c:?}")
        };
        assert!(why.contains("repeat 1 crash"), "{why}");
        assert!(why.contains("repeat 2 clean"), "{why}");
    }

    #[test]
    fn a_clean_subset_with_too_few_rows_for_the_target_rate_is_undetermined() {
        // 1 of 40 rows: 10 clean rows miss it with probability 0.776.
        let rate = Some(Rate {
            rows: 1,
            of: 40,
            p: 0.025,
        });
        let c = subset_class(&[run(0, 10, 0, SIG)], rate);
        assert!(
            matches!(&c, Class::Undetermined(w) if w.contains("needs 119 rows")),
            "{c:?}"
        );
        assert_eq!(subset_class(&[run(0, 200, 0, SIG)], rate), Class::Clean);
        // Agreeing crash repeats give the signature, whatever their onset rows.
        assert_eq!(
            subset_class(&[run(3, 10, 2, SIG), run(1, 10, 9, SIG)], rate),
            Class::Crash(SIG.into())
        );
    }

    #[test]
    fn a_failed_run_or_a_diverged_decode_is_never_clean() {
        let mut failed = run(0, 0, 0, SIG);
        failed.error = Some("could not start\ndetail".into());
        assert!(
            matches!(run_class(&failed), Class::Undetermined(w) if w.contains("could not start"))
        );
        let mut diverged = run(0, 10, 0, SIG);
        diverged.counts.insert("mismatch".into(), 2);
        assert!(matches!(run_class(&diverged), Class::Undetermined(w) if w.contains("2 mismatch")));
    }
}
