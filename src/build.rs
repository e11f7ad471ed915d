//! Building one variant: check the toolchain and patches before touching anything, materialize
//! the vendor tree, configure CMake (only when its arguments changed), build the targets with
//! Ninja while feeding its own progress to the reporter and the full output to a log, collect
//! and hash the artifacts, and write the manifest. Machine-specific paths are kept out of the
//! binaries (prefix maps, `$ORIGIN` run paths, build info from the pin).

use crate::digest::Sha256;
use crate::error::{Error, IoContext, Result};
use crate::manifest::{self, ExternalParameters, InternalParameters, Resource, Statement};
use crate::patch::{Bundle, PatchFile};
use crate::process;
use crate::progress::{parse_ninja_status, Reporter};
use crate::recipe::{PatchSelection, Recipe, Variant};
use crate::toolchain::{self, ResolvedToolchain};
use crate::upstream::{self, Tree};
use crate::workspace::Workspace;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
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
const CONFIGURE_SCHEME: u32 = 1;

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
];

/// One output artifact (the `build --json` contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    /// Path relative to the artifact root.
    pub path: String,
    /// SHA-256.
    pub sha256: Sha256,
    /// Size in bytes.
    pub size: u64,
}

/// What a build did.
#[derive(Debug, Clone, Serialize)]
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
    /// Output artifacts.
    pub artifacts: Vec<Artifact>,
    /// Folder the artifact paths are relative to.
    pub artifact_root: PathBuf,
    /// The full build log.
    pub log: PathBuf,
    /// Source tree the build used.
    pub source_tree: PathBuf,
    /// Ninja steps run (0 for a no-op).
    pub steps_run: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Options for [`build`].
pub struct BuildOptions<'a> {
    /// Ninja parallelism (None: Ninja's default).
    pub jobs: Option<usize>,
    /// Progress sink.
    pub reporter: &'a dyn Reporter,
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
    let reporter = opts.reporter;

    // Everything that can be refused is checked before vendor/ is touched.
    reporter.stage("toolchain", &variant.toolchain.name);
    let tools = toolchain::resolve(&variant.toolchain, &ws.tool_dirs())?;
    let bundle = bundle_for(recipe)?;
    let patches: Vec<&PatchFile> = match &variant.patches {
        PatchSelection::Series => bundle.select(None)?,
        PatchSelection::List(names) => bundle.select(Some(names))?,
    };
    for p in &patches {
        crate::patch::apply::parse_diff(p)?;
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

    let vdir = ws.variant_dir(&recipe.name, variant.name.as_str());
    let cmake_dir = vdir.join("cmake");
    fsx_create(&cmake_dir)?;
    let log_path = vdir.join("build.log");
    let log = Arc::new(Mutex::new(
        std::fs::File::create(&log_path).at("create", &log_path)?,
    ));

    let (template, actual) = cmake_args(variant, &tools, &tree, &cmake_dir, &vdir);
    write_git_shim(&vdir, &tree)?;

    // Configure only when the arguments changed (Ninja re-runs CMake itself when a
    // CMakeLists.txt changes); a kept build directory makes the rebuild incremental.
    let stamp = cmake_dir.join("pinforge-configure.json");
    let stamp_body = serde_json::to_vec_pretty(&serde_json::json!({
        "scheme": CONFIGURE_SCHEME,
        "scrubbed_env": SCRUBBED_ENV,
        "args": &actual,
    }))
    .map_err(|e| Error::Internal(e.to_string()))?;
    let configured = cmake_dir.join("CMakeCache.txt").exists()
        && std::fs::read(&stamp).ok().as_deref() == Some(stamp_body.as_slice());
    if !configured {
        reporter.stage("configure", variant.name.as_str());
        let mut cmd = Command::new(&tools.tool("cmake")?.path);
        // --fresh: CMake keeps option values in its cache, so an option the recipe no longer
        // sets (or a default that depends on the environment) would otherwise survive.
        cmd.arg("--fresh").args(&actual);
        run_logged(&mut cmd, &log, &log_path, reporter)?;
        crate::fsx::write_atomic(&stamp, &stamp_body)?;
    }

    reporter.stage("build", variant.name.as_str());
    let mut cmd = Command::new(&tools.tool("ninja")?.path);
    cmd.arg("-C").arg(&cmake_dir);
    if let Some(j) = opts.jobs {
        cmd.arg(format!("-j{j}"));
    }
    cmd.args(&variant.targets);
    let steps_run = run_logged(&mut cmd, &log, &log_path, reporter)?;
    reporter.finish();

    copy_public_headers(&tree.path, &cmake_dir)?;
    let (artifacts, links) = collect_artifacts(&cmake_dir)?;
    if artifacts.is_empty() {
        return Err(Error::tool(
            format!("build of {}/{}", recipe.name, variant.name),
            "finished but produced no artifacts in bin/, lib/ or include/",
        ));
    }

    let manifest_path = vdir.join("manifest.json");
    let (deps, inputs) = dependencies(recipe, &tree, &patches, &tools, &vdir)?;
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
    let subjects: Vec<Resource> = artifacts
        .iter()
        .map(|a| Resource {
            name: a.path.clone(),
            uri: None,
            digest: BTreeMap::from([("sha256".to_string(), a.sha256.to_string())]),
            annotations: BTreeMap::from([("size".to_string(), Value::from(a.size))]),
        })
        .collect();
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
                    artifact_root: "cmake".into(),
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
        crate::fsx::write_atomic(&manifest_path, statement.to_json()?.as_bytes())?;
    }

    Ok(BuildOutcome {
        recipe: recipe.name.clone(),
        variant: variant.name.to_string(),
        manifest: manifest_path,
        input_digest,
        cached,
        artifacts,
        artifact_root: cmake_dir,
        log: log_path,
        source_tree: tree.path.clone(),
        steps_run,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn fsx_create(p: &Path) -> Result<()> {
    crate::fsx::create_dir_all(p)
}

/// The configure arguments: the template recorded in the manifest (machine paths replaced by
/// `${SRC}`, `${BUILD}`, `${TOOL:role}`) and the actual arguments.
fn cmake_args(
    variant: &Variant,
    tools: &ResolvedToolchain,
    tree: &Tree,
    cmake_dir: &Path,
    vdir: &Path,
) -> (Vec<String>, Vec<String>) {
    let mut t: Vec<String> = vec![
        "-S".into(),
        "${SRC}".into(),
        "-B".into(),
        "${BUILD}".into(),
        "-G".into(),
        "Ninja".into(),
        "-DCMAKE_MAKE_PROGRAM=${TOOL:ninja}".into(),
        "-DCMAKE_C_COMPILER=${TOOL:cc}".into(),
        "-DCMAKE_CXX_COMPILER=${TOOL:cxx}".into(),
        format!("-DCMAKE_BUILD_TYPE={}", variant.build_type),
        // Keep absolute source and build paths out of __FILE__ and debug info.
        format!("-DCMAKE_C_FLAGS=-ffile-prefix-map=${{SRC}}={SRC_MAP} -ffile-prefix-map=${{BUILD}}={BUILD_MAP}"),
        format!("-DCMAKE_CXX_FLAGS=-ffile-prefix-map=${{SRC}}={SRC_MAP} -ffile-prefix-map=${{BUILD}}={BUILD_MAP}"),
        // Run paths relative to the library, not to this build folder.
        "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON".into(),
        // Build info from the pin, never from the vendor repository's own commits.
        format!("-DLLAMA_BUILD_NUMBER={}", tree.pin.build_number),
        format!("-DLLAMA_BUILD_COMMIT={}", tree.pin.build_commit),
        "-DGIT_EXE=${VARIANT}/pinforge-git".into(),
    ];
    if tools.tools.contains_key("nvcc") {
        t.push("-DCMAKE_CUDA_COMPILER=${TOOL:nvcc}".into());
        t.push(format!(
            "-DCMAKE_CUDA_FLAGS=-Xcompiler=-ffile-prefix-map=${{SRC}}={SRC_MAP} -Xcompiler=-ffile-prefix-map=${{BUILD}}={BUILD_MAP}"
        ));
        if let Some(root) = &tools.cuda_root {
            t.push(format!("-DCUDAToolkit_ROOT={root}"));
        }
        if let Some(arch) = &tools.cuda_architectures {
            t.push(format!("-DCMAKE_CUDA_ARCHITECTURES={arch}"));
        }
    }
    for (k, v) in &variant.cmake {
        t.push(format!("-D{k}={v}"));
    }
    let src = tree.path.display().to_string();
    let build = cmake_dir.display().to_string();
    let vd = vdir.display().to_string();
    let actual = t
        .iter()
        .map(|a| {
            let mut s = a
                .replace("${SRC}", &src)
                .replace("${BUILD}", &build)
                .replace("${VARIANT}", &vd);
            for (role, tool) in &tools.tools {
                s = s.replace(
                    &format!("${{TOOL:{role}}}"),
                    &tool.path.display().to_string(),
                );
            }
            s
        })
        .collect();
    (t, actual)
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
        crate::fsx::write_atomic(&path, body.as_bytes())?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).at("chmod", &path)
}

/// Run a command with stdout and stderr appended to the log; Ninja status lines feed the
/// reporter. Returns how many Ninja steps ran. A failure shows the log's tail and path.
fn run_logged(
    cmd: &mut Command,
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

/// The public headers (`include/*.h`, `ggml/include/*.h`) travel with the libraries, so that
/// an installed layer can be compiled against (the smoke shim uses the build's own llama.h).
/// Files are rewritten only when their content changed, keeping no-op builds no-ops.
fn copy_public_headers(src: &Path, cmake_dir: &Path) -> Result<()> {
    let dest = cmake_dir.join("include");
    for dir in [src.join("include"), src.join("ggml").join("include")] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "h") && p.is_file())
            .collect();
        names.sort();
        for h in names {
            let bytes = std::fs::read(&h).at("read", &h)?;
            let to = dest.join(h.file_name().unwrap_or_default());
            if std::fs::read(&to).ok().as_deref() != Some(bytes.as_slice()) {
                crate::fsx::write_atomic(&to, &bytes)?;
            }
        }
    }
    Ok(())
}

/// Regular files under `bin/`, `lib/` and `include/` of the build folder are the artifacts; symlinks among
/// them are recorded as links (`libllama.so -> libllama.so.0`).
/// Symlinks among the outputs: (path relative to the artifact root, link target).
type Links = Vec<(String, String)>;

fn collect_artifacts(cmake_dir: &Path) -> Result<(Vec<Artifact>, Links)> {
    let mut files = Vec::new();
    let mut links = Vec::new();
    for sub in ["bin", "lib", "include"] {
        let dir = cmake_dir.join(sub);
        if dir.is_dir() {
            walk(cmake_dir, &dir, &mut files, &mut links)?;
        }
    }
    files.sort_by(|a: &Artifact, b| a.path.cmp(&b.path));
    links.sort();
    Ok((files, links))
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<Artifact>, links: &mut Links) -> Result<()> {
    for entry in std::fs::read_dir(dir).at("read directory", dir)? {
        let entry = entry.at("read directory", dir)?;
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .map_err(|_| Error::Internal("artifact outside build dir".into()))?
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::symlink_metadata(&path).at("stat", &path)?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).at("read link", &path)?;
            links.push((rel, target.display().to_string()));
        } else if meta.is_dir() {
            walk(root, &path, files, links)?;
        } else if meta.is_file() {
            let (sha256, size) = Sha256::of_file(&path)?;
            files.push(Artifact {
                path: rel,
                sha256,
                size,
            });
        }
    }
    Ok(())
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
    let Ok(path) = crate::fsx::absolute(path) else {
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

    #[test]
    fn artifacts_are_files_and_links_are_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        std::fs::write(bin.join("libx.so.1.0"), b"elf").expect("write");
        std::os::unix::fs::symlink("libx.so.1.0", bin.join("libx.so")).expect("link");
        let (files, links) = collect_artifacts(dir.path()).expect("collect");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "bin/libx.so.1.0");
        assert_eq!(files[0].size, 3);
        assert_eq!(links, vec![("bin/libx.so".into(), "libx.so.1.0".into())]);
    }
}
