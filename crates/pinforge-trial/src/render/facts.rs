//! The pieces of a report that are plain functions of one record: a build's name, two
//! manifests compared through the diff library (`pinforge diff`'s rows), a run's claim, a
//! smoke in words, and a flip record's own artifact rows for when its manifests are gone.

use super::load::{FlipView, RunView, SmokeView};
use super::{shown_path, Claim, Diff, DiffRow};
use crate::validate::rows::Outcome;
use pinforge_build::diff;
use pinforge_record::manifest::Statement;

pub(super) fn build_name(st: &Statement) -> String {
    let p = &st.predicate.build_definition.external_parameters;
    format!("{}/{}", p.recipe, p.variant)
}

pub(super) fn manifest_diff(title: String, source: String, a: &Statement, b: &Statement) -> Diff {
    let d = diff::diff(a, b);
    let same = d.parameters.len() + d.dependencies.len() + d.artifacts.len() + d.links.len();
    let rows: Vec<DiffRow> = d
        .changes()
        .map(|(section, row)| DiffRow {
            section: section.to_string(),
            name: row.name.clone(),
            a: row.a.clone().unwrap_or_else(|| "-".into()),
            b: row.b.clone().unwrap_or_else(|| "-".into()),
            change: match (&row.rule, row.change) {
                (Some(rule), _) => format!("equal under {rule}"),
                (None, c) => serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            },
        })
        .collect();
    Diff {
        title,
        source,
        same: same - rows.len(),
        rows,
    }
}

pub(super) fn outcome_of(name: &str) -> Option<Outcome> {
    Outcome::ALL.into_iter().find(|o| o.as_str() == name)
}

/// The claim of a plain validate run.
pub(super) fn run_claim(v: &RunView) -> Claim {
    let s = &v.settings;
    let arms: Vec<String> = s
        .arms
        .iter()
        .map(|a| format!("{} ({}, {})", a.name, a.build, a.source))
        .collect();
    let mut facts = Vec::new();
    // What the rows drove, when not the prompt-cache path every earlier run had.
    if !s.row_kind.is_default() {
        facts.push(("row kind".to_string(), s.row_kind.name().to_string()));
    }
    // A merged run names the shards it was joined from (issue #35): which fleet runs, by id
    // and by the digest of the evidence the merge verified.
    if !v.evidence.shards.is_empty() {
        let shards: Vec<String> = v
            .evidence
            .shards
            .iter()
            .map(|x| {
                format!(
                    "shard {}: run {} (evidence sha256 {})",
                    x.shard,
                    x.run,
                    x.sha256.short(16)
                )
            })
            .collect();
        facts.push((
            format!("merged from {} shards", shards.len()),
            shards.join("; "),
        ));
    }
    Claim {
        title: format!("Validation run {}", v.evidence.run),
        hypothesis: None,
        prediction: None,
        verdict: v.summary.verdict.clone(),
        reason: None,
        facts: vec![
            ("arms (baseline, candidate)".into(), arms.join(" vs ")),
            ("rows per arm".into(), s.rows.to_string()),
            (
                "prompts".into(),
                match s.seed {
                    Some(seed) => format!("generated, seed {seed}"),
                    None => "from a prompt file".into(),
                },
            ),
            ("token budget".into(), s.budget.to_string()),
            (
                "model".into(),
                format!(
                    "{} ({}, sha256 {})",
                    shown_path(&s.model),
                    s.arch,
                    s.model_sha256.short(16)
                ),
            ),
        ]
        .into_iter()
        .chain(facts)
        .collect(),
    }
}

pub(super) fn smoke_word(sm: &SmokeView) -> String {
    let mut w = sm.verdict.clone();
    if let Some(sig) = &sm.normalized_signature {
        w.push_str(&format!(": {sig}"));
    }
    if let Some(d) = &sm.device {
        w.push_str(&format!(" on {d}"));
    }
    w
}

/// The record's own artifact rows, when the manifests are gone.
pub(super) fn record_diff(f: &FlipView) -> Diff {
    let rows: Vec<DiffRow> = f
        .artifacts
        .iter()
        .filter(|a| !a.same)
        .map(|a| DiffRow {
            section: "artifact".into(),
            name: a.path.clone(),
            a: a.from_sha256.clone().unwrap_or_else(|| "-".into()),
            b: a.to_sha256.clone().unwrap_or_else(|| "-".into()),
            change: "different".into(),
        })
        .collect();
    Diff {
        title: format!("{} → {}", f.from, f.to),
        source: format!(
            "the artifact rows of flip {} (its manifests are not available)",
            f.id
        ),
        same: f.artifacts.len() - rows.len(),
        rows,
    }
}
