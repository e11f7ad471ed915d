//! Smoke decodes: a tiny model decoded by the build under test, with a sequence-state save,
//! memory clear and restore in the middle, compared token by token and logit by logit with an
//! uninterrupted reference run. The engine runs in a child process (this binary re-executed)
//! through a C shim compiled against the build's own `llama.h`, so an engine crash is a
//! result (`crash`, with the sanitizer's signature), never pinforge's crash.

pub mod child;

use crate::artifact::manifest::Statement;
use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::deploy::install::Root;
use crate::deploy::model::{self, Arch};
use crate::sys::cuda;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The shim's source, compiled per build under test.
pub const SHIM_SOURCE: &str = include_str!("shim.c");

/// The target triple pinforge was built for (the shim is built for the same).
const TARGET: &str = env!("PINFORGE_TARGET");

/// A build to smoke: where its libraries and headers are, and what it is. Built only by
/// [`target_from_manifest`] and [`target_from_installed`], which recompute every digest below
/// from the files themselves and refuse a file that differs from the record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeTarget {
    /// Human name: `recipe/variant`.
    pub name: String,
    /// Folder holding `lib/libllama.so*` and `include/llama.h` (the staged prefix, or an
    /// installed store entry).
    pub root: PathBuf,
    /// libllama file (relative to root).
    pub libllama: String,
    /// SHA-256 of libllama, recomputed (equal to the recorded one; keys the shim cache).
    pub libllama_sha256: Sha256,
    /// The headers the shim compiles against (`include/…`), with their recomputed SHA-256.
    pub headers: BTreeMap<String, Sha256>,
    /// The verified bytes of those headers: the shim is compiled against these copies, never
    /// against the build folder, so a header swapped after the check is not what is compiled.
    #[serde(skip)]
    header_bytes: BTreeMap<String, Vec<u8>>,
    /// The ASan runtime the (verified) libllama needs, if it is instrumented.
    pub sanitizer: Option<String>,
    /// Whether the build has a CUDA backend (libggml-cuda).
    pub cuda: bool,
    /// nvcc version the build used, if any.
    pub cuda_toolkit: Option<String>,
    /// CMAKE_CUDA_ARCHITECTURES, if any.
    pub cuda_architectures: Option<String>,
}

/// Smoke a build described by a manifest: its artifact root is reached through real folders
/// only, and every file smoke compiles against or loads is checked against the manifest.
pub fn target_from_manifest(path: &Path) -> Result<SmokeTarget> {
    let st = Statement::read(path)?;
    let root = st.checked_artifact_root(path)?;
    let mut recorded = BTreeMap::new();
    for s in &st.subject {
        let sha = s.sha256().ok_or_else(|| {
            Error::input(
                path.display(),
                format!("subject `{}` has no sha256", s.name.escape_debug()),
            )
        })?;
        recorded.insert(s.name.clone(), sha);
    }
    let mut links = BTreeMap::new();
    for b in &st.predicate.run_details.byproducts {
        if let Some(t) = b.annotations.get("link_target") {
            let t = t.as_str().ok_or_else(|| {
                Error::input(
                    path.display(),
                    format!(
                        "link `{}`: link_target is not a string",
                        b.name.escape_debug()
                    ),
                )
            })?;
            links.insert(b.name.clone(), t.to_string());
        }
    }
    target_from(
        &st,
        root,
        &recorded,
        &links,
        &format!("the manifest {}", path.display()),
    )
}

/// The largest manifest read from a store entry (the install root bounds its records alike).
const MAX_ENTRY_MANIFEST: u64 = 16 << 20;

/// The largest header read (llama.h is about 70 KiB).
const MAX_HEADER: u64 = 16 << 20;

/// Smoke an installed layer (`None`: what `current` shows), through its store entry.
pub fn target_from_installed(
    root: &Root,
    layer: Option<crate::deploy::install::Layer>,
) -> Result<SmokeTarget> {
    // Never canonicalize a link chain someone else may have edited: the install root resolves
    // the layer from its own committed record and re-hashes the entry before we read it.
    let entry = root.layer_entry(layer)?;
    let digest: Sha256 = entry
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            Error::Internal(format!(
                "invariant: store entry {} is named by its digest",
                entry.display()
            ))
        })?;
    // The record is the entry's identity (its listing hashes to the entry's name, and
    // layer_entry re-hashed the files against it); manifest.json sits beside the content and
    // is not part of that identity, so it is believed only where it agrees with the record.
    let info = root.read_entry(&digest)?;
    let mpath = entry.join("manifest.json");
    let bytes = read_regular(&mpath, "the entry's manifest", MAX_ENTRY_MANIFEST)?;
    let st = Statement::parse(&bytes, &mpath)?;
    let disagree = |what: String| {
        Error::check(
            mpath.display(),
            format!(
                "{what}; the entry's manifest disagrees with its record and was not used \
                 (manifest.json is not part of an entry's identity: reinstall the build)"
            ),
        )
    };
    let params = &st.predicate.build_definition.external_parameters;
    if params.recipe != info.recipe || params.variant != info.variant {
        return Err(disagree(format!(
            "it names {}/{}, the record {}/{}",
            params.recipe, params.variant, info.recipe, info.variant
        )));
    }
    for s in &st.subject {
        let rec = info.files.get(&s.name).map(|f| f.sha256);
        if rec.is_none() || rec != s.sha256() {
            return Err(disagree(format!(
                "it lists `{}`, which the record does not hold with that sha256",
                s.name.escape_debug()
            )));
        }
    }
    if st.subject.len() != info.files.len() {
        return Err(disagree(format!(
            "it lists {} files, the record {}",
            st.subject.len(),
            info.files.len()
        )));
    }
    let recorded = info
        .files
        .iter()
        .map(|(p, f)| (p.clone(), f.sha256))
        .collect();
    target_from(
        &st,
        entry.clone(),
        &recorded,
        &info.links,
        &format!("the record of store entry {}", entry.display()),
    )
}

/// Open `root/rel` for reading: every folder on the way a real folder (no link), the file
/// itself a regular file (a FIFO, device, socket or link is refused before it is opened).
fn open_inside(root: &Path, rel: &str, what: &str) -> Result<(PathBuf, std::fs::File)> {
    let comps: Vec<&str> = rel.split('/').collect();
    let mut p = root.to_path_buf();
    for c in &comps[..comps.len().saturating_sub(1)] {
        p.push(c);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::input(
                    p.display(),
                    format!(
                        "the way to {what} `{}` passes through something that is not a folder (a link?); it was not read",
                        rel.escape_debug()
                    ),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::input(p.display(), format!("{what} not found"))
                    .with_hint("the build folder changed since the build; rebuild the variant"))
            }
            Err(e) => return Err(Error::io("stat", &p, e)),
        }
    }
    if let Some(last) = comps.last() {
        p.push(last);
    }
    let f = fsx::open_regular(&p, what, false)?;
    Ok((p, f))
}

/// Read a regular file (never a FIFO or device, links followed not at all), at most `limit`
/// bytes.
fn read_regular(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>> {
    let f = fsx::open_regular(path, what, false)?;
    read_limited(f, path, what, limit)
}

fn read_limited(f: std::fs::File, path: &Path, what: &str, limit: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .at("read", path)?;
    if bytes.len() as u64 > limit {
        return Err(Error::input(
            path.display(),
            format!("{what} is larger than {limit} bytes; refused"),
        ));
    }
    Ok(bytes)
}

/// A file whose bytes differ from the record: a check failure, before anything is compiled
/// or loaded.
fn differs(path: &Path, what: &str, rel: &str, got: Sha256, want: Sha256, source: &str) -> Error {
    Error::check(
        path.display(),
        format!(
            "{what} `{}` has sha256 {got}, but {source} records {want}; nothing was compiled or \
             loaded (the files changed since they were recorded: rebuild or reinstall the \
             variant; `pinforge verify` lists every differing file)",
            rel.escape_debug()
        ),
    )
}

/// Whether a subject is a header the shim may include: the shim compiles with only these on
/// its include path.
fn is_header(name: &str) -> bool {
    name.starts_with("include/") && name.ends_with(".h")
}

/// Whether a subject is a shared library the decode loads (libllama and the ggml backends
/// beside it).
fn is_shared_library(name: &str) -> bool {
    name.strip_prefix("lib/")
        .is_some_and(|f| !f.contains('/') && f.contains(".so"))
}

fn target_from(
    st: &Statement,
    root: PathBuf,
    recorded: &BTreeMap<String, Sha256>,
    links: &BTreeMap<String, String>,
    source: &str,
) -> Result<SmokeTarget> {
    let params = &st.predicate.build_definition.external_parameters;
    let name = format!("{}/{}", params.recipe, params.variant);
    let lib = st
        .subject
        .iter()
        .find(|s| s.name.starts_with("lib/libllama.so"))
        .ok_or_else(|| {
            Error::input(&name, "the build has no libllama shared library (lib/libllama.so*)")
                .with_hint("smoke needs a BUILD_SHARED_LIBS build of the `llama` target, staged in lib/: rebuild the variant with this pinforge")
        })?;
    if !st.subject.iter().any(|s| s.name == "include/llama.h") {
        return Err(Error::input(&name, "the build has no include/llama.h")
            .with_hint("rebuild with this pinforge: builds now keep the public headers"));
    }
    let want = |rel: &str| {
        recorded
            .get(rel)
            .copied()
            .ok_or_else(|| Error::Internal(format!("invariant: `{rel}` is a recorded subject")))
    };

    // libllama: read once; the digest and the sanitizer probe see the same bytes.
    let (path, mut f) = open_inside(&root, &lib.name, "libllama")?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).at("read", &path)?;
    let lib_sha = Sha256::of_bytes(&bytes);
    if lib_sha != want(&lib.name)? {
        return Err(differs(
            &path,
            "libllama",
            &lib.name,
            lib_sha,
            want(&lib.name)?,
            source,
        ));
    }
    let sanitizer = match asan_soname(&bytes) {
        Some(so) => Some(so),
        None => clang_asan_runtime(&bytes, &name)?,
    };
    drop(bytes);

    // The other libraries the decode loads through libllama.
    for s in st
        .subject
        .iter()
        .filter(|s| s.name != lib.name && is_shared_library(&s.name))
    {
        let (path, f) = open_inside(&root, &s.name, "shared library")?;
        let (got, _) = Sha256::of_reader(f, &path)?;
        if got != want(&s.name)? {
            return Err(differs(
                &path,
                "shared library",
                &s.name,
                got,
                want(&s.name)?,
                source,
            ));
        }
    }

    // The loader reaches libllama by its soname through the links in lib/ (libllama.so.0 ->
    // libllama.so.0.0.1): each must be what the record says, a name beside it, never a way
    // out of the build.
    for (name, target) in links.iter().filter(|(n, _)| is_shared_library(n)) {
        let p = root.join(name);
        let found = std::fs::read_link(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::input(p.display(), "recorded link not found")
                .with_hint("the build folder changed since the build; rebuild the variant"),
            std::io::ErrorKind::InvalidInput => Error::check(
                p.display(),
                format!(
                    "`{}` is recorded as a link but is not one",
                    name.escape_debug()
                ),
            ),
            _ => Error::io("read link", &p, e),
        })?;
        if found.as_os_str().as_encoded_bytes() != target.as_bytes() {
            return Err(Error::check(
                p.display(),
                format!(
                    "link `{}` points at `{}`, but {source} records `{}`; nothing was compiled or loaded",
                    name.escape_debug(),
                    found.display(),
                    target.escape_debug()
                ),
            ));
        }
        if target.contains('/') || target == ".." || target == "." {
            return Err(Error::input(
                p.display(),
                format!(
                    "link `{}` -> `{}` leaves lib/; smoke loads libraries only from beside libllama",
                    name.escape_debug(),
                    target.escape_debug()
                ),
            ));
        }
    }

    let mut headers = BTreeMap::new();
    let mut header_bytes = BTreeMap::new();
    for s in st.subject.iter().filter(|s| is_header(&s.name)) {
        let (path, f) = open_inside(&root, &s.name, "header")?;
        let bytes = read_limited(f, &path, "header", MAX_HEADER)?;
        let got = Sha256::of_bytes(&bytes);
        if got != want(&s.name)? {
            return Err(differs(
                &path,
                "header",
                &s.name,
                got,
                want(&s.name)?,
                source,
            ));
        }
        headers.insert(s.name.clone(), got);
        header_bytes.insert(s.name.clone(), bytes);
    }

    let cuda = st.subject.iter().any(|s| s.name.contains("libggml-cuda"));
    let arg = |prefix: &str| {
        params
            .cmake_args
            .iter()
            .find_map(|a| a.strip_prefix(prefix).map(str::to_string))
    };
    let toolkit = st
        .predicate
        .build_definition
        .resolved_dependencies
        .iter()
        .find(|d| d.name == "tool:nvcc")
        .and_then(|d| d.annotations.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Ok(SmokeTarget {
        name,
        root,
        libllama: lib.name.clone(),
        libllama_sha256: lib_sha,
        headers,
        header_bytes,
        sanitizer,
        cuda,
        cuda_toolkit: toolkit,
        cuda_architectures: arg("-DCMAKE_CUDA_ARCHITECTURES="),
    })
}

/// Compile (or reuse) the shim for `target` into `cache`. The cache key covers the shim
/// source, the recomputed digests of libllama and of every header the shim may include, the
/// compiler, and the build's folder (the shim's rpath points there, so a shim built for one
/// folder must not be reused for another holding the same bytes).
pub fn shim_for(target: &SmokeTarget, cache: &Path) -> Result<PathBuf> {
    let mut b = cc::Build::new();
    b.cargo_metadata(false)
        .cargo_warnings(false)
        .cargo_debug(false)
        .target(TARGET)
        .host(TARGET)
        .opt_level(1)
        .debug(false)
        .pic(true)
        .warnings(false);
    let compiler = b.try_get_compiler().map_err(|e| {
        Error::input("smoke shim", format!("no C compiler: {e}"))
            .with_hint("install gcc (or set CC)")
    })?;
    let mut key_text = format!(
        "shim {}\nlibllama {}\n",
        Sha256::of_bytes(SHIM_SOURCE.as_bytes()),
        target.libllama_sha256
    );
    for (name, sha) in &target.headers {
        key_text.push_str(&format!("header {} {sha}\n", name.escape_debug()));
    }
    key_text.push_str(&format!(
        "cc {}\nroot {}\n",
        compiler.path().display(),
        target.root.display()
    ));
    let key = Sha256::of_bytes(key_text.as_bytes());
    let out = cache.join(format!("pinforge-smoke-{}.so", key.short(16)));
    if out.is_file() {
        return Ok(out);
    }
    fsx::create_dir_all(cache)?;
    let src = cache.join(format!("shim-{}.c", key.short(16)));
    fsx::write_atomic(&src, SHIM_SOURCE.as_bytes())?;
    // The verified header bytes, in a folder of this process's own: the compiler sees those
    // and nothing else from the build (no header the manifest does not name, none swapped
    // after the check).
    let inc = cache.join(format!(".inc-{}-{}", key.short(16), std::process::id()));
    let _ = std::fs::remove_dir_all(&inc);
    let compiled = compile_shim(target, &compiler, &src, &inc, &out, &key);
    let _ = std::fs::remove_dir_all(&inc);
    compiled?;
    Ok(out)
}

fn compile_shim(
    target: &SmokeTarget,
    compiler: &cc::Tool,
    src: &Path,
    inc: &Path,
    out: &Path,
    key: &Sha256,
) -> Result<()> {
    for (name, bytes) in &target.header_bytes {
        let rel = name.strip_prefix("include/").unwrap_or(name);
        let p = inc.join(rel);
        fsx::create_dir_all(&fsx::parent_of(&p))?;
        fsx::write_atomic(&p, bytes)?;
    }
    let lib_path = target.root.join(&target.libllama);
    let lib_dir = fsx::parent_of(&lib_path);
    let cache = fsx::parent_of(out);
    let tmp = cache.join(format!(".tmp-{}-{}.so", key.short(16), std::process::id()));
    let mut cmd = compiler.to_command();
    cmd.arg("-shared")
        .arg("-o")
        .arg(&tmp)
        .arg(src)
        .arg(format!("-I{}", inc.display()))
        .arg(&lib_path)
        // Bound to this build's libraries, not to whatever a layer link shows later.
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    crate::base::process::run(&mut cmd, "install gcc (or set CC)").map_err(|e| match e {
        Error::Tool {
            command, detail, ..
        } => Error::input(
            format!("smoke shim for {}", target.name),
            format!("does not compile against this build's llama.h ({command})"),
        )
        .with_detail(detail.unwrap_or_default())
        .with_hint("the build's C API changed in a way the shim does not cover"),
        other => other,
    })?;
    std::fs::rename(&tmp, out).at("rename into", out)?;
    Ok(())
}

/// What the smoke found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The restored decode equals the reference.
    Ok,
    /// The restored decode diverged.
    Mismatch,
    /// The engine died.
    Crash,
    /// The decode could not run.
    Error,
}

/// The `smoke --json` contract (and more).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeReport {
    /// ok | mismatch | crash | error.
    pub verdict: Verdict,
    /// Model architecture.
    pub arch: String,
    /// Tokens generated in the reference run.
    pub tokens_generated: usize,
    /// Reference decode speed.
    pub tokens_per_second: f64,
    /// Crash signature (sanitizer summary and first frames, or the signal), else null.
    pub signature: Option<String>,
    /// Device the decode ran on: `cpu`, or `cuda:N (name)`. `cuda:N` only when the engine
    /// registered a GPU device and the model was offloaded to it.
    pub device: String,
    /// Why a CUDA build ran on the CPU (`no CUDA driver`, ...), else null.
    pub device_reason: Option<String>,
    /// The backend devices the engine itself registered (`CPU`, `CUDA0`).
    pub engine_devices: Vec<child::EngineDevice>,
    /// The build smoked.
    pub target: String,
    /// Why (mismatch: where; error: the reason).
    pub detail: Option<String>,
    /// Reference tokens.
    pub reference: Vec<i32>,
    /// Tokens of the save/restore run.
    pub restored: Vec<i32>,
    /// Step at which the state was saved and restored.
    pub restore_step: Option<usize>,
    /// Largest absolute logit difference after the restore.
    pub max_logit_diff: Option<f32>,
    /// Size of the saved sequence state.
    pub state_bytes: Option<usize>,
    /// The signal that ended the child, if any.
    pub signal: Option<i32>,
    /// The child's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// Last lines of the child's stderr.
    pub stderr_tail: String,
    /// CUDA probe.
    pub cuda: cuda::Probe,
    /// Whether the build is AddressSanitizer-instrumented.
    pub sanitizer: Option<String>,
    /// GPU memory used by the decode (free before minus free during), when on a GPU.
    pub gpu_memory_used_bytes: Option<u64>,
}

/// Options for [`run`].
pub struct SmokeOptions {
    /// Model file (None: generate the tiny model for `arch`).
    pub model: Option<PathBuf>,
    /// Architecture of the generated model.
    pub arch: Arch,
    /// Tokens to generate.
    pub tokens: usize,
    /// Where shims and generated models are cached.
    pub cache: PathBuf,
    /// Test-only: make the engine call crash.
    pub crash_test: bool,
    /// Give up after this long.
    pub timeout: Duration,
    /// Refuse (verdict `error`) rather than run a CUDA build on the CPU when no device is
    /// usable: for a GPU check that must not pass by falling back.
    pub require_gpu: bool,
}

/// The logit tolerance: restored and reference decodes run the same kernels on the same KV
/// bytes, so anything above float noise is a divergence.
pub const LOGIT_TOLERANCE: f32 = 1e-3;

/// Run a smoke decode against `target`.
pub fn run(target: &SmokeTarget, opts: &SmokeOptions) -> Result<SmokeReport> {
    if opts.tokens < 2 || opts.tokens > 64 {
        return Err(Error::input(
            format!("--tokens {}", opts.tokens),
            "must be between 2 and 64 (the save/restore happens halfway)",
        ));
    }
    let probe = cuda::probe();
    let sanitizer = target.sanitizer.clone();
    let mut report = SmokeReport {
        verdict: Verdict::Error,
        arch: opts.arch.name().to_string(),
        tokens_generated: 0,
        tokens_per_second: 0.0,
        signature: None,
        device: "cpu".into(),
        device_reason: None,
        engine_devices: vec![],
        target: target.name.clone(),
        detail: None,
        reference: vec![],
        restored: vec![],
        restore_step: None,
        max_logit_diff: None,
        state_bytes: None,
        signal: None,
        exit_code: None,
        stderr_tail: String::new(),
        cuda: probe.clone(),
        sanitizer: sanitizer.clone(),
        gpu_memory_used_bytes: None,
    };
    let mut gpu_layers = 0;
    if target.cuda {
        if let Some(why) = cuda::preflight(
            &probe,
            target.cuda_toolkit.as_deref(),
            target.cuda_architectures.as_deref(),
        ) {
            report.detail = Some(format!("refused: {why}"));
            return Ok(report);
        }
        match (probe.devices.first(), cuda::cpu_reason(&probe)) {
            (Some(d), _) => {
                gpu_layers = 999;
                // Offloaded to the probe's device from here on: a crash or hang there is
                // reported as a GPU run; the engine's own device list refines it below.
                report.device = format!("cuda:{} ({})", d.ordinal, d.name);
            }
            (None, why) => {
                let why = why.unwrap_or_else(|| "no CUDA device".into());
                if opts.require_gpu {
                    report.detail = Some(format!(
                        "refused: --require-gpu, and {why} (the CUDA build would run on the CPU)"
                    ));
                    return Ok(report);
                }
                report.device_reason = Some(format!("{why}: the CUDA build runs on the CPU"));
            }
        }
    } else if opts.require_gpu {
        report.detail = Some("refused: --require-gpu, and this is not a CUDA build".into());
        return Ok(report);
    }

    let model = match &opts.model {
        Some(m) => {
            report.arch = model::architecture(m)?;
            m.clone()
        }
        None => {
            let p = opts
                .cache
                .join(format!("tiny-{}-seed1.gguf", opts.arch.name()));
            if !p.exists() {
                model::write_tiny(opts.arch, 1, &p)?;
            }
            p
        }
    };
    let shim = shim_for(target, &opts.cache)?;

    let exe = std::env::current_exe().map_err(|e| Error::io("locate", Path::new("pinforge"), e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__smoke-child")
        .arg("--shim")
        .arg(&shim)
        .arg("--model")
        .arg(&model)
        .arg("--tokens")
        .arg(opts.tokens.to_string())
        .arg("--gpu-layers")
        .arg(gpu_layers.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let (true, Some((k, v))) = (opts.crash_test, crate::base::hooks::smoke_crash_env()) {
        cmd.env(k, v);
    }
    engine_env(&mut cmd, target);
    let (status, stdout, stderr) = run_with_timeout(&mut cmd, opts.timeout)?;
    use std::os::unix::process::ExitStatusExt;
    report.signal = status.and_then(|s| s.signal());
    report.exit_code = status.and_then(|s| s.code());
    report.stderr_tail = crate::base::process::tail(&without_shadow_legend(&stderr), 25);

    let asan = asan_signature(&stderr);
    if status.is_none() {
        report.verdict = Verdict::Crash;
        report.signature = Some(format!(
            "hang: no result within {}s",
            opts.timeout.as_secs()
        ));
        return Ok(report);
    }
    if asan.is_some() || report.signal.is_some() {
        report.verdict = Verdict::Crash;
        report.signature = asan.or_else(|| {
            report
                .signal
                .map(|s| format!("killed by signal {s} ({})", signal_name(s)))
        });
        return Ok(report);
    }
    let result: child::ChildResult = match serde_json::from_str(stdout.trim()) {
        Ok(r) => r,
        Err(_) => {
            // It exited without a signal but also without a result: treat as a crash of the
            // engine (e.g. abort() turned into an exit by a handler) and show why.
            report.verdict = Verdict::Crash;
            report.signature = Some(format!(
                "exited with {} without a result",
                report
                    .exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "?".into())
            ));
            return Ok(report);
        }
    };
    report.engine_devices = result.devices.clone();
    if let Some(e) = result.error {
        report.verdict = Verdict::Error;
        report.detail = Some(e);
        return Ok(report);
    }
    // Where it ran is what the engine registered, not what the probe hoped: a GPU the probe
    // sees but the engine's backend does not (a driver it cannot use) means the CPU ran, and
    // the name is the engine's own (the probe's first device need not be the engine's first).
    let engine_gpu = result.devices.iter().find(|d| d.kind == "gpu");
    match (gpu_layers > 0, engine_gpu) {
        (true, Some(g)) => {
            let ordinal = probe.devices.first().map(|d| d.ordinal).unwrap_or(0);
            report.device = format!("cuda:{ordinal} ({})", g.description);
        }
        (true, None) => {
            report.device = "cpu".into();
            report.device_reason =
                Some("the engine registered no GPU device: the decode ran on the CPU".into());
            if opts.require_gpu {
                report.verdict = Verdict::Error;
                report.detail = Some(
                    "refused: --require-gpu, and the engine registered no GPU device although \
                     the probe found one"
                        .into(),
                );
                return Ok(report);
            }
        }
        (false, Some(g)) => {
            // The probe saw no device but the engine did: nothing was offloaded (no layers were
            // asked for), though ggml may still hand it large operations. Say both.
            report.device_reason = Some(format!(
                "the probe found no CUDA device but the engine registered {} ({}); no layers \
                 were offloaded",
                g.name, g.description
            ));
        }
        (false, None) => {}
    }
    report.tokens_generated = result.reference.len();
    report.tokens_per_second = if result.reference_seconds > 0.0 {
        result.reference.len() as f64 / result.reference_seconds
    } else {
        0.0
    };
    report.restore_step = Some(result.restore_step);
    report.max_logit_diff = Some(result.max_logit_diff);
    report.state_bytes = Some(result.state_bytes);
    report.reference = result.reference.clone();
    report.restored = result.restored.clone();
    // GPU memory is the decode's only when it ran on the GPU.
    report.gpu_memory_used_bytes = result
        .gpu_memory_used_bytes
        .filter(|_| report.device.starts_with("cuda:"));
    let divergence = result
        .reference
        .iter()
        .zip(&result.restored)
        .position(|(a, b)| a != b)
        .or_else(|| {
            (result.reference.len() != result.restored.len()).then_some(result.restored.len())
        });
    match (divergence, result.max_logit_diff > LOGIT_TOLERANCE) {
        (None, false) => report.verdict = Verdict::Ok,
        (Some(i), _) => {
            report.verdict = Verdict::Mismatch;
            report.detail = Some(format!(
                "token {i} differs after the restore at step {}: reference {:?}, restored {:?}",
                result.restore_step,
                result.reference.get(i),
                result.restored.get(i)
            ));
        }
        (None, true) => {
            report.verdict = Verdict::Mismatch;
            report.detail = Some(format!(
                "same tokens, but logits differ by up to {} after the restore at step {} (tolerance {LOGIT_TOLERANCE})",
                result.max_logit_diff, result.restore_step
            ));
        }
    }
    Ok(report)
}

/// The environment an engine process of `target` needs: an instrumented libllama needs the
/// ASan runtime loaded first; leaks of the Rust driver are not the engine's bug, and a
/// distinct exit code marks a sanitizer stop. (Shared by smoke and the validate engine.)
pub fn engine_env(cmd: &mut Command, target: &SmokeTarget) {
    if let Some(so) = &target.sanitizer {
        cmd.env("LD_PRELOAD", so).env(
            "ASAN_OPTIONS",
            format!(
                "detect_leaks=0:exitcode={ASAN_EXIT}:abort_on_error=0:symbolize=1{}",
                cuda_asan_option(target)
            ),
        );
    }
}

/// The CUDA driver maps device memory into the range ASan keeps as its shadow gap: an
/// instrumented CUDA build needs `protect_shadow_gap=0`, or cuInit fails on a GPU machine.
fn cuda_asan_option(target: &SmokeTarget) -> &'static str {
    if target.cuda {
        ":protect_shadow_gap=0"
    } else {
        ""
    }
}

/// [`engine_env`] for the validate engine, choosing whether the sanitizer symbolizes its report. Symbolizing costs
/// seconds per report on an instrumented libllama; a harness that has already seen the
/// names of a crash's frames can map an unsymbolized report's `(module+offset)` frames back
/// to them. Every frame also carries `<module+offset>` either way, for that mapping.
pub fn engine_env_symbolized(cmd: &mut Command, target: &SmokeTarget, symbolize: bool) {
    if let Some(so) = &target.sanitizer {
        cmd.env("LD_PRELOAD", so).env(
            "ASAN_OPTIONS",
            format!(
                "detect_leaks=0:exitcode={ASAN_EXIT}:abort_on_error=0:symbolize={}:stack_trace_format='    #%n %p %F %L <%m+%o>'{}",
                u8::from(symbolize),
                cuda_asan_option(target)
            ),
        );
    }
}

/// The exit code the sanitizer is told to use, so its stops are told apart from errors.
pub const ASAN_EXIT: i32 = 86;

/// The ASan runtime a library needs (`libasan.so.8`): its `DT_NEEDED` entry (the bytes
/// already checked against the record). A file `elf` does not read (not ELF64 little-endian)
/// falls back to a scan of its bytes for the name.
fn asan_soname(bytes: &[u8]) -> Option<String> {
    if let Some(needed) = crate::base::elf::needed(bytes) {
        return needed.into_iter().find(|n| n.starts_with("libasan.so."));
    }
    let needle = b"libasan.so.";
    let at = bytes.windows(needle.len()).position(|w| w == needle)?;
    let end = bytes[at..]
        .iter()
        .position(|&b| b == 0)
        .map(|e| at + e)
        .unwrap_or(at + needle.len());
    Some(String::from_utf8_lossy(&bytes[at..end]).into_owned())
}

/// clang links its AddressSanitizer runtime into executables only: an instrumented shared
/// library built by clang names no runtime, it just calls `__asan_init`. The runtime that
/// belongs to the compiler version the library records (`clang version X.Y.Z` in its
/// `.comment`) is found in the distribution's LLVM folders, or else asked of the `clang` on
/// PATH; nothing named by the record itself is run.
fn clang_asan_runtime(bytes: &[u8], name: &str) -> Result<Option<String>> {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if !has(b"__asan_init") {
        return Ok(None);
    }
    let arch = std::env::consts::ARCH;
    let file = format!("libclang_rt.asan-{arch}.so");
    let mut candidates = Vec::new();
    if let Some(v) = clang_version(bytes) {
        let major = v.split('.').next().unwrap_or(&v).to_string();
        for ver in [v.as_str(), major.as_str()] {
            candidates.push(PathBuf::from(format!(
                "/usr/lib/llvm-{major}/lib/clang/{ver}/lib/linux/{file}"
            )));
            candidates.push(PathBuf::from(format!(
                "/usr/lib/llvm-{major}/lib/clang/{ver}/lib/{arch}-unknown-linux-gnu/libclang_rt.asan.so"
            )));
        }
    }
    if let Ok(o) = Command::new("clang")
        .arg(format!("-print-file-name={file}"))
        .stdin(Stdio::null())
        .output()
    {
        let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && p.starts_with('/') {
            candidates.push(PathBuf::from(p));
        }
    }
    match candidates.into_iter().find(|p| p.is_file()) {
        Some(p) => Ok(Some(p.display().to_string())),
        None => Err(Error::input(
            name,
            "libllama is instrumented by clang's AddressSanitizer, but no clang ASan runtime \
             was found",
        )
        .with_hint(format!(
            "install the clang that built it (Debian: apt-get install clang; the runtime is \
             {file} in libclang-rt-*-dev)"
        ))),
    }
}

/// `14.0.6` from a `.comment` string `Debian clang version 14.0.6`.
fn clang_version(bytes: &[u8]) -> Option<String> {
    let needle = b"clang version ";
    let at = bytes.windows(needle.len()).position(|w| w == needle)? + needle.len();
    let v: String = bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .map(|&b| b as char)
        .collect();
    (!v.is_empty()).then_some(v)
}

/// `heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in ...)` from an ASan
/// report, plus its SUMMARY line and first frames.
pub fn asan_signature(stderr: &str) -> Option<String> {
    let err_line = stderr
        .lines()
        .find(|l| l.contains("ERROR: AddressSanitizer:"))?;
    let kind = err_line
        .split("ERROR: AddressSanitizer:")
        .nth(1)
        .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_default();
    let frame_fn = |line: &str| -> Option<String> {
        let l = line.trim_start();
        if !l.starts_with('#') {
            return None;
        }
        let after = l.split(" in ").nth(1)?;
        let func = after.split(" /").next().unwrap_or(after).trim();
        let func = func.split(" (").next().unwrap_or(func);
        Some(func.split('(').next().unwrap_or(func).trim().to_string())
    };
    let mut lines = stderr
        .lines()
        .skip_while(|l| !l.contains("ERROR: AddressSanitizer:"));
    let frames: Vec<String> = lines
        .by_ref()
        .skip(1)
        .skip_while(|l| !l.trim_start().starts_with("#0"))
        .take_while(|l| l.trim_start().starts_with('#'))
        .filter_map(frame_fn)
        .take(4)
        .collect();
    let alloc: Option<String> = stderr
        .lines()
        .skip_while(|l| !l.contains("allocated by thread"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('#'))
        .filter_map(frame_fn)
        .find(|f| f.contains("llama") || f.contains("ggml"));
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("SUMMARY: AddressSanitizer:"))
        .map(str::trim);
    let mut sig = format!(
        "{kind} in {}",
        frames.first().cloned().unwrap_or_else(|| "?".into())
    );
    if let Some(a) = alloc {
        sig.push_str(&format!(" (allocated in {a})"));
    }
    if !frames.is_empty() {
        sig.push_str(&format!("\nframes: {}", frames.join(" <- ")));
    }
    if let Some(s) = summary {
        sig.push_str(&format!("\n{s}"));
    }
    Some(sig)
}

/// ASan ends its report with a map of shadow bytes and their legend; the lines worth showing
/// as "last lines of stderr" are the ones before it (and the ABORTING line after it).
pub fn without_shadow_legend(stderr: &str) -> String {
    let mut out = Vec::new();
    let mut skipping = false;
    for line in stderr.lines() {
        if line.starts_with("Shadow bytes around the buggy address") {
            skipping = true;
        }
        if skipping && line.contains("==ABORTING") {
            skipping = false;
        }
        if !skipping {
            out.push(line);
        }
    }
    out.join("\n")
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        _ => "signal",
    }
}

type ChildOutput = (Option<std::process::ExitStatus>, String, String);

/// Run with a deadline; both pipes drained on threads so a chatty child cannot block.
fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<ChildOutput> {
    let line = crate::base::process::display(cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| crate::base::process::spawn_error(&line, e, ""))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().at("wait for", Path::new(&line))? {
            Some(s) => break Some(s),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok((status, stdout, stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASAN: &str = "=================================================================
==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020000001d8 at pc 0x7f00 bp 0x7ffd sp 0x7ffd
READ of size 4 at 0x6020000001d8 thread T0
    #0 0x7f3a in llama_kv_cache::apply_ubatch(llama_kv_cache::slot_info const&, llama_ubatch const&) (/b/bin/libllama.so.0+0x1f)
    #1 0x7f3b in llama_kv_cache::state_read_meta(llama_io_read_i&, unsigned int, unsigned int, llama_kv_cache::slot_info&, int) (/b/bin/libllama.so.0+0x2f)
    #2 0x7f3c in llama_kv_cache::state_read(llama_io_read_i&, int, unsigned int) (/b/bin/libllama.so.0+0x3f)

0x6020000001d8 is located 0 bytes after 8-byte region [0x6020000001d0,0x6020000001d8)
allocated by thread T0 here:
    #0 0x7f10 in operator new(unsigned long) ../../../../src/libsanitizer/asan/asan_new_delete.cpp:95
    #1 0x7f11 in llama_batch_allocr::ubatch_reserve(unsigned int, unsigned int) (/b/bin/libllama.so.0+0x4f)

SUMMARY: AddressSanitizer: heap-buffer-overflow (/b/bin/libllama.so.0+0x1f) in llama_kv_cache::apply_ubatch(llama_kv_cache::slot_info const&, llama_ubatch const&)
";

    #[test]
    fn a_clang_instrumented_library_gets_clangs_runtime_and_others_get_none() {
        assert_eq!(
            clang_version(b"\0GCC: (Debian 12.2.0-14) 12.2.0\0Debian clang version 14.0.6\0")
                .as_deref(),
            Some("14.0.6")
        );
        assert_eq!(clang_version(b"GCC: 12.2.0"), None);
        // Not instrumented: nothing to preload, nothing searched.
        assert_eq!(
            clang_asan_runtime(b"clang version 14.0.6", "x").expect("plain"),
            None
        );
        // Instrumented by Debian's clang 14 (tools/bootstrap.sh installs it): its runtime.
        if Path::new("/usr/lib/llvm-14").is_dir() {
            let so = clang_asan_runtime(b"__asan_init\0Debian clang version 14.0.6\0", "x")
                .expect("found")
                .expect("instrumented");
            assert!(so.contains("libclang_rt.asan"), "{so}");
            assert!(Path::new(&so).is_file(), "{so}");
        }
    }

    #[test]
    fn asan_reports_become_signatures() {
        let sig = asan_signature(ASAN).expect("signature");
        let first = sig.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            "heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)"
        );
        assert!(
            sig.contains("frames: llama_kv_cache::apply_ubatch <- llama_kv_cache::state_read_meta")
        );
        assert!(sig.contains("SUMMARY: AddressSanitizer: heap-buffer-overflow"));
        assert_eq!(asan_signature("all fine\n"), None);
    }

    #[test]
    fn shadow_legend_is_left_out_of_the_tail() {
        let text = "READ of size 4\nSUMMARY: x\nShadow bytes around the buggy address:\n  0x0c: fa\n  Heap left redzone: fa\n==1==ABORTING\n";
        assert_eq!(
            without_shadow_legend(text),
            "READ of size 4\nSUMMARY: x\n==1==ABORTING"
        );
    }

    #[test]
    fn asan_runtime_is_found_in_dynamic_strings() {
        assert_eq!(
            asan_soname(b"\x7fELF....libstdc++.so.6\0libasan.so.8\0libm.so.6\0").as_deref(),
            Some("libasan.so.8")
        );
        assert_eq!(asan_soname(b"\x7fELF....libm.so.6\0"), None);
    }

    #[test]
    fn asan_runtime_of_a_real_instrumented_library_is_its_dt_needed_entry() {
        let d = tempfile::tempdir().expect("tmp");
        let src = d.path().join("a.c");
        std::fs::write(
            &src,
            "int f(int *p) { return p[1]; }\nconst char *s = \"libasan.so.99\";\n",
        )
        .expect("write");
        let lib = d.path().join("liba.so");
        let ok = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-fsanitize=address", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return; // no compiler with ASan here
        }
        let bytes = std::fs::read(&lib).expect("read");
        let name = asan_soname(&bytes).expect("needs libasan");
        // The dynamic section's entry, not the decoy string in .rodata.
        assert!(
            name.starts_with("libasan.so.") && name != "libasan.so.99",
            "{name}"
        );
        // An uninstrumented library needs none, whatever its strings say.
        let plain = d.path().join("libp.so");
        let st = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&plain)
            .arg(&src)
            .status()
            .expect("cc");
        assert!(st.success());
        assert_eq!(asan_soname(&std::fs::read(&plain).expect("read")), None);
    }
}
