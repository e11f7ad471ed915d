//! `pinforge smoke` and its hidden child process: a smoke decode of a build or an installed
//! layer, with the verdict rendered.

use super::{installed_layer, print_json, JsonArg, RootArg};
use crate::cli::output::{paint, Tone};
use crate::outln;
use pinforge_base::error::{Error, ExitCode, Result};
use pinforge_base::workspace::Workspace;
use pinforge_deploy::install::Root;
use pinforge_deploy::model::Arch;
use pinforge_deploy::smoke::{self, SmokeOptions, Verdict};
use std::path::PathBuf;

/// Arguments of `smoke`.
#[derive(Debug, clap::Args)]
pub struct SmokeArgs {
    /// A manifest written by `pinforge build`
    #[arg(required_unless_present = "installed")]
    pub manifest: Option<PathBuf>,
    /// Smoke the install root: `current`, or the named layer
    #[arg(long, num_args = 0..=1, default_missing_value = "current", value_name = "LAYER",
          value_parser = ["current", "live", "control", "original"])]
    pub installed: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
    /// A GGUF model [default: the tiny model of --arch]
    #[arg(long, conflicts_with = "arch")]
    pub model: Option<PathBuf>,
    /// Architecture of the generated tiny model: qwen2vl (M-RoPE) or qwen2 (control)
    #[arg(long, value_parser = ["qwen2vl", "qwen2"])]
    pub arch: Option<String>,
    /// Tokens to generate (the state is saved and restored halfway)
    #[arg(long, default_value_t = 16)]
    pub tokens: usize,
    /// The engine path to drive: restore (save, clear, restore halfway and compare), kshift
    /// (the server's context shift halfway), embd-pos-null or embd-pos-n-tokens (an embedding
    /// batch with pos NULL, or with the n_tokens positions llama_batch_init allocates)
    #[arg(long, default_value = "restore", value_parser = scenario_arg)]
    pub scenario: smoke::Scenario,
    #[command(flatten)]
    pub out: JsonArg,
    /// Refuse (exit 2) rather than run a CUDA build on the CPU when no GPU is usable
    #[arg(long)]
    pub require_gpu: bool,
    /// Test only: make the engine call crash
    #[arg(long, hide = true)]
    pub crash_test: bool,
}

/// Arguments of the hidden `__smoke-child` command.
#[derive(Debug, clap::Args)]
pub struct SmokeChildArgs {
    #[arg(long)]
    pub shim: PathBuf,
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long)]
    pub tokens: usize,
    #[arg(long)]
    pub gpu_layers: i32,
    #[arg(long, default_value = "restore", value_parser = scenario_arg)]
    pub scenario: smoke::Scenario,
}

/// A `--scenario` value: one of [`smoke::SCENARIOS`] by name.
fn scenario_arg(s: &str) -> std::result::Result<smoke::Scenario, String> {
    smoke::Scenario::parse(s).ok_or_else(|| {
        let names: Vec<&str> = smoke::SCENARIOS.iter().map(|s| s.name()).collect();
        format!(
            "`{s}` is not a scenario; expected one of {}",
            names.join(", ")
        )
    })
}

/// Run `smoke`.
pub(super) fn run(ctx: &super::Ctx, a: SmokeArgs) -> Result<ExitCode> {
    let ws_root = ctx.ws_root.as_path();
    let root = a.root.resolve(ws_root);
    cmd_smoke(ws_root, &root, a)
}

/// Run the smoke child: one decode in this process, its report as JSON on stdout.
pub(super) fn run_child(a: SmokeChildArgs) -> Result<ExitCode> {
    let r =
        pinforge_deploy::smoke::child::run(&a.shim, &a.model, a.tokens, a.gpu_layers, a.scenario);
    let failed = r.error.is_some();
    // The child's report is an internal protocol read back by the parent, not a document.
    let s = serde_json::to_string(&r).map_err(|e| Error::Internal(e.to_string()))?;
    outln!("{s}");
    Ok(if failed {
        ExitCode::Input
    } else {
        ExitCode::Ok
    })
}

pub(super) fn smoke_options(
    ws_root: &std::path::Path,
    model: Option<PathBuf>,
    arch: Option<String>,
    tokens: usize,
    crash_test: bool,
) -> Result<SmokeOptions> {
    if crash_test && !pinforge_base::hooks::ENABLED {
        return Err(crate::Error::input(
            "--crash-test",
            "this pinforge was built without the test hooks",
        )
        .with_hint("the flag exists for pinforge's own tests (cargo feature `test-hooks`)"));
    }
    let ws = Workspace::new(ws_root)?;
    if let Some(m) = &model {
        // The model is an input: a missing file or a FIFO is exit 2, checked before anything
        // is compiled or spawned (and a FIFO is never opened for reading).
        pinforge_base::fsx::open_regular(m, "model file", true)?;
    }
    Ok(SmokeOptions {
        model,
        arch: Arch::parse(arch.as_deref().unwrap_or("qwen2vl"))?,
        tokens,
        cache: pinforge_deploy::smoke::shim_cache(ws.root())?,
        crash_test,
        timeout: std::time::Duration::from_secs(300),
        require_gpu: false,
        scenario: smoke::Scenario::Restore,
    })
}

fn cmd_smoke(ws_root: &std::path::Path, root: &std::path::Path, a: SmokeArgs) -> Result<ExitCode> {
    let opts = SmokeOptions {
        require_gpu: a.require_gpu,
        scenario: a.scenario,
        ..smoke_options(ws_root, a.model, a.arch, a.tokens, a.crash_test)?
    };
    let target = match (&a.installed, &a.manifest) {
        (Some(layer), _) => {
            let root = Root::open_existing(root)?;
            let layer = installed_layer(layer)?;
            smoke::target_from_installed(&root, layer)?
        }
        (None, Some(m)) => smoke::target_from_manifest(m)?,
        (None, None) => return Err(Error::input("smoke", "give a MANIFEST or --installed")),
    };
    let report = smoke::run(&target, &opts)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::SMOKE, &report)?;
    } else {
        render_smoke(&report);
    }
    Ok(match report.verdict {
        Verdict::Ok => ExitCode::Ok,
        Verdict::Mismatch | Verdict::Crash => ExitCode::CheckFailed,
        Verdict::Error => ExitCode::Input,
    })
}

pub(super) fn render_smoke(r: &smoke::SmokeReport) {
    let verdict = match r.verdict {
        Verdict::Ok => "ok",
        Verdict::Mismatch => "mismatch",
        Verdict::Crash => "crash",
        Verdict::Error => "error",
    };
    let scenario = match r.scenario {
        smoke::Scenario::Restore => String::new(),
        s => format!(", scenario {}", s.name()),
    };
    outln!(
        "smoke {}: {}  (arch {}{scenario}, device {}, {} tokens, {:.0} tok/s{})",
        r.target,
        paint(
            if r.verdict == Verdict::Ok {
                Tone::Good
            } else {
                Tone::Bad
            },
            verdict
        ),
        r.arch,
        r.device,
        r.tokens_generated,
        r.tokens_per_second,
        r.sanitizer
            .as_deref()
            .map(|s| format!(", sanitizer {s}"))
            .unwrap_or_default()
    );
    if let Some(d) = &r.detail {
        outln!("  {d}");
    }
    if let Some(n) = &r.scenario_note {
        outln!("  {n}");
    }
    if let Some(s) = &r.signature {
        for line in s.lines() {
            outln!("  {line}");
        }
    }
    if r.verdict == Verdict::Crash && !r.stderr_tail.is_empty() {
        outln!("  last lines of the engine's stderr:");
        let lines: Vec<&str> = r.stderr_tail.lines().collect();
        for line in &lines[lines.len().saturating_sub(8)..] {
            outln!("    {line}");
        }
    }
    if let Some(why) = &r.device_reason {
        outln!("  device: {why}");
    } else if !r.cuda.driver_present {
        outln!(
            "  cuda: {}",
            r.cuda.reason.as_deref().unwrap_or("no CUDA driver")
        );
    }
    if !r.engine_devices.is_empty() {
        let names: Vec<&str> = r.engine_devices.iter().map(|d| d.name.as_str()).collect();
        outln!("  engine devices: {}", names.join(", "));
    }
}
