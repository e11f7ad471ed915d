//! The command line: clap definitions, one thin function per command (parse, call one library
//! operation, render), and the only place that writes to the terminal (human text, `--json`,
//! the indicatif progress bar, error rendering with hints and exit codes).

use crate::build::{self, BuildOptions, BuildOutcome};
use crate::error::{exit, Error, Result};
use crate::manifest;
use crate::patch::lint::Severity;
use crate::patch::{Bundle, PatchFile};
use crate::progress::Reporter;
use crate::recipe::Recipe;
use crate::workspace::Workspace;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Mutex;

const EXIT_CODES: &str = "Exit codes: 0 ok; 1 a check failed (verify mismatch); 2 usage or input \
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
    /// Re-hash every output and every input still on disk; exit 1 on any mismatch.
    Verify {
        /// A manifest written by `pinforge build`
        manifest: PathBuf,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Patch bundle commands.
    #[command(subcommand)]
    Patch(PatchCommand),
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
        Command::Verify { manifest, json } => cmd_verify(&manifest, json),
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
