//! `pinforge bisect` (issue #39 §2): the first pin of a range where a patch's defect is gone
//! without the patch. Each probe builds the patch's `Pinforge-Check` variant (a sanitizer
//! variant without the patch) on one pin, through the normal build path and the compile cache
//! (the folder `build/RECIPE.onto-PIN/VARIANT`, the one `audit --check` uses, so an audit's
//! build is a bisect's and back), smokes it with the check's settings, and marks the pin
//! `bad` (the declared signature), `good` (clean) or `skip` (no answer, or another crash that
//! may hide the defect) — never a guess. Each probed pin's text verdict (does the patch still
//! apply, is it already in the tree) is read by the audit's own probes. The order and the
//! search are `source::bisect`'s; every probe's evidence is kept in
//! `build/.bisect/RECIPE/PATCH.json`, like `git bisect log`.

use crate::check::{self, Shown};
use crate::flip;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::workspace::Workspace;
use pinforge_build::build::{self, BuildOptions};
use pinforge_deploy::smoke::signature::normalize_signature;
use pinforge_source::audit;
use pinforge_source::bisect::search::{self, Found, Mark, Step};
use pinforge_source::bisect::{self as plan_mod, Plan};
use pinforge_source::patch::Bundle;
use pinforge_source::recipe::Recipe;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// What `bisect` is asked.
pub struct BisectRequest<'a> {
    /// The recipe whose bundle holds the patch, and whose pin is the old side.
    pub recipe: &'a Recipe,
    /// The patch file (as the series names it).
    pub patch: String,
    /// `crate:NAME@OLD..NEW` or `git:URL@OLD..NEW`.
    pub range: String,
    /// A clone of the crate's source repository, to order releases by what they vendor
    /// (crate ranges only).
    pub vcs_repo: Option<PathBuf>,
    /// Write the result's `Applied-Upstream` into the patch.
    pub write: bool,
    /// The date written.
    pub today: String,
}

/// The build of one probe.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ProbeBuild {
    /// `build/RECIPE.onto-PIN/VARIANT`.
    pub folder: String,
    /// Wall seconds (0 when it failed before building).
    pub seconds: f64,
    /// Nothing was rebuilt.
    pub cached: bool,
    /// Compile-cache hits.
    pub compile_cache_hits: u64,
    /// Compile-cache misses.
    pub compile_cache_misses: u64,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One probe, as `git bisect log` keeps it, with its evidence.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Probe {
    /// 1 for the first probe.
    pub step: usize,
    /// The group probed (index into the plan's groups).
    pub group: usize,
    /// The pin built (the group's first release).
    pub pin: String,
    /// Every release of the group (they vendor the same upstream commit).
    pub releases: Vec<String>,
    /// The upstream commit they vendor, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The build.
    pub build: ProbeBuild,
    /// The smoke's verdict (`ok`, `crash`, `error`, …), when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smoke: Option<String>,
    /// Its normalized crash signature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Its wall seconds.
    pub smoke_seconds: f64,
    /// What the probe marks.
    pub mark: Mark,
    /// Why, for a person.
    pub why: String,
    /// The patch's text verdict on this pin (`carries`, `merged`, `superseded`, …), or why
    /// there is none.
    pub text: String,
}

/// The release a result names.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Named {
    /// The group's releases.
    pub releases: Vec<String>,
    /// The upstream commit they vendor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The tags on it (git ranges).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// The whole bisect: plan, probes, result.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BisectReport {
    /// The recipe.
    pub recipe: String,
    /// The patch.
    pub patch: String,
    /// The check the probes smoke, as its header declares it.
    pub check: String,
    /// The signature a `bad` probe shows (normalized).
    pub signature: String,
    /// The pins and their order.
    pub plan: Plan,
    /// The most probes this range needs without skips (`ceil(log2 n) + 2`, n the groups).
    pub bound: usize,
    /// Every probe, in the order made.
    pub probes: Vec<Probe>,
    /// What was found (indices are groups of the plan).
    pub found: Found,
    /// The newest group that shows the defect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_bad: Option<Named>,
    /// The first group without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_good: Option<Named>,
    /// The first release (by version) without the defect, when the answer is exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_fixed_release: Option<String>,
    /// A good pin older than a bad one (the defect came back, or the order is not upstream's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_monotone: Option<String>,
    /// Of the probed pins, the first (in probe order of the plan) where the patch no longer
    /// applies, and the first where it is already in the tree (reverse-applies or empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_not_applying: Option<String>,
    /// See `first_not_applying`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_in_tree: Option<String>,
    /// The header line to write, when the answer is exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_upstream: Option<String>,
    /// Whether `--write` wrote it.
    pub written: bool,
    /// Where this report is kept.
    pub log: String,
}

impl BisectReport {
    /// Exit 0 only for an exact answer.
    pub fn exact(&self) -> bool {
        matches!(self.found, Found::Exact { .. })
    }
}

/// Run the bisect.
pub fn run(ws: &Workspace, req: &BisectRequest, opts: &BuildOptions) -> Result<BisectReport> {
    let recipe = req.recipe;
    let bundle: Bundle = build::bundle_for(recipe)?;
    let declared = check::declared(ws, recipe, &bundle)?;
    let d = declared.iter().find(|d| d.file == req.patch).ok_or_else(|| {
        let known = bundle.series.iter().any(|e| e.id.as_str() == req.patch);
        let e = Error::input(
            format!("--patch {}", req.patch),
            if known {
                "declares no Pinforge-Check: a bisect needs the smoke that shows its defect"
            } else {
                "is not a patch of the recipe's bundle"
            },
        );
        if known {
            e.with_hint("add a `Pinforge-Check: variant=… arch=… signature=\"KIND in FUNCTION\"` field to its header")
        } else {
            e.with_hint("name a file the bundle's series lists, e.g. 0001-….patch")
        }
    })?;
    pinforge_build::toolchain::resolve(&d.variant.toolchain, &ws.tool_dirs())?;
    let plan = plan_mod::plan(
        ws,
        &req.range,
        req.vcs_repo.as_deref(),
        recipe.pin.subdir.as_deref(),
    )?;
    let expected = normalize_signature(&d.spec.signature);
    let n = plan.groups.len();
    let bound = search::bound(n);
    let mut marks: Vec<Option<Mark>> = vec![None; n];
    let mut probes = Vec::new();
    let found = loop {
        match search::next(&marks) {
            Step::Done(f) => break f,
            Step::Probe(g) => {
                let p = probe(
                    ws,
                    recipe,
                    &bundle,
                    d,
                    &plan,
                    g,
                    &expected,
                    probes.len() + 1,
                    bound,
                    req,
                    opts,
                )?;
                marks[g] = Some(p.mark);
                probes.push(p);
            }
        }
    };
    let log = ws
        .root()
        .join("build")
        .join(".bisect")
        .join(&recipe.name)
        .join(format!("{}.json", req.patch));
    let mut report = report_of(
        Head {
            recipe: recipe.name.clone(),
            patch: req.patch.clone(),
            check: check::settings(&d.spec),
            signature: expected,
            bound,
            log: log.display().to_string(),
        },
        plan,
        probes,
        &marks,
        found,
        &req.today,
    );
    if req.write {
        let value = report.applied_upstream.clone().ok_or_else(|| {
            Error::check(
                format!("bisect --write {}", req.patch),
                "the bisect named no exact first pin without the defect, so there is no Applied-Upstream to write; nothing was written",
            )
            .with_hint("see the probes (skipped pins, or a range that does not bracket the fix), widen or narrow --range, and bisect again")
        });
        match value {
            Ok(v) => {
                // This run's evidence is kept before the header changes: a process killed
                // while the bundle is rewritten leaves the log of the probes that decided the
                // line (saying `written: false`, an under-claim the header then corrects), never
                // an older run's log beside a new header.
                keep_log(&log, &report)?;
                let read = bundle
                    .files
                    .iter()
                    .find(|(id, _)| id.as_str() == req.patch)
                    .map(|(_, p)| p.bytes.as_slice())
                    .unwrap_or_default();
                plan_mod::write_applied_upstream(ws, recipe, &req.patch, read, &v)?;
                report.written = true;
            }
            Err(e) => {
                keep_log(&log, &report)?;
                return Err(e);
            }
        }
    }
    keep_log(&log, &report)?;
    Ok(report)
}

/// What a report says besides its plan, probes and answer.
struct Head {
    recipe: String,
    patch: String,
    check: String,
    signature: String,
    bound: usize,
    log: String,
}

/// The report of a finished search: the groups it names, read back as releases, the text
/// verdicts beside them, and the header line an exact answer writes.
fn report_of(
    head: Head,
    plan: Plan,
    probes: Vec<Probe>,
    marks: &[Option<Mark>],
    found: Found,
    today: &str,
) -> BisectReport {
    let named = |g: usize| Named {
        releases: plan.groups[g]
            .iter()
            .map(|&i| plan.pins[i].version.clone())
            .collect(),
        upstream: plan.pins[plan.groups[g][0]].upstream.clone(),
        tags: plan.pins[plan.groups[g][0]].tags.clone(),
    };
    let (last_bad, first_good) = match &found {
        Found::Exact {
            last_bad,
            first_good,
        }
        | Found::Between {
            last_bad,
            first_good,
        } => (Some(named(*last_bad)), Some(named(*first_good))),
        Found::AlreadyFixed { first_good } => (None, Some(named(*first_good))),
        Found::NotFixed { last_bad } => (Some(named(*last_bad)), None),
        Found::Undecided => (None, None),
    };
    let exact_good = match &found {
        Found::Exact { first_good, .. } => Some(*first_good),
        _ => None,
    };
    let label = |g: usize| plan.pins[plan.groups[g][0]].label();
    let non_monotone = search::non_monotone(marks).map(|(g, b)| {
        format!(
            "{} runs clean but the later {} shows the defect: the defect came back, or this order is not upstream's",
            label(g),
            label(b)
        )
    });
    let mut by_group: Vec<&Probe> = probes.iter().collect();
    by_group.sort_by_key(|p| p.group);
    let first_text = |words: &[&str]| {
        by_group
            .iter()
            .find(|p| words.contains(&p.text.as_str()))
            .map(|p| p.pin.clone())
    };
    let first_not_applying = first_text(&["superseded", "conflicts", "merged", "fixed-upstream"]);
    let first_in_tree = first_text(&["merged"]);
    drop(by_group);
    let applied_upstream = exact_good.map(|g| plan_mod::applied_upstream(&plan, g, today));
    BisectReport {
        recipe: head.recipe,
        patch: head.patch,
        check: head.check,
        signature: head.signature,
        first_fixed_release: exact_good
            .and_then(|g| plan_mod::first_fixed_release(&plan, g))
            .map(|p| p.version.clone()),
        plan,
        bound: head.bound,
        probes,
        found,
        last_bad,
        first_good,
        non_monotone,
        first_not_applying,
        first_in_tree,
        applied_upstream,
        written: false,
        log: head.log,
    }
}

/// The report, written whole (one file, atomically) as the bisect's evidence.
fn keep_log(path: &std::path::Path, report: &BisectReport) -> Result<()> {
    fsx::create_dir_all(&fsx::parent_of(path))?;
    // The same document `bisect --json` prints: the schema id first among its members.
    let mut doc = serde_json::Map::new();
    doc.insert(
        "schema".into(),
        serde_json::Value::from(pinforge_record::schema_id::BISECT),
    );
    if let serde_json::Value::Object(fields) =
        serde_json::to_value(report).map_err(|e| Error::Internal(format!("bisect report: {e}")))?
    {
        doc.extend(fields);
    }
    let mut text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::Internal(format!("bisect report: {e}")))?;
    text.push('\n');
    fsx::write_atomic(path, text.as_bytes())
}

/// Build and smoke group `g`'s first release, and read the patch's text verdict there.
#[allow(clippy::too_many_arguments)]
fn probe(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    d: &check::Declared,
    plan: &Plan,
    g: usize,
    expected: &str,
    step: usize,
    bound: usize,
    req: &BisectRequest,
    opts: &BuildOptions,
) -> Result<Probe> {
    let pin = &plan.pins[plan.groups[g][0]];
    let onto = pin.onto(plan)?;
    let moved = check::new_pin_recipe(recipe, &onto);
    opts.reporter.stage(
        "bisect",
        &format!(
            "probe {step} (at most {bound} without skips): build {} on {}",
            d.variant.name,
            pin.label()
        ),
    );
    let started = Instant::now();
    let built = build::build(ws, &moved, &d.variant, opts);
    let folder = format!("build/{}/{}", moved.name, d.variant.name);
    let (build_rec, outcome) = match built {
        Ok(o) => (
            ProbeBuild {
                folder,
                seconds: o.seconds,
                cached: o.cached,
                compile_cache_hits: o.compile_cache.hits,
                compile_cache_misses: o.compile_cache.misses,
                error: None,
            },
            Some(o),
        ),
        Err(e) => (
            ProbeBuild {
                folder,
                seconds: started.elapsed().as_secs_f64(),
                cached: false,
                compile_cache_hits: 0,
                compile_cache_misses: 0,
                error: Some(crate::record::error_text(&e)),
            },
            None,
        ),
    };
    let (smoke, signature, smoke_seconds, mark, why) = match &outcome {
        None => (
            None,
            None,
            0.0,
            Mark::Skip,
            format!(
                "did not build: {}",
                build_rec
                    .error
                    .as_deref()
                    .unwrap_or_default()
                    .lines()
                    .next()
                    .unwrap_or_default()
            ),
        ),
        Some(o) => {
            opts.reporter.stage(
                "bisect",
                &format!(
                    "probe {step}: smoke {} ({})",
                    pin.label(),
                    check::settings(&d.spec)
                ),
            );
            let (_, side) = flip::smoke_one(&o.manifest, &check::smoke_options(ws, &d.spec)?);
            let (mark, why) = mark_of(&check::shown_of(&side), expected);
            (
                Some(side.verdict.clone()),
                side.normalized_signature.clone(),
                side.seconds,
                mark,
                why,
            )
        }
    };
    let text = text_verdict(ws, recipe, bundle, &onto, &req.patch, &req.today);
    opts.reporter.stage(
        "bisect",
        &format!("probe {step}: {} is {} ({why})", pin.label(), mark.as_str()),
    );
    Ok(Probe {
        step,
        group: g,
        pin: pin.spec.clone(),
        releases: plan.groups[g]
            .iter()
            .map(|&i| plan.pins[i].version.clone())
            .collect(),
        upstream: pin.upstream.clone(),
        build: build_rec,
        smoke,
        signature,
        smoke_seconds,
        mark,
        why,
        text,
    })
}

/// The mark a smoke gives, against the expected (normalized) signature.
pub(crate) fn mark_of(shown: &Shown, expected: &str) -> (Mark, String) {
    match shown {
        Shown::Crash(s) if s == expected => (Mark::Bad, format!("shows `{s}`")),
        Shown::Clean => (Mark::Good, "runs clean".into()),
        Shown::Crash(s) => (
            Mark::Skip,
            format!("another crash, `{s}`, may hide the defect"),
        ),
        Shown::Nothing(why) => (Mark::Skip, format!("no answer: {why}")),
    }
}

/// The patch's verdict by the audit's text probes on `onto`, or why there is none.
fn text_verdict(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    onto: &audit::Onto,
    file: &str,
    today: &str,
) -> String {
    match audit::run(ws, recipe, bundle, onto, today, &Default::default()) {
        Ok(s) => s
            .audit
            .patches
            .iter()
            .find(|p| p.file == file)
            .map(|p| p.verdict.as_str().to_string())
            .unwrap_or_else(|| "not audited".into()),
        Err(e) => format!(
            "no text verdict: {}",
            crate::record::error_text(&e)
                .lines()
                .next()
                .unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_declared_signature_marks_a_pin_bad() {
        let sig = "heap-buffer-overflow in llama_kv_cache::apply_ubatch";
        assert_eq!(mark_of(&Shown::Crash(sig.into()), sig).0, Mark::Bad);
        assert_eq!(mark_of(&Shown::Clean, sig).0, Mark::Good);
        let (m, why) = mark_of(
            &Shown::Crash("SEGV on unknown address 0x? in f".into()),
            sig,
        );
        assert_eq!(m, Mark::Skip);
        assert!(why.contains("may hide the defect"), "{why}");
        let (m, why) = mark_of(&Shown::Nothing("did not build".into()), sig);
        assert_eq!(m, Mark::Skip);
        assert!(why.contains("did not build"), "{why}");
    }
}
