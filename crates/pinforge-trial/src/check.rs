//! `audit --check` and `rebase --check` (issue #26 §2): a drop proven by behaviour, not only by
//! text. Every patch whose header declares a `Pinforge-Check` has its declared sanitizer
//! variant (one that does not apply the patch) built on the old pin and on the new pin, through
//! the normal build path and its compile cache, and smoked with the declared settings on both.
//! What the two smokes show becomes the patch's check finding, which the audit folds into its
//! evidence and its one ruling (`source::audit`): `still-needed` (the new pin still shows the
//! signature; never merged or superseded then), `fixed-upstream` (the old pin shows it, the new
//! one runs clean), `check-invalid` (the old pin does not show it either), or undetermined.
//!
//! The audit lives in `source/` and cannot build or smoke; this module sits above both. Builds
//! are shared: patches that declare the same variant share its two builds, and patches that
//! also declare the same smoke share its two smokes. The old pin's build is the recipe's own
//! `build/RECIPE/VARIANT` (what `pinforge build --variant VARIANT` makes, so it is usually
//! current); the new pin's is `build/RECIPE.onto-PIN/VARIANT`, so the two never overwrite each
//! other.

use crate::config;
use crate::flip;
use crate::record::SmokeSide;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::names::is_identifier;
use pinforge_base::workspace::Workspace;
use pinforge_build::build::{self, BuildOptions, BuildOutcome};
use pinforge_deploy::model::Arch;
use pinforge_deploy::smoke::signature::normalize_signature;
use pinforge_deploy::smoke::{Scenario, SmokeOptions};
use pinforge_source::audit::{
    self, Behaviour, CheckBuild, CheckCost, CheckFinding, CheckSmoke, Checks, Onto,
};
use pinforge_source::patch::header::CheckSpec;
use pinforge_source::patch::Bundle;
use pinforge_source::recipe::{Recipe, Variant};
use std::collections::{BTreeMap, BTreeSet};

/// Which pin a build is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Old,
    New,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Old => "old",
            Side::New => "new",
        }
    }
}

/// What one smoke of one side showed, as the check compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shown {
    /// It crashed with this normalized signature.
    Crash(String),
    /// It ran clean.
    Clean,
    /// No answer (a failed build or smoke, a diverged decode): why.
    Nothing(String),
}

impl Shown {
    fn said(&self) -> String {
        match self {
            Shown::Crash(s) => format!("crash `{s}`"),
            Shown::Clean => "ok".into(),
            Shown::Nothing(why) => format!("no answer ({why})"),
        }
    }
}

/// The finding of a check from what the two pins showed, against the signature it expects
/// (compared as smoke normalizes signatures). The new pin still showing it is `still-needed`
/// whatever the old showed; otherwise the old pin must show it for the check to say anything.
pub(crate) fn classify(expected: &str, old: &Shown, new: &Shown) -> Behaviour {
    let expected = normalize_signature(expected);
    let shows = |s: &Shown| matches!(s, Shown::Crash(sig) if *sig == expected);
    if shows(new) {
        return Behaviour::StillNeeded;
    }
    match (old, new) {
        (Shown::Nothing(_), _) => Behaviour::Undetermined,
        _ if !shows(old) => Behaviour::CheckInvalid,
        (_, Shown::Clean) => Behaviour::FixedUpstream,
        // Another crash or no answer on the new pin: the defect may hide behind it.
        _ => Behaviour::Undetermined,
    }
}

/// One patch's declared check, resolved against the recipe.
pub(crate) struct Declared {
    pub(crate) file: String,
    pub(crate) spec: CheckSpec,
    pub(crate) variant: Variant,
}

/// The declared checks of the bundle's patches, in series order: each variant exists, is a
/// sanitizer variant and does not apply the patch it checks; a model file exists.
pub(crate) fn declared(ws: &Workspace, recipe: &Recipe, bundle: &Bundle) -> Result<Vec<Declared>> {
    let mut out = Vec::new();
    for p in bundle.select(None)? {
        let Some(spec) = p.require_attribution()?.check.clone() else {
            continue;
        };
        let subject = format!("{}: Pinforge-Check", p.origin.display());
        let variant = recipe.variant(&spec.variant).map_err(|_| {
            Error::input(
                &subject,
                format!(
                    "variant `{}` is not a variant of recipe {}",
                    spec.variant, recipe.name
                ),
            )
            .with_hint("name a sanitizer variant the recipe defines, e.g. variant=unpatched-asan")
        })?;
        if !is_sanitizer(variant) {
            return Err(Error::input(
                &subject,
                format!("variant `{}` builds without a sanitizer", spec.variant),
            )
            .with_hint("a check needs a sanitizer build to see the defect: name a variant with LLAMA_SANITIZE_ADDRESS (or _THREAD, _UNDEFINED) on, e.g. unpatched-asan"));
        }
        let applied = config::resolve_patches(recipe, variant)?;
        if applied.iter().any(|r| r.file == p.id.as_str()) {
            return Err(Error::input(
                &subject,
                format!("variant `{}` applies {} itself: it cannot show the defect the patch fixes", spec.variant, p.id),
            )
            .with_hint("declare a variant without this patch (with the patches it depends on), e.g. unpatched-asan"));
        }
        if let Some(m) = &spec.model {
            pinforge_base::fsx::open_regular(&ws.root().join(m), "check model file", true)?;
        }
        out.push(Declared {
            file: p.id.to_string(),
            spec,
            variant: variant.clone(),
        });
    }
    Ok(out)
}

/// Whether a variant turns a sanitizer on (llama.cpp's `LLAMA_SANITIZE_*`, ggml's
/// `GGML_SANITIZE_*`).
fn is_sanitizer(v: &Variant) -> bool {
    v.cmake.iter().any(|(k, val)| {
        (k.starts_with("LLAMA_SANITIZE_") || k.starts_with("GGML_SANITIZE_"))
            && ["on", "true", "1", "yes"].contains(&val.to_ascii_lowercase().as_str())
    })
}

/// The recipe moved onto the new pin, under its own name (`RECIPE.onto-PIN`), so that its
/// builds have their own folders beside the old pin's.
pub(crate) fn new_pin_recipe(recipe: &Recipe, onto: &Onto) -> Recipe {
    let mut r = onto.moved(recipe);
    let slug: String = onto
        .spec
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = format!("{}.onto-{slug}", recipe.name);
    r.name = if is_identifier(&name) && !name.contains("..") {
        name
    } else {
        format!(
            "{}.onto-{}",
            recipe.name.chars().take(40).collect::<String>(),
            Sha256::of_bytes(onto.spec.as_bytes()).short(12)
        )
    };
    r
}

/// The smoke settings of a check, as a key and for people.
pub(crate) fn settings(spec: &CheckSpec) -> String {
    let scenario = spec
        .scenario
        .as_deref()
        .map(|s| format!(" scenario={s}"))
        .unwrap_or_default();
    match (&spec.model, &spec.arch) {
        (Some(m), _) => format!("model={m} tokens={}{scenario}", spec.tokens),
        (None, a) => format!(
            "arch={} tokens={}{scenario}",
            a.as_deref().unwrap_or("qwen2vl"),
            spec.tokens
        ),
    }
}

pub(crate) fn smoke_options(ws: &Workspace, spec: &CheckSpec) -> Result<SmokeOptions> {
    let scenario = match spec.scenario.as_deref() {
        None => Scenario::Restore,
        Some(name) => Scenario::parse(name).ok_or_else(|| {
            Error::Internal(format!(
                "check scenario `{name}` passed the header's parse but smoke does not know it"
            ))
        })?,
    };
    Ok(SmokeOptions {
        model: spec.model.as_ref().map(|m| ws.root().join(m)),
        arch: Arch::parse(spec.arch.as_deref().unwrap_or("qwen2vl"))?,
        tokens: spec.tokens,
        cache: pinforge_deploy::smoke::shim_cache(ws.root())?,
        crash_test: false,
        timeout: std::time::Duration::from_secs(300),
        require_gpu: false,
        scenario,
    })
}

/// What a smoke's record says, as the check compares it.
pub(crate) fn shown_of(side: &SmokeSide) -> Shown {
    match (side.verdict.as_str(), &side.normalized_signature) {
        ("ok", _) => Shown::Clean,
        ("crash", Some(s)) => Shown::Crash(s.clone()),
        (v, _) => Shown::Nothing(format!(
            "smoke {v}{}",
            side.detail
                .as_deref()
                .map(|d| format!(": {}", d.lines().next().unwrap_or_default()))
                .unwrap_or_default()
        )),
    }
}

/// The builds and smokes of a check run, each made once.
struct Runs<'a> {
    ws: &'a Workspace,
    recipes: [&'a Recipe; 2],
    pins: [String; 2],
    opts: &'a BuildOptions<'a>,
    builds: BTreeMap<(Side, String), std::result::Result<BuildOutcome, String>>,
    smokes: BTreeMap<(Side, String, String), (Shown, CheckSmoke)>,
}

impl Runs<'_> {
    /// Build `variant` on `side` once; a failed build is kept as its reason.
    fn build(&mut self, side: Side, variant: &Variant) {
        let key = (side, variant.name.to_string());
        if self.builds.contains_key(&key) {
            return;
        }
        let recipe = self.recipes[side as usize];
        self.opts.reporter.stage(
            "check",
            &format!("build {} on the {} pin", variant.name, side.word()),
        );
        let o = build::build(self.ws, recipe, variant, self.opts)
            .map_err(|e| crate::record::error_text(&e));
        self.builds.insert(key, o);
    }

    /// Smoke `variant` on `side` with `spec`'s settings once.
    fn smoke(&mut self, side: Side, d: &Declared) -> Result<Shown> {
        let key = (side, d.variant.name.to_string(), settings(&d.spec));
        if let Some((shown, _)) = self.smokes.get(&key) {
            return Ok(shown.clone());
        }
        let built = self
            .builds
            .get(&(side, d.variant.name.to_string()))
            .ok_or_else(|| Error::Internal("a check smoked a variant it did not build".into()))?;
        let (shown, record) = match built {
            Err(why) => (
                Shown::Nothing(format!("did not build: {why}")),
                CheckSmoke {
                    settings: key.2.clone(),
                    verdict: "error".into(),
                    signature: None,
                    detail: Some(format!("did not build: {why}")),
                    seconds: 0.0,
                },
            ),
            Ok(o) => {
                self.opts.reporter.stage(
                    "check",
                    &format!(
                        "smoke {} on the {} pin ({})",
                        d.variant.name,
                        side.word(),
                        key.2
                    ),
                );
                let (_, side_rec) = flip::smoke_one(&o.manifest, &smoke_options(self.ws, &d.spec)?);
                let shown = shown_of(&side_rec);
                let detail = match &shown {
                    Shown::Nothing(why) => Some(why.clone()),
                    _ => None,
                };
                (
                    shown,
                    CheckSmoke {
                        settings: key.2.clone(),
                        verdict: side_rec.verdict.clone(),
                        signature: side_rec.normalized_signature.clone(),
                        detail,
                        seconds: side_rec.seconds,
                    },
                )
            }
        };
        self.smokes.insert(key, (shown.clone(), record));
        Ok(shown)
    }

    /// One line of cost for a build: `312.4 s, 410 compile-cache misses` or `cached`.
    fn cost_of(&self, side: Side, variant: &str) -> String {
        match self.builds.get(&(side, variant.to_string())) {
            Some(Ok(o)) if o.cached => format!("{:.1} s, current (cached)", o.seconds),
            Some(Ok(o)) => format!(
                "{:.1} s, compile cache {}",
                o.seconds,
                o.compile_cache.summary()
            ),
            Some(Err(_)) => "failed".into(),
            None => "not built".into(),
        }
    }

    /// The builds and smokes made, with the totals.
    fn cost(&self) -> CheckCost {
        let mut builds = Vec::new();
        for ((side, variant), o) in &self.builds {
            let smokes: Vec<CheckSmoke> = self
                .smokes
                .iter()
                .filter(|((s, v, _), _)| s == side && v == variant)
                .map(|(_, (_, rec))| rec.clone())
                .collect();
            let recipe = self.recipes[*side as usize];
            let (seconds, cached, hits, misses) = match o {
                Ok(o) => (
                    o.seconds,
                    o.cached,
                    o.compile_cache.hits,
                    o.compile_cache.misses,
                ),
                Err(_) => (0.0, false, 0, 0),
            };
            builds.push(CheckBuild {
                side: side.word().into(),
                pin: self.pins[*side as usize].clone(),
                variant: variant.clone(),
                built_as: format!("{}/{variant}", recipe.name),
                seconds,
                cached,
                compile_cache_hits: hits,
                compile_cache_misses: misses,
                smokes,
            });
        }
        CheckCost {
            build_seconds: builds.iter().map(|b| b.seconds).sum(),
            smoke_seconds: builds
                .iter()
                .flat_map(|b| &b.smokes)
                .map(|s| s.seconds)
                .sum(),
            cached_builds: builds.iter().filter(|b| b.cached).count(),
            compile_cache_hits: builds.iter().map(|b| b.compile_cache_hits).sum(),
            compile_cache_misses: builds.iter().map(|b| b.compile_cache_misses).sum(),
            builds,
        }
    }
}

/// Build and smoke every declared check on both pins: the findings per patch file and the cost.
pub(crate) fn run_checks(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    onto: &Onto,
    opts: &BuildOptions,
) -> Result<Checks> {
    let declared = declared(ws, recipe, bundle)?;
    // The toolchains are checked before anything is built, as `build` does.
    for d in &declared {
        pinforge_build::toolchain::resolve(&d.variant.toolchain, &ws.tool_dirs())?;
    }
    let new_recipe = new_pin_recipe(recipe, onto);
    let mut runs = Runs {
        ws,
        recipes: [recipe, &new_recipe],
        pins: [
            format!("the recipe's pin ({})", recipe.name),
            onto.spec.clone(),
        ],
        opts,
        builds: BTreeMap::new(),
        smokes: BTreeMap::new(),
    };
    let mut findings = BTreeMap::new();
    for d in &declared {
        runs.build(Side::Old, &d.variant);
        runs.build(Side::New, &d.variant);
        let old = runs.smoke(Side::Old, d)?;
        let new = runs.smoke(Side::New, d)?;
        let behaviour = classify(&d.spec.signature, &old, &new);
        let sharing: Vec<&str> = declared
            .iter()
            .filter(|o| o.file != d.file && o.variant.name == d.variant.name)
            .map(|o| o.file.as_str())
            .collect();
        let detail = format!(
            "{}: expects `{}` without the fix ({} {}); old pin: {}; new pin {}: {}\nbuilds of {}: old {}; new {}{}",
            match behaviour {
                Behaviour::StillNeeded => "the new pin without the patch still shows the defect",
                Behaviour::FixedUpstream => "the old pin without the patch shows the defect, the new pin runs clean",
                Behaviour::CheckInvalid => "the old pin without the patch does not show the declared signature: the check does not show this defect; fix the Pinforge-Check",
                Behaviour::Undetermined => "the check gave no answer",
            },
            normalize_signature(&d.spec.signature),
            d.variant.name,
            settings(&d.spec),
            old.said(),
            onto.spec,
            new.said(),
            d.variant.name,
            runs.cost_of(Side::Old, d.variant.name.as_str()),
            runs.cost_of(Side::New, d.variant.name.as_str()),
            if sharing.is_empty() {
                String::new()
            } else {
                format!(" (shared with {})", sharing.join(", "))
            }
        );
        findings.insert(d.file.clone(), CheckFinding { behaviour, detail });
    }
    Ok(Checks {
        findings,
        cost: Some(runs.cost()),
    })
}

/// `audit --check`: the checks built and smoked, then the audit with their findings folded in.
pub fn audit(
    ws: &Workspace,
    recipe: &Recipe,
    bundle: &Bundle,
    onto: &Onto,
    today: &str,
    opts: &BuildOptions,
) -> Result<audit::Session> {
    let checks = run_checks(ws, recipe, bundle, onto, opts)?;
    // vendor/ is shared with builds: the audit's materialization under the lock.
    let _lock = ws.lock()?;
    audit::run_checked(ws, recipe, bundle, onto, today, &BTreeSet::new(), &checks)
}

/// `rebase --check`, before the rebase: the checked audit, and a refusal (exit 1, nothing
/// written) when the rebase would drop a patch that is still needed: one the text alone rules
/// merged, or one named in `--drop`.
pub fn gate(
    ws: &Workspace,
    recipe_path: &std::path::Path,
    onto: &Onto,
    drop: &BTreeSet<String>,
    today: &str,
    opts: &BuildOptions,
) -> Result<audit::Audit> {
    let recipe = Recipe::load(recipe_path)?;
    let bundle = build::bundle_for(&recipe)?;
    let session = audit(ws, &recipe, &bundle, onto, today, opts)?;
    let held: Vec<String> = session
        .audit
        .patches
        .iter()
        .filter(|p| {
            p.check == Some(Behaviour::StillNeeded) && (p.merged_by_text || drop.contains(&p.file))
        })
        .map(|p| {
            format!(
                "{} ({})",
                p.file,
                if drop.contains(&p.file) {
                    "named in --drop"
                } else {
                    "its text says merged"
                }
            )
        })
        .collect();
    if !held.is_empty() {
        return Err(Error::check(
            format!("rebase --check onto {}", onto.spec),
            format!(
                "the new pin without the patch still shows the defect, so the rebase would drop a fix that is still needed: {}; nothing was written",
                held.join(", ")
            ),
        )
        .with_hint("run `pinforge audit RECIPE --onto PIN --check` for the evidence; keep the patch (remove it from --drop) or refresh it as a new fix"));
    }
    Ok(session.audit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: &str = "heap-buffer-overflow in llama_kv_cache::apply_ubatch";

    // The header's scenario names (source cannot see smoke) are smoke's, both ways.
    #[test]
    fn the_headers_scenarios_are_the_ones_smoke_drives() {
        let smoke: Vec<&str> = pinforge_deploy::smoke::SCENARIOS
            .iter()
            .map(|s| s.name())
            .collect();
        assert_eq!(pinforge_source::patch::header::CHECK_SCENARIOS, &smoke[..]);
    }

    // issue #26 §2: the three findings, and no answer where none was given.
    #[test]
    fn the_two_smokes_decide_still_needed_fixed_upstream_or_check_invalid() {
        let crash = |s: &str| Shown::Crash(s.into());
        let none = || Shown::Nothing("did not build".into());
        let other = crash("SEGV on unknown address 0x? in f");
        for old in [crash(SIG), Shown::Clean, none(), other.clone()] {
            assert_eq!(
                classify(SIG, &old, &crash(SIG)),
                Behaviour::StillNeeded,
                "{old:?}"
            );
        }
        assert_eq!(
            classify(SIG, &crash(SIG), &Shown::Clean),
            Behaviour::FixedUpstream
        );
        assert_eq!(
            classify(SIG, &Shown::Clean, &Shown::Clean),
            Behaviour::CheckInvalid
        );
        assert_eq!(
            classify(SIG, &other, &Shown::Clean),
            Behaviour::CheckInvalid
        );
        assert_eq!(
            classify(SIG, &Shown::Clean, &none()),
            Behaviour::CheckInvalid
        );
        assert_eq!(
            classify(SIG, &none(), &Shown::Clean),
            Behaviour::Undetermined
        );
        // The defect may hide behind another crash, or behind a build that failed.
        assert_eq!(classify(SIG, &crash(SIG), &other), Behaviour::Undetermined);
        assert_eq!(classify(SIG, &crash(SIG), &none()), Behaviour::Undetermined);
        // The expected signature compares as smoke normalizes it (addresses, allocation site).
        let full = "heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)";
        assert_eq!(
            classify(full, &crash(SIG), &crash(SIG)),
            Behaviour::StillNeeded
        );
    }

    #[test]
    fn the_new_pin_builds_under_its_own_recipe_name() {
        let recipe = Recipe::load_or_default(None).expect("embedded recipe");
        let onto = Onto {
            spec: "crate:llama-cpp-sys-2@0.1.140".into(),
            source: recipe.pin.source.clone(),
            sha256_from: None,
            subdir: None,
        };
        let r = new_pin_recipe(&recipe, &onto);
        assert_eq!(r.name, "mrope-cpu.onto-crate-llama-cpp-sys-2-0.1.140");
        assert!(is_identifier(&r.name));
        assert!(is_sanitizer(recipe.variant("unpatched-asan").expect("v")));
        assert!(!is_sanitizer(recipe.variant("unpatched").expect("v")));
    }
}
