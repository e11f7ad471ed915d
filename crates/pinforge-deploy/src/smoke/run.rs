//! One smoke decode: the report and option types, and [`run`], which picks the device, spawns
//! the child (`pinforge __smoke-child`) and turns what it did into a verdict.

use super::sanitizer::{asan_signature, engine_env, ggml_abort_signature, without_shadow_legend};
use super::scenario::Scenario;
use super::{child, shim_for, SmokeTarget};
use crate::model::{self, Arch};
use pinforge_base::error::{Error, Result};
use pinforge_base::proc_wait::{run_with_timeout, signal_name};
use pinforge_sys::cuda;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

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
    /// What the smoke drove: `restore` (save/restore compared with a reference), `kshift`,
    /// `embd-pos-null`, `embd-pos-n-tokens`.
    pub scenario: Scenario,
    /// Which path a scenario other than `restore` took (shifted or not, the embedding rows),
    /// else null.
    pub scenario_note: Option<String>,
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
    /// The engine path to drive (the default: save and restore).
    pub scenario: Scenario,
}

/// The logit tolerance: restored and reference decodes run the same kernels on the same KV
/// bytes, so anything above float noise is a divergence.
pub(crate) const LOGIT_TOLERANCE: f32 = 1e-3;

/// Run a smoke decode against `target`.
pub fn run(target: &SmokeTarget, opts: &SmokeOptions) -> Result<SmokeReport> {
    if opts.tokens < 2 || opts.tokens > 64 {
        return Err(Error::input(
            format!("--tokens {}", opts.tokens),
            "must be between 2 and 64 (the save/restore happens halfway)",
        ));
    }
    let probe = cuda::probe();
    let mut report = SmokeReport::new(target, opts, &probe);
    let Some(gpu_layers) = choose_device(target, opts, &probe, &mut report) else {
        return Ok(report);
    };
    let model = model_for(opts, &mut report)?;
    let shim = shim_for(target, &opts.cache)?;
    let mut cmd = child_command(&shim, &model, opts, gpu_layers)?;
    engine_env(&mut cmd, target);
    let (status, stdout, stderr) = run_with_timeout(&mut cmd, opts.timeout)?;
    use std::os::unix::process::ExitStatusExt;
    report.signal = status.and_then(|s| s.signal());
    report.exit_code = status.and_then(|s| s.code());
    report.stderr_tail = pinforge_base::process::tail(&without_shadow_legend(&stderr), 25);
    let Some(result) = child_result(&mut report, status.is_some(), &stdout, &stderr, opts) else {
        return Ok(report);
    };
    report.engine_devices = result.devices.clone();
    if let Some(e) = result.error {
        report.verdict = Verdict::Error;
        report.detail = Some(e);
        return Ok(report);
    }
    if !where_it_ran(&mut report, &result, &probe, gpu_layers, opts.require_gpu) {
        return Ok(report);
    }
    record_decode(&mut report, &result);
    Ok(report)
}

impl SmokeReport {
    /// The report before anything ran: verdict `error`, on the CPU.
    fn new(target: &SmokeTarget, opts: &SmokeOptions, probe: &cuda::Probe) -> SmokeReport {
        SmokeReport {
            verdict: Verdict::Error,
            arch: opts.arch.name().to_string(),
            scenario: opts.scenario,
            scenario_note: None,
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
            sanitizer: target.sanitizer.clone(),
            gpu_memory_used_bytes: None,
        }
    }
}

/// The layers to offload (999 on a usable GPU, else 0), or `None` when the smoke is refused
/// (the reason is in `report.detail`).
fn choose_device(
    target: &SmokeTarget,
    opts: &SmokeOptions,
    probe: &cuda::Probe,
    report: &mut SmokeReport,
) -> Option<i32> {
    if !target.cuda {
        if opts.require_gpu {
            report.detail = Some("refused: --require-gpu, and this is not a CUDA build".into());
            return None;
        }
        return Some(0);
    }
    if let Some(why) = cuda::preflight(
        probe,
        target.cuda_toolkit.as_deref(),
        target.cuda_architectures.as_deref(),
    ) {
        report.detail = Some(format!("refused: {why}"));
        return None;
    }
    match (probe.devices.first(), cuda::cpu_reason(probe)) {
        (Some(d), _) => {
            // Offloaded to the probe's device from here on: a crash or hang there is
            // reported as a GPU run; the engine's own device list refines it below.
            report.device = format!("cuda:{} ({})", d.ordinal, d.name);
            Some(999)
        }
        (None, why) => {
            let why = why.unwrap_or_else(|| "no CUDA device".into());
            if opts.require_gpu {
                report.detail = Some(format!(
                    "refused: --require-gpu, and {why} (the CUDA build would run on the CPU)"
                ));
                return None;
            }
            report.device_reason = Some(format!("{why}: the CUDA build runs on the CPU"));
            Some(0)
        }
    }
}

/// The model to decode: the given file (its architecture recorded), or the cached tiny model.
fn model_for(opts: &SmokeOptions, report: &mut SmokeReport) -> Result<PathBuf> {
    if let Some(m) = &opts.model {
        report.arch = model::architecture(m)?;
    }
    model_file(opts)
}

/// The model file a smoke with `opts` decodes: the given one, or the cached tiny model of
/// the architecture (written on first use). The install gate's server check serves the same.
pub fn model_file(opts: &SmokeOptions) -> Result<PathBuf> {
    if let Some(m) = &opts.model {
        return Ok(m.clone());
    }
    let p = opts
        .cache
        .join(format!("tiny-{}-seed1.gguf", opts.arch.name()));
    if !p.exists() {
        model::write_tiny(opts.arch, 1, &p)?;
    }
    Ok(p)
}

/// `pinforge __smoke-child` for this decode.
fn child_command(
    shim: &Path,
    model: &Path,
    opts: &SmokeOptions,
    gpu_layers: i32,
) -> Result<Command> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locate", Path::new("pinforge"), e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__smoke-child")
        .arg("--shim")
        .arg(shim)
        .arg("--model")
        .arg(model)
        .arg("--tokens")
        .arg(opts.tokens.to_string())
        .arg("--gpu-layers")
        .arg(gpu_layers.to_string())
        .arg("--scenario")
        .arg(opts.scenario.name())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let (true, Some((k, v))) = (opts.crash_test, pinforge_base::hooks::smoke_crash_env()) {
        cmd.env(k, v);
    }
    Ok(cmd)
}

/// The child's result line, or `None` when the child hung, crashed or said nothing readable
/// (then `report` holds the crash verdict and its signature).
fn child_result(
    report: &mut SmokeReport,
    exited: bool,
    stdout: &str,
    stderr: &str,
    opts: &SmokeOptions,
) -> Option<child::ChildResult> {
    let asan = asan_signature(stderr);
    if !exited {
        report.verdict = Verdict::Crash;
        report.signature = Some(format!(
            "hang: no result within {}s",
            opts.timeout.as_secs()
        ));
        return None;
    }
    if asan.is_some() || report.signal.is_some() {
        report.verdict = Verdict::Crash;
        // A ggml assertion aborts (SIGABRT) after printing which one failed: that line, not
        // the bare signal, is the defect's signature.
        report.signature = asan
            .or_else(|| report.signal.and(ggml_abort_signature(stderr)))
            .or_else(|| {
                report
                    .signal
                    .map(|s| format!("killed by signal {s} ({})", signal_name(s)))
            });
        return None;
    }
    match serde_json::from_str(stdout.trim()) {
        Ok(r) => Some(r),
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
            None
        }
    }
}

/// Where it ran is what the engine registered, not what the probe hoped: a GPU the probe sees
/// but the engine's backend does not (a driver it cannot use) means the CPU ran, and the name
/// is the engine's own (the probe's first device need not be the engine's first). False when
/// `--require-gpu` refuses the run (verdict and detail set).
fn where_it_ran(
    report: &mut SmokeReport,
    result: &child::ChildResult,
    probe: &cuda::Probe,
    gpu_layers: i32,
    require_gpu: bool,
) -> bool {
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
            if require_gpu {
                report.verdict = Verdict::Error;
                report.detail = Some(
                    "refused: --require-gpu, and the engine registered no GPU device although \
                     the probe found one"
                        .into(),
                );
                return false;
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
    true
}

/// The decode's numbers and the verdict: ok, or where the restored run diverged.
fn record_decode(report: &mut SmokeReport, result: &child::ChildResult) {
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
    if report.scenario != Scenario::Restore {
        // Nothing to compare: the engine ran the path to its end, and the note says which.
        report.restore_step = None;
        report.max_logit_diff = None;
        report.state_bytes = None;
        report.scenario_note = result.scenario_note.clone();
        report.verdict = Verdict::Ok;
        return;
    }
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
}
