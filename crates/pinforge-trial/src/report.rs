//! The readable Markdown summaries of flip and ablation records (`summary.md` beside each
//! `record.json`).

use crate::record::{AblationRecord, FlipRecord, SmokeSide};
use pinforge_base::text::cell;

/// The readable summary of a completed record.
pub(crate) fn summary_markdown(r: &FlipRecord) -> String {
    let mut s = String::new();
    heading(&mut s, r);
    s.push_str("## What differs\n\n| axis | setting | from | to |\n|---|---|---|---|\n");
    for row in &r.diff {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            row.axis.name(),
            cell(&row.key),
            cell(&opt(&row.from)),
            cell(&opt(&row.to))
        ));
    }
    builds_and_smokes(&mut s, r);
    if let Some(t) = &r.soak {
        crate::soak::summary_section(&mut s, t);
    }
    if !r.artifacts.is_empty() {
        s.push_str(
            "\n## Artifacts\n\n| path | from sha256 | to sha256 | same |\n|---|---|---|---|\n",
        );
        for a in &r.artifacts {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                cell(&a.path),
                opt(&a.from_sha256),
                opt(&a.to_sha256),
                a.word()
            ));
        }
    }
    for (side, b) in [("from", &r.builds.from), ("to", &r.builds.to)] {
        if let Some(e) = b.as_ref().and_then(|b| b.error.as_deref()) {
            s.push_str(&format!(
                "\n## Why the {side} build failed\n\n```text\n{e}\n```\n"
            ));
        }
    }
    s
}

/// A value, or `-` where there is none.
fn opt(x: &Option<String>) -> String {
    x.clone().unwrap_or_else(|| "-".into())
}

/// The title, the provenance line and the registered claim with its verdict.
fn heading(s: &mut String, r: &FlipRecord) {
    s.push_str(&format!("# Flip {}\n\n", r.id));
    s.push_str(&format!(
        "Recipe `{}`, `{}` → `{}`; pinforge {}; registered {}, completed {}.\n\n",
        r.recipe,
        r.from,
        r.to,
        r.pinforge_version,
        r.registered_at,
        opt(&r.completed_at)
    ));
    s.push_str(&format!("- **Hypothesis:** {}\n", cell(&r.hypothesis)));
    s.push_str(&format!(
        "- **Prediction:** {}\n",
        cell(r.prediction.as_deref().unwrap_or("-"))
    ));
    s.push_str(&format!(
        "- **Axis:** {}{}\n",
        r.axis,
        if r.single_setting {
            ""
        } else {
            " (more than one axis: not a single-setting trial)"
        }
    ));
    s.push_str(&format!(
        "- **Verdict:** {} — {}\n\n",
        r.verdict.map(|v| v.as_str()).unwrap_or("-"),
        cell(r.reason.as_deref().unwrap_or("-"))
    ));
}

/// One row per side: how the build went, the manifest digest, the smoke verdict, where it
/// ran, and the compared signature.
fn builds_and_smokes(s: &mut String, r: &FlipRecord) {
    s.push_str("\n## Builds and smokes\n\n| side | variant | build | manifest sha256 | smoke | device | signature |\n|---|---|---|---|---|---|---|\n");
    for (side, b, sm) in [
        ("from", &r.builds.from, &r.smokes.from),
        ("to", &r.builds.to, &r.smokes.to),
    ] {
        let build = match b {
            None => "not run".to_string(),
            Some(b) if b.error.is_some() => format!("failed after {:.1}s", b.seconds),
            Some(b) => format!(
                "{} in {:.1}s",
                if b.cached { "cached" } else { "built" },
                b.seconds
            ),
        };
        s.push_str(&format!(
            "| {side} | {} | {build} | {} | {} | {} | {} |\n",
            b.as_ref().map(|b| b.variant.as_str()).unwrap_or("-"),
            b.as_ref()
                .and_then(|b| b.manifest_sha256)
                .map(|d| d.to_hex())
                .unwrap_or_else(|| "-".into()),
            sm.as_ref().map(|x| x.verdict.as_str()).unwrap_or("-"),
            cell(&device_cell(sm.as_ref())),
            cell(
                sm.as_ref()
                    .and_then(|x| x.normalized_signature.as_deref())
                    .unwrap_or("-")
            )
        ));
    }
}

/// Where a smoke ran, with the reason when a CUDA build ran on the CPU.
fn device_cell(sm: Option<&SmokeSide>) -> String {
    match sm {
        Some(SmokeSide {
            device: Some(d),
            device_reason: Some(why),
            ..
        }) => format!("{d} ({why})"),
        Some(SmokeSide {
            device: Some(d), ..
        }) => d.clone(),
        _ => "-".into(),
    }
}

/// The readable summary of an ablation record.
pub(crate) fn ablation_markdown(r: &AblationRecord) -> String {
    let mut s = format!(
        "# Ablation {}\n\nRecipe `{}`, variant `{}` ({} patches, {}); pinforge {}; {} → {}, {:.1}s.\n\n",
        r.id,
        r.recipe,
        r.variant,
        r.patches.len(),
        r.mode,
        r.pinforge_version,
        r.started_at,
        r.finished_at.as_deref().unwrap_or("-"),
        r.seconds
    );
    s.push_str(&format!(
        "- **Signature under test:** {}\n",
        cell(
            r.target_signature
                .as_deref()
                .unwrap_or("none (the unpatched subset is clean: nothing to ablate)")
        )
    ));
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    s.push_str(&format!("- **Necessary:** {}\n", list(&r.necessary)));
    if !r.other_crash_when_left_out.is_empty() {
        s.push_str(&format!(
            "- **Another crash when left out (not the target signature):** {}\n",
            list(&r.other_crash_when_left_out)
        ));
    }
    s.push_str(&format!(
        "- **Sufficient (minimal):** {}\n",
        if r.sufficient.is_empty() {
            "none".to_string()
        } else {
            r.sufficient
                .iter()
                .map(|x| format!("{{{}}}", x.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        }
    ));
    s.push_str(&format!(
        "- **Does not touch the signature:** {}\n\n",
        list(&r.no_effect)
    ));
    s.push_str("| subset | applied | built as | build | smoke | class | signature or reason |\n|---|---|---|---|---|---|---|\n");
    for x in &r.subsets {
        s.push_str(&format!(
            "| {} | {} | {} | {} {:.1}s | {} | {} | {} |\n",
            x.label,
            cell(&list(&x.applied)),
            x.built_as,
            if x.cached { "cached" } else { "built" },
            x.build_seconds,
            x.smoke.as_ref().map(|s| s.verdict.as_str()).unwrap_or("-"),
            x.class,
            cell(
                x.smoke
                    .as_ref()
                    .and_then(|s| s.normalized_signature.as_deref())
                    .or(x.reason.as_deref())
                    .or(x.dependency.as_deref())
                    .unwrap_or("-")
            )
        ));
    }
    if let Some(t) = &r.soak {
        ablation_soak_section(&mut s, r, t);
    }
    s
}

/// The soak trial of an ablation: settings, run order, and every subset's runs with their
/// evidence (run id, manifest digest) and the timing of their completed rows.
fn ablation_soak_section(
    s: &mut String,
    r: &AblationRecord,
    t: &crate::record::schema::AblationSoak,
) {
    s.push_str(&format!(
        "
## Soak

{} rows per subset and repeat, {} repeat(s), run in the order {}; \
         confidence {}.\n",
        t.settings.rows,
        t.settings.repeats,
        t.order.join(" "),
        t.settings.confidence
    ));
    if let Some(rate) = t.target_rate {
        s.push_str(&format!(
            "The target signature showed in {} of {} rows of the unpatched subset (p = {:.4}).\n",
            rate.rows, rate.of, rate.p
        ));
    }
    s.push_str("\n| subset | repeat | run | evidence | rows | outcome | timed rows | mean wall ms |\n|---|---|---|---|---|---|---|---|\n");
    for x in &r.subsets {
        let Some(soak) = &x.soak else { continue };
        let timing = soak.timing.as_ref();
        for (run, k) in soak.runs.iter().zip(1..) {
            s.push_str(&format!(
                "| {} | {k} | `{}` | {} | {} | {} | {} | {} |\n",
                x.label,
                run.run.as_deref().unwrap_or("-"),
                run.evidence
                    .as_ref()
                    .map(|e| e.sha256.short(12))
                    .unwrap_or_else(|| "-".into()),
                run.rows,
                cell(&run.word()),
                timing.map(|t| t.rows.to_string()).unwrap_or_default(),
                timing
                    .and_then(|t| t.mean_wall_ms)
                    .map(|m| format!("{m:.3}"))
                    .unwrap_or_else(|| "-".into())
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
