//! Patch ablation: a variant built and smoked with subsets of its patch list (every subset for
//! at most four patches; otherwise none, each alone, each left out, and all), to tell which
//! patches are necessary and which sets are sufficient to remove a crash signature.
//!
//! Each subset is a derived variant (the same everything, `patches = [subset]`) built under its
//! own folder `VARIANT.abl-none`, `VARIANT.abl-0001-0003` (the leading number of each patch
//! file, or its position when a name has none). A subset whose configuration equals a variant
//! the recipe already defines (the empty subset of `patched-asan` is `unpatched-asan`, the full
//! one `patched-asan` itself) is built as that variant, so its build folder — and pinforge's
//! build cache — is reused. The derived names are ablate's own: a recipe variant named in
//! their namespace ([`is_derived_name`]) is refused before anything is built, since its
//! folder, built with its own flags, would be taken for a subset's. A subset whose patches do not apply alone is retried with one more
//! patch of the list (the first, in series order, with which it applies), and the record says
//! which. Records go to `ablations/RECIPE--VARIANT-NNNN/` (see [`crate::flip`] for the id rule).
//!
//! Words used in the record: a subset is `clean` (smoke ok), shows `signature` (the crash
//! signature the empty subset shows), `other-crash` (another signature), or is `undetermined`
//! (it did not apply, build or smoke; or the decode diverged). A set is sufficient when it is
//! clean and no smaller tested set inside it is; a patch is necessary when the full set is
//! clean and leaving that patch out alone is not; a patch does not touch the signature when
//! adding it to any tested subset never changes the outcome.
//!
//! With `--trial soak` ([`soak`]), every subset that builds is soaked for N rows per repeat
//! instead of smoked, and its class comes from those runs.

use crate::config::{self, PatchRef};
use crate::flip;
use crate::record;
pub use crate::record::AblateStep;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::names::is_identifier;
use pinforge_base::workspace::Workspace;
use pinforge_build::build::{self, BuildOptions};
use pinforge_deploy::smoke::{SmokeOptions, Verdict as SmokeVerdict};
use pinforge_record::manifest;
use pinforge_source::recipe::{PatchSelection, Recipe, Variant, VariantName};
use pinforge_source::upstream;
// The record types keep their old path: `pinforge schema` names `trial::ablate::AblationRecord`.
pub use crate::record::{AblationRecord, SubsetRecord};
use crate::report;
use crate::soak::SoakOptions;
use crate::verdict::SideResult;
use serde::Serialize;
use std::time::Instant;

pub mod soak;

/// The schema id of an ablation record and of `ablate --json`.
pub const SCHEMA: &str = pinforge_record::schema_id::ABLATE;

/// Up to this many patches, every subset is tried.
pub(crate) const ALL_SUBSETS_UP_TO: usize = 4;

/// The subsets to try, as sorted index lists: every subset (by size, then order) for at most
/// [`ALL_SUBSETS_UP_TO`] patches; otherwise the empty set, each patch alone, each left out,
/// and the full set.
pub(crate) fn subsets(n: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = if n <= ALL_SUBSETS_UP_TO {
        (0u32..(1u32 << n))
            .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
            .collect()
    } else {
        let mut v = vec![Vec::new()];
        v.extend((0..n).map(|i| vec![i]));
        v.extend((0..n).map(|i| (0..n).filter(|j| *j != i).collect()));
        v.push((0..n).collect());
        v
    };
    out.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// The short labels of a variant's patches, one per patch: each file's leading number (`0001`
/// of `0001-fix.patch`) when every file has one and no two repeat; otherwise every patch gets
/// its 1-based position as four digits. Mixing the two could collide (`fix.patch` at position
/// 1 and `0001-x.patch`), and a label names a derived variant and its build folder, so the
/// labels must be unique.
pub(crate) fn short_ids(patches: &[PatchRef]) -> Vec<String> {
    let leads: Vec<String> = patches
        .iter()
        .map(|p| p.file.chars().take_while(char::is_ascii_digit).collect())
        .collect();
    let usable = leads.iter().all(|l| !l.is_empty() && l.len() <= 8)
        && leads
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == leads.len();
    if usable {
        leads
    } else {
        (1..=patches.len()).map(|i| format!("{i:04}")).collect()
    }
}

/// A subset's label: `none`, or the short ids joined with `+`.
pub(crate) fn label(patches: &[PatchRef], subset: &[usize]) -> String {
    if subset.is_empty() {
        return "none".into();
    }
    let ids = short_ids(patches);
    subset
        .iter()
        .map(|&i| ids[i].clone())
        .collect::<Vec<_>>()
        .join("+")
}

/// The derived variant's name: `VARIANT.abl-none`, `VARIANT.abl-0001-0003`. Too long for a
/// folder name, it becomes `abl-` and a digest of the variant and the subset.
pub(crate) fn derived_name(variant: &str, patches: &[PatchRef], subset: &[usize]) -> VariantName {
    let name = format!("{variant}.abl-{}", label(patches, subset).replace('+', "-"));
    let name = if is_identifier(&name) {
        name
    } else {
        let key = format!("{variant}\n{}", label(patches, subset));
        format!("abl-{}", Sha256::of_bytes(key.as_bytes()).short(16))
    };
    VariantName::new(&name).expect("invariant: derived names are identifiers")
}

/// Whether `name` is in the namespace of `variant`'s derived subset names ([`derived_name`]):
/// `VARIANT.abl-…`, or `abl-` and 16 hex digits.
pub(crate) fn is_derived_name(variant: &str, name: &str) -> bool {
    name.starts_with(&format!("{variant}.abl-"))
        || name.strip_prefix("abl-").is_some_and(|h| {
            h.len() == 16
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// A subset is built under its derived name, in `build/RECIPE/NAME/`: a variant of the recipe
/// in that namespace would have its folder (and its build, made with its own flags) taken for
/// a subset's, so the ablation would record another configuration. Every identifier a
/// recipe may name a variant is also one a subset could get, so such a variant is refused
/// before anything is built (exit 2, naming it), whatever its configuration.
fn check_derived_names_free(recipe: &Recipe, variant: &str) -> Result<()> {
    match recipe
        .variants
        .keys()
        .find(|v| is_derived_name(variant, v.as_str()))
    {
        None => Ok(()),
        Some(v) => Err(Error::input(
            format!("{}: variant `{v}`", recipe.path.display()),
            format!(
                "is named like a subset that `ablate --variant {variant}` derives \
                 (`{variant}.abl-…`, `abl-` and 16 hex digits): its build folder would be \
                 taken for the subset's"
            ),
        )
        .with_hint(format!(
            "rename the variant in the recipe; names `{variant}.abl-*` are ablate's"
        ))),
    }
}

/// How one subset came out, for the analysis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    /// Smoke ok.
    Clean,
    /// A crash with this normalized signature.
    Crash(String),
    /// No outcome, with the reason.
    Undetermined(String),
}

/// What the subsets show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct Analysis {
    /// The normalized signature of the empty subset (None: nothing to ablate).
    pub target_signature: Option<String>,
    /// Patches (indices) whose removal alone from the full set brings the target signature
    /// back.
    pub necessary: Vec<usize>,
    /// Patches (indices) whose removal alone from the full set gives a crash with another
    /// signature: a different failure, not evidence that the patch fixes the target.
    pub other_crash_when_left_out: Vec<usize>,
    /// Minimal clean subsets.
    pub sufficient: Vec<Vec<usize>>,
    /// Patches whose addition never changes a tested subset's outcome.
    pub no_effect: Vec<usize>,
}

/// The analysis of tested subsets (each a sorted index list of the `n` patches, as actually
/// applied).
pub(crate) fn analyse(n: usize, results: &[(Vec<usize>, Class)]) -> Analysis {
    let class_of = |s: &[usize]| results.iter().find(|(x, _)| x == s).map(|(_, c)| c);
    let target_signature = match class_of(&[]) {
        Some(Class::Crash(s)) => Some(s.clone()),
        _ => None,
    };
    if target_signature.is_none() {
        return Analysis {
            target_signature,
            necessary: Vec::new(),
            other_crash_when_left_out: Vec::new(),
            sufficient: Vec::new(),
            no_effect: Vec::new(),
        };
    }
    let full: Vec<usize> = (0..n).collect();
    let clean: Vec<&Vec<usize>> = results
        .iter()
        .filter(|(_, c)| *c == Class::Clean)
        .map(|(s, _)| s)
        .collect();
    let subset_of = |a: &[usize], b: &[usize]| a.iter().all(|x| b.contains(x));
    let mut sufficient: Vec<Vec<usize>> = clean
        .iter()
        .filter(|s| !clean.iter().any(|t| t.len() < s.len() && subset_of(t, s)))
        .map(|s| (*s).clone())
        .collect();
    sufficient.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    sufficient.dedup();
    // Only the target signature coming back makes a patch necessary; another crash is a
    // different failure and is reported on its own.
    let mut necessary = Vec::new();
    let mut other_crash_when_left_out = Vec::new();
    if class_of(&full) == Some(&Class::Clean) {
        for p in 0..n {
            let without: Vec<usize> = full.iter().copied().filter(|x| *x != p).collect();
            match class_of(&without) {
                Some(Class::Crash(s)) if Some(s) == target_signature.as_ref() => necessary.push(p),
                Some(Class::Crash(_)) => other_crash_when_left_out.push(p),
                _ => {}
            }
        }
    }
    let no_effect = (0..n)
        .filter(|p| {
            let mut pairs = 0;
            for (s, c) in results {
                if s.contains(p) || matches!(c, Class::Undetermined(_)) {
                    continue;
                }
                let mut with: Vec<usize> = s.clone();
                with.push(*p);
                with.sort_unstable();
                match class_of(&with) {
                    Some(Class::Undetermined(_)) | None => {}
                    Some(d) if d == c => pairs += 1,
                    Some(_) => return false,
                }
            }
            pairs > 0
        })
        .collect();
    Analysis {
        target_signature,
        necessary,
        other_crash_when_left_out,
        sufficient,
        no_effect,
    }
}

/// A variant the recipe defines whose resolved build is the same as `derived`'s (the variant
/// itself first), so that its folder and cache are reused.
fn existing_equal<'a>(
    recipe: &'a Recipe,
    base: &'a Variant,
    derived: &Variant,
    derived_patches: &[String],
) -> Option<&'a Variant> {
    let same = |v: &Variant| -> bool {
        let patches = match config::resolve_patches(recipe, v) {
            Ok(p) => p.into_iter().map(|p| p.file).collect::<Vec<_>>(),
            Err(_) => return false,
        };
        patches == derived_patches
            && v.toolchain == derived.toolchain
            && v.build_type == derived.build_type
            && v.targets == derived.targets
            && v.cmake == derived.cmake
    };
    std::iter::once(base)
        .chain(recipe.variants.values().filter(|v| v.name != base.name))
        .find(|v| same(v))
}

/// Whether `patches` apply onto the pristine tree (materializing the patched tree, which the
/// build then reuses). Only an input error (a hunk that matches nowhere) counts as "does not
/// apply"; anything else is a real error.
fn applies(
    ws: &Workspace,
    recipe: &Recipe,
    patches: &[&pinforge_source::patch::PatchFile],
) -> Result<Option<String>> {
    let _lock = ws.lock()?;
    let pristine = upstream::pristine(ws, recipe)?;
    match upstream::patched(ws, &pristine, patches) {
        Ok(_) => Ok(None),
        Err(e @ Error::Input { .. }) => Ok(Some(e.to_string())),
        Err(e) => Err(e),
    }
}

/// Ablate `variant`'s patch list: build and smoke every subset (or, with `soak`, build every
/// subset and then run their validation soaks, interleaved per repeat), analyse, and write the
/// record.
pub fn run(
    ws: &Workspace,
    recipe: &Recipe,
    variant: &str,
    smoke_opts: &SmokeOptions,
    soak_opts: Option<&SoakOptions>,
    build_opts: &BuildOptions,
) -> Result<AblationRecord> {
    let started = Instant::now();
    if let Some(s) = soak_opts {
        crate::soak::check(s)?;
    }
    let base = recipe.variant(variant)?;
    check_derived_names_free(recipe, variant)?;
    let patches = config::resolve_patches(recipe, base)?;
    if patches.is_empty() {
        return Err(Error::input(
            format!("ablate {variant}"),
            "the variant applies no patch: there is nothing to ablate",
        )
        .with_hint("ablate a patched variant, e.g. --variant patched-asan"));
    }
    // Checked before anything is built, as `build` does.
    pinforge_build::toolchain::resolve(&base.toolchain, &ws.tool_dirs())?;
    let ablation = Ablation {
        ws,
        recipe,
        base,
        variant,
        bundle: build::bundle_for(recipe)?,
        files: patches.iter().map(|p| p.file.clone()).collect(),
        patches,
        signer: &build_opts.signer,
    };
    let mut record = ablation.register(smoke_opts, soak_opts)?;
    let mut results: Vec<(Vec<usize>, Class)> = Vec::new();
    for subset in subsets(ablation.patches.len()) {
        let (applied, rec, class) =
            ablation.subset(&subset, smoke_opts, soak_opts.is_some(), build_opts)?;
        results.push((applied, class));
        record.subsets.push(rec);
        classify(&mut record, &results);
        // Written after every subset: a long ablation that is interrupted keeps what it found.
        record::write_json(&record.record, &record, &build_opts.signer)?;
    }
    if let Some(opts) = soak_opts {
        soak::run(
            opts,
            &mut record,
            &mut results,
            build_opts.reporter,
            &build_opts.signer,
        )?;
        classify(&mut record, &results);
    }
    let a = analyse(ablation.patches.len(), &results);
    let names = |v: &[usize]| ablation.names(v);
    record.target_signature = a.target_signature.clone();
    record.necessary = names(&a.necessary);
    record.other_crash_when_left_out = names(&a.other_crash_when_left_out);
    record.sufficient = a.sufficient.iter().map(|s| names(s)).collect();
    record.no_effect = names(&a.no_effect);
    record.finished_at = Some(manifest::now_rfc3339());
    record.seconds = started.elapsed().as_secs_f64();
    // The finished record and its summary appear together (one exchange of the folder),
    // signed inside the same transaction under `--sign`; crash points `ablate:1`, `ablate:2`.
    let dir = pinforge_base::fsx::parent_of(&record.record);
    record::commit_final(
        &dir,
        &record,
        &report::ablation_markdown(&record),
        &build_opts.signer,
        (AblateStep::Staged, AblateStep::Swapped),
    )?;
    Ok(record)
}

/// One ablation under way: the variant, its resolved patch list (by index) and the bundle
/// the subsets are picked from.
struct Ablation<'a> {
    ws: &'a Workspace,
    recipe: &'a Recipe,
    base: &'a Variant,
    variant: &'a str,
    bundle: pinforge_source::patch::Bundle,
    patches: Vec<PatchRef>,
    files: Vec<String>,
    /// Who signs the record (the build options' signer).
    signer: &'a pinforge_record::sign::record::Signer,
}

/// How a subset is to be built: the patches actually applied (by index), why one was added,
/// and why it cannot be built at all.
struct Applied {
    applied: Vec<usize>,
    dependency: Option<String>,
    undetermined: Option<String>,
}

impl Ablation<'_> {
    /// The patch files of indices `v`.
    fn names(&self, v: &[usize]) -> Vec<String> {
        v.iter().map(|&i| self.files[i].clone()).collect()
    }

    /// The patch files of a subset, as the bundle has them.
    fn pick(&self, s: &[usize]) -> Result<Vec<&pinforge_source::patch::PatchFile>> {
        self.bundle.select(Some(&self.names(s)))
    }

    /// Claim the record folder and write the record before anything is built.
    fn register(
        &self,
        smoke_opts: &SmokeOptions,
        soak_opts: Option<&SoakOptions>,
    ) -> Result<AblationRecord> {
        let (recipe, variant, n) = (self.recipe, self.variant, self.patches.len());
        let (id, dir) = record::claim_record_dir(
            self.ws.root(),
            "ablations",
            &format!("{}--{}", recipe.name, variant),
        )?;
        let record = AblationRecord {
            schema: SCHEMA.into(),
            id,
            recipe: recipe.name.clone(),
            variant: variant.into(),
            patches: self.patches.clone(),
            mode: if n <= ALL_SUBSETS_UP_TO {
                "every-subset"
            } else {
                "each-alone-and-each-left-out"
            }
            .into(),
            smoke_settings: record::SmokeSettings {
                model: smoke_opts.model.clone(),
                arch: smoke_opts.arch.name().to_string(),
                tokens: smoke_opts.tokens,
            },
            soak: soak_opts.map(soak::registered),
            subsets: Vec::new(),
            target_signature: None,
            necessary: Vec::new(),
            other_crash_when_left_out: Vec::new(),
            sufficient: Vec::new(),
            no_effect: Vec::new(),
            pinforge_version: env!("CARGO_PKG_VERSION").into(),
            started_at: manifest::now_rfc3339(),
            finished_at: None,
            seconds: 0.0,
            record: dir.join("record.json"),
            summary: dir.join("summary.md"),
        };
        record::write_json(&record.record, &record, self.signer)?;
        Ok(record)
    }

    /// Does `subset` apply alone? If not, with which one more patch (the first in series
    /// order)? If neither, it is undetermined.
    fn applied(&self, subset: &[usize], lbl: &str) -> Result<Applied> {
        let (ws, recipe, n) = (self.ws, self.recipe, self.patches.len());
        let mut out = Applied {
            applied: subset.to_vec(),
            dependency: None,
            undetermined: None,
        };
        let Some(why) = applies(ws, recipe, &self.pick(subset)?)? else {
            return Ok(out);
        };
        let found = (0..n).filter(|q| !subset.contains(q)).find_map(|q| {
            let mut with = subset.to_vec();
            with.push(q);
            with.sort_unstable();
            match self.pick(&with).and_then(|p| applies(ws, recipe, &p)) {
                Ok(None) => Some(Ok((q, with))),
                Ok(Some(_)) => None,
                Err(e) => Some(Err(e)),
            }
        });
        match found.transpose()? {
            Some((q, with)) => {
                out.dependency = Some(format!(
                    "{lbl} does not apply alone ({why}); tried with {} added",
                    self.files[q]
                ));
                out.applied = with;
            }
            None => {
                out.undetermined = Some(format!(
                    "{lbl} does not apply, alone or with one more patch of the list: {why}"
                ))
            }
        }
        Ok(out)
    }

    /// Build and smoke one subset (as an equal existing variant where there is one; with
    /// `soak`, build only: its soak runs later): the patches applied, the subset's record, and
    /// its class.
    fn subset(
        &self,
        subset: &[usize],
        smoke_opts: &SmokeOptions,
        soak: bool,
        build_opts: &BuildOptions,
    ) -> Result<(Vec<usize>, SubsetRecord, Class)> {
        let (recipe, variant) = (self.recipe, self.variant);
        let lbl = label(&self.patches, subset);
        build_opts
            .reporter
            .stage("ablate", &format!("{variant} with {lbl}"));
        let Applied {
            applied,
            dependency,
            undetermined,
        } = self.applied(subset, &lbl)?;
        let applied_files = self.names(&applied);
        let mut derived = self.base.clone();
        derived.name = derived_name(variant, &self.patches, &applied);
        derived.patches = PatchSelection::List(applied_files.clone());
        derived.description = Some(format!("ablation of {variant}: patches {lbl}"));
        derived.inherits.insert(0, variant.to_string());
        let existing = existing_equal(recipe, self.base, &derived, &applied_files);
        let to_build = existing.cloned().unwrap_or(derived);

        let mut rec = SubsetRecord {
            label: lbl.clone(),
            patches: self.names(subset),
            applied: applied_files,
            dependency,
            built_as: to_build.name.to_string(),
            existing_variant: existing.is_some(),
            cached: false,
            manifest: None,
            manifest_sha256: None,
            build_seconds: 0.0,
            smoke: None,
            class: "undetermined".into(),
            reason: undetermined.clone(),
            soak: None,
        };
        let class = match undetermined {
            Some(why) => Class::Undetermined(why),
            None => self.build_and_smoke(&to_build, &mut rec, smoke_opts, soak, build_opts)?,
        };
        if let Class::Undetermined(why) = &class {
            rec.reason = Some(why.clone());
        }
        Ok((applied, rec, class))
    }

    /// Build `to_build` and smoke it (unless `soak`: its class then waits for its soak runs),
    /// recording both in `rec`; a failed build is an undetermined class, not an error.
    fn build_and_smoke(
        &self,
        to_build: &Variant,
        rec: &mut SubsetRecord,
        smoke_opts: &SmokeOptions,
        soak: bool,
        build_opts: &BuildOptions,
    ) -> Result<Class> {
        let t = Instant::now();
        let o = match build::build(self.ws, self.recipe, to_build, build_opts) {
            Err(e) => {
                rec.build_seconds = t.elapsed().as_secs_f64();
                return Ok(Class::Undetermined(format!(
                    "did not build: {}",
                    record::error_text(&e)
                )));
            }
            Ok(o) => o,
        };
        rec.build_seconds = o.seconds;
        rec.cached = o.cached;
        if soak {
            rec.manifest_sha256 = Some(Sha256::of_file(&o.manifest)?.0);
            rec.manifest = Some(o.manifest);
            return Ok(Class::Undetermined("built; its soak has not run".into()));
        }
        build_opts.reporter.stage("smoke", to_build.name.as_str());
        let (result, side) = flip::smoke_one(&o.manifest, smoke_opts);
        rec.manifest_sha256 = Some(Sha256::of_file(&o.manifest)?.0);
        rec.manifest = Some(o.manifest);
        rec.smoke = Some(side);
        Ok(class_of_smoke(result))
    }
}

/// A smoke's result as an ablation class.
fn class_of_smoke(result: SideResult) -> Class {
    match result {
        SideResult::Smoked {
            verdict: SmokeVerdict::Ok,
            ..
        } => Class::Clean,
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(s),
            ..
        } => Class::Crash(pinforge_deploy::smoke::signature::normalize_signature(&s)),
        SideResult::Smoked {
            verdict, detail, ..
        } => Class::Undetermined(format!(
            "smoke {}: {}",
            serde_json::to_value(&verdict)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            detail.unwrap_or_default()
        )),
        SideResult::BuildFailed(e) | SideResult::NotRun(e) => Class::Undetermined(e),
    }
}

/// Name every subset's class against the empty subset's signature (known once it has run).
fn classify(record: &mut AblationRecord, results: &[(Vec<usize>, Class)]) {
    let target = results
        .iter()
        .find(|(s, _)| s.is_empty())
        .and_then(|(_, c)| match c {
            Class::Crash(s) => Some(s.clone()),
            _ => None,
        });
    for (rec, (_, class)) in record.subsets.iter_mut().zip(results) {
        rec.class = match class {
            Class::Clean => "clean",
            Class::Crash(s) if Some(s) == target.as_ref() => "signature",
            Class::Crash(_) => "other-crash",
            Class::Undetermined(_) => "undetermined",
        }
        .into();
    }
    record.target_signature = target;
}

#[cfg(test)]
mod tests;
