//! The command line: clap definitions, one thin function per command (parse, call one library
//! operation, render), and the only place that writes to the terminal (human text, `--json`,
//! the indicatif progress bar, error rendering with hints and exit codes).

use crate::build::{self, BuildOptions, BuildOutcome};
use crate::error::{exit, Error, Result};
use crate::install::{Layer, Root, StageMode, Verification};
use crate::manifest;
use crate::model::{self, Arch};
use crate::patch::lint::Severity;
use crate::patch::{Bundle, PatchFile};
use crate::progress::Reporter;
use crate::recipe::Recipe;
use crate::smoke::{self, SmokeOptions, Verdict};
use crate::workspace::Workspace;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Mutex;

const EXIT_CODES: &str =
    "Exit codes: 0 ok; 1 a check failed (verify mismatch, smoke mismatch or crash, \
refused smoke gate, reverted swap); 2 usage or input \
error (bad recipe, patch, pin, missing tool; nothing half-written); 3 an external tool failed \
(CMake, the compiler); 4 internal error.";

/// pinforge: pin an upstream inference engine, carry attributed patches, build variants with
/// verifiable provenance.
#[derive(Debug, Parser)]
#[command(name = "pinforge", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Workspace folder holding vendor/ and build/ [default: current directory]
    #[arg(long, global = true, env = "PINFORGE_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Resolve the pin, materialize the vendor tree, apply the variant's patches, build with
    /// CMake and Ninja, write the manifest.
    Build {
        /// Recipe TOML [default: the embedded recipes/mrope-cpu.toml]
        recipe: Option<PathBuf>,
        /// Variant(s) to build [default: the recipe's default-variant]
        #[arg(long = "variant", short = 'v')]
        variants: Vec<String>,
        /// Ninja parallelism
        #[arg(long, short = 'j')]
        jobs: Option<usize>,
        /// Machine-readable output (one object; a list when several variants are built)
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every output and every input still on disk (or, with --installed, an
    /// installed layer through its stable path); exit 1 on any mismatch.
    Verify {
        /// A manifest written by `pinforge build`
        #[arg(required_unless_present = "installed")]
        manifest: Option<PathBuf>,
        /// Verify the install root instead: `current`, or the named layer
        #[arg(long, num_args = 0..=1, default_missing_value = "current", value_name = "LAYER")]
        installed: Option<String>,
        /// Install root [default: <workspace>/rollback]
        #[arg(long, env = "PINFORGE_ROOT")]
        root: Option<PathBuf>,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Stage a build's outputs into the install root and commit a layer change with one rename.
    Install {
        /// A manifest, or a recipe (with --variant) whose build is in the workspace
        /// [default: the embedded recipe]
        target: Option<PathBuf>,
        /// Variant (when TARGET is a recipe)
        #[arg(long, short = 'v')]
        variant: Option<String>,
        /// live, control or original
        #[arg(long)]
        layer: String,
        /// Install root [default: <workspace>/rollback]
        #[arg(long, env = "PINFORGE_ROOT")]
        root: Option<PathBuf>,
        /// Copy instead of hard-linking the build outputs
        #[arg(long)]
        copy: bool,
        /// Gate: smoke-decode the build first and refuse the swap unless the verdict is ok
        #[arg(long)]
        smoke: bool,
        /// Architecture of the gate's tiny model
        #[arg(long, default_value = "qwen2vl")]
        smoke_arch: String,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Point `current` at another layer, or (default) return live to the previous live build.
    Rollback {
        /// Layer to show through `current`
        #[arg(long)]
        to: Option<String>,
        /// Install root [default: <workspace>/rollback]
        #[arg(long, env = "PINFORGE_ROOT")]
        root: Option<PathBuf>,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Layers, what `current` shows, each entry's digest, recipe, variant, verification, and
    /// any unfinished transaction.
    Status {
        /// Install root [default: <workspace>/rollback]
        #[arg(long, env = "PINFORGE_ROOT")]
        root: Option<PathBuf>,
        /// Re-hash every layer's entry now (exit 1 on a mismatch) instead of showing the
        /// last verification a receipt recorded
        #[arg(long)]
        verify: bool,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Remove store entries that no layer, the rollback stack or a journal references.
    Gc {
        /// Install root [default: <workspace>/rollback]
        #[arg(long, env = "PINFORGE_ROOT")]
        root: Option<PathBuf>,
        /// Report what would be removed (entries, bytes, generations); remove nothing
        #[arg(long)]
        dry_run: bool,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Patch bundle commands.
    #[command(subcommand)]
    Patch(PatchCommand),
    /// Model commands.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Vendor commands.
    #[command(subcommand)]
    Vendor(VendorCommand),
    /// Smoke-decode a build (a manifest) or an installed layer: decode, save the sequence
    /// state, clear, restore, continue, compare with an uninterrupted run. Exit 0 ok, 1
    /// mismatch or crash, 2 error.
    Smoke {
        /// A manifest written by `pinforge build`
        #[arg(required_unless_present = "installed")]
        manifest: Option<PathBuf>,
        /// Smoke the install root: `current`, or the named layer
        #[arg(long, num_args = 0..=1, default_missing_value = "current", value_name = "LAYER")]
        installed: Option<String>,
        /// Install root [default: <workspace>/rollback]
        #[arg(long, env = "PINFORGE_ROOT")]
        root: Option<PathBuf>,
        /// A GGUF model [default: the tiny model of --arch]
        #[arg(long, conflicts_with = "arch")]
        model: Option<PathBuf>,
        /// Architecture of the generated tiny model: qwen2vl (M-RoPE) or qwen2 (control)
        #[arg(long)]
        arch: Option<String>,
        /// Tokens to generate (the state is saved and restored halfway)
        #[arg(long, default_value_t = 16)]
        tokens: usize,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
        /// Test only: make the engine call crash
        #[arg(long, hide = true)]
        crash_test: bool,
    },
    /// Internal: the child process of `smoke`.
    #[command(name = "__smoke-child", hide = true)]
    SmokeChild {
        #[arg(long)]
        shim: PathBuf,
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        tokens: usize,
        #[arg(long)]
        gpu_layers: i32,
    },
}

/// `pinforge vendor ...`
#[derive(Debug, Subcommand)]
pub enum VendorCommand {
    /// Print the digest to pin a local source with: SHA-256 of a tarball, or the tree digest
    /// of a folder (`tree-sha256` of a `dir` pin).
    Digest {
        /// A tarball or a folder
        path: PathBuf,
    },
}

/// `pinforge model ...`
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Write a tiny random-weight GGUF model (deterministic for a seed, well under 1 MB).
    Tiny {
        /// qwen2vl (M-RoPE) or qwen2 (classical RoPE, same weights)
        #[arg(long)]
        arch: String,
        /// Output file
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Seed for the weights
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// `pinforge patch ...`
#[derive(Debug, Subcommand)]
pub enum PatchCommand {
    /// Check attribution headers (every patch in patches/ by default); exit 2 on any error.
    Lint {
        /// Patch files or bundle folders
        paths: Vec<PathBuf>,
    },
    /// Apply the series onto a clean git checkout, one commit per patch with attribution
    /// trailers (no fuzz; a hunk that does not match is shown, nothing is committed for it).
    Apply {
        /// The checkout
        repo: PathBuf,
        /// Bundle folder
        #[arg(long, default_value = "patches")]
        dir: PathBuf,
    },
    /// The bibliography: one row per patch in series order.
    List {
        /// Bundle folder
        #[arg(long, default_value = "patches")]
        dir: PathBuf,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
}

/// Run the CLI and return the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            render_error(&e);
            e.exit_code()
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    let ws_root = cli.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    match cli.command {
        Command::Build {
            recipe,
            variants,
            jobs,
            json,
        } => cmd_build(&ws_root, recipe, variants, jobs, json),
        Command::Verify {
            manifest,
            installed,
            root,
            json,
        } => match (installed, manifest) {
            (Some(layer), _) => cmd_verify_installed(&install_root(&ws_root, root), &layer, json),
            (None, Some(m)) => cmd_verify(&m, json),
            (None, None) => Err(Error::input("verify", "give a MANIFEST or --installed")),
        },
        Command::Install {
            target,
            variant,
            layer,
            root,
            copy,
            smoke,
            smoke_arch,
            json,
        } => cmd_install(
            &ws_root,
            InstallArgs {
                target,
                variant,
                layer,
                root: install_root(&ws_root, root),
                copy,
                smoke: smoke.then_some(smoke_arch),
                json,
            },
        ),
        Command::Model(ModelCommand::Tiny { arch, output, seed }) => {
            cmd_model_tiny(&arch, &output, seed)
        }
        Command::Vendor(VendorCommand::Digest { path }) => {
            let (kind, digest) = crate::upstream::pin_digest(&path)?;
            println!("{digest}  {kind}  {}", path.display());
            Ok(exit::OK)
        }
        Command::Smoke {
            manifest,
            installed,
            root,
            model,
            arch,
            tokens,
            json,
            crash_test,
        } => cmd_smoke(
            &ws_root,
            SmokeArgs {
                manifest,
                installed,
                root: install_root(&ws_root, root),
                model,
                arch,
                tokens,
                json,
                crash_test,
            },
        ),
        Command::SmokeChild {
            shim,
            model,
            tokens,
            gpu_layers,
        } => {
            let r = crate::smoke::child::run(&shim, &model, tokens, gpu_layers);
            let failed = r.error.is_some();
            print_json(&r)?;
            Ok(if failed { exit::INPUT } else { exit::OK })
        }
        Command::Rollback { to, root, json } => {
            cmd_rollback(&install_root(&ws_root, root), to, json)
        }
        Command::Status { root, json, verify } => {
            cmd_status(&install_root(&ws_root, root), json, verify)
        }
        Command::Gc {
            root,
            dry_run,
            json,
        } => cmd_gc(&install_root(&ws_root, root), dry_run, json),
        Command::Patch(PatchCommand::Lint { paths }) => cmd_lint(paths),
        Command::Patch(PatchCommand::List { dir, json }) => cmd_list(&dir, json),
        Command::Patch(PatchCommand::Apply { repo, dir }) => cmd_apply(&repo, &dir),
    }
}

fn render_error(e: &Error) {
    eprintln!("error: {e}");
    if let Some(detail) = e.detail() {
        for line in detail.lines() {
            eprintln!("  {line}");
        }
    }
    if let Some(hint) = e.hint() {
        eprintln!("hint: {hint}");
    }
}

fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(value).map_err(|e| Error::Internal(e.to_string()))?;
    println!("{s}");
    Ok(())
}

/// Progress on stderr with indicatif; it hides itself when stderr is not a terminal, and the
/// stage lines still go to stderr so logs of non-interactive runs say what happened.
struct TermReporter {
    bar: Mutex<Option<indicatif::ProgressBar>>,
    quiet: bool,
}

impl TermReporter {
    fn new(quiet: bool) -> Self {
        TermReporter {
            bar: Mutex::new(None),
            quiet,
        }
    }
}

impl Reporter for TermReporter {
    fn stage(&self, name: &str, detail: &str) {
        self.finish();
        if !self.quiet {
            eprintln!("{name:>10} {detail}");
        }
    }
    fn progress(&self, done: u64, total: u64, message: &str) {
        let Ok(mut guard) = self.bar.lock() else {
            return;
        };
        let bar = guard.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {wide_msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix("compile");
            b
        });
        bar.set_length(total);
        bar.set_position(done);
        bar.set_message(message.to_string());
    }
    fn finish(&self) {
        if let Ok(mut guard) = self.bar.lock() {
            if let Some(b) = guard.take() {
                b.finish_and_clear();
            }
        }
    }
}

fn cmd_build(
    ws_root: &std::path::Path,
    recipe_path: Option<PathBuf>,
    variants: Vec<String>,
    jobs: Option<usize>,
    json: bool,
) -> Result<i32> {
    let ws = Workspace::new(ws_root)?;
    let recipe = match &recipe_path {
        Some(p) => Recipe::load(p)?,
        None => Recipe::embedded_default()?,
    };
    let names = if variants.is_empty() {
        vec![recipe.default_variant.to_string()]
    } else {
        variants
    };
    // Resolve every name first: a typo in the third variant must not cost two builds.
    let selected = names
        .iter()
        .map(|n| recipe.variant(n))
        .collect::<Result<Vec<_>>>()?;
    let reporter = TermReporter::new(false);
    let mut outcomes = Vec::new();
    for v in selected {
        let outcome = build::build(
            &ws,
            &recipe,
            v,
            &BuildOptions {
                jobs,
                reporter: &reporter,
            },
        )?;
        if !json {
            render_build(&outcome);
        }
        outcomes.push(outcome);
    }
    if json {
        match outcomes.as_slice() {
            [one] => print_json(one)?,
            many => print_json(&many)?,
        }
    }
    Ok(exit::OK)
}

fn render_build(o: &BuildOutcome) {
    println!(
        "{} {}/{}  input {}  {:.1}s",
        if o.cached { "cached" } else { "built " },
        o.recipe,
        o.variant,
        o.input_digest.short(16),
        o.seconds
    );
    println!("  manifest   {}", o.manifest.display());
    println!("  artifacts  {}", o.artifact_root.display());
    for a in &o.artifacts {
        println!(
            "    {:<28} sha256:{}  {} bytes",
            a.path,
            a.sha256.short(16),
            a.size
        );
    }
    println!("  log        {}", o.log.display());
}

fn cmd_verify(path: &std::path::Path, json: bool) -> Result<i32> {
    let report = manifest::verify(path)?;
    if json {
        print_json(&report)?;
    } else if report.ok {
        println!(
            "ok: {} outputs and {} inputs match {} (input {})",
            report.outputs_checked,
            report.inputs_checked,
            path.display(),
            report.input_digest.short(16)
        );
        if !report.inputs_absent.is_empty() {
            println!(
                "  not on disk (skipped): {}",
                report.inputs_absent.join(", ")
            );
        }
    } else {
        for m in &report.mismatches {
            println!("MISMATCH {} {}", m.role, m.path);
            println!("  expected {}", m.expected);
            println!("  found    {}", m.actual);
        }
        println!(
            "{} mismatch(es) against {}",
            report.mismatches.len(),
            path.display()
        );
    }
    Ok(if report.ok {
        exit::OK
    } else {
        exit::CHECK_FAILED
    })
}

fn install_root(ws_root: &std::path::Path, root: Option<PathBuf>) -> PathBuf {
    root.unwrap_or_else(|| ws_root.join("rollback"))
}

fn render_verification(v: &Verification) {
    if v.ok {
        println!("ok: {} file(s) verified through {}", v.files, v.through);
    } else {
        for m in &v.mismatches {
            println!("MISMATCH {}", m.path);
            println!("  expected {}", m.expected);
            println!("  found    {}", m.actual);
        }
        println!("{} mismatch(es) through {}", v.mismatches.len(), v.through);
    }
}

/// `--installed [LAYER]`: `current` (the default) or a layer name.
fn installed_layer(arg: &str) -> Result<Option<Layer>> {
    match arg {
        "current" => Ok(None),
        other => Layer::parse(other).map(Some),
    }
}

fn cmd_verify_installed(root: &std::path::Path, layer: &str, json: bool) -> Result<i32> {
    let root = Root::open_existing(root)?;
    let layer = installed_layer(layer)?;
    let v = root.verify_installed(layer)?;
    if json {
        print_json(&v)?;
    } else {
        render_verification(&v);
    }
    Ok(if v.ok { exit::OK } else { exit::CHECK_FAILED })
}

/// The manifest an install names: a manifest file, or a recipe + variant built in the workspace.
fn manifest_for(
    ws_root: &std::path::Path,
    target: Option<PathBuf>,
    variant: Option<String>,
) -> Result<PathBuf> {
    if let Some(t) = &target {
        if t.extension().is_some_and(|x| x == "json") {
            if variant.is_some() {
                return Err(Error::input(
                    t.display(),
                    "--variant goes with a recipe, not a manifest",
                ));
            }
            return Ok(t.clone());
        }
    }
    let recipe = match &target {
        Some(p) => Recipe::load(p)?,
        None => Recipe::embedded_default()?,
    };
    let v = recipe.variant(
        variant
            .as_deref()
            .unwrap_or(recipe.default_variant.as_str()),
    )?;
    let ws = Workspace::new(ws_root)?;
    let m = ws
        .variant_dir(&recipe.name, v.name.as_str())
        .join("manifest.json");
    if !m.exists() {
        return Err(
            Error::input(m.display(), "no build of this variant in the workspace")
                .with_hint(format!("run `pinforge build --variant {}` first", v.name)),
        );
    }
    Ok(m)
}

struct InstallArgs {
    target: Option<PathBuf>,
    variant: Option<String>,
    layer: String,
    root: PathBuf,
    copy: bool,
    smoke: Option<String>,
    json: bool,
}

fn cmd_install(ws_root: &std::path::Path, a: InstallArgs) -> Result<i32> {
    let layer = Layer::parse(&a.layer)?;
    let manifest = manifest_for(ws_root, a.target, a.variant)?;
    let json = a.json;
    if let Some(arch) = &a.smoke {
        // The gate smokes the very bytes install will stage (install re-verifies them).
        let target = smoke::target_from_manifest(&manifest)?;
        let report = smoke::run(
            &target,
            &smoke_options(ws_root, None, Some(arch.clone()), 16, false)?,
        )?;
        if !json {
            render_smoke(&report);
        }
        if report.verdict != Verdict::Ok {
            return Err(Error::check(
                manifest.display(),
                format!(
                    "smoke gate: verdict {:?}, not ok; the swap was not committed",
                    report.verdict
                ),
            ));
        }
    }
    let root = Root::open(&a.root)?;
    let out = root.install(&manifest, layer, a.copy.then_some(StageMode::Copy))?;
    if json {
        print_json(&out)?;
    } else {
        if let Some(r) = &out.recovered {
            println!("recovered an interrupted transaction: {}", r.display());
        }
        println!("installed {} into {layer}", out.entry.display());
        render_verification(&out.verification);
        println!("receipt {}", out.receipt.display());
    }
    Ok(exit::OK)
}

fn cmd_model_tiny(arch: &str, output: &std::path::Path, seed: u64) -> Result<i32> {
    let arch = Arch::parse(arch)?;
    let size = model::write_tiny(arch, seed, output)?;
    println!(
        "wrote {} ({} bytes, arch {}, seed {seed})",
        output.display(),
        size,
        arch.name()
    );
    Ok(exit::OK)
}

struct SmokeArgs {
    manifest: Option<PathBuf>,
    installed: Option<String>,
    root: PathBuf,
    model: Option<PathBuf>,
    arch: Option<String>,
    tokens: usize,
    json: bool,
    crash_test: bool,
}

fn smoke_options(
    ws_root: &std::path::Path,
    model: Option<PathBuf>,
    arch: Option<String>,
    tokens: usize,
    crash_test: bool,
) -> Result<SmokeOptions> {
    let ws = Workspace::new(ws_root)?;
    Ok(SmokeOptions {
        model,
        arch: Arch::parse(arch.as_deref().unwrap_or("qwen2vl"))?,
        tokens,
        cache: ws.root().join("build").join(".smoke"),
        crash_test,
        timeout: std::time::Duration::from_secs(300),
    })
}

fn cmd_smoke(ws_root: &std::path::Path, a: SmokeArgs) -> Result<i32> {
    let target = match (&a.installed, &a.manifest) {
        (Some(layer), _) => {
            let root = Root::open(&a.root)?;
            let layer = installed_layer(layer)?;
            smoke::target_from_installed(&root, layer)?
        }
        (None, Some(m)) => smoke::target_from_manifest(m)?,
        (None, None) => return Err(Error::input("smoke", "give a MANIFEST or --installed")),
    };
    let opts = smoke_options(ws_root, a.model, a.arch, a.tokens, a.crash_test)?;
    let report = smoke::run(&target, &opts)?;
    if a.json {
        print_json(&report)?;
    } else {
        render_smoke(&report);
    }
    Ok(match report.verdict {
        Verdict::Ok => exit::OK,
        Verdict::Mismatch | Verdict::Crash => exit::CHECK_FAILED,
        Verdict::Error => exit::INPUT,
    })
}

fn render_smoke(r: &smoke::SmokeReport) {
    let verdict = match r.verdict {
        Verdict::Ok => "ok",
        Verdict::Mismatch => "mismatch",
        Verdict::Crash => "crash",
        Verdict::Error => "error",
    };
    println!(
        "smoke {}: {verdict}  (arch {}, device {}, {} tokens, {:.0} tok/s{})",
        r.target,
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
        println!("  {d}");
    }
    if let Some(s) = &r.signature {
        for line in s.lines() {
            println!("  {line}");
        }
    }
    if r.verdict == Verdict::Crash && !r.stderr_tail.is_empty() {
        println!("  last lines of the engine's stderr:");
        let lines: Vec<&str> = r.stderr_tail.lines().collect();
        for line in &lines[lines.len().saturating_sub(8)..] {
            println!("    {line}");
        }
    }
    if !r.cuda.driver_present {
        println!(
            "  cuda: {}",
            r.cuda.reason.as_deref().unwrap_or("no CUDA driver")
        );
    }
}

fn cmd_rollback(root: &std::path::Path, to: Option<String>, json: bool) -> Result<i32> {
    let to = to.as_deref().map(Layer::parse).transpose()?;
    let root = Root::open_existing(root)?;
    let out = root.rollback(to)?;
    if json {
        print_json(&out)?;
    } else {
        if let Some(r) = &out.recovered {
            println!("recovered an interrupted transaction: {}", r.display());
        }
        println!("current now shows {}", out.layer);
        render_verification(&out.verification);
        println!("receipt {}", out.receipt.display());
    }
    Ok(exit::OK)
}

fn cmd_status(root: &std::path::Path, json: bool, verify: bool) -> Result<i32> {
    let root = Root::open_existing(root)?;
    let st = root.status(verify)?;
    let all_ok = st.layers.values().flatten().all(|s| s.verification == "ok");
    let code = if verify && !all_ok {
        exit::CHECK_FAILED
    } else {
        exit::OK
    };
    if json {
        print_json(&st)?;
        return Ok(code);
    }
    println!("install root {} (generation {})", st.root.display(), st.gen);
    match &st.current {
        Some(c) => println!(
            "current -> {} ({}/{}, {})",
            c.layer,
            c.recipe,
            c.variant,
            c.digest.short(16)
        ),
        None => println!("current -> nothing installed"),
    }
    for (name, slot) in &st.layers {
        match slot {
            Some(s) => println!(
                "  {name:<9} {}  {}/{}  verification: {} ({})",
                s.digest.short(16),
                s.recipe,
                s.variant,
                s.verification,
                match (&s.verified_at, st.verified_now) {
                    (Some(t), true) => format!("re-hashed now, {t}"),
                    (Some(t), false) => format!("recorded {t}; `status --verify` re-hashes"),
                    (None, _) => "never verified".to_string(),
                }
            ),
            None => println!("  {name:<9} -"),
        }
    }
    if !st.live_history.is_empty() {
        println!(
            "  rollback stack: {} earlier live build(s)",
            st.live_history.len()
        );
    }
    if let Some(j) = &st.transaction {
        println!(
            "unfinished transaction {} ({} of {}, generation {} -> {}, phase {}): the next install, rollback or gc finishes or undoes it",
            j.txid, j.op, j.layer, j.from_gen, j.to_gen, j.phase
        );
    }
    Ok(code)
}

fn cmd_gc(root: &std::path::Path, dry_run: bool, json: bool) -> Result<i32> {
    let root = Root::open_existing(root)?;
    let out = root.gc(dry_run)?;
    if json {
        print_json(&out)?;
        return Ok(exit::OK);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for e in &out.removed_entries {
        println!("{verb} store/{e}");
    }
    for e in &out.missing_entries {
        println!("warning: referenced entry store/{e} is missing");
    }
    println!(
        "gc: {verb} {} entr(ies) ({} bytes) and {} old generation(s); {} entr(ies) still referenced",
        out.removed_entries.len(),
        out.bytes_freed,
        out.removed_generations,
        out.kept_entries
    );
    Ok(exit::OK)
}

fn cmd_lint(paths: Vec<PathBuf>) -> Result<i32> {
    let paths = if paths.is_empty() {
        vec![PathBuf::from("patches")]
    } else {
        paths
    };
    let mut findings = Vec::new();
    let mut files = 0usize;
    for p in &paths {
        if p.is_dir() {
            let b = Bundle::load(p)?;
            files += b.files.len();
            findings.extend(b.lint());
        } else {
            let f = PatchFile::read(p)?;
            files += 1;
            findings.extend(f.findings.iter().map(|x| (f.origin.clone(), x.clone())));
        }
    }
    let errors = findings
        .iter()
        .filter(|(_, f)| f.severity == Severity::Error)
        .count();
    for (path, f) in &findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        println!(
            "{}:{}: {sev}: {} [{}]",
            path.display(),
            f.line,
            f.message,
            f.rule
        );
        if let Some(h) = &f.hint {
            println!("  hint: {h}");
        }
    }
    println!(
        "{files} patch(es): {errors} error(s), {} warning(s)",
        findings.len() - errors
    );
    Ok(if errors > 0 { exit::INPUT } else { exit::OK })
}

fn cmd_apply(repo: &std::path::Path, dir: &std::path::Path) -> Result<i32> {
    let bundle = Bundle::load(dir)?;
    let patches = bundle.select(None)?;
    let applied = crate::patch::apply::apply_to_checkout(repo, &patches)?;
    for a in &applied {
        println!("{} {}", a.commit.short(12), a.id);
    }
    println!(
        "applied {} patch(es) onto {}",
        applied.len(),
        repo.display()
    );
    Ok(exit::OK)
}

fn cmd_list(dir: &std::path::Path, json: bool) -> Result<i32> {
    let bundle = Bundle::load(dir)?;
    let rows = bundle.bibliography();
    if json {
        print_json(&rows)?;
        return Ok(exit::OK);
    }
    let short = |u: &Option<String>| {
        u.as_deref()
            .and_then(|u| u.rsplit('/').next())
            .map(|n| format!("#{n}"))
            .unwrap_or_else(|| "-".into())
    };
    let fw = rows.iter().map(|r| r.file.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<3} {:<fw$} {:<14} {:<7} {:<7} {:<10} {:<24} URL",
        "#", "FILE", "STATUS", "ISSUE", "PR", "COMMIT", "HANDLES"
    );
    for (i, r) in rows.iter().enumerate() {
        let status = r
            .status
            .as_deref()
            .map(|s| s.split(' ').next().unwrap_or(s).to_string())
            .unwrap_or_else(|| "INVALID".into());
        println!(
            "{:<3} {:<fw$} {:<14} {:<7} {:<7} {:<10} {:<24} {}",
            i + 1,
            r.file,
            status,
            short(&r.issue),
            short(&r.pr),
            r.commit.as_deref().unwrap_or("-"),
            if r.handles.is_empty() {
                "-".to_string()
            } else {
                r.handles.join(",")
            },
            r.url.as_deref().unwrap_or("-")
        );
    }
    Ok(exit::OK)
}
