//! Flips: two variants of one recipe that differ in exactly one axis (pin, patches, toolchain,
//! build type, sanitizer, other CMake arguments, targets), built and smoked side by side as a
//! falsification step. The hypothesis "this axis is the defect" is written to the record before
//! anything is built; the verdict is recorded in both directions (`supported` when the crash
//! signature disappears, `falsified` when it survives), and a trial that could not run is
//! `invalid`, never evidence either way. This module plans and runs a flip; the pieces it is
//! made of (and that ablate shares) live beside it: `config` (resolved variants), `axis` (the
//! diff), `verdict` (the rule), `record` (the schema and record folders), `report` (the
//! summary) and `signature` (crash-signature comparison).
//!
//! Record ids are deterministic: `RECIPE--FROM--TO-NNNN` under `flips/`, where `NNNN` is the
//! first counter (from 0001) whose folder does not exist yet. The folder is claimed with one
//! `mkdir`, so two concurrent flips never share a record, and a rerun of the same flip gets
//! the next number instead of overwriting the earlier evidence.

use crate::axis::{axes_of, axis_rows, render_rows, Axis, AxisRow};
use crate::config::{resolve, Config};
use crate::record::schema::SoakTrial;
pub use crate::record::FlipStep;
use crate::record::{
    self, claim_record_dir, error_text, write_json, ArtifactRow, BuildSide, Pair, SmokeSettings,
    SmokeSide,
};
use crate::report::summary_markdown;
use crate::soak::SoakOptions;
use crate::verdict::{decide, smoke_word, SideResult};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use pinforge_build::build::{self, BuildOptions};
use pinforge_deploy::smoke::signature::normalize_signature;
use pinforge_deploy::smoke::{self, SmokeOptions, Verdict as SmokeVerdict};
use pinforge_record::manifest;
use pinforge_source::recipe::{Recipe, Variant};
use std::path::Path;
use std::time::Instant;

// The record type and schema id keep their old path: `pinforge schema` names
// `trial::flip::FlipRecord`, and a flip's output is this module's product.
pub use crate::record::{FlipRecord, SCHEMA};
pub use crate::verdict::FlipVerdict;

/// What to flip.
pub struct FlipRequest<'a> {
    /// The recipe.
    pub recipe: &'a Recipe,
    /// From variant.
    pub from: &'a str,
    /// To variant.
    pub to: &'a str,
    /// The hypothesis under test.
    pub hypothesis: &'a str,
    /// What the hypothesis predicts.
    pub prediction: Option<&'a str>,
    /// Proceed when more than one axis differs.
    pub allow_multi: bool,
}

/// A flip resolved and checked, ready to register.
pub struct FlipPlan<'a> {
    recipe: &'a Recipe,
    from: &'a Variant,
    to: &'a Variant,
    /// Both configurations.
    pub configs: Pair<Config>,
    /// The mechanical diff.
    pub rows: Vec<AxisRow>,
    /// The axes that differ.
    pub axes: Vec<Axis>,
    hypothesis: String,
    prediction: Option<String>,
}

/// Free text that goes into a record and a Markdown summary: not empty, not huge, no control
/// characters but line breaks and tabs (an escape sequence in a hypothesis would repaint the
/// terminal of whoever reads the summary).
fn check_text(what: &str, s: &str) -> Result<String> {
    if s.trim().is_empty() {
        return Err(Error::input(what, "is empty").with_hint(
            "state what the flip tests, e.g. --hypothesis \"the CUDA backend is the defect\"",
        ));
    }
    if s.len() > 4096 {
        return Err(Error::input(
            what,
            format!("is {} bytes; at most 4096", s.len()),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
    {
        return Err(Error::input(
            what,
            format!("holds the control character U+{:04X}", c as u32),
        ));
    }
    Ok(s.to_string())
}

/// Resolve both variants, diff them, and refuse unless exactly one axis differs (or
/// `allow_multi`). Nothing is written.
pub fn plan<'a>(ws: &Workspace, req: &FlipRequest<'a>) -> Result<FlipPlan<'a>> {
    let hypothesis = check_text("--hypothesis", req.hypothesis)?;
    let prediction = req
        .prediction
        .map(|p| check_text("--prediction", p))
        .transpose()?;
    let from = req.recipe.variant(req.from)?;
    let to = req.recipe.variant(req.to)?;
    let configs = Pair {
        from: resolve(ws, req.recipe, from)?,
        to: resolve(ws, req.recipe, to)?,
    };
    let rows = axis_rows(&configs.from, &configs.to);
    let axes = axes_of(&rows);
    let subject = format!("flip {} -> {}", req.from, req.to);
    if axes.is_empty() {
        return Err(Error::input(
            subject,
            "the two variants resolve to the same configuration: no axis differs, so there is nothing to test",
        )
        .with_hint("pick two variants that differ in exactly one setting"));
    }
    if axes.len() > 1 && !req.allow_multi {
        let names: Vec<&str> = axes.iter().map(|a| a.name()).collect();
        return Err(Error::input(
            subject,
            format!(
                "the variants differ in {} axes ({}); a flip changes exactly one setting",
                axes.len(),
                names.join(", ")
            ),
        )
        .with_detail(render_rows(&rows))
        .with_hint(
            "pick variants that differ in one axis, or pass --allow-multi to run it anyway \
             (the record is then marked \"single_setting\": false)",
        ));
    }
    Ok(FlipPlan {
        recipe: req.recipe,
        from,
        to,
        configs,
        rows,
        axes,
        hypothesis,
        prediction,
    })
}

fn values_of(rows: &[AxisRow]) -> Pair<String> {
    let side = |f: &dyn Fn(&AxisRow) -> &Option<String>| -> String {
        rows.iter()
            .map(|r| {
                format!(
                    "{}={}",
                    r.key,
                    f(r).clone().unwrap_or_else(|| "(not set)".into())
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Pair {
        from: side(&|r| &r.from),
        to: side(&|r| &r.to),
    }
}

impl FlipPlan<'_> {
    /// Register the trial: claim its folder and write the pre-registration record (hypothesis,
    /// prediction, axis, both configurations, version, time) before anything is built.
    /// A soak trial (`soak`) registers its settings too; its runs come later.
    pub fn register(
        &self,
        ws: &Workspace,
        smoke: &SmokeOptions,
        soak: Option<&SoakOptions>,
        signer: &pinforge_record::sign::record::Signer,
    ) -> Result<FlipRecord> {
        if let Some(s) = soak {
            crate::soak::check(s)?;
        }
        let stem = format!(
            "{}--{}--{}",
            self.recipe.name, self.configs.from.variant, self.configs.to.variant
        );
        let (id, dir) = claim_record_dir(ws.root(), "flips", &stem)?;
        let record = FlipRecord {
            schema: SCHEMA.into(),
            id,
            state: "registered".into(),
            recipe: self.recipe.name.clone(),
            recipe_sha256: self.recipe.sha256,
            from: self.configs.from.variant.clone(),
            to: self.configs.to.variant.clone(),
            hypothesis: self.hypothesis.clone(),
            prediction: self.prediction.clone(),
            axis: self
                .axes
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join("+"),
            axes: self.axes.clone(),
            values: values_of(&self.rows),
            single_setting: self.axes.len() == 1,
            diff: self.rows.clone(),
            configurations: self.configs.clone(),
            smoke_settings: SmokeSettings {
                model: smoke.model.clone(),
                arch: smoke.arch.name().to_string(),
                tokens: smoke.tokens,
            },
            pinforge_version: env!("CARGO_PKG_VERSION").into(),
            registered_at: manifest::now_rfc3339(),
            completed_at: None,
            builds: Pair {
                from: None,
                to: None,
            },
            artifacts: Vec::new(),
            smoke: Pair {
                from: None,
                to: None,
            },
            smokes: Pair {
                from: None,
                to: None,
            },
            soak: soak.map(SoakTrial::registered),
            verdict: None,
            reason: None,
            record: dir.join("record.json"),
            summary: dir.join("summary.md"),
        };
        write_json(&record.record, &record, signer)?;
        pinforge_base::hooks::crash_named("flip:registered");
        Ok(record)
    }

    /// Build both sides, smoke both with the same settings (or, with `soak`, run each side's
    /// validation soak, interleaved), and complete the record (JSON and summary). Build, smoke
    /// and soak failures become an `invalid` verdict with the reason; only a failure to write
    /// the record itself is an error.
    pub fn run(
        &self,
        ws: &Workspace,
        mut record: FlipRecord,
        smoke_opts: &SmokeOptions,
        soak: Option<&SoakOptions>,
        build_opts: &BuildOptions,
    ) -> Result<FlipRecord> {
        let mut results: Vec<SideResult> = Vec::new();
        let mut builds: Vec<Option<BuildSide>> = Vec::new();
        let mut manifests: Vec<Option<manifest::Statement>> = Vec::new();
        let mut outcomes = Vec::new();
        for (side, v) in [("from", self.from), ("to", self.to)] {
            if let Some(SideResult::BuildFailed(_)) = results.first() {
                results.push(SideResult::NotRun("the from side did not build".into()));
                builds.push(None);
                manifests.push(None);
                outcomes.push(None);
                continue;
            }
            build_opts
                .reporter
                .stage("flip", &format!("{side} side: {}", v.name));
            let built = build_one(ws, self.recipe, v, build_opts);
            results.push(built.result);
            builds.push(Some(built.side));
            manifests.push(built.statement);
            outcomes.push(built.outcome);
        }
        if let (Some(a), Some(b)) = (&manifests[0], &manifests[1]) {
            record.artifacts = artifact_rows(a, b);
        }
        if let (Some(opts), Some(trial)) = (soak, record.soak.as_mut()) {
            let (verdict, reason) = match (&outcomes[0], &outcomes[1]) {
                (Some(f), Some(t)) => crate::soak::run(
                    opts,
                    Pair {
                        from: f.manifest.clone(),
                        to: t.manifest.clone(),
                    },
                    trial,
                    build_opts.reporter,
                ),
                _ => decide(&results[0], &results[1]),
            };
            let note = self.no_sanitizer_note(verdict, trial);
            let mut builds = builds.into_iter();
            record.builds = Pair {
                from: builds.next().flatten(),
                to: builds.next().flatten(),
            };
            return self.complete(record, verdict, reason + &note, &build_opts.signer);
        }
        // Both built: the same model and settings for both smokes.
        let mut smokes: Vec<Option<SmokeSide>> = vec![None, None];
        if outcomes.iter().all(Option::is_some) {
            for (i, o) in outcomes.iter().flatten().enumerate() {
                build_opts.reporter.stage("smoke", &o.variant);
                let (result, side) = smoke_one(&o.manifest, smoke_opts);
                results[i] = result;
                smokes[i] = Some(side);
            }
        }
        let (verdict, mut reason) = decide(&results[0], &results[1]);
        reason.push_str(&cpu_only_note(&smokes));
        let mut smokes = smokes.into_iter();
        let mut builds = builds.into_iter();
        record.smokes = Pair {
            from: smokes.next().flatten(),
            to: smokes.next().flatten(),
        };
        record.smoke = Pair {
            from: record.smokes.from.as_ref().map(|s| s.verdict.clone()),
            to: record.smokes.to.as_ref().map(|s| s.verdict.clone()),
        };
        record.builds = Pair {
            from: builds.next().flatten(),
            to: builds.next().flatten(),
        };
        self.complete(record, verdict, reason, &build_opts.signer)
    }

    /// Write the verdict, the summary and the completed record.
    fn complete(
        &self,
        mut record: FlipRecord,
        verdict: FlipVerdict,
        reason: String,
        signer: &pinforge_record::sign::record::Signer,
    ) -> Result<FlipRecord> {
        record.verdict = Some(verdict);
        record.reason = Some(reason);
        record.state = "complete".into();
        record.completed_at = Some(manifest::now_rfc3339());
        // One commit: the summary and the completed (signed) record appear together, or the
        // folder stays the registered, unfinished record (kill points `flip:1`, `flip:2`).
        let dir = fsx::parent_of(&record.record);
        record::commit_final(
            &dir,
            &record,
            &summary_markdown(&record),
            signer,
            (FlipStep::Staged, FlipStep::Swapped),
        )?;
        Ok(record)
    }

    /// Why a soak's from side may show nothing: a build without a sanitizer does not stop at
    /// a memory error (an over-read like #20093's is silent there, the same tokens come out).
    fn no_sanitizer_note(&self, verdict: FlipVerdict, trial: &SoakTrial) -> String {
        let silent = trial
            .repeats
            .iter()
            .any(|r| r.runs.from.error.is_none() && r.runs.from.onset_row.is_none());
        if verdict == FlipVerdict::Invalid && silent && self.configs.from.sanitizer.is_empty() {
            format!(
                " — the from build ({}, {}) has no sanitizer: an out-of-bounds read or write \
                 is silent there (the decode goes on with the same tokens), so only a \
                 sanitizer variant makes a memory error's signature visible",
                self.configs.from.variant, self.configs.from.build_type
            )
        } else {
            String::new()
        }
    }
}

/// One side's build as the record and the verdict need it.
struct Built {
    result: SideResult,
    side: BuildSide,
    statement: Option<manifest::Statement>,
    outcome: Option<build::BuildOutcome>,
}

/// Build one side and read its manifest back; a failure is the side's result (with the
/// reason and the tool's detail in the record), not an error of the flip.
fn build_one(ws: &Workspace, recipe: &Recipe, v: &Variant, build_opts: &BuildOptions) -> Built {
    let started = Instant::now();
    let built = build::build(ws, recipe, v, build_opts).and_then(|o| {
        let (digest, _) = Sha256::of_file(&o.manifest)?;
        let stmt = manifest::Statement::read(&o.manifest)?;
        Ok((o, digest, stmt))
    });
    match built {
        Ok((o, digest, stmt)) => Built {
            result: SideResult::NotRun("not smoked yet".into()),
            side: BuildSide {
                variant: v.name.to_string(),
                manifest: Some(o.manifest.clone()),
                manifest_sha256: Some(digest),
                input_digest: Some(o.input_digest),
                cached: o.cached,
                seconds: o.seconds,
                error: None,
            },
            statement: Some(stmt),
            outcome: Some(o),
        },
        Err(e) => {
            let why = error_text(&e);
            Built {
                side: BuildSide {
                    variant: v.name.to_string(),
                    manifest: None,
                    manifest_sha256: None,
                    input_digest: None,
                    cached: false,
                    seconds: started.elapsed().as_secs_f64(),
                    error: Some(match e.detail() {
                        Some(d) => format!("{why}\n{d}"),
                        None => why.clone(),
                    }),
                },
                result: SideResult::BuildFailed(why),
                statement: None,
                outcome: None,
            }
        }
    }
}

/// Every artifact of either build, with whether it is the same, equal under a stated rule,
/// or different (and whether build paths may explain that).
fn artifact_rows(a: &manifest::Statement, b: &manifest::Statement) -> Vec<ArtifactRow> {
    pinforge_build::diff::diff(a, b)
        .artifacts
        .into_iter()
        .map(|r| ArtifactRow {
            embeds_machine_path: build_paths_explain(a, b, &r.name),
            same: r.change == pinforge_build::diff::Change::Same,
            equal_under: r.rule,
            path: r.name,
            from_sha256: r.a,
            to_sha256: r.b,
        })
        .collect()
}

/// A CUDA build smoked on the CPU never ran its CUDA kernels: the verdict stands for the
/// host code only, and the reason says so (empty when both ran where they were built for).
fn cpu_only_note(smokes: &[Option<SmokeSide>]) -> String {
    let cpu_only: Vec<String> = smokes
        .iter()
        .zip(["from", "to"])
        .filter_map(|(s, side)| {
            let why = s.as_ref()?.device_reason.as_deref()?;
            Some(format!("{side}: {why}"))
        })
        .collect();
    if cpu_only.is_empty() {
        return String::new();
    }
    format!(
        " (the CUDA kernels were not exercised: {})",
        cpu_only.join("; ")
    )
}

/// Smoke one manifest; a smoke that cannot even start is a smoke `error` with the reason.
pub(crate) fn smoke_one(manifest: &Path, opts: &SmokeOptions) -> (SideResult, SmokeSide) {
    let started = Instant::now();
    let report = smoke::target_from_manifest(manifest).and_then(|t| smoke::run(&t, opts));
    let seconds = started.elapsed().as_secs_f64();
    match report {
        Ok(r) => (
            SideResult::Smoked {
                verdict: r.verdict.clone(),
                signature: r.signature.clone(),
                detail: r.detail.clone(),
            },
            SmokeSide {
                verdict: smoke_word(&r.verdict).into(),
                normalized_signature: r.signature.as_deref().map(normalize_signature),
                signature: r.signature,
                detail: r.detail,
                seconds,
                device: Some(r.device),
                device_reason: r.device_reason,
            },
        ),
        Err(e) => {
            let why = error_text(&e);
            (
                SideResult::Smoked {
                    verdict: SmokeVerdict::Error,
                    signature: None,
                    detail: Some(why.clone()),
                },
                SmokeSide {
                    verdict: "error".into(),
                    signature: None,
                    normalized_signature: None,
                    detail: Some(why),
                    seconds,
                    device: None,
                    device_reason: None,
                },
            )
        }
    }
}

/// Whether a difference in artifact `name` between two builds may come from their build
/// paths: either side names a machine path, or nvcc's path-hashed names were hashed from two
/// different folders (another uid's fixed folder, or a real folder). Two builds that hashed the
/// same fixed folder hash alike: a difference there is real, and is not explained away.
fn build_paths_explain(a: &manifest::Statement, b: &manifest::Statement, name: &str) -> bool {
    let ann = |st: &manifest::Statement, key: &str| {
        st.subject
            .iter()
            .find(|x| x.name == name)
            .and_then(|x| x.annotations.get(key).cloned())
    };
    let marked = |st: &manifest::Statement, other: &manifest::Statement| {
        ann(
            st,
            pinforge_record::manifest::annotation::EMBEDS_MACHINE_PATH,
        ) == Some(serde_json::Value::Bool(true))
            || (ann(
                st,
                pinforge_record::manifest::annotation::NVCC_PATH_HASHED_NAMES,
            )
            .is_some()
                && ann(
                    st,
                    pinforge_record::manifest::annotation::HASHED_SOURCE_PATH,
                ) != ann(
                    other,
                    pinforge_record::manifest::annotation::HASHED_SOURCE_PATH,
                ))
    };
    marked(a, b) || marked(b, a)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_paths_explain_a_difference_only_when_the_hashed_folders_differ() {
        use serde_json::Value;
        let lib = |ann: &[(&str, Value)]| {
            let mut r = pinforge_record::manifest::Resource {
                name: "lib/libggml-cuda.so".into(),
                uri: None,
                digest: std::collections::BTreeMap::new(),
                annotations: std::collections::BTreeMap::new(),
            };
            for (k, v) in ann {
                r.annotations.insert(k.to_string(), v.clone());
            }
            pinforge_record::manifest::testing::statement("v", &[], vec![r])
        };
        let hashed = |p: &str| {
            lib(&[
                ("nvcc_path_hashed_names", Value::from(true)),
                ("hashed_source_path", Value::from(p)),
            ])
        };
        let name = "lib/libggml-cuda.so";
        let same_a = hashed("/tmp/pinforge-0/src");
        let same_b = hashed("/tmp/pinforge-0/src");
        assert!(
            !build_paths_explain(&same_a, &same_b, name),
            "a real difference"
        );
        let other_uid = hashed("/tmp/pinforge-1000/src");
        assert!(build_paths_explain(&same_a, &other_uid, name));
        // A real folder (no hashed path recorded) against a fixed one: explained.
        let real = lib(&[
            ("nvcc_path_hashed_names", Value::from(true)),
            ("embeds_machine_path", Value::from(true)),
        ]);
        assert!(build_paths_explain(&same_a, &real, name));
        assert!(build_paths_explain(&real, &same_a, name));
        // Nothing marked on either side: nothing to explain with.
        let plain = lib(&[]);
        assert!(!build_paths_explain(&plain, &plain, name));
    }

    #[test]
    fn hypotheses_with_control_characters_or_nothing_are_refused() {
        assert!(check_text("--hypothesis", "").is_err());
        assert!(check_text("--hypothesis", "  \n").is_err());
        assert!(check_text("--hypothesis", "a\u{1b}[2Jb").is_err());
        assert!(check_text("--hypothesis", &"x".repeat(5000)).is_err());
        assert!(check_text("--hypothesis", "libllama\tis\nthe defect").is_ok());
    }
}
