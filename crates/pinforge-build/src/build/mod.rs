//! Building one variant: check the toolchain and patches before touching anything, materialize
//! the vendor tree, configure CMake (only when its arguments changed), build the targets with
//! Ninja while feeding its own progress to the reporter and the full output to a log, stage
//! what the project's install rules install (`stage`), check with CMake's file API (`fileapi`)
//! that every built library is covered, ship the CUDA runtime beside a CUDA engine (`runtime`),
//! hash the artifacts (with a normalized digest where nvcc left pid noise, see
//! [`pinforge_record::normalize`]), and write the manifest.
//! Machine-specific paths are kept out of the binaries (prefix maps, `$ORIGIN` run paths, a
//! fixed install prefix, build info from the pin).
//!
//! [`build`] is the sequence of those phases; the pieces they call live beside it: the
//! configure arguments (`configure`), the log every tool run writes (`log`), the manifest half
//! (`record`), the CUDA toolkit a build resolves (`toolkit`) and the no-op stamp (`stamp`).

pub mod cache;
mod configure;
pub mod dist;
pub(crate) mod fileapi;
pub mod fixed;
mod gated;
mod log;
mod record;
pub(crate) mod runtime;
pub(crate) mod stage;
mod stamp;
mod toolkit;

use crate::cudakit::Toolkit;
use crate::toolchain::{self, ResolvedToolchain, Role};
use log::{run_logged, Log};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::progress::Reporter;
use pinforge_base::workspace::Workspace;
use pinforge_record::manifest;
use pinforge_record::sign::record::Signer;
use pinforge_source::patch::{Bundle, PatchFile};
use pinforge_source::recipe::{PatchSelection, Recipe, Variant};
use pinforge_source::upstream::{self, Tree};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Where the prefix maps send the source and build folders inside the binaries.
pub(crate) const SRC_MAP: &str = "/pinforge/src";
/// See [`SRC_MAP`].
pub(crate) const BUILD_MAP: &str = "/pinforge/build";

/// Bumped whenever the way pinforge configures changes, so kept build folders reconfigure.
const CONFIGURE_SCHEME: u32 = 2;

/// The artifact root, relative to the variant folder: the staged install prefix.
pub(crate) const ARTIFACT_ROOT: &str = "stage";

/// Environment variables removed from every CMake and Ninja run: each changes the binaries
/// without appearing in the recorded CMake arguments.
pub(crate) const SCRUBBED_ENV: &[&str] = &[
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

/// Symlinks among the outputs: (path relative to the artifact root, link target).
pub(crate) type Links = Vec<(String, String)>;

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
    /// Where the compiles ran, for a distributed build (`--dist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist: Option<dist::Stats>,
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
    /// Who signs the manifest (`--sign`); [`Signer::none`] for none.
    pub signer: Signer,
}

/// The patch bundle a recipe uses: its folder, or the embedded one for the embedded recipe.
pub fn bundle_for(recipe: &Recipe) -> Result<Bundle> {
    match &recipe.patches_dir {
        Some(dir) => Bundle::load(dir),
        None => Bundle::embedded(),
    }
}

/// Build one variant of a recipe: each phase below is one step of the pipeline, and each
/// refuses what it can before the next one touches anything.
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
        // `--sign`: the kept manifest is signed as it stands (its bytes do not change).
        opts.signer.sign_kept(&o.manifest)?;
        let seconds = started.elapsed().as_secs_f64();
        return Ok(BuildOutcome { seconds, ..o });
    }
    let notes = stamp::Recorder::new(opts.reporter);
    let reporter: &dyn Reporter = &notes;

    // Everything that can be refused is checked before vendor/ is touched.
    let (tools, toolkit) = resolve_tools(ws, variant, &opts.compile_cache, reporter)?;
    let dist = dist::Preflight::check(&opts.compile_cache, &tools, variant, &ws.tool_dirs())?;
    let bundle = bundle_needed(recipe, variant)?;
    let patches = choose_patches(variant, bundle.as_ref())?;
    let tree = materialize(ws, recipe, &patches, reporter)?;
    let before = stamp::Before::take(ws, recipe, &patches, &tools, &tree);
    let job = Job {
        ws,
        recipe,
        variant,
        vdir: ws.variant_dir(&recipe.name, variant.name.as_str()),
        tools,
        toolkit,
        dist,
        patches,
        tree,
    };

    let site = Site::prepare(&job, &opts.compile_cache, reporter)?;
    let dist_status = site.start_dist(reporter)?;
    let cmake_args = configure(&job, &site, reporter)?;
    let install_targets = install_targets(&job, &site)?;
    let (steps_run, compile_cache) = ninja(&job, &site, &install_targets, opts.jobs, reporter)?;
    let dist = site.finish_dist(dist_status, reporter)?;
    let (staging, model) = install_into_stage(&job, &site, reporter)?;
    let machine_paths = scan_machine_paths(&job, &site, reporter)?;
    let staged = collect(&job, &site, &model, machine_paths, reporter)?;
    let inputs = record::inputs(&job, cmake_args)?;
    let (subjects, rules_used) = record::subjects(&staged, &site, reporter)?;
    let mut byproducts =
        record::byproducts(&staged, &rules_used, &compile_cache, &job.tools, &site)?;
    if let (Some(d), Some(s)) = (&site.dist, &dist) {
        byproducts.push(s.byproduct(&d.tool));
    }

    let input_digest = inputs.input_digest;
    let statement = record::statement(subjects, inputs, &staging, started_on, byproducts);
    let (manifest_path, cached) = record::write(&job.vdir, &statement, steps_run, &opts.signer)?;

    let record::Staged {
        artifacts,
        links,
        coverage,
        ..
    } = staged;
    let outcome = BuildOutcome {
        recipe: recipe.name.clone(),
        variant: variant.name.to_string(),
        manifest: manifest_path,
        input_digest,
        cached,
        artifacts,
        links,
        artifact_root: site.stage_dir.clone(),
        staging,
        coverage,
        install_targets,
        log: site.log.path.clone(),
        source_tree: job.tree.path.clone(),
        steps_run,
        seconds: started.elapsed().as_secs_f64(),
        compile_cache,
        dist,
    };
    // A stamp that cannot be written only costs the next build its fast path.
    let _ = stamp::write(
        &job,
        &opts.compile_cache,
        before,
        &outcome,
        &notes,
        &site.paths,
    );
    Ok(outcome)
}

/// What one build works from once its inputs are settled: the recipe and variant, the
/// resolved toolchain (and provisioned CUDA toolkit), the chosen patches and the patched tree.
struct Job<'a> {
    ws: &'a Workspace,
    recipe: &'a Recipe,
    variant: &'a Variant,
    /// `build/RECIPE/VARIANT`.
    vdir: PathBuf,
    tools: ResolvedToolchain,
    toolkit: Option<Toolkit>,
    patches: Vec<&'a PatchFile>,
    tree: Tree,
    /// A `--dist` build's checked scheduler, token and sccache.
    dist: Option<dist::Preflight>,
}

/// Resolve the toolchain and the CUDA toolkit (provisioned if the toolchain names a lock),
/// and check the compile cache's settings.
fn resolve_tools(
    ws: &Workspace,
    variant: &Variant,
    compile_cache: &cache::Settings,
    reporter: &dyn Reporter,
) -> Result<(ResolvedToolchain, Option<Toolkit>)> {
    reporter.stage("toolchain", &variant.toolchain.name);
    let (toolchain, toolkit) =
        toolkit::for_build(&variant.toolchain, &ws.tool_dirs(), &|stage, detail| {
            reporter.stage(stage, detail)
        })?;
    let tools = toolchain::resolve(&toolchain, &ws.tool_dirs())?;
    compile_cache.check()?;
    Ok((tools, toolkit))
}

/// The bundle the variant's patches come from. A variant that takes no patch needs no
/// bundle: a recipe of plain upstream builds (a control, a new project) must not require an
/// empty patches/ folder.
fn bundle_needed(recipe: &Recipe, variant: &Variant) -> Result<Option<Bundle>> {
    match &variant.patches {
        PatchSelection::List(names) if names.is_empty() => Ok(None),
        _ => Ok(Some(bundle_for(recipe)?)),
    }
}

/// The variant's patches, in order, each checked to parse as a diff.
fn choose_patches<'b>(variant: &Variant, bundle: Option<&'b Bundle>) -> Result<Vec<&'b PatchFile>> {
    let patches: Vec<&PatchFile> = match (&variant.patches, bundle) {
        (PatchSelection::Series, Some(b)) => b.select(None)?,
        (PatchSelection::List(names), Some(b)) => b.select(Some(names))?,
        (_, None) => Vec::new(),
    };
    for p in &patches {
        pinforge_source::patch::apply::parse_diff(p)?;
    }
    Ok(patches)
}

/// The vendor tree: the pristine pin with the patches applied.
fn materialize(
    ws: &Workspace,
    recipe: &Recipe,
    patches: &[&PatchFile],
    reporter: &dyn Reporter,
) -> Result<Tree> {
    reporter.stage("vendor", &recipe.name);
    let pristine = upstream::pristine(ws, recipe)?;
    if let Some(note) = pristine.pin.skipped_git_note() {
        reporter.stage("note", &note);
    }
    let tree = upstream::patched(ws, &pristine, patches)?;
    // A hunk that applied at another line: the build goes on, the patch is due a refresh.
    for r in &tree.patches {
        for o in &r.hunk_offsets {
            reporter.stage("note", &o.note(&r.file));
        }
    }
    Ok(tree)
}

/// Where a build runs: the variant's CMake folder and log, the paths the build sees (the
/// fixed build path, or the real folders), and the compile cache set up for them.
struct Site {
    /// `build/RECIPE/VARIANT/cmake`, the real folder.
    cmake_dir: PathBuf,
    /// The source folder as the build sees it: the fixed path, or the source link.
    seen_src: PathBuf,
    /// The CMake folder as the build sees it.
    seen_cmake: PathBuf,
    /// The stage (the artifact root).
    stage_dir: PathBuf,
    log: Log,
    paths: fixed::BuildPaths,
    cache: cache::CompileCache,
    /// The distributed compile of a `--dist` build.
    dist: Option<dist::Dist>,
}

impl Site {
    /// Create the CMake folder and log, decide the build path and prepare the compile cache.
    fn prepare(job: &Job, settings: &cache::Settings, reporter: &dyn Reporter) -> Result<Site> {
        let (vdir, tree) = (&job.vdir, &job.tree);
        let cmake_dir = vdir.join("cmake");
        pinforge_base::fsx::create_dir_all(&cmake_dir)?;
        let log = Log::create(vdir.join("build.log"))?;

        let via_link = cache::source_link(vdir, &tree.path, &cmake_dir)?;
        let kit_id = job.toolkit.as_ref().map(|k| k.record.tree_sha256.short(12));
        let paths = fixed::BuildPaths::resolve(
            &tree.path,
            vdir,
            job.toolkit
                .as_ref()
                .zip(kit_id.as_deref())
                .map(|(k, id)| (k.root.as_path(), id)),
            &job.tools.tool(Role::Cmake)?.path,
        )?;
        let nvcc = job.tools.has(Role::Nvcc);
        if let (true, Some(why)) = (nvcc, &paths.unfixed) {
            reporter.stage(
                "note",
                &format!(
                    "the build runs at its real folder ({why}): nvcc hashes that path into its \
                     CUDA objects, so another workspace builds other bytes"
                ),
            );
        }
        // At the fixed path every workspace names its sources and build folder alike: base_dir
        // is the fixed folder (so compiles name `../src/...` as at the real folder, and a
        // sanitizer's record of the file name stays free of any path), and nvcc's prefix maps
        // need no ignore_options. At the real folder, base_dir is the workspace.
        let (base_dir, ignored) = match &paths.root {
            Some(root) => (root.as_path(), Vec::new()),
            None if nvcc => {
                let ignored = configure::variant_prefix_maps(configure::NVCC_PREFIX)
                    .iter()
                    .map(|w| {
                        w.replace("${SRC}", &via_link.display().to_string())
                            .replace("${BUILD}", &cmake_dir.display().to_string())
                    })
                    .collect();
                (job.ws.root(), ignored)
            }
            None => (job.ws.root(), Vec::new()),
        };
        let dist = match &job.dist {
            Some(p) => Some(dist::Dist::prepare(p, vdir)?),
            None => None,
        };
        let cache = cache::CompileCache::prepare(
            settings,
            &job.tools,
            base_dir,
            paths.root.as_deref().filter(|_| nvcc),
            vdir,
            &ignored,
            dist.as_ref().map(|d| d.tool.path.as_path()),
        )?;
        let seen_src = if paths.fixed() {
            paths.src.clone()
        } else {
            via_link
        };
        Ok(Site {
            seen_cmake: paths.cmake_dir(),
            seen_src,
            stage_dir: vdir.join(ARTIFACT_ROOT),
            cmake_dir,
            log,
            paths,
            cache,
            dist,
        })
    }

    /// Point a CMake or Ninja run at the compile cache's configuration and, for a
    /// distributed build, at its sccache.
    fn apply(&self, cmd: &mut Command) {
        self.cache.apply(cmd);
        if let Some(d) = &self.dist {
            d.apply(cmd);
        }
    }
}

/// Configure, only when the arguments changed (Ninja re-runs CMake itself when a
/// CMakeLists.txt changes); a kept build directory makes the rebuild incremental. Returns the
/// arguments' template, which the manifest records.
fn configure(job: &Job, site: &Site, reporter: &dyn Reporter) -> Result<Vec<String>> {
    let (mut template, mut actual) = configure::cmake_args(
        job.variant,
        &site.paths.seen_tools(&job.tools),
        &Tree {
            path: site.seen_src.clone(),
            ..job.tree.clone()
        },
        &site.seen_cmake,
        &site.paths.variant,
    );
    // Options of this tree that gate a folder it lacks (see `gated`): off unless the recipe
    // says otherwise, in the recorded arguments like any other.
    let set_by_recipe = |name: &str| {
        job.variant
            .cmake
            .keys()
            .any(|k| pinforge_source::recipe::cmake_key_name(k) == name)
    };
    let forced = gated::forced_off(&job.tree.path, &set_by_recipe);
    for f in &forced {
        template.push(f.arg());
        actual.push(f.arg());
    }
    configure::write_git_shim(&job.vdir, &job.tree)?;
    fileapi::write_query(&site.cmake_dir)?;

    let stamp = site.cmake_dir.join("pinforge-configure.json");
    let stamp_body = serde_json::to_vec_pretty(&serde_json::json!({
        "scheme": CONFIGURE_SCHEME,
        "scrubbed_env": SCRUBBED_ENV,
        "args": &actual,
        "source": &job.tree.path,
        "build_path": &site.paths,
    }))
    .map_err(|e| Error::Internal(e.to_string()))?;
    let configured = site.cmake_dir.join("CMakeCache.txt").exists()
        && site.cmake_dir.join(".cmake/api/v1/reply").is_dir()
        && fsx::read_if_present(&stamp).ok().flatten().as_deref() == Some(stamp_body.as_slice());
    if !configured {
        reporter.stage("configure", job.variant.name.as_str());
        let mut cmd = site.paths.command(&job.tools.tool(Role::Cmake)?.path)?;
        // --fresh: CMake keeps option values in its cache, so an option the recipe no longer
        // sets (or a default that depends on the environment) would otherwise survive.
        cmd.arg("--fresh").args(&actual);
        site.apply(&mut cmd);
        site.log
            .note(&forced.iter().map(gated::Forced::why).collect::<Vec<_>>());
        run_logged(&mut cmd, &[], &site.log, reporter).map_err(|e| {
            let log = fsx::read_to_string(&site.log.path).unwrap_or_default();
            match gated::diagnose(&job.tree.path, &site.seen_src, &log) {
                Some(hint) => {
                    e.with_hint(format!("{hint}; the full log: {}", site.log.path.display()))
                }
                None => e,
            }
        })?;
        pinforge_base::fsx::write_atomic(&stamp, &stamp_body)?;
    }
    Ok(template)
}

/// The targets to build besides the requested ones. `cmake --install` installs every target
/// its rules name: those must be built too, or the install fails on a missing file (a recipe
/// keeps this set small with the project's options, e.g. LLAMA_BUILD_TOOLS=OFF).
fn install_targets(job: &Job, site: &Site) -> Result<Vec<String>> {
    let model = fileapi::read(&site.cmake_dir)?;
    model.closure(&job.variant.targets)?;
    Ok(model
        .installed_targets
        .iter()
        .filter(|t| !job.variant.targets.contains(t))
        .cloned()
        .collect())
}

/// Run Ninja over the targets; returns the steps it ran and what the compile cache did.
fn ninja(
    job: &Job,
    site: &Site,
    install_targets: &[String],
    jobs: Option<usize>,
    reporter: &dyn Reporter,
) -> Result<(u64, cache::Stats)> {
    reporter.stage("build", job.variant.name.as_str());
    let mut cmd = site.paths.command(&job.tools.tool(Role::Ninja)?.path)?;
    cmd.arg("-C").arg(&site.seen_cmake);
    if let Some(j) = jobs {
        cmd.arg(format!("-j{j}"));
    }
    cmd.args(&job.variant.targets).args(install_targets);
    site.cache.reset()?;
    if let Some(d) = &site.dist {
        let built = [&job.variant.targets[..], install_targets].concat();
        dist::refuse_debug_info(&fileapi::read(&site.cmake_dir)?, &built)?;
        d.zero()?;
    }
    site.apply(&mut cmd);
    let ran = run_logged(&mut cmd, &[], &site.log, reporter);
    // Before `?`: with the cache off, reading the counts also removes the throwaway store,
    // which a failed build must not leave behind either.
    let compile_cache = site.cache.stats();
    let steps_run = ran?;
    let compile_cache = compile_cache?;
    reporter.finish();
    Ok((steps_run, compile_cache))
}

/// Install into the stage (through DESTDIR, then moved to the stage), or stage the built
/// libraries when the project has no install rules; returns how, and the CMake code model
/// read again (Ninja re-runs CMake when a CMakeLists.txt changed).
fn install_into_stage(
    job: &Job,
    site: &Site,
    reporter: &dyn Reporter,
) -> Result<(stage::Staging, fileapi::CodeModel)> {
    reporter.stage("install", job.variant.name.as_str());
    let destdir = job.vdir.join("stage.destdir");
    stage::clear(&destdir)?;
    pinforge_base::fsx::create_dir_all(&destdir)?;
    let mut cmd = site.paths.command(&job.tools.tool(Role::Cmake)?.path)?;
    cmd.arg("--install").arg(&site.seen_cmake);
    run_logged(
        &mut cmd,
        &[("DESTDIR", destdir.as_os_str())],
        &site.log,
        reporter,
    )?;
    // A build that wrote into its pinned source (a configure_file into the source folder)
    // would no longer be the tree the manifest names: say so now, not at the next verify.
    let tree = &job.tree;
    pinforge_source::git::check_clean(&tree.path, tree.head).map_err(|e| {
        Error::check(
            tree.path.display(),
            format!("the build wrote into its pinned source tree: {e}"),
        )
    })?;
    let model = fileapi::read(&site.cmake_dir)?;
    let staging = if stage::take_prefix(&destdir, &site.stage_dir)? {
        stage::Staging::CmakeInstall
    } else {
        stage::clear(&site.stage_dir)?;
        stage::stage_built_libraries(&model, &job.variant.targets, &site.stage_dir)?;
        stage::Staging::BuiltLibraries
    };
    for program in stage::stage_executables(&model, &job.variant.targets, &site.stage_dir)? {
        reporter.stage(
            "note",
            &format!("staged {program} from the build tree (not installed by the install rules)"),
        );
    }
    stage::relocate(&site.stage_dir)?;
    Ok((staging, model))
}

/// The staged files that name a machine path, said in a note. The source tree and the variant
/// folder are long, unique paths; the workspace root alone (say `/srv`) could occur in any
/// binary by chance. The fixed folder is the same in every workspace, but still a folder of
/// this machine (and user): an artifact that names it is marked too.
fn scan_machine_paths(
    job: &Job,
    site: &Site,
    reporter: &dyn Reporter,
) -> Result<Vec<(String, String)>> {
    let (tree, vdir) = (&job.tree.path, &job.vdir);
    let machine_paths = match &site.paths.root {
        Some(root) => stage::find_machine_paths(&site.stage_dir, &[tree, vdir, root])?,
        None => stage::find_machine_paths(&site.stage_dir, &[tree, vdir])?,
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
    Ok(machine_paths)
}

/// Ship the CUDA runtime, then list the stage and check that it covers every built library.
fn collect(
    job: &Job,
    site: &Site,
    model: &fileapi::CodeModel,
    machine_paths: Vec<(String, String)>,
    reporter: &dyn Reporter,
) -> Result<record::Staged> {
    // After the machine-path scan: the shipped libraries are the toolkit's bytes, not ours.
    let (shipped, known) =
        record::ship_cuda_runtime(&site.stage_dir, &job.tools, job.toolkit.as_ref(), reporter)?;
    let (artifacts, links, examined) = stage::collect_examined(&site.stage_dir, &known)?;
    if artifacts.is_empty() {
        return Err(Error::check(
            format!("build of {}/{}", job.recipe.name, job.variant.name),
            "finished but neither the install rules nor the requested targets produced a file",
        ));
    }
    let coverage = stage::cover(
        model,
        &job.variant.targets,
        &site.cmake_dir,
        &artifacts,
        &links,
    )?;
    Ok(record::Staged {
        artifacts,
        links,
        examined,
        shipped,
        coverage,
        machine_paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(pinforge_sys::mkfifo(c.as_c_str(), 0o644), 0);
        assert!(stage::collect(dir.path()).is_err());
    }
}
