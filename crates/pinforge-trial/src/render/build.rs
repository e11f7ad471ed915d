//! The report's content from its inputs: each validate run's timelines, counts and latency,
//! each flip's and ablation's claim, the linked soak runs, the artifact diff of the two sides
//! (the diff library `pinforge diff` uses), the patch set with its attribution, the evidence
//! index re-checked now (the validate, soak and manifest verify libraries), and the coverage
//! list of what the evidence does not reach.

use super::facts::{build_name, manifest_diff, outcome_of, record_diff, run_claim, smoke_word};
use super::load::{self, AblationView, FlipView, Input, RunView, SmokeView};
use super::{
    shown_path, Claim, Counts, EvidenceItem, InputEntry, Latency, Link, Patch, Report, Status,
    Timeline,
};
use crate::record::error_text;
use crate::validate::rows::Outcome;
use pinforge_base::digest::Sha256;
use pinforge_base::error::Result;
use pinforge_record::manifest::{self, Statement};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Header fields whose values are attribution links.
const LINK_FIELDS: &[&str] = &[
    "Upstream-Issue",
    "Upstream-PR",
    "Upstream-Commit",
    "Applied-Upstream",
    "Origin",
];

/// Header fields naming people.
const PEOPLE_FIELDS: &[&str] = &["Upstream-Author", "Reported-by"];

/// Build the report from every input, in the order given. Every input is read first, so that
/// a bad one is refused before anything is checked.
pub(crate) fn build(paths: &[PathBuf]) -> Result<Report> {
    let mut r = Report::default();
    let mut loaded = Vec::new();
    for p in paths {
        let (kind, input) = load::load(p)?;
        r.inputs.push(InputEntry {
            path: shown_path(p),
            kind,
        });
        loaded.push(input);
    }
    let mut b = Builder {
        r,
        statements: Vec::new(),
    };
    let mut standalone: Vec<(Statement, PathBuf)> = Vec::new();
    for input in loaded {
        match input {
            Input::Run(v) => b.run(&v, None),
            Input::Flip(f, path) => b.flip(&f, &path),
            Input::Ablation(a, path) => b.ablation(&a, &path),
            Input::Served(v) => super::served::add(&mut b.r, &v),
            Input::Manifest(st, path) => {
                b.manifest(&st, &path);
                standalone.push((*st, path));
            }
        }
    }
    // Manifests given on their own are compared in the order given, each with the next.
    for w in standalone.windows(2) {
        let (a, pa) = &w[0];
        let (bst, pb) = &w[1];
        b.r.diffs.push(manifest_diff(
            format!("{} → {}", build_name(a), build_name(bst)),
            format!("manifests {} and {}", shown_path(pa), shown_path(pb)),
            a,
            bst,
        ));
    }
    b.coverage();
    Ok(b.r)
}

struct Builder {
    r: Report,
    /// Every build manifest seen, for the coverage of toolchains.
    statements: Vec<Statement>,
}

impl Builder {
    /// A validate run: a timeline, counts and latency per arm, its evidence re-checked, and
    /// the classes it never saw. `side` labels a soak flip's linked run (`from#1`).
    fn run(&mut self, v: &RunView, side: Option<&str>) {
        let run = v.evidence.run.clone();
        for arm in &v.summary.arms {
            let label = match side {
                Some(s) => format!("{s} · {}", arm.name),
                None => format!("{run} · {}", arm.name),
            };
            let mut marks: Vec<(u64, Outcome)> = v
                .rows
                .iter()
                .filter(|r| r.arm == arm.name)
                .map(|r| (r.row, r.outcome))
                .collect();
            marks.sort_by_key(|m| m.0);
            let mut wall: Vec<f64> = v
                .rows
                .iter()
                .filter(|r| r.arm == arm.name && r.outcome != Outcome::Error)
                .map(|r| r.wall_ms)
                .collect();
            wall.sort_by(f64::total_cmp);
            let mut counts = [0u64; 5];
            for (k, n) in &arm.counts {
                if let Some(o) = outcome_of(k) {
                    counts[o.index()] = *n;
                }
            }
            self.r.timelines.push(Timeline {
                label: label.clone(),
                span: v.settings.rows,
                marks,
                onset: arm.onset_row,
                names: Default::default(),
            });
            self.r.counts.push(Counts {
                label: label.clone(),
                counts,
            });
            self.r.latency.push(Latency {
                label,
                wall_ms: wall,
            });
        }
        if side.is_none() {
            self.r.claims.push(run_claim(v));
        }
        self.run_evidence(v);
        self.run_coverage(v, side.unwrap_or(&run));
    }

    fn run_evidence(&mut self, v: &RunView) {
        let ev_path = v.dir.join("evidence.json");
        let check = crate::validate::verify_evidence(&v.dir);
        let (status, detail) = match &check {
            Ok(c) if c.ok => (Status::Pass, format!("{} checks passed", c.checked.len())),
            Ok(c) => (
                Status::Fail,
                c.mismatches
                    .iter()
                    .map(|m| {
                        format!(
                            "{} ({}): expected {}, found {}",
                            m.path, m.role, m.expected, m.actual
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Err(e) => (Status::Fail, error_text(e)),
        };
        self.r.evidence.push(EvidenceItem {
            path: shown_path(&ev_path),
            role: format!("evidence of run {}", v.evidence.run),
            sha256: v.evidence_sha256.to_hex(),
            status,
            detail,
        });
        let file_status = |p: &Path| -> (Status, String) {
            let shown = p.display().to_string();
            match &check {
                Ok(c) if c.mismatches.iter().any(|m| m.path == shown) => {
                    (Status::Fail, "differs from the evidence".into())
                }
                Ok(c) if c.absent.contains(&shown) => (Status::Absent, "not on disk".into()),
                Ok(c) if c.checked.contains(&shown) => (Status::Pass, "re-hashed".into()),
                Ok(_) => (Status::Absent, "not checked".into()),
                Err(_) => (
                    Status::Fail,
                    "the run's evidence could not be checked".into(),
                ),
            }
        };
        for (name, sha) in &v.evidence.files {
            let p = v.dir.join(name);
            let (status, detail) = file_status(&p);
            self.r.evidence.push(EvidenceItem {
                path: shown_path(&p),
                role: format!("run file {name}"),
                sha256: sha.to_hex(),
                status,
                detail,
            });
        }
        // The shards of a merged run: each one's evidence.json as the merge verified it, and
        // whether it still holds those bytes.
        for x in &v.evidence.shards {
            let (status, detail) = match pinforge_base::digest::Sha256::of_file(&x.evidence) {
                Ok((d, _)) if d == x.sha256 => {
                    (Status::Pass, "the bytes the merge verified".into())
                }
                Ok(_) => (Status::Fail, "differs from what the merge verified".into()),
                // Gone, or no regular file any more (a FIFO is refused, never read).
                Err(e) => (Status::Absent, error_text(&e)),
            };
            self.r.evidence.push(EvidenceItem {
                path: shown_path(&x.evidence),
                role: format!("evidence of shard {} (run {})", x.shard, x.run),
                sha256: x.sha256.to_hex(),
                status,
                detail,
            });
        }
        for a in &v.settings.arms {
            let (status, detail) = file_status(&a.manifest);
            self.r.evidence.push(EvidenceItem {
                path: shown_path(&a.manifest),
                role: format!("manifest of arm {}", a.name),
                sha256: a.manifest_sha256.to_hex(),
                status,
                detail,
            });
        }
    }

    fn run_coverage(&mut self, v: &RunView, label: &str) {
        for o in Outcome::ALL {
            if o == Outcome::Error {
                continue;
            }
            let n: u64 = v
                .summary
                .arms
                .iter()
                .map(|a| a.counts.get(o.as_str()).copied().unwrap_or(0))
                .sum();
            if n == 0 {
                let why = match (o, v.settings.grammar_sha256) {
                    (Outcome::TokenBudget, None) => {
                        " (no grammar: the class needs a schema-constrained run)"
                    }
                    _ => "",
                };
                self.r
                    .coverage
                    .push(format!("{label}: no {} rows on any arm{why}", o.as_str()));
            }
        }
        if !v.summary.errors.is_empty() {
            self.r.coverage.push(format!(
                "{label}: {} harness-error rows, left out of every comparison",
                v.summary.errors.len()
            ));
        }
        if let Some(s) = v.settings.shard {
            self.r.coverage.push(format!(
                "{label}: holds shard {s} of the {} rows only",
                v.settings.rows
            ));
        }
        self.r.coverage.push(format!(
            "{label}: the validation harness offloads no layers (gpu_layers 0): no GPU kernel ran in its {} rows",
            v.rows.len()
        ));
    }

    /// A flip record: its claim, its builds' manifests (diff, patches, evidence), and the
    /// linked soak runs.
    fn flip(&mut self, f: &FlipView, path: &Path) {
        let mut claim = Claim {
            title: format!("Flip {}", f.id),
            hypothesis: Some(f.hypothesis.clone()),
            prediction: f.prediction.clone(),
            verdict: f
                .verdict
                .clone()
                .unwrap_or_else(|| format!("none ({})", f.state)),
            reason: f.reason.clone(),
            facts: vec![
                ("recipe".into(), f.recipe.clone()),
                ("from → to".into(), format!("{} → {}", f.from, f.to)),
                ("axis".into(), f.axis.clone()),
            ],
        };
        for (side, sm) in [("from", &f.smokes.from), ("to", &f.smokes.to)] {
            if let Some(sm) = sm {
                claim.facts.push((format!("{side} smoke"), smoke_word(sm)));
                self.smoke_coverage(&format!("flip {} {side}", f.id), sm);
            }
        }
        self.record_evidence(f, path);
        let mut sides = Vec::new();
        for (side, b) in [("from", &f.builds.from), ("to", &f.builds.to)] {
            sides.push(self.flip_build(&f.id, side, b.as_ref()));
        }
        match (&sides[0], &sides[1]) {
            (Some(a), Some(b)) => {
                let d = manifest_diff(
                    format!("{} → {}", f.from, f.to),
                    format!("the manifests of flip {}", f.id),
                    a,
                    b,
                );
                self.r.diffs.push(d);
            }
            _ if !f.artifacts.is_empty() => self.r.diffs.push(record_diff(f)),
            _ => {}
        }
        if let Some(soak) = &f.soak {
            for rep in &soak.repeats {
                claim.facts.push((
                    format!("repeat {}", rep.repeat),
                    format!("{} — {}", rep.verdict, rep.reason),
                ));
                for (side, run) in [("from", &rep.runs.from), ("to", &rep.runs.to)] {
                    let label = format!("{side}#{}", rep.repeat);
                    self.soak_run(&format!("flip {}", f.id), &label, run);
                }
            }
        } else {
            self.r.coverage.push(format!(
                "flip {}: decided from one smoke per side (no soak rows: a late or probabilistic onset cannot show)",
                f.id
            ));
        }
        self.r.claims.push(claim);
    }

    /// One run a soak record links (`owner` names the record, `label` the run in it): drawn
    /// from its evidence, or listed in the evidence index and the coverage with why not.
    fn soak_run(&mut self, owner: &str, label: &str, run: &load::SoakRunView) {
        if let Some(e) = &run.error {
            self.r.coverage.push(format!(
                "{owner} {label} ({}): the run failed, nothing recorded: {e}",
                run.variant
            ));
        }
        let Some(ev) = &run.evidence else { return };
        match load::linked_run(ev) {
            Ok(v) => self.run(&v, Some(label)),
            Err(why) => {
                self.r.evidence.push(EvidenceItem {
                    path: shown_path(&ev.manifest),
                    role: format!(
                        "evidence of {label} run {}",
                        run.run.as_deref().unwrap_or("-")
                    ),
                    sha256: ev.sha256.to_hex(),
                    status: if why.contains("changed") {
                        Status::Fail
                    } else {
                        Status::Absent
                    },
                    detail: why.clone(),
                });
                self.r.coverage.push(format!(
                    "{owner} {label}: its {} rows are not drawn ({why})",
                    run.rows
                ));
            }
        }
    }

    /// The record file itself: a soak record is re-checked by the soak verify library; a smoke
    /// record has nothing of its own to re-check (its manifests are listed with their checks).
    fn record_evidence(&mut self, f: &FlipView, path: &Path) {
        self.push_record(
            path,
            format!("flip record {}", f.id),
            f.soak.is_some(),
            "a smoke flip record: verify re-checks its manifests, listed below",
        );
    }

    /// A flip or ablation record file in the evidence index: its digest, and its status now
    /// (re-checked by the soak verify library when it links soak runs; otherwise `smoke_detail`
    /// says what verify re-checks instead).
    fn push_record(&mut self, path: &Path, role: String, soak: bool, smoke_detail: &str) {
        let sha = pinforge_base::fsx::read(path)
            .map(|b| Sha256::of_bytes(&b).to_hex())
            .unwrap_or_else(|_| "-".into());
        let (status, detail) = if soak {
            soak_record_status(path)
        } else {
            (Status::Absent, smoke_detail.to_string())
        };
        self.r.evidence.push(EvidenceItem {
            path: shown_path(path),
            role,
            sha256: sha,
            status,
            detail,
        });
    }

    /// One side's build: its manifest when it is still the recorded one (then its patches and
    /// its verify), or why not.
    fn flip_build(
        &mut self,
        id: &str,
        side: &str,
        b: Option<&load::BuildView>,
    ) -> Option<Statement> {
        let Some(b) = b else {
            self.r
                .coverage
                .push(format!("flip {id}: the {side} side was not built"));
            return None;
        };
        if let Some(e) = &b.error {
            let first = e.lines().next().unwrap_or("");
            self.r.coverage.push(format!(
                "flip {id}: the {side} build ({}) failed, so it was not tested: {first}",
                b.variant
            ));
        }
        let m = b.manifest.as_ref()?;
        self.recorded_manifest(
            m,
            b.manifest_sha256,
            &format!("manifest of the {side} build ({})", b.variant),
        )
    }

    /// A manifest a record names: listed in the evidence with its verify now; its patches and
    /// toolchain taken in when it is still the one recorded.
    fn recorded_manifest(
        &mut self,
        m: &Path,
        want: Option<Sha256>,
        role: &str,
    ) -> Option<Statement> {
        match load::recorded_manifest(m, want) {
            Ok(st) => {
                self.manifest_with_role(&st, m, role);
                Some(st)
            }
            Err(why) => {
                self.r.evidence.push(EvidenceItem {
                    path: shown_path(m),
                    role: role.to_string(),
                    sha256: want.map(|w| w.to_hex()).unwrap_or_else(|| "-".into()),
                    status: if why.contains("changed") {
                        Status::Fail
                    } else {
                        Status::Absent
                    },
                    detail: why,
                });
                None
            }
        }
    }

    fn smoke_coverage(&mut self, who: &str, sm: &SmokeView) {
        if let (Some(d), Some(why)) = (&sm.device, &sm.device_reason) {
            self.r.coverage.push(format!(
                "{who}: ran on {d} ({why}): its GPU kernels were not exercised"
            ));
        }
    }

    /// An ablation record: its finding as the claim, each subset's manifest in the evidence,
    /// and the patch set from the fullest subset's manifest.
    fn ablation(&mut self, a: &AblationView, path: &Path) {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let mut claim = Claim {
            title: format!("Ablation {}", a.id),
            hypothesis: a.target_signature.as_ref().map(|s| {
                format!(
                    "the patch set of {}/{} removes the signature {s}",
                    a.recipe, a.variant
                )
            }),
            prediction: None,
            verdict: format!("necessary: {}", list(&a.necessary)),
            reason: Some(format!(
                "sufficient (minimal): {}; no effect: {}",
                if a.sufficient.is_empty() {
                    "none".to_string()
                } else {
                    a.sufficient
                        .iter()
                        .map(|s| format!("{{{}}}", s.join(", ")))
                        .collect::<Vec<_>>()
                        .join("; ")
                },
                list(&a.no_effect)
            )),
            facts: Vec::new(),
        };
        self.push_record(
            path,
            format!("ablation record {}", a.id),
            a.subsets.iter().any(|s| s.soak.is_some()),
            "verify re-checks its subsets' manifests, listed below",
        );
        let full: BTreeSet<&str> = a.patches.iter().map(|p| p.file.as_str()).collect();
        for s in &a.subsets {
            let word = match (&s.smoke, &s.soak) {
                (Some(sm), _) => smoke_word(sm),
                (None, Some(soak)) => format!("soak: {} run(s)", soak.runs.len()),
                (None, None) => "no smoke".into(),
            };
            for (run, k) in s.soak.iter().flat_map(|x| x.runs.iter()).zip(1..) {
                self.soak_run(
                    &format!("ablation {}", a.id),
                    &format!("{}#{k}", s.label),
                    run,
                );
            }
            claim.facts.push((
                format!("subset {}", s.label),
                format!(
                    "{} ({word}){}",
                    s.class,
                    s.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                ),
            ));
            if let Some(sm) = &s.smoke {
                self.smoke_coverage(&format!("ablation {} subset {}", a.id, s.label), sm);
            }
            let Some(m) = &s.manifest else { continue };
            let is_full = s
                .applied
                .iter()
                .map(String::as_str)
                .collect::<BTreeSet<_>>()
                == full;
            let before = self.r.patches.len();
            self.recorded_manifest(
                m,
                s.manifest_sha256,
                &format!("manifest of subset {}", s.label),
            );
            if !is_full {
                // Only the full set's attribution is listed; a subset repeats part of it.
                self.r.patches.truncate(before);
            }
        }
        self.r.claims.push(claim);
    }

    /// A manifest given as an input.
    fn manifest(&mut self, st: &Statement, path: &Path) {
        self.manifest_with_role(st, path, &format!("manifest of {}", build_name(st)));
    }

    fn manifest_with_role(&mut self, st: &Statement, path: &Path, role: &str) {
        let sha = pinforge_base::fsx::read(path)
            .map(|b| Sha256::of_bytes(&b).to_hex())
            .unwrap_or_else(|_| "-".into());
        let (status, detail) = match manifest::verify(path, Some(&pinforge_source::git::GitTrees)) {
            Ok(rep) if rep.ok => (
                Status::Pass,
                format!(
                    "{} outputs and {} inputs match{}",
                    rep.outputs_checked,
                    rep.inputs_checked,
                    if rep.inputs_absent.is_empty() {
                        String::new()
                    } else {
                        format!("; not on disk: {}", rep.inputs_absent.join(", "))
                    }
                ),
            ),
            Ok(rep) => (
                Status::Fail,
                rep.mismatches
                    .iter()
                    .map(|m| {
                        format!(
                            "{} ({}): expected {}, found {}",
                            m.path, m.role, m.expected, m.actual
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Err(e) => (Status::Fail, error_text(&e)),
        };
        self.r.evidence.push(EvidenceItem {
            path: shown_path(path),
            role: role.to_string(),
            sha256: sha,
            status,
            detail,
        });
        let build = build_name(st);
        for p in load::manifest_patches(st, path) {
            if self
                .r
                .patches
                .iter()
                .any(|q| q.build == build && q.id == p.id)
            {
                continue;
            }
            let (links, people, note) = match &p.fields {
                Ok(fields) => {
                    let links = LINK_FIELDS
                        .iter()
                        .flat_map(|f| {
                            fields.get(*f).into_iter().flatten().map(|v| Link {
                                field: f.to_string(),
                                url: v.clone(),
                            })
                        })
                        .collect();
                    let people = PEOPLE_FIELDS
                        .iter()
                        .flat_map(|f| fields.get(*f).into_iter().flatten().cloned())
                        .collect();
                    (links, people, None)
                }
                Err(why) => (Vec::new(), Vec::new(), Some(why.clone())),
            };
            self.r.patches.push(Patch {
                build: build.clone(),
                order: p.order,
                id: p.id,
                status: p.status,
                sha256: p.sha256.map(|s| s.to_hex()).unwrap_or_else(|| "-".into()),
                people,
                links,
                note,
            });
        }
        self.statements.push(st.clone());
    }

    /// What no input covers: a CUDA toolchain, rows at all.
    fn coverage(&mut self) {
        let nvcc = self.statements.iter().any(|st| {
            st.predicate
                .build_definition
                .resolved_dependencies
                .iter()
                .any(|d| d.name == "tool:nvcc")
        });
        if !nvcc {
            self.r.coverage.push(
                "no build in this report was compiled with a CUDA toolchain (nvcc): GPU code paths are untested"
                    .into(),
            );
        }
        if self.r.timelines.is_empty() {
            self.r
                .coverage
                .push("no input holds validation rows: there is no timeline".into());
        }
    }
}

/// A soak record (flip or ablation) re-checked by the soak verify library: every linked run.
fn soak_record_status(path: &Path) -> (Status, String) {
    match crate::soak::verify::verify_record(path) {
        Ok(c) if c.ok => (
            Status::Pass,
            format!("{} linked runs re-checked", c.runs.len()),
        ),
        Ok(c) => (
            Status::Fail,
            c.runs
                .iter()
                .filter_map(|r| r.problem.as_ref().map(|p| format!("{}: {p}", r.side)))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Err(e) => (Status::Absent, error_text(&e)),
    }
}
