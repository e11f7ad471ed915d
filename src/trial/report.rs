//! The readable Markdown summary of a completed flip record, and the table-cell escaping that
//! ablate's summary uses too.

use crate::trial::record::{FlipRecord, SmokeSide};

/// Text for a Markdown table cell: no line breaks, no pipes.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The readable summary of a completed record.
pub fn summary_markdown(r: &FlipRecord) -> String {
    let mut s = String::new();
    let opt = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
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
            cell(&match sm.as_ref() {
                Some(SmokeSide {
                    device: Some(d),
                    device_reason: Some(why),
                    ..
                }) => format!("{d} ({why})"),
                Some(SmokeSide {
                    device: Some(d), ..
                }) => d.clone(),
                _ => "-".into(),
            }),
            cell(
                sm.as_ref()
                    .and_then(|x| x.normalized_signature.as_deref())
                    .unwrap_or("-")
            )
        ));
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
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
