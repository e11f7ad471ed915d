//! The command line: clap definitions, one file per command (parse, call one library
//! operation, render), shared argument groups, and the only place that writes to the terminal
//! (human text, `--json`, the indicatif progress bar, error rendering with hints and exit codes).

mod build;
mod diff;
mod gc;
mod install;
mod model;
mod patch;
mod reporter;
mod rollback;
mod smoke;
mod status;
mod vendor;
mod verify;

use crate::error::{exit, Error, Result};
use crate::install::Layer;
use crate::outln;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// pinforge: pin an upstream inference engine, carry attributed patches, build variants with
/// verifiable provenance.
#[derive(Debug, Parser)]
#[command(name = "pinforge", version, after_help = crate::error::ExitCode::help_table())]
pub struct Cli {
    /// Workspace folder holding vendor/ and build/ [default: current directory]
    #[arg(long, global = true, env = "PINFORGE_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `--root`, shared by every command that reads or writes the install root.
#[derive(Debug, Clone, clap::Args)]
pub struct RootArg {
    /// Install root [default: <workspace>/rollback]
    #[arg(long, env = "PINFORGE_ROOT")]
    pub root: Option<PathBuf>,
}

impl RootArg {
    /// The install root: `--root`, else `<workspace>/rollback`.
    fn resolve(&self, ws_root: &std::path::Path) -> PathBuf {
        self.root
            .clone()
            .unwrap_or_else(|| ws_root.join("rollback"))
    }
}

/// `--json`, shared by every command with a machine-readable form.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct JsonArg {
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Resolve the pin, materialize the vendor tree, apply the variant's patches, build with
    /// CMake and Ninja, write the manifest.
    Build(build::BuildArgs),
    /// Re-hash every output and every input still on disk (or, with --installed, an
    /// installed layer through its stable path); exit 1 on any mismatch.
    Verify(verify::VerifyArgs),
    /// Stage a build's outputs into the install root and commit a layer change with one rename.
    Install(install::InstallCmd),
    /// Compare two builds' manifests: parameters, pin, patches, tools, and every artifact
    /// and link, same or different. Exit 0 when identical, 1 when anything differs.
    #[command(
        after_help = "Example: pinforge diff build/mrope-cpu/unpatched/manifest.json \
build/mrope-cpu/patched/manifest.json"
    )]
    Diff(diff::DiffArgs),
    /// Point `current` at another layer, or (default) return live to the previous live build.
    Rollback(rollback::RollbackArgs),
    /// Layers, what `current` shows, each entry's digest, recipe, variant, verification, and
    /// any unfinished transaction.
    Status(status::StatusArgs),
    /// Remove store entries that no layer, the rollback stack or a journal references.
    Gc(gc::GcArgs),
    /// Patch bundle commands.
    #[command(subcommand)]
    Patch(patch::PatchCommand),
    /// Model commands.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Vendor commands.
    #[command(subcommand)]
    Vendor(vendor::VendorCommand),
    /// Smoke-decode a build (a manifest) or an installed layer: decode, save the sequence
    /// state, clear, restore, continue, compare with an uninterrupted run. Exit 0 ok, 1
    /// mismatch or crash, 2 error.
    Smoke(smoke::SmokeCmd),
    /// Internal: the child process of `smoke`.
    #[command(name = "__smoke-child", hide = true)]
    SmokeChild(smoke::SmokeChildArgs),
}

/// Run the CLI and return the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            render_error(&e);
            e.exit_code()
        }
    };
    match crate::output::finish() {
        // The reader stopped reading (`| head -1`): that is its choice, not a failure.
        None | Some(crate::output::OutputFailure::Closed) => code,
        Some(crate::output::OutputFailure::Failed(why)) => {
            eprintln!("error: standard output: cannot write the report: {why}");
            eprintln!(
                "note: the command's own work finished before this (it would have exited {code}); \
                 whatever it committed stays committed"
            );
            eprintln!("hint: `pinforge status` shows the install root; rerun with output to a writable place");
            exit::INTERNAL
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    let ws_root = cli.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    let ws = ws_root.as_path();
    match cli.command {
        Command::Build(a) => build::run(ws, a),
        Command::Verify(a) => verify::run(ws, a),
        Command::Install(a) => install::run(ws, a),
        Command::Diff(a) => diff::run(a),
        Command::Rollback(a) => rollback::run(ws, a),
        Command::Status(a) => status::run(ws, a),
        Command::Gc(a) => gc::run(ws, a),
        Command::Patch(c) => patch::run(c),
        Command::Model(c) => model::run(c),
        Command::Vendor(c) => vendor::run(c),
        Command::Smoke(a) => smoke::run(ws, a),
        Command::SmokeChild(a) => smoke::run_child(a),
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
    outln!("{s}");
    Ok(())
}

/// `--installed [LAYER]`: `current` (the default) or a layer name.
fn installed_layer(arg: &str) -> Result<Option<Layer>> {
    match arg {
        "current" => Ok(None),
        other => Layer::parse(other).map(Some),
    }
}
