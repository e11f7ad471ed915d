//! Building one variant: check the toolchain and patches before touching anything, materialize
//! the vendor tree, configure CMake (only when its arguments changed), build the targets with
//! Ninja while feeding its own progress to the reporter and the full output to a log, stage
//! what the project's install rules install (`stage`), check with CMake's file API (`fileapi`)
//! that every built library is covered, ship the CUDA runtime beside a CUDA engine (`runtime`),
//! hash the artifacts (with a normalized digest where nvcc left pid noise, see
//! [`crate::artifact::normalize`]), and write the manifest.
//! Machine-specific paths are kept out of the binaries (prefix maps, `$ORIGIN` run paths, a
//! fixed install prefix, build info from the pin).

pub mod cache;
pub mod fileapi;
pub mod fixed;
pub mod runtime;
pub mod stage;
mod stamp;

use crate::artifact::manifest::{
    self, ExternalParameters, InternalParameters, Resource, Statement,
};
use crate::artifact::toolchain::{self, ResolvedToolchain};
use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::process;
use crate::base::progress::{parse_ninja_status, Reporter};
use crate::base::workspace::Workspace;
use crate::source::patch::{Bundle, PatchFile};
use crate::source::recipe::{PatchSelection, Recipe, Variant};
use crate::source::upstream::{self, Tree};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where the prefix maps send the source and build folders inside the binaries.
pub const SRC_MAP: &str = "/pinforge/src";
/// See [`SRC_MAP`].
pub const BUILD_MAP: &str = "/pinforge/build";

/// Bumped whenever the way pinforge configures changes, so kept build folders reconfigure.
const CONFIGURE_SCHEME: u32 = 2;

/// The artifact root, relative to the variant folder: the staged install prefix.
pub const ARTIFACT_ROOT: &str = "stage";

/// Environment variables removed from every CMake and Ninja run: each changes the binaries
/// without appearing in the recorded CMake arguments.
pub const SCRUBBED_ENV: &[&str] = &[
    "SOURCE_DATE_EPOCH",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "CUDAFLAGS",
    "CUDAHOSTCXX",
    "CC",
    "CXX",
    "CUDACXX",
    "CMAKE_GENERATOR",
    "CMAKE_BUILD_TYPE",
    "CMAKE_TOOLCHAIN_FILE",
    "CMAKE_PREFIX_PATH",
    "CMAKE_C_COMPILER_LAUNCHER",
    "CMAKE_CXX_COMPILER_LAUNCHER",
    "CMAKE_INSTALL_PREFIX",
    "CMAKE_INSTALL_MODE",
    "DESTDIR",
];

/// The `-D` variables whose values are compiler flag strings: pinforge's reproducibility flags
/// come first and a recipe's value is appended, never replacing them.
pub const FLAG_VARIABLES: &[&str] = &["CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS", "CMAKE_CUDA_FLAGS"];

/// One output artifact (the `build --json` contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Artifact {
    /// Path relative to the artifact root.
    pub path: String,
    /// SHA-256.
    pub sha256: Sha256,
    /// Size in bytes.
    pub size: u64,
}

/// What a build did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BuildOutcome {
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
    /// Manifest path.
    pub manifest: PathBuf,
    /// Input digest (names the build).
    pub input_digest: Sha256,
    /// True when nothing was rebuilt and the outputs equal the previous manifest's.
    pub cached: bool,
    /// Output artifacts: the files the project's install rules installed into the stage.
    pub artifacts: Vec<Artifact>,
    /// Links among the artifacts: (path relative to the artifact root, link target).
    pub links: Links,
    /// Folder the artifact paths are relative to: `build/RECIPE/VARIANT/stage`, a standard
    /// prefix (`lib/`, `include/`, `lib/cmake/`, `lib/pkgconfig/`).
    pub artifact_root: PathBuf,
    /// How the stage was filled.
    pub staging: stage::Staging,
    /// Every library the requested targets built, with the artifact that covers it.
    pub coverage: Vec<stage::Coverage>,
    /// Targets built besides the requested ones because install rules name them.
    pub install_targets: Vec<String>,
    /// The full build log.
    pub log: PathBuf,
    /// Source tree the build used.
    pub source_tree: PathBuf,
    /// Ninja steps run (0 for a no-op).
    pub steps_run: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// What the compile cache did for this build.
    pub compile_cache: cache::Stats,
}

/// Options for [`build`].
pub struct BuildOptions<'a> {
    /// Ninja parallelism (None: Ninja's default).
    pub jobs: Option<usize>,
    /// Progress sink.
    pub reporter: &'a dyn Reporter,
    /// The compile cache (the environment's settings with a command's `--no-cache`,
    /// `--cache-dir`, … applied): passed in, so that the environment is read once, at the top.
    pub compile_cache: cache::Settings,
}

/// The patch bundle a recipe uses: its folder, or the embedded one for the embedded recipe.
pub fn bundle_for(recipe: &Recipe) -> Result<Bundle> {
    match &recipe.patches_dir {
        Some(dir) => Bundle::load(dir),
        None => Bundle::embedded(),
    }
}

/// Build one variant of a recipe.
pub fn build(
    ws: &Workspace,
    recipe: &Recipe,
    variant: &Variant,
    opts: &BuildOptions,
) -> Result<BuildOutcome> {
    let started = Instant::now();
    let started_on = manifest::now_rfc3339();
    let _lock = ws.lock()?;
    if let Some(o) = stamp::fresh(ws, &opts.compile_cache, recipe, variant, opts.reporter) {
        let seconds = started.elapsed().as_secs_f64();
        return Ok(BuildOutcome { seconds, ..o });
    }
    let notes = stamp::Recorder::new(opts.reporter);
    let reporter: &dyn Reporter = &notes;

    // Everything that can be refused is checked before vendor/ is touched.
    reporter.stage("toolchain", &variant.toolchain.name);
    let (toolchain, toolkit) = crate::artifact::cudakit::for_build(
        &variant.toolchain,
        &ws.tool_dirs(),
        &|stage, detail| reporter.stage(stage, detail),
    )?;
    let tools = toolchain::resolve(&toolchain, &ws.tool_dirs())?;
    opts.compile_cache.check()?;
    // A variant that takes no patch needs no bundle: a recipe of plain upstream builds (a
    // control, a new project) must not require an empty patches/ folder.
    let bundle = match &variant.patches {
        PatchSelection::List(names) if names.is_empty() => None,
        _ => Some(bundle_for(recipe)?),
    };
    let patches: Vec<&PatchFile> = match (&variant.patches, &bundle) {
        (PatchSelection::Series, Some(b)) => b.select(None)?,
        (PatchSelection::List(names), Some(b)) => b.select(Some(names))?,
        (_, None) => Vec::new(),
    };
    for p in &patches {
        crate::source::patch::apply::parse_diff(p)?;
    }

    reporter.stage("vendor", &recipe.name);
    let pristine = upstream::pristine(ws, recipe)?;
    if let Some(note) = pristine.pin.skipped_git_note() {
        reporter.stage("note", &note);
    }
    let tree = upstream::patched(ws, &pristine, &patches)?;
    // A hunk that applied at another line: the build goes on, the patch is due a refresh.
    for r in &tree.patches {
        for o in &r.hunk_offsets {
            reporter.stage("note", &o.note(&r.file));
        }
    }

    let before = stamp::Before::take(ws, recipe, &patches, &tools, &tree);

    let vdir = ws.variant_dir(&recipe.name, variant.name.as_str());
    let cmake_dir = vdir.join("cmake");
    fsx_create(&cmake_dir)?;
    let log_path = vdir.join("build.log");
    let log = Arc::new(Mutex::new(
        std::fs::File::create(&log_path).at("create", &log_path)?,
    ));

    let via_link = cache::source_link(&vdir, &tree.path, &cmake_dir)?;
    let kit_id = toolkit.as_ref().map(|k| k.record.tree_sha256.short(12));
    let paths = fixed::BuildPaths::resolve(
        &tree.path,
        &vdir,
        toolkit
            .as_ref()
            .zip(kit_id.as_deref())
            .map(|(k, id)| (k.root.as_path(), id)),
        &tools.tool("cmake")?.path,
    )?;
    let nvcc = tools.tools.contains_key("nvcc");
    if let (true, Some(why)) = (nvcc, &paths.unfixed) {
        reporter.stage(
            "note",
            &format!(
                "the build runs at its real folder ({why}): nvcc hashes that path into its \
                 CUDA objects, so another workspace builds other bytes"
            ),
        );
    }
    // At the fixed path every workspace names its sources and build folder alike: base_dir is
    // the fixed folder (so compiles name `../src/...` as at the real folder, and a
    // sanitizer's record of the file name stays free of any path), and nvcc's prefix maps
    // need no ignore_options. At the real folder, base_dir is the workspace.
    let (base_dir, ignored) = match &paths.root {
        Some(root) => (root.as_path(), Vec::new()),
        None if nvcc => {
            let ignored = variant_prefix_maps(NVCC_PREFIX)
                .iter()
                .map(|w| {
                    w.replace("${SRC}", &via_link.display().to_string())
                        .replace("${BUILD}", &cmake_dir.display().to_string())
                })
                .collect();
            (ws.root(), ignored)
        }
        None => (ws.root(), Vec::new()),
    };
    let cache = cache::CompileCache::prepare(
        &opts.compile_cache,
        &tools,
        base_dir,
        paths.root.as_deref().filter(|_| nvcc),
        &vdir,
        &ignored,
    )?;
    let seen_src = if paths.fixed() {
        paths.src.clone()
    } else {
        via_link
    };
    let seen_cmake = paths.cmake_dir();
    let (template, actual) = cmake_args(
        variant,
        &paths.seen_tools(&tools),
        &Tree {
            path: seen_src,
            ..tree.clone()
        },
        &seen_cmake,
        &paths.variant,
    );
    write_git_shim(&vdir, &tree)?;
    fileapi::write_query(&cmake_dir)?;

    // Configure only when the arguments changed (Ninja re-runs CMake itself when a
    // CMakeLists.txt changes); a kept build directory makes the rebuild incremental.
    let stamp = cmake_dir.join("pinforge-configure.json");
    let stamp_body = serde_json::to_vec_pretty(&serde_json::json!({
        "scheme": CONFIGURE_SCHEME,
        "scrubbed_env": SCRUBBED_ENV,
        "args": &actual,
        "source": &tree.path,
        "build_path": &paths,
    }))
    .map_err(|e| Error::Internal(e.to_string()))?;
    let configured = cmake_dir.join("CMakeCache.txt").exists()
        && cmake_dir.join(".cmake/api/v1/reply").is_dir()
        && std::fs::read(&stamp).ok().as_deref() == Some(stamp_body.as_slice());
    if !configured {
        reporter.stage("configure", variant.name.as_str());
        let mut cmd = paths.command(&tools.tool("cmake")?.path)?;
        // --fresh: CMake keeps option values in its cache, so an option the recipe no longer
        // sets (or a default that depends on the environment) would otherwise survive.
        cmd.arg("--fresh").args(&actual);
        cache.apply(&mut cmd);
        run_logged(&mut cmd, &[], &log, &log_path, reporter)?;
        crate::base::fsx::write_atomic(&stamp, &stamp_body)?;
    }

    // `cmake --install` installs every target its rules name: those must be built too, or the
    // install fails on a missing file (a recipe keeps this set small with the project's
    // options, e.g. LLAMA_BUILD_TOOLS=OFF).
    let model = fileapi::read(&cmake_dir)?;
    model.closure(&variant.targets)?;
    let install_targets: Vec<String> = model
        .installed_targets
        .iter()
        .filter(|t| !variant.targets.contains(t))
        .cloned()
        .collect();

    reporter.stage("build", variant.name.as_str());
    let mut cmd = paths.command(&tools.tool("ninja")?.path)?;
    cmd.arg("-C").arg(&seen_cmake);
    if let Some(j) = opts.jobs {
        cmd.arg(format!("-j{j}"));
    }
    cmd.args(&variant.targets).args(&install_targets);
    cache.reset()?;
    cache.apply(&mut cmd);
    let ran = run_logged(&mut cmd, &[], &log, &log_path, reporter);
    // Before `?`: with the cache off, reading the counts also removes the throwaway store,
    // which a failed build must not leave behind either.
    let compile_cache = cache.stats();
    let steps_run = ran?;
    let compile_cache = compile_cache?;
    reporter.finish();

    reporter.stage("install", variant.name.as_str());
    let stage_dir = vdir.join(ARTIFACT_ROOT);
    let destdir = vdir.join("stage.destdir");
    stage::clear(&destdir)?;
    fsx_create(&destdir)?;
    let mut cmd = paths.command(&tools.tool("cmake")?.path)?;
    cmd.arg("--install").arg(&seen_cmake);
    run_logged(
        &mut cmd,
        &[("DESTDIR", destdir.as_os_str())],
        &log,
        &log_path,
        reporter,
    )?;
    // A build that wrote into its pinned source (a configure_file into the source folder)
    // would no longer be the tree the manifest names: say so now, not at the next verify.
    upstream::check_clean(&tree.path, tree.head).map_err(|e| {
        Error::check(
            tree.path.display(),
            format!("the build wrote into its pinned source tree: {e}"),
        )
    })?;
    // The code model again: Ninja re-runs CMake when a CMakeLists.txt changed.
    let model = fileapi::read(&cmake_dir)?;
    let staging = if stage::take_prefix(&destdir, &stage_dir)? {
        stage::Staging::CmakeInstall
    } else {
        stage::clear(&stage_dir)?;
        stage::stage_built_libraries(&model, &variant.targets, &stage_dir)?;
        stage::Staging::BuiltLibraries
    };
    stage::relocate(&stage_dir)?;
    // The source tree and the variant folder are long, unique paths; the workspace root alone
    // (say `/srv`) could occur in any binary by chance.
    // The fixed folder is the same in every workspace, but still a folder of this machine
    // (and user): an artifact that names it is marked too.
    let machine_paths = match &paths.root {
        Some(root) => stage::find_machine_paths(&stage_dir, &[&tree.path, &vdir, root])?,
        None => stage::find_machine_paths(&stage_dir, &[&tree.path, &vdir])?,
    };
    if !machine_paths.is_empty() {
        let files: Vec<&str> = machine_paths.iter().map(|(f, _)| f.as_str()).collect();
        reporter.stage(
            "note",
            &format!(
                "{} staged file(s) embed this machine's build paths and will differ in another \
                 workspace or for another user (marked `embeds_machine_path` in the manifest): {}",
                files.len(),
                files.join(", ")
            ),
        );
    }
    // After the machine-path scan: the shipped libraries are the toolkit's bytes, not ours.
    let shipped = ship_cuda_runtime(&stage_dir, &tools, toolkit.as_ref(), reporter)?;
    let (artifacts, links) = stage::collect(&stage_dir)?;
    if artifacts.is_empty() {
        return Err(Error::check(
            format!("build of {}/{}", recipe.name, variant.name),
            "finished but neither the install rules nor the requested targets produced a file",
        ));
    }
    let coverage = stage::cover(&model, &variant.targets, &cmake_dir, &artifacts, &links)?;

    let manifest_path = vdir.join("manifest.json");
    let (mut deps, inputs) = dependencies(recipe, &tree, &patches, &tools, &vdir)?;
    if let Some(k) = &toolkit {
        deps.push(crate::artifact::cudakit::resource(k));
    }
    let params = ExternalParameters {
        recipe: recipe.name.clone(),
        variant: variant.name.to_string(),
        build_type: variant.build_type.clone(),
        targets: variant.targets.clone(),
        cmake_args: template,
        patches: patches.iter().map(|p| p.id.to_string()).collect(),
    };
    let input_digest = manifest::input_digest(&params, &deps)?;

    let previous = Statement::read(&manifest_path).ok();
    let mut rules_used = BTreeSet::new();
    let mut path_hashed: Vec<String> = Vec::new();
    let mut subjects: Vec<Resource> = Vec::with_capacity(artifacts.len());
    for a in &artifacts {
        let mut ann = BTreeMap::from([("size".to_string(), Value::from(a.size))]);
        if machine_paths.iter().any(|(f, _)| f == &a.path) {
            ann.insert("embeds_machine_path".into(), Value::from(true));
        }
        if let Some((_, source)) = shipped.iter().find(|(p, _)| p == &a.path) {
            ann.insert("shipped_from".into(), Value::from(source.clone()));
        } else {
            let bytes = crate::base::fsx::read(&stage_dir.join(&a.path))?;
            if let Some(n) = crate::artifact::normalize::normalize(&bytes) {
                rules_used.insert(n.rule);
                ann.insert("normalized".into(), normalized_annotation(&n));
            }
            // The hash of the source's real path, not the path: the scan for machine paths
            // cannot see it. At the fixed path it is the same in every workspace sharing the
            // cache folder (`build_path` names it); at the real folder another tree gives
            // other bytes.
            if crate::artifact::normalize::has_path_hashed_names(&bytes) {
                ann.insert("nvcc_path_hashed_names".into(), Value::from(true));
                if paths.fixed() {
                    // What the names hash: a build at the same folder (any workspace, the
                    // same uid) gives the same names, another folder others; flip compares it.
                    ann.insert(
                        "hashed_source_path".into(),
                        Value::from(paths.src.display().to_string()),
                    );
                } else {
                    ann.insert("embeds_machine_path".into(), Value::from(true));
                }
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
    if !path_hashed.is_empty() && !paths.fixed() {
        reporter.stage(
            "note",
            &format!(
                "{} holds nvcc names hashed from the source's real path (`_INTERNAL_…`): it \
                 will differ in another workspace or vendor tree (marked `embeds_machine_path`)",
                path_hashed.join(", ")
            ),
        );
    }
    let cached = steps_run == 0
        && previous
            .as_ref()
            .is_some_and(|p| p.input_digest() == input_digest && p.subject == subjects);

    let mut byproducts: Vec<Resource> = links
        .iter()
        .map(|(name, target)| Resource {
            name: name.clone(),
            uri: None,
            digest: BTreeMap::new(),
            annotations: BTreeMap::from([("link_target".to_string(), Value::from(target.clone()))]),
        })
        .collect();
    // What the build folder built and which artifact installs it: the file API cross-check,
    // kept so that a reader can tell the manifest covers every library.
    byproducts.extend(coverage.iter().map(|c| Resource {
        name: format!("built:{}", c.built),
        uri: None,
        digest: BTreeMap::from([("sha256".to_string(), c.built_sha256.to_string())]),
        annotations: BTreeMap::from([
            ("target".to_string(), Value::from(c.target.clone())),
            ("installed_as".to_string(), Value::from(c.artifact.clone())),
        ]),
    }));
    // The reproducibility rule any subject's `normalized` digest follows, stated in words so
    // that a reader of this manifest alone knows what the normalized digest leaves out.
    byproducts.extend(rules_used.iter().map(|rule| Resource {
        name: format!("normalization:{rule}"),
        uri: None,
        digest: BTreeMap::new(),
        annotations: BTreeMap::from([(
            "rule".to_string(),
            Value::from(crate::artifact::normalize::NVCC_TMPXFT_TEXT),
        )]),
    }));
    // Run details, not inputs: a hit gives the bytes a compile would, so it names no build.
    byproducts.push(compile_cache.byproduct(tools.tool(cache::ROLE)?));
    byproducts.push(paths.resource());
    let (log_digest, _) = Sha256::of_file(&log_path)?;
    byproducts.push(Resource {
        name: "build.log".into(),
        uri: None,
        digest: BTreeMap::from([("sha256".to_string(), log_digest.to_string())]),
        annotations: BTreeMap::new(),
    });

    let statement = Statement {
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
    };
    // A cached build keeps the previous manifest byte for byte: nothing was built.
    if !cached {
        crate::base::fsx::write_atomic(&manifest_path, statement.to_json()?.as_bytes())?;
    }

    let outcome = BuildOutcome {
        recipe: recipe.name.clone(),
        variant: variant.name.to_string(),
        manifest: manifest_path,
        input_digest,
        cached,
        artifacts,
        links,
        artifact_root: stage_dir,
        staging,
        coverage,
        install_targets,
        log: log_path,
        source_tree: tree.path.clone(),
        steps_run,
        seconds: started.elapsed().as_secs_f64(),
        compile_cache,
    };
    // A stamp that cannot be written only costs the next build its fast path.
    let _ = stamp::write(
        ws,
        &opts.compile_cache,
        recipe,
        variant,
        before,
        &outcome,
        &notes,
        &paths,
    );
    Ok(outcome)
}

/// A subject's `normalized` annotation: the rule, the normalized digest, and what it masked.
pub fn normalized_annotation(n: &crate::artifact::normalize::Normalized) -> Value {
    serde_json::json!({
        "rule": n.rule,
        "sha256": n.sha256.to_string(),
        "masked_names": n.masked_names,
        "build_id_masked": n.build_id_masked,
    })
}

/// Ship the CUDA runtime libraries the staged engine needs from the toolkit it was built with
/// (see [`runtime`]): a provisioned toolkit's root, else a system toolkit's `cuda-root`, else
/// the folder above the `nvcc` found. Returns each shipped artifact path with the dependency
/// it came from (`toolkit:NAME` or `tool:nvcc`).
fn ship_cuda_runtime(
    stage_dir: &Path,
    tools: &ResolvedToolchain,
    toolkit: Option<&crate::artifact::cudakit::Toolkit>,
    reporter: &dyn Reporter,
) -> Result<Vec<(String, String)>> {
    let Some(nvcc) = tools.tools.get("nvcc") else {
        return Ok(vec![]);
    };
    let (root, source) = match (toolkit, &tools.cuda_root) {
        (Some(k), _) => (k.root.clone(), format!("toolkit:{}", k.record.name)),
        (None, Some(r)) => (PathBuf::from(r), "tool:nvcc".to_string()),
        (None, None) => {
            let real = std::fs::canonicalize(&nvcc.path).unwrap_or_else(|_| nvcc.path.clone());
            match real.parent().and_then(Path::parent) {
                Some(r) => (r.to_path_buf(), "tool:nvcc".to_string()),
                None => return Ok(vec![]),
            }
        }
    };
    let runtime::Shipping { shipped, missing } = runtime::ship(stage_dir, &root)?;
    if !shipped.is_empty() {
        let names: Vec<&str> = shipped.iter().map(|s| s.path.as_str()).collect();
        reporter.stage(
            "ship",
            &format!("CUDA runtime from {source}: {}", names.join(", ")),
        );
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
    Ok(shipped
        .into_iter()
        .map(|s| (s.path, source.clone()))
        .collect())
}

fn fsx_create(p: &Path) -> Result<()> {
    crate::base::fsx::create_dir_all(p)
}

/// One configure argument: plain text, or a flags variable whose pinforge words (which name
/// machine paths) are shell-quoted once substituted, followed by the recipe's own flags.
enum Arg {
    Plain(String),
    Flags {
        var: String,
        words: Vec<String>,
        user: Option<String>,
    },
}

/// Quote one word for the shell that Ninja runs compile commands through (and for CMake's
/// `separate_arguments(UNIX_COMMAND)`, which follows the same rules): a path with a space
/// stays one word.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:+,@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// How a host-compiler flag is handed through nvcc.
const NVCC_PREFIX: &str = "-Xcompiler=";

/// The prefix maps whose left side is this variant's folder (`${SRC}`, the source link, and
/// `${BUILD}`), as template words: in the CUDA flags, and (substituted) in the list of
/// arguments the compile cache leaves out of its key.
fn variant_prefix_maps(pre: &str) -> Vec<String> {
    vec![
        format!("{pre}-ffile-prefix-map=${{SRC}}={SRC_MAP}"),
        format!("{pre}-ffile-prefix-map=${{BUILD}}={BUILD_MAP}"),
    ]
}

/// The configure arguments: the template recorded in the manifest (machine paths replaced by
/// `${SRC}`, `${BUILD}`, `${TOOL:role}`) and the actual arguments. Every argument is one argv
/// element (never re-split); recipe flags are appended after pinforge's prefix maps.
fn cmake_args(
    variant: &Variant,
    tools: &ResolvedToolchain,
    tree: &Tree,
    cmake_dir: &Path,
    vdir: &Path,
) -> (Vec<String>, Vec<String>) {
    let user = |var: &str| -> Option<String> {
        variant
            .cmake
            .iter()
            .find(|(k, _)| crate::source::recipe::cmake_key_name(k) == var)
            .map(|(_, v)| v.clone())
    };
    let prefix_maps = |pre: &str| -> Vec<String> {
        let mut v = variant_prefix_maps(pre);
        // The compile cache hands the compiler the source as `../src/...` (see cache).
        v.insert(
            1,
            format!(
                "{pre}-ffile-prefix-map={}={SRC_MAP}",
                cache::SOURCE_FROM_BUILD
            ),
        );
        v
    };
    let mut t: Vec<Arg> = [
        "-S",
        "${SRC}",
        "-B",
        "${BUILD}",
        "-G",
        "Ninja",
        "-DCMAKE_MAKE_PROGRAM=${TOOL:ninja}",
        "-DCMAKE_C_COMPILER=${TOOL:cc}",
        "-DCMAKE_CXX_COMPILER=${TOOL:cxx}",
    ]
    .iter()
    .map(|s| Arg::Plain(s.to_string()))
    .collect();
    let launcher = tools.tools.contains_key(cache::ROLE);
    for lang in ["C", "CXX"].iter().filter(|_| launcher) {
        t.push(Arg::Plain(format!(
            "-DCMAKE_{lang}_COMPILER_LAUNCHER=${{TOOL:{}}}",
            cache::ROLE
        )));
    }
    t.push(Arg::Plain(format!(
        "-DCMAKE_BUILD_TYPE={}",
        variant.build_type
    )));
    // Keep absolute source and build paths out of __FILE__ and debug info.
    for var in ["CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"] {
        t.push(Arg::Flags {
            var: var.into(),
            words: prefix_maps(""),
            user: user(var),
        });
    }
    t.extend(
        [
            // Run paths relative to the library, not to this build folder, in the build tree
            // and in the installed copies (CMake rewrites run paths at install time).
            "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON".to_string(),
            "-DCMAKE_INSTALL_RPATH=$ORIGIN;$ORIGIN/../lib".to_string(),
            // A fixed prefix that exists nowhere: configured files and binaries never name the
            // workspace; the install goes through DESTDIR into the stage.
            format!("-DCMAKE_INSTALL_PREFIX={}", stage::PREFIX),
            "-DCMAKE_INSTALL_LIBDIR=lib".to_string(),
            // Build info from the pin, never from the vendor repository's own commits.
            format!("-DLLAMA_BUILD_NUMBER={}", tree.pin.build_number),
            format!("-DLLAMA_BUILD_COMMIT={}", tree.pin.build_commit),
            "-DGIT_EXE=${VARIANT}/pinforge-git".to_string(),
        ]
        .into_iter()
        .map(Arg::Plain),
    );
    if tools.tools.contains_key("nvcc") {
        t.push(Arg::Plain("-DCMAKE_CUDA_COMPILER=${TOOL:nvcc}".into()));
        if launcher {
            t.push(Arg::Plain(format!(
                "-DCMAKE_CUDA_COMPILER_LAUNCHER=${{TOOL:{}}}",
                cache::ROLE
            )));
        }
        t.push(Arg::Flags {
            var: "CMAKE_CUDA_FLAGS".into(),
            words: prefix_maps(NVCC_PREFIX),
            user: user("CMAKE_CUDA_FLAGS"),
        });
        if let Some(root) = &tools.cuda_root {
            t.push(Arg::Plain(format!("-DCUDAToolkit_ROOT={root}")));
        }
        if let Some(arch) = &tools.cuda_architectures {
            t.push(Arg::Plain(format!("-DCMAKE_CUDA_ARCHITECTURES={arch}")));
        }
    }
    let merged: Vec<&str> = t
        .iter()
        .filter_map(|a| match a {
            Arg::Flags { var, .. } => Some(var.as_str()),
            Arg::Plain(_) => None,
        })
        .collect::<Vec<_>>();
    let mut rest = Vec::new();
    for (k, v) in &variant.cmake {
        if !merged.contains(&crate::source::recipe::cmake_key_name(k)) {
            rest.push(Arg::Plain(format!("-D{k}={v}")));
        }
    }
    t.extend(rest);

    let src = tree.path.display().to_string();
    let build = cmake_dir.display().to_string();
    let vd = vdir.display().to_string();
    let subst = |a: &str| {
        let mut s = a
            .replace("${SRC}", &src)
            .replace("${BUILD}", &build)
            .replace("${VARIANT}", &vd);
        // A provisioned toolkit's root is in the user's cache: it enters the identity as
        // `${TOOLKIT}` (the toolkit itself is identified by its tree digest), never by path.
        if let Some(root) = tools
            .tools
            .get("nvcc")
            .and_then(|t| t.path.parent())
            .and_then(Path::parent)
        {
            s = s.replace(
                crate::artifact::cudakit::ROOT_TEMPLATE,
                &root.display().to_string(),
            );
        }
        for (role, tool) in &tools.tools {
            s = s.replace(
                &format!("${{TOOL:{role}}}"),
                &tool.path.display().to_string(),
            );
        }
        s
    };
    let render = |a: &Arg, actual: bool| match a {
        Arg::Plain(s) if actual => subst(s),
        Arg::Plain(s) => s.clone(),
        Arg::Flags { var, words, user } => {
            let mut ws: Vec<String> = words
                .iter()
                .map(|w| {
                    if actual {
                        shell_word(&subst(w))
                    } else {
                        w.clone()
                    }
                })
                .collect();
            ws.extend(user.iter().filter(|u| !u.is_empty()).cloned());
            format!("-D{var}={}", ws.join(" "))
        }
    };
    let template = t.iter().map(|a| render(a, false)).collect();
    let actual = t.iter().map(|a| render(a, true)).collect();
    (template, actual)
}

/// ggml's CMakeLists asks git for the commit of its own folder, which inside a vendor
/// repository would be pinforge's patch commit: patched and unpatched builds would then differ
/// in libggml-base for no reason. This stand-in answers with the pin's build info instead.
fn write_git_shim(vdir: &Path, tree: &Tree) -> Result<()> {
    let body = format!(
        "#!/bin/sh\n# Written by pinforge: build info comes from the pin, not from the vendor repository.\n\
         case \"$1\" in\n  rev-parse) echo '{commit}' ;;\n  rev-list) echo '{number}' ;;\n  \
         diff-index) exit 0 ;;\n  --version) echo 'git version 2.0.0.pinforge' ;;\n  *) exit 1 ;;\nesac\n",
        commit = tree.pin.build_commit.replace('\'', ""),
        number = tree.pin.build_number,
    );
    let path = vdir.join("pinforge-git");
    if std::fs::read(&path).ok().as_deref() != Some(body.as_bytes()) {
        crate::base::fsx::write_atomic(&path, body.as_bytes())?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).at("chmod", &path)
}

/// Run a command with stdout and stderr appended to the log; Ninja status lines feed the
/// reporter. Returns how many Ninja steps ran. A failure shows the log's tail and path.
fn run_logged(
    cmd: &mut Command,
    env: &[(&str, &std::ffi::OsStr)],
    log: &Arc<Mutex<std::fs::File>>,
    log_path: &Path,
    reporter: &dyn Reporter,
) -> Result<u64> {
    let line = process::display(cmd);
    // The build sees a fixed environment: variables that silently change what CMake or the
    // compilers produce are removed. SOURCE_DATE_EPOCH in particular makes ggml's CMakeLists
    // turn GGML_NATIVE_DEFAULT off, which drops SSE4.2/AVX/AVX2/FMA/F16C from ggml-cpu.
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env("NINJA_STATUS", "[%f/%t] ")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(mut f) = log.lock() {
        let _ = writeln!(f, "$ {line}");
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| process::spawn_error(&line, e, "run tools/bootstrap.sh or put it on PATH"))?;
    let stderr = child.stderr.take();
    let log_err = Arc::clone(log);
    let err_thread = std::thread::spawn(move || {
        if let Some(s) = stderr {
            for l in BufReader::new(s).lines().map_while(|l| l.ok()) {
                if let Ok(mut f) = log_err.lock() {
                    let _ = writeln!(f, "{l}");
                }
            }
        }
    });
    let mut steps = 0u64;
    if let Some(out) = child.stdout.take() {
        for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Some((done, total, msg)) = parse_ninja_status(&l) {
                steps = steps.max(done);
                reporter.progress(done, total, msg);
            }
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{l}");
            }
        }
    }
    let status = child.wait().at("wait for", Path::new(&line))?;
    let _ = err_thread.join();
    if let Ok(mut f) = log.lock() {
        let _ = f.flush();
    }
    if !status.success() {
        let text = std::fs::read_to_string(log_path).unwrap_or_default();
        return Err(Error::tool(&line, format!("exited with {status}"))
            .with_detail(format!(
                "{}\n(full log: {})",
                process::tail(&text, process::TAIL_LINES),
                log_path.display()
            ))
            .with_hint(format!("read the full log: {}", log_path.display())));
    }
    Ok(steps)
}

/// Symlinks among the outputs: (path relative to the artifact root, link target).
pub type Links = Vec<(String, String)>;

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
    if pin.skipped_git_entries > 0 {
        let n = Value::from(pin.skipped_git_entries);
        ann.insert("skipped_git_entries".into(), n);
    }
    deps.push(Resource {
        name: "upstream".into(),
        uri: Some(pin.uri.clone()),
        digest,
        annotations: ann,
    });
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
        let name = format!("patch:{}", p.id);
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
        deps.push(Resource {
            name: name.clone(),
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
        });
        if p.origin.exists() {
            inputs.insert(name, rel(&p.origin));
        }
    }

    deps.push(Resource {
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
    });
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

/// `path` relative to `base` when both are absolute and share a prefix (so a moved workspace
/// still verifies); otherwise the absolute path.
fn relative_to(path: &Path, base: &Path) -> PathBuf {
    let Ok(path) = crate::base::fsx::absolute(path) else {
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

    // issue #7 class 7: a machine path with a space stays one word inside a flags string.
    #[test]
    fn flag_words_with_spaces_or_quotes_are_shell_quoted() {
        assert_eq!(
            shell_word("-ffile-prefix-map=/a/b=/x"),
            "-ffile-prefix-map=/a/b=/x"
        );
        assert_eq!(
            shell_word("-ffile-prefix-map=/my ws/src=/x"),
            "'-ffile-prefix-map=/my ws/src=/x'"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        // What the shell makes of it is the original word.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s|' {}", shell_word("/a b/it's=$HOME")))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/a b/it's=$HOME|");
    }

    // issue #7 class 7: every flags variable (C, C++, CUDA; typed or not) keeps pinforge's
    // prefix maps first; each argument is one argv element; the template has no machine path.
    #[test]
    fn recipe_flags_are_appended_for_every_language_and_paths_stay_one_argument() {
        let recipe = crate::source::recipe::Recipe::parse(
            r#"default-variant = "v"
[pin]
kind = "dir"
path = "/x"
tree-sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
[toolchain.cuda]
cc = "gcc"
cxx = "g++"
nvcc = "/cuda/bin/nvcc"
[base]
toolchain = "cuda"
targets = ["llama"]
cmake = { "CMAKE_CUDA_FLAGS:STRING" = "-lineinfo", CMAKE_CXX_FLAGS = "-g -O1", OTHER = "a b" }
[variants.v]
"#,
            Path::new("r.toml"),
            Some(Path::new("/ws/recipes")),
        )
        .expect("recipe");
        let variant = recipe.variant("v").expect("v");
        let tool = |p: &str| crate::artifact::toolchain::ToolRecord {
            path: PathBuf::from(p),
            real_path: PathBuf::from(p),
            version: "1".into(),
            version_line: "1".into(),
            sha256: Sha256::of_bytes(b""),
        };
        let tools = ResolvedToolchain {
            name: "cuda".into(),
            tools: ["cc", "cxx", "cmake", "ninja", "nvcc"]
                .iter()
                .map(|r| (r.to_string(), tool(&format!("/t/{r}"))))
                .collect(),
            cuda_root: None,
            cuda_architectures: None,
        };
        let tree: Tree = serde_json::from_value(serde_json::json!({
            "path": "/my ws/vendor/src",
            "base_commit": "0123456789012345678901234567890123456789",
            "head": "0123456789012345678901234567890123456789",
            "patches": [],
            "pin": {"kind": "dir", "uri": "/x", "sha256": null, "git_commit": null, "tag": null,
                    "subdir": null, "build_number": 0, "build_commit": "x", "archive": null}
        }))
        .expect("tree");
        let (template, actual) = cmake_args(
            variant,
            &tools,
            &tree,
            Path::new("/my ws/build/r/v/cmake"),
            Path::new("/my ws/build/r/v"),
        );
        let find = |args: &[String], var: &str| -> Vec<String> {
            args.iter()
                .filter(|a| a.starts_with(&format!("-D{var}")))
                .cloned()
                .collect()
        };
        assert_eq!(
            find(&template, "CMAKE_CUDA_FLAGS"),
            vec!["-DCMAKE_CUDA_FLAGS=-Xcompiler=-ffile-prefix-map=${SRC}=/pinforge/src -Xcompiler=-ffile-prefix-map=../src=/pinforge/src -Xcompiler=-ffile-prefix-map=${BUILD}=/pinforge/build -lineinfo"]
        );
        assert_eq!(
            find(&template, "CMAKE_CXX_FLAGS"),
            vec!["-DCMAKE_CXX_FLAGS=-ffile-prefix-map=${SRC}=/pinforge/src -ffile-prefix-map=../src=/pinforge/src -ffile-prefix-map=${BUILD}=/pinforge/build -g -O1"]
        );
        assert_eq!(
            find(&actual, "CMAKE_CXX_FLAGS"),
            vec!["-DCMAKE_CXX_FLAGS='-ffile-prefix-map=/my ws/vendor/src=/pinforge/src' -ffile-prefix-map=../src=/pinforge/src '-ffile-prefix-map=/my ws/build/r/v/cmake=/pinforge/build' -g -O1"]
        );
        assert_eq!(find(&actual, "OTHER"), vec!["-DOTHER=a b"]);
        assert!(
            actual.contains(&"/my ws/vendor/src".to_string()),
            "{actual:?}"
        );
        assert!(
            template.iter().all(|a| !a.contains("/my ws")),
            "{template:?}"
        );
        assert!(template.contains(&"-DCMAKE_INSTALL_PREFIX=/pinforge/prefix".to_string()));
    }

    #[test]
    fn artifacts_are_files_and_links_are_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).expect("mkdir");
        std::fs::write(lib.join("libx.so.1.0"), b"elf").expect("write");
        std::os::unix::fs::symlink("libx.so.1.0", lib.join("libx.so")).expect("link");
        let (files, links) = stage::collect(dir.path()).expect("collect");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "lib/libx.so.1.0");
        assert_eq!(files[0].size, 3);
        assert_eq!(links, vec![("lib/libx.so".into(), "libx.so.1.0".into())]);
    }

    #[test]
    fn a_stage_with_a_fifo_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("lib/x");
        std::fs::create_dir(dir.path().join("lib")).expect("mkdir");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("cstr");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(crate::sys::mkfifo(c.as_c_str(), 0o644), 0);
        assert!(stage::collect(dir.path()).is_err());
    }
}
