//! The manifest half of a build: the resolved dependencies and where each is on this machine
//! (the input digest names the build), the subjects with their annotations, the byproducts
//! (links, the file API's coverage, normalization rules, run details), and the statement.

use super::{cache, fixed, runtime, stage, Artifact, Job, Links, Site, ARTIFACT_ROOT};
use crate::cudakit::Toolkit;
use crate::toolchain::{ResolvedToolchain, Role};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::progress::Reporter;
use pinforge_record::manifest::{
    self, annotation, ExternalParameters, InternalParameters, Resource, Statement,
};
use pinforge_record::normalize::{self, Normalized};
use pinforge_source::patch::PatchFile;
use pinforge_source::recipe::Recipe;
use pinforge_source::upstream::Tree;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A subject's `normalized` annotation: the rule, the normalized digest, and what it masked.
pub(crate) fn normalized_annotation(n: &Normalized) -> Value {
    serde_json::json!({
        "rule": n.rule,
        "sha256": n.sha256.to_string(),
        "masked_names": n.masked_names,
        "build_id_masked": n.build_id_masked,
    })
}

/// Each shipped artifact path with the dependency it came from.
type Sources = Vec<(String, String)>;

/// Ship the CUDA runtime libraries the staged engine needs from the toolkit it was built with
/// (see [`runtime`]): a provisioned toolkit's root, else a system toolkit's `cuda-root`, else
/// the folder above the `nvcc` found. Returns each shipped artifact path with the dependency
/// it came from (`toolkit:NAME` or `tool:nvcc`), and each one's digest when it was linked
/// from a sealed file whose record holds it.
pub(super) fn ship_cuda_runtime(
    stage_dir: &Path,
    tools: &ResolvedToolchain,
    toolkit: Option<&Toolkit>,
    reporter: &dyn Reporter,
) -> Result<(Sources, Vec<stage::KnownDigest>)> {
    let Some(nvcc) = tools.get(Role::Nvcc) else {
        return Ok((vec![], vec![]));
    };
    let sealed = toolkit.and_then(|k| k.runtime.as_ref());
    let (root, source) = match (toolkit, &tools.cuda_root) {
        (Some(k), _) => (k.root.clone(), format!("toolkit:{}", k.record.name)),
        (None, Some(r)) => (PathBuf::from(r), "tool:nvcc".to_string()),
        (None, None) => {
            let real = std::fs::canonicalize(&nvcc.path).unwrap_or_else(|_| nvcc.path.clone());
            match real.parent().and_then(Path::parent) {
                Some(r) => (r.to_path_buf(), "tool:nvcc".to_string()),
                None => return Ok((vec![], vec![])),
            }
        }
    };
    let runtime::Shipping { shipped, missing } = runtime::ship(stage_dir, &root, sealed)?;
    if !shipped.is_empty() {
        let linked = shipped.iter().filter(|s| s.copied.is_none()).count();
        let names: Vec<&str> = shipped.iter().map(|s| s.path.as_str()).collect();
        reporter.stage(
            "ship",
            &format!(
                "CUDA runtime from {source}: {} ({linked} of {} hard-linked from the sealed toolkit)",
                names.join(", "),
                shipped.len()
            ),
        );
    }
    // A copy where a link was expected costs ~557 MB per CUDA build: say which, and why.
    for s in shipped.iter().filter(|s| s.copied.is_some()) {
        if let Some(why) = &s.copied {
            reporter.stage("note", &format!("{} copied, not linked: {why}", s.path));
        }
    }
    if !missing.is_empty() {
        reporter.stage(
            "note",
            &format!(
                "the engine needs {} but the CUDA toolkit at {} does not hold it: the machine's \
                 loader must find it, or the engine will not load",
                missing.join(", "),
                root.display()
            ),
        );
    }
    let known = shipped.iter().map(|s| (s.path.clone(), s.known)).collect();
    let sources = shipped
        .into_iter()
        .map(|s| (s.path, source.clone()))
        .collect();
    Ok((sources, known))
}

/// What names a build: its parameters and resolved dependencies (hashed into the input
/// digest), and where each dependency is on this machine (for `verify`).
pub(super) struct Inputs {
    pub(super) params: ExternalParameters,
    pub(super) deps: Vec<Resource>,
    pub(super) inputs: BTreeMap<String, PathBuf>,
    pub(super) input_digest: Sha256,
}

/// The build's inputs, from the job and the configure template.
pub(super) fn inputs(job: &Job, cmake_args: Vec<String>) -> Result<Inputs> {
    let (mut deps, inputs) =
        dependencies(job.recipe, &job.tree, &job.patches, &job.tools, &job.vdir)?;
    if let Some(k) = &job.toolkit {
        deps.push(super::toolkit::resource(k));
    }
    let params = ExternalParameters {
        recipe: job.recipe.name.clone(),
        variant: job.variant.name.to_string(),
        build_type: job.variant.build_type.clone(),
        targets: job.variant.targets.clone(),
        cmake_args,
        patches: job.patches.iter().map(|p| p.id.to_string()).collect(),
    };
    let input_digest = manifest::input_digest(&params, &deps)?;
    Ok(Inputs {
        params,
        deps,
        inputs,
        input_digest,
    })
}

/// The resolved dependencies (for the input digest) and where each is on this machine.
fn dependencies(
    recipe: &Recipe,
    tree: &Tree,
    patches: &[&PatchFile],
    tools: &ResolvedToolchain,
    vdir: &Path,
) -> Result<(Vec<Resource>, BTreeMap<String, PathBuf>)> {
    let mut deps = Vec::new();
    let mut inputs = BTreeMap::new();
    let rel = |p: &Path| relative_to(p, vdir);

    let pin = &tree.pin;
    deps.push(upstream(tree));
    if let Some(a) = &pin.archive {
        // only the file digest can be re-checked; git pins are checked through the tree
        if pin.sha256.is_some() {
            inputs.insert("upstream".to_string(), rel(a));
        }
    }

    deps.push(Resource {
        name: "source-tree".into(),
        uri: None,
        digest: BTreeMap::from([("gitCommit".to_string(), tree.head.to_string())]),
        annotations: BTreeMap::from([(
            "base_commit".to_string(),
            Value::from(tree.base_commit.to_string()),
        )]),
    });
    inputs.insert("source-tree".into(), rel(&tree.path));

    for (i, p) in patches.iter().enumerate() {
        let dep = patch(tree, i, p);
        if p.origin.exists() {
            inputs.insert(dep.name.clone(), rel(&p.origin));
        }
        deps.push(dep);
    }

    deps.push(recipe_resource(recipe));
    if !recipe.embedded {
        inputs.insert("recipe".into(), rel(&recipe.path));
    }

    for (role, t) in &tools.tools {
        let name = format!("tool:{role}");
        deps.push(Resource {
            name: name.clone(),
            uri: None,
            digest: BTreeMap::from([("sha256".to_string(), t.sha256.to_string())]),
            annotations: BTreeMap::from([
                ("version".to_string(), Value::from(t.version.clone())),
                (
                    "version_line".to_string(),
                    Value::from(t.version_line.clone()),
                ),
            ]),
        });
        inputs.insert(name, t.real_path.clone());
    }
    Ok((deps, inputs))
}

/// The `upstream` dependency: the pin, by digest and build info.
fn upstream(tree: &Tree) -> Resource {
    let pin = &tree.pin;
    let mut digest = BTreeMap::new();
    if let Some(s) = pin.sha256 {
        digest.insert("sha256".to_string(), s.to_string());
    }
    if let Some(c) = pin.git_commit {
        digest.insert("gitCommit".to_string(), c.to_string());
    }
    let mut ann = BTreeMap::from([
        ("kind".to_string(), Value::from(pin.kind.clone())),
        ("build_number".to_string(), Value::from(pin.build_number)),
        (
            "build_commit".to_string(),
            Value::from(pin.build_commit.clone()),
        ),
    ]);
    if let Some(s) = &pin.subdir {
        ann.insert("subdir".into(), Value::from(s.clone()));
    }
    if let Some(t) = &pin.tag {
        ann.insert("tag".into(), Value::from(t.clone()));
    }
    // An npm pin's tree comes from a git bundle inside the tarball: its digest too.
    if let Some(b) = pin.bundle_sha256 {
        ann.insert("bundle_sha256".into(), Value::from(b.to_string()));
    }
    if pin.skipped_git_entries > 0 {
        let n = Value::from(pin.skipped_git_entries);
        ann.insert("skipped_git_entries".into(), n);
    }
    Resource {
        name: "upstream".into(),
        uri: Some(pin.uri.clone()),
        digest,
        annotations: ann,
    }
}

/// The `patch:ID` dependency of the `i`-th applied patch.
fn patch(tree: &Tree, i: usize, p: &PatchFile) -> Resource {
    let status = p
        .attribution
        .as_ref()
        .map(|a| a.status.to_string())
        .unwrap_or_default();
    let commit = tree
        .patches
        .get(i)
        .map(|r| r.commit.to_string())
        .unwrap_or_default();
    Resource {
        name: format!("patch:{}", p.id),
        uri: Some(format!("patches/{}", p.id)),
        digest: BTreeMap::from([("sha256".to_string(), p.sha256.to_string())]),
        annotations: BTreeMap::from([
            ("order".to_string(), Value::from(i + 1)),
            ("upstream_status".to_string(), Value::from(status)),
            ("vendor_commit".to_string(), Value::from(commit)),
            (
                "hunk_offsets".to_string(),
                Value::from(hunk_offsets(tree, i)),
            ),
        ]),
    }
}

/// The `recipe` dependency.
fn recipe_resource(recipe: &Recipe) -> Resource {
    Resource {
        name: "recipe".into(),
        uri: Some(if recipe.embedded {
            recipe.path.display().to_string()
        } else {
            format!(
                "recipes/{}",
                recipe
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        }),
        digest: BTreeMap::from([("sha256".to_string(), recipe.sha256.to_string())]),
        annotations: BTreeMap::new(),
    }
}

/// `path` relative to `base` when both are absolute and share a prefix (so a moved workspace
/// still verifies); otherwise the absolute path.
fn relative_to(path: &Path, base: &Path) -> PathBuf {
    let Ok(path) = pinforge_base::fsx::absolute(path) else {
        return path.to_path_buf();
    };
    let pc: Vec<_> = path.components().collect();
    let bc: Vec<_> = base.components().collect();
    let common = pc.iter().zip(&bc).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return path;
    }
    let mut out = PathBuf::new();
    for _ in common..bc.len() {
        out.push("..");
    }
    for c in &pc[common..] {
        out.push(c);
    }
    out
}

/// The moved hunks of the `i`-th applied patch as `FILE#N ±K` strings (empty: none moved).
fn hunk_offsets(tree: &Tree, i: usize) -> Vec<String> {
    tree.patches
        .get(i)
        .map(|r| r.hunk_offsets.iter().map(ToString::to_string).collect())
        .unwrap_or_default()
}

/// What the stage holds once the install ran: the artifacts and links, the CUDA runtime
/// shipped beside them, every built library's covering artifact, and the files that name a
/// machine path.
pub(super) struct Staged {
    pub(super) artifacts: Vec<Artifact>,
    pub(super) links: Links,
    /// What the read that hashed each non-shipped artifact found (see `stage::collect_examined`).
    pub(super) examined: BTreeMap<String, stage::Examined>,
    pub(super) shipped: Vec<(String, String)>,
    pub(super) coverage: Vec<stage::Coverage>,
    pub(super) machine_paths: Vec<(String, String)>,
}

/// The subjects, and the normalization rules their annotations use.
pub(super) fn subjects(
    staged: &Staged,
    site: &Site,
    reporter: &dyn Reporter,
) -> Result<(Vec<Resource>, BTreeSet<&'static str>)> {
    let mut rules_used = BTreeSet::new();
    let mut path_hashed: Vec<String> = Vec::new();
    let mut subjects: Vec<Resource> = Vec::with_capacity(staged.artifacts.len());
    for a in &staged.artifacts {
        let mut ann = BTreeMap::from([(annotation::SIZE.to_string(), Value::from(a.size))]);
        if staged.machine_paths.iter().any(|(f, _)| f == &a.path) {
            ann.insert(annotation::EMBEDS_MACHINE_PATH.into(), Value::from(true));
        }
        if let Some((_, source)) = staged.shipped.iter().find(|(p, _)| p == &a.path) {
            ann.insert(annotation::SHIPPED_FROM.into(), Value::from(source.clone()));
        } else {
            // Examined in the read that hashed it: the file is not read again here.
            let Some(seen) = staged.examined.get(&a.path) else {
                return Err(Error::Internal(format!("{} was hashed unexamined", a.path)));
            };
            if let Some(n) = &seen.normalized {
                rules_used.insert(n.rule);
                ann.insert(annotation::NORMALIZED.into(), normalized_annotation(n));
            }
            if seen.path_hashed {
                path_hashed_names(&mut ann, &site.paths);
                path_hashed.push(a.path.clone());
            }
        }
        subjects.push(Resource {
            name: a.path.clone(),
            uri: None,
            digest: BTreeMap::from([("sha256".to_string(), a.sha256.to_string())]),
            annotations: ann,
        });
    }
    if !path_hashed.is_empty() && !site.paths.fixed() {
        reporter.stage(
            "note",
            &format!(
                "{} holds nvcc names hashed from the source's real path (`_INTERNAL_…`): it \
                 will differ in another workspace or vendor tree (marked `embeds_machine_path`)",
                path_hashed.join(", ")
            ),
        );
    }
    Ok((subjects, rules_used))
}

/// The annotations of a subject with nvcc names hashed from the source's real path, not the
/// path: the scan for machine paths cannot see it. At the fixed path it is the same in every
/// workspace sharing the cache folder (`build_path` names it); at the real folder another tree
/// gives other bytes.
fn path_hashed_names(ann: &mut BTreeMap<String, Value>, paths: &fixed::BuildPaths) {
    ann.insert(annotation::NVCC_PATH_HASHED_NAMES.into(), Value::from(true));
    if paths.fixed() {
        // What the names hash: a build at the same folder (any workspace, the same uid) gives
        // the same names, another folder others; flip compares it.
        ann.insert(
            annotation::HASHED_SOURCE_PATH.into(),
            Value::from(paths.src.display().to_string()),
        );
    } else {
        ann.insert(annotation::EMBEDS_MACHINE_PATH.into(), Value::from(true));
    }
}

/// The byproducts: links, the file API's coverage, the normalization rules in words, and the
/// run details (compile cache, build path, log).
pub(super) fn byproducts(
    staged: &Staged,
    rules_used: &BTreeSet<&'static str>,
    compile_cache: &cache::Stats,
    tools: &ResolvedToolchain,
    site: &Site,
) -> Result<Vec<Resource>> {
    let mut byproducts: Vec<Resource> = staged
        .links
        .iter()
        .map(|(name, target)| Resource {
            name: name.clone(),
            uri: None,
            digest: BTreeMap::new(),
            annotations: BTreeMap::from([(
                annotation::LINK_TARGET.to_string(),
                Value::from(target.clone()),
            )]),
        })
        .collect();
    // What the build folder built and which artifact installs it: the file API cross-check,
    // kept so that a reader can tell the manifest covers every library.
    byproducts.extend(staged.coverage.iter().map(|c| Resource {
        name: format!("built:{}", c.built),
        uri: None,
        digest: BTreeMap::from([("sha256".to_string(), c.built_sha256.to_string())]),
        annotations: BTreeMap::from([
            (
                annotation::TARGET.to_string(),
                Value::from(c.target.clone()),
            ),
            (
                annotation::INSTALLED_AS.to_string(),
                Value::from(c.artifact.clone()),
            ),
        ]),
    }));
    // The reproducibility rule any subject's `normalized` digest follows, stated in words so
    // that a reader of this manifest alone knows what the normalized digest leaves out.
    byproducts.extend(rules_used.iter().map(|rule| Resource {
        name: format!("normalization:{rule}"),
        uri: None,
        digest: BTreeMap::new(),
        annotations: BTreeMap::from([(
            annotation::RULE.to_string(),
            Value::from(normalize::NVCC_TMPXFT_TEXT),
        )]),
    }));
    // Run details, not inputs: a hit gives the bytes a compile would, so it names no build.
    byproducts.push(compile_cache.byproduct(tools.tool(Role::Ccache)?));
    byproducts.push(site.paths.resource());
    let (log_digest, _) = Sha256::of_file(&site.log.path)?;
    byproducts.push(Resource {
        name: "build.log".into(),
        uri: None,
        digest: BTreeMap::from([("sha256".to_string(), log_digest.to_string())]),
        annotations: BTreeMap::new(),
    });
    Ok(byproducts)
}

/// The statement of one build.
pub(super) fn statement(
    subjects: Vec<Resource>,
    inputs: Inputs,
    staging: &stage::Staging,
    started_on: String,
    byproducts: Vec<Resource>,
) -> Statement {
    let Inputs {
        params,
        deps,
        inputs,
        input_digest,
    } = inputs;
    Statement {
        type_: manifest::STATEMENT_TYPE.into(),
        subject: subjects,
        predicate_type: manifest::PREDICATE_TYPE.into(),
        predicate: manifest::Provenance {
            build_definition: manifest::BuildDefinition {
                build_type: manifest::BUILD_TYPE.into(),
                external_parameters: params,
                internal_parameters: InternalParameters {
                    artifact_root: ARTIFACT_ROOT.into(),
                    staging: staging.as_str().into(),
                    inputs,
                    input_digest,
                },
                resolved_dependencies: deps,
            },
            run_details: manifest::RunDetails {
                builder: manifest::Builder {
                    id: "pinforge".into(),
                    version: BTreeMap::from([(
                        "pinforge".to_string(),
                        env!("CARGO_PKG_VERSION").to_string(),
                    )]),
                },
                metadata: manifest::Metadata {
                    invocation_id: input_digest.to_string(),
                    started_on,
                    finished_on: manifest::now_rfc3339(),
                },
                byproducts,
            },
        },
    }
}

/// Write the manifest, unless the build is cached: no Ninja step ran and the previous
/// manifest names the same inputs and outputs, so it is kept byte for byte (nothing was
/// built). Returns the manifest's path and whether the build is cached.
pub(super) fn write(
    vdir: &Path,
    statement: &Statement,
    steps_run: u64,
    signer: &pinforge_record::sign::record::Signer,
) -> Result<(PathBuf, bool)> {
    let path = vdir.join("manifest.json");
    let previous = Statement::read(&path).ok();
    let cached = steps_run == 0
        && previous.as_ref().is_some_and(|p| {
            p.input_digest() == statement.input_digest() && p.subject == statement.subject
        });
    // With `--sign`, the sidecars are renamed before the manifest (its commit point), so a
    // new manifest never appears unsigned; a kept one is signed as it stands.
    if !cached {
        signer.write_record(&path, statement.to_json()?.as_bytes())?;
    } else {
        signer.sign_kept(&path)?;
    }
    Ok((path, cached))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_walk_up_and_down() {
        assert_eq!(
            relative_to(Path::new("/w/patches/a.patch"), Path::new("/w/build/r/v")),
            PathBuf::from("../../../patches/a.patch")
        );
        assert_eq!(
            relative_to(Path::new("/w/build/r/v/x"), Path::new("/w/build/r/v")),
            PathBuf::from("x")
        );
    }
}
