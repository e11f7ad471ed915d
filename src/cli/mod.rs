//! The command line: clap definitions, one file per command (parse, call one library
//! operation, render), shared argument groups, and the only place that writes to the terminal
//! (human text, `--json`, the indicatif progress bar, error rendering with hints and exit codes).

mod ablate;
mod audit;
mod bisect;
mod build;
mod diff;
mod exec;
mod flip;
mod gc;
mod generate;
mod hint;
mod history;
mod install;
mod key;
mod model;
pub(crate) mod output;
mod patch;
mod pull;
mod push;
mod rebase;
mod repair;
mod report;
mod reporter;
mod rollback;
pub mod schema;
mod sign;
mod smoke;
mod status;
mod toolkit;
mod validate;
mod validate_serve;
mod vendor;
mod verify;

use crate::outln;
use clap::{Parser, Subcommand};
use pinforge_base::error::{Error, ExitCode, ExitStatus, Result};
use pinforge_deploy::install::Layer;
use std::path::PathBuf;

/// pinforge: pin an upstream inference engine, carry attributed patches, build variants with
/// verifiable provenance.
#[derive(Debug, Parser)]
#[command(name = "pinforge", version, after_help = pinforge_base::error::ExitCode::help_table())]
pub struct Cli {
    /// Workspace folder holding vendor/ and build/ [default: current directory]
    #[arg(long, global = true, env = "PINFORGE_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// Less output: results and errors only, no stage lines (a successful `build` prints nothing)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More output (a cached build's full artifact list, every stage)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// When to color the output: auto (a terminal, and NO_COLOR unset), always, never
    #[arg(long, global = true, value_enum, default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// Color when stdout is a terminal and NO_COLOR is unset.
    Auto,
    /// Always color.
    Always,
    /// Never color.
    Never,
}

impl ColorWhen {
    fn clap(self) -> clap::ColorChoice {
        match self {
            ColorWhen::Auto => clap::ColorChoice::Auto,
            ColorWhen::Always => clap::ColorChoice::Always,
            ColorWhen::Never => clap::ColorChoice::Never,
        }
    }

    /// Whether pinforge's own output is colored.
    fn enabled(self) -> bool {
        use std::io::IsTerminal;
        match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::io::stdout().is_terminal()
            }
        }
    }
}

/// How much to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// `-q`: results and errors only.
    Quiet,
    /// The default.
    Normal,
    /// `-v` and more.
    Verbose,
}

/// What every command gets besides its own arguments.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The workspace folder (`--workspace`, default `.`).
    pub ws_root: PathBuf,
    /// `-q` / `-v`.
    pub verbosity: Verbosity,
    /// Who signs the records the command writes (`--sign`, its environment and config, loaded
    /// before anything is written); nobody for a command without `--sign`.
    pub signer: pinforge_record::sign::record::Signer,
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
    #[command(
        after_help = "Examples:\n  pinforge build                                   # the embedded default recipe's default variant\n  pinforge build recipes/mrope-cpu.toml --variant patched-asan --variant unpatched-asan\n  pinforge build --json -q"
    )]
    Build(build::BuildArgs),
    /// Re-hash every output and every input still on disk (or, with --installed, an
    /// installed layer through its stable path); exit 1 on any mismatch.
    #[command(
        after_help = "Examples:\n  pinforge verify build/mrope-cpu/patched/manifest.json\n  pinforge verify --installed control --root /srv/llama/rollback"
    )]
    Verify(verify::VerifyArgs),
    /// Sign a record pinforge wrote: a DSSE envelope (FILE.dsse.json) and a detached SSHSIG
    /// (FILE.sig, namespace pinforge) that `ssh-keygen -Y verify` checks.
    #[command(
        after_help = "Example:\n  pinforge sign build/mrope-cpu/patched/manifest.json --key ~/.ssh/pinforge_ed25519"
    )]
    Sign(sign::SignArgs),
    /// Signing key commands.
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Stage a build's outputs into the install root and commit a layer change with one rename.
    #[command(
        after_help = "Examples:\n  pinforge install build/mrope-cpu/patched/manifest.json --layer live --smoke\n  pinforge install recipes/mrope-cpu.toml --variant unpatched --layer control"
    )]
    Install(install::InstallArgs),
    /// Upload a verified build to an OCI registry as an artifact (its statement as the config,
    /// its staged prefix as one deterministic tar layer) with its signatures attached; print
    /// the artifact's digest.
    #[command(
        after_help = "Examples:\n  pinforge push build/mrope-cpu/patched/manifest.json 127.0.0.1:5000/llama/mrope-cpu:patched\n  pinforge push out/manifest.json registry.example.com/team/llama:cuda --json"
    )]
    Push(push::PushArgs),
    /// Fetch an artifact by digest into pulled/<digest>/: every digest and (with
    /// --allowed-signers) the signature checked before anything is unpacked.
    #[command(
        after_help = "Examples:\n  pinforge pull 127.0.0.1:5000/llama/mrope-cpu@sha256:<digest> --allowed-signers allowed_signers\n  pinforge install oci://127.0.0.1:5000/llama/mrope-cpu@sha256:<digest> --layer live --allowed-signers allowed_signers"
    )]
    Pull(pull::PullArgs),
    /// Compare two builds' manifests: parameters, pin, patches, tools, and every artifact
    /// and link, same or different. Exit 0 when identical, 1 when anything differs.
    #[command(
        after_help = "Example: pinforge diff build/mrope-cpu/unpatched/manifest.json \
build/mrope-cpu/patched/manifest.json"
    )]
    Diff(diff::DiffArgs),
    /// Render validate runs, flip and ablation records and build manifests as one
    /// self-contained HTML page (inline SVG, no script, no network), or as text or Markdown:
    /// verdicts, timelines, outcome counts, latency, artifact diff, patches, evidence checked
    /// now, and what was not tested. Exit 1 when some evidence fails its check now.
    #[command(
        after_help = "Examples:\n  pinforge report validate/RUN-ID -o report.html\n  pinforge report flips/ID/record.json build/mrope-cpu/patched/manifest.json -o flip.md --format md"
    )]
    Report(report::ReportArgs),
    /// Point `current` at another layer, or (default) return live to the previous live build.
    #[command(
        after_help = "Examples:\n  pinforge rollback                 # live returns to the previous live build\n  pinforge rollback --to control    # current shows the control layer"
    )]
    Rollback(rollback::RollbackArgs),
    /// Layers, what `current` shows, each entry's digest, recipe, variant, verification, and
    /// any unfinished transaction.
    #[command(
        after_help = "Examples:\n  pinforge status\n  pinforge status --json --root /srv/llama/rollback"
    )]
    Status(status::StatusArgs),
    /// Every install and rollback the install root records: generation, time, what each
    /// layer showed, and the receipt.
    #[command(
        after_help = "Examples:\n  pinforge history\n  pinforge rollback --to-generation 3   # restore what generation 3 showed"
    )]
    History(history::HistoryArgs),
    /// Remove store entries that no layer, the rollback stack or a journal references.
    #[command(after_help = "Example:\n  pinforge gc --root /srv/llama/rollback")]
    Gc(gc::GcArgs),
    /// Re-hash every entry the layers and the rollback stack reference, and re-materialize a
    /// damaged one from a verified source (another entry's or object's file with the recorded
    /// digest, or a `--from` build's output), swapped in whole.
    /// Exit 0 when everything is intact afterwards, 1 when a damaged file has no verified
    /// source (then nothing is written).
    #[command(
        after_help = "Examples:\n  pinforge repair --dry-run\n  pinforge repair --from build/mrope-cpu/patched/manifest.json"
    )]
    Repair(repair::RepairArgs),
    /// The recipe's patch bundle against a newer upstream: per patch a verdict (merged,
    /// superseded, carries, carries-review, conflicts, reverted; with `--check` also
    /// fixed-upstream, a drop proven by the patch's check) with its evidence, strongest first.
    /// Exit 0 when every patch carries, 1 when anything needs a decision.
    #[command(
        after_help = "Examples:\n  pinforge audit recipes/mrope-cpu.toml --onto crate:llama-cpp-sys-2@0.1.140\n  pinforge audit recipes/tiny.toml --onto git:../tiny@v2 --json"
    )]
    Audit(audit::AuditArgs),
    /// The first pin of a crate range where a patch's defect is gone without it: its
    /// Pinforge-Check built and smoked as `git bisect run` would (releases vendoring one
    /// upstream commit built once, ordered by what they vendor with `--vcs-repo`), every probe
    /// kept in build/.bisect/. `--write` records the answer as Applied-Upstream.
    #[command(
        after_help = "Examples:\n  pinforge bisect recipes/mrope-cpu.toml --patch 0001-batch-size-ubatch-reserve-pos-for-mrope.patch \\\n    --range crate:llama-cpp-sys-2@0.1.137..0.1.144 --vcs-repo ../llama-cpp-rs\n\nExit codes: 0 an exact answer (a pin with the defect right before one without), 1 anything else (skipped pins between, fixed outside the range, no answer), 2 bad input."
    )]
    Bisect(bisect::BisectArgs),
    /// Move the recipe's pin and its bundle onto a newer upstream: carried patches refreshed
    /// (headers kept, only Last-Update changes), merged and confirmed-superseded patches moved
    /// to the ledger; a conflict stops with nothing written (with `--resolve`: left in a
    /// checkout for the operator, then `--continue` or `--abort`).
    #[command(
        after_help = "Examples:\n  pinforge rebase recipes/mrope-cpu.toml --onto crate:llama-cpp-sys-2@0.1.137\n  pinforge rebase recipes/mrope-cpu.toml --onto crate:llama-cpp-sys-2@0.1.140 --drop 0001-batch-size-ubatch-reserve-pos-for-mrope.patch\n  pinforge rebase recipes/mrope-cpu.toml --onto crate:llama-cpp-sys-2@0.1.137 --resolve\n  pinforge rebase recipes/mrope-cpu.toml --continue"
    )]
    Rebase(rebase::RebaseArgs),
    /// Build and smoke two variants that differ in exactly one axis, with a hypothesis
    /// registered before anything is built; record the artifact diff and the verdict
    /// (supported, falsified or invalid). Exit 0 supported or falsified, 1 invalid, 2 refused.
    #[command(
        after_help = "Examples:\n  pinforge flip --from unpatched-asan --to patched-asan --arch qwen2vl \\\n    --hypothesis \"the M-RoPE patches are the fix\"\n  pinforge flip recipes/mrope-cpu.toml --from a --to b --hypothesis H --allow-multi --json\n\nExit codes: 0 the trial ran (verdict supported or falsified: both are evidence), 1 the trial is invalid (a build or smoke could not run, or the from side shows no signature; the record says why), 2 refused before anything was written (the variants differ in more or fewer than one axis, bad input)."
    )]
    Flip(flip::FlipArgs),
    /// Build and smoke a variant with subsets of its patches; report which patches are
    /// necessary and which sets are sufficient to remove the crash signature.
    #[command(
        after_help = "Example:\n  pinforge ablate --variant patched-asan --arch qwen2vl\n\nExit codes: 0 every subset was built and smoked, 1 some subset could not be (its reason is recorded), 2 bad input."
    )]
    Ablate(ablate::AblateArgs),
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
    /// state, clear, restore, continue, compare with an uninterrupted run (or, with
    /// --scenario, a context shift or an embedding batch). Exit 0 ok, 1 mismatch or crash, 2
    /// error.
    #[command(
        after_help = "Examples:\n  pinforge smoke build/mrope-cpu/unpatched-asan/manifest.json --arch qwen2vl\n  pinforge smoke build/mrope-cpu/unpatched-asan/manifest.json --scenario kshift\n  pinforge smoke --installed live --arch qwen2 --json"
    )]
    Smoke(smoke::SmokeArgs),
    /// Run a command in a variant's build folder as the build saw it: in the build's private
    /// mount namespace, with the source tree, variant folder and CMake build folder mounted at
    /// the fixed path, from the fixed build folder (as `nix develop` does). Exit with the
    /// command's code; 2 when the variant was never built or was built at its real folder.
    #[command(
        after_help = "Examples:\n  pinforge exec recipes/mrope-cpu.toml --variant patched -- cmake --build .\n  pinforge exec --variant patched -- sh"
    )]
    Exec(exec::ExecArgs),
    /// Provision (or re-verify) a CUDA toolkit from a lock of pinned PyPI wheels and print its
    /// root; builds whose toolchain names `cuda-toolkit` do this themselves.
    #[command(
        after_help = "Examples:\n  pinforge toolkit recipes/toolkits/cuda-13.1.1.toml\n  pinforge toolkit recipes/toolkits/cuda-13.0.2.toml --json --cache-dir /srv/cache"
    )]
    Toolkit(toolkit::ToolkitArgs),
    /// A/B soak of two builds: the same rows on a long-lived engine per arm with prompt-cache
    /// save/restore between rows, every row classified (ok, crash, token-budget, mismatch,
    /// error) and recorded, a summary and an evidence manifest. Exit 1 when the candidate
    /// (the second arm) has a crash or mismatch row.
    #[command(
        after_help = "Examples:\n  pinforge validate --installed control,live --rows 300 --arch qwen2vl\n  pinforge validate A/manifest.json B/manifest.json --rows 1002 --budget 12 --schema s.json --json\n  pinforge validate --installed control,live --rows 300 --resume RUN_ID\n  pinforge verify validate/RUN_ID/evidence.json"
    )]
    Validate(validate::ValidateArgs),
    /// Write a shell completion script to stdout.
    #[command(
        after_help = "Examples:\n  pinforge completions bash > ~/.local/share/bash-completion/completions/pinforge\n  pinforge completions zsh > ~/.zfunc/_pinforge"
    )]
    Completions(generate::CompletionsArgs),
    /// Write the man page (roff) to stdout.
    #[command(after_help = "Example:\n  pinforge man > ~/.local/share/man/man1/pinforge.1")]
    Man,
    /// Internal: write the JSON Schema of every `--json` document (`schemas/`).
    #[command(name = "__schemas", hide = true)]
    Schemas(schema::SchemasArgs),
    /// Internal: the child process of `smoke`.
    #[command(name = "__smoke-child", hide = true)]
    SmokeChild(smoke::SmokeChildArgs),
    /// Internal: the engine process of `validate`.
    #[command(name = "__validate-engine", hide = true)]
    ValidateEngine(validate::EngineArgs),
}

/// Run the CLI and return the process exit code.
pub fn main() -> ExitStatus {
    use clap::{CommandFactory, FromArgMatches};
    // `--color` must reach clap's own help and errors too, so it is read before clap parses.
    let color = color_from_args(std::env::args_os());
    let matches = Cli::command().color(color.clap()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    crate::cli::output::set_color(cli.color.enabled());
    let hints = hint::HintOptions::from_matches(&matches);
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            render_error(&e, &hints);
            e.exit_code().into()
        }
    };
    match crate::cli::output::finish() {
        // The reader stopped reading (`| head -1`): that is its choice, not a failure.
        None | Some(crate::cli::output::OutputFailure::Closed) => code,
        Some(crate::cli::output::OutputFailure::Failed(why)) => {
            eprintln!("error: standard output: cannot write the report: {why}");
            eprintln!(
                "note: the command's own work finished before this (it would have exited {code}); \
                 whatever it committed stays committed"
            );
            eprintln!(
                "hint: {}",
                hints.apply(
                    "`pinforge status` shows the install root; rerun with output to a writable place"
                )
            );
            ExitCode::Internal.into()
        }
    }
}

/// `--color WHEN` / `--color=WHEN` as given, before clap has parsed anything (auto otherwise).
fn color_from_args(args: impl Iterator<Item = std::ffi::OsString>) -> ColorWhen {
    let mut when = ColorWhen::Auto;
    let mut next_is_value = false;
    for a in args {
        let a = a.to_string_lossy().into_owned();
        let value = if next_is_value {
            next_is_value = false;
            Some(a.as_str())
        } else if a == "--color" {
            next_is_value = true;
            None
        } else {
            a.strip_prefix("--color=")
        };
        match value {
            Some("always") => when = ColorWhen::Always,
            Some("never") => when = ColorWhen::Never,
            Some(_) => when = ColorWhen::Auto,
            None => {}
        }
    }
    when
}

impl Command {
    /// The `--sign` arguments of a command that writes a record.
    fn sign_with(&self) -> Option<&sign::SignWith> {
        match self {
            Command::Build(a) => Some(&a.sign),
            Command::Flip(a) => Some(&a.sign),
            Command::Ablate(a) => Some(&a.sign),
            Command::Validate(a) => Some(&a.sign),
            Command::Install(a) => Some(&a.sign),
            _ => None,
        }
    }
}

fn run(cli: Cli) -> Result<ExitStatus> {
    // `--sign` (and its environment and config): the key is loaded before anything is
    // written, and every record the command writes is signed with it.
    let signer = match cli.command.sign_with() {
        Some(s) => s.signer()?,
        None => pinforge_record::sign::record::Signer::none(),
    };
    let ctx = Ctx {
        ws_root: cli.workspace.clone().unwrap_or_else(|| PathBuf::from(".")),
        verbosity: match (cli.quiet, cli.verbose) {
            (true, _) => Verbosity::Quiet,
            (false, 0) => Verbosity::Normal,
            (false, _) => Verbosity::Verbose,
        },
        signer,
    };
    // A wait on a lock another command holds is said on stderr (after a second), except
    // under `-q`; stdout stays the command's own output.
    if !cli.quiet {
        pinforge_base::text::notice::set_sink(Some(Box::new(|line: &str| {
            eprintln!("note: {line}");
        })));
    }
    if matches!(
        cli.command,
        Command::Build(_)
            | Command::Audit(_)
            | Command::Bisect(_)
            | Command::Patch(_)
            | Command::Ablate(_)
            | Command::Flip(_)
            | Command::Exec(_)
            | Command::Smoke(_)
            | Command::Validate(_)
    ) {
        rebase::settle_leftover(&ctx)?;
    }
    let code = match cli.command {
        // The child's own status, passed through.
        Command::Exec(a) => return exec::run(&ctx, a),
        Command::Build(a) => build::run(&ctx, a),
        Command::Verify(a) => verify::run(&ctx, a),
        Command::Sign(a) => sign::run(a),
        Command::Key(c) => key::run(c),
        Command::Install(a) => install::run(&ctx, a),
        Command::Diff(a) => diff::run(a),
        Command::Report(a) => report::run(a),
        Command::Push(a) => push::run(a),
        Command::Pull(a) => pull::run(&ctx, a),
        Command::Flip(a) => flip::run(&ctx, a),
        Command::Ablate(a) => ablate::run(&ctx, a),
        Command::Rollback(a) => rollback::run(&ctx, a),
        Command::Status(a) => status::run(&ctx, a),
        Command::Gc(a) => gc::run(&ctx, a),
        Command::Repair(a) => repair::run(&ctx, a),
        Command::History(a) => history::run(&ctx, a),
        Command::Audit(a) => audit::run(&ctx, a),
        Command::Bisect(a) => bisect::run(&ctx, a),
        Command::Rebase(a) => rebase::run(&ctx, a),
        Command::Patch(c) => patch::run(&ctx, c),
        Command::Model(c) => model::run(c),
        Command::Vendor(c) => vendor::run(c),
        Command::Toolkit(a) => toolkit::run(&ctx, a),
        Command::Smoke(a) => smoke::run(&ctx, a),
        Command::SmokeChild(a) => smoke::run_child(a),
        Command::Validate(a) => validate::run(&ctx, a),
        Command::ValidateEngine(a) => Ok(validate::run_engine(a)),
        Command::Schemas(a) => schema::run(a),
        Command::Completions(a) => generate::completions(a),
        Command::Man => generate::man(),
    };
    code.map(ExitStatus::from)
}

/// The error on standard error. Messages embed values from files and tools (names, paths, a
/// compiler's log tail): the message and hint are one line each (`text::shown_line`), the
/// detail keeps its lines (`text::shown_lines`), and nothing reaches the terminal raw (issue #19
/// class 2).
fn render_error(e: &Error, hints: &hint::HintOptions) {
    use pinforge_base::text::{shown_line, shown_lines};
    eprintln!("error: {}", shown_line(&e.to_string()));
    if let Some(detail) = e.detail() {
        for line in shown_lines(detail).lines() {
            eprintln!("  {line}");
        }
    }
    if let Some(hint) = e.hint() {
        eprintln!("hint: {}", shown_line(&hints.apply(hint)));
    }
}

/// Every JSON document names its schema (`pinforge.COMMAND/v1`), so that a consumer can tell
/// what it reads and a format change is a new schema id, never a surprise. Keys stay sorted
/// (canonical JSON, deterministic output).
fn with_schema<T: serde::Serialize>(schema: &str, value: &T) -> Result<serde_json::Value> {
    let v = serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))?;
    let serde_json::Value::Object(fields) = v else {
        return Err(Error::Internal(format!(
            "{schema}: a JSON document must be an object"
        )));
    };
    let mut doc = serde_json::Map::new();
    doc.insert("schema".into(), serde_json::Value::from(schema));
    doc.extend(fields.into_iter().filter(|(k, _)| k != "schema"));
    Ok(serde_json::Value::Object(doc))
}

/// Print one JSON document (pretty) with its schema id.
fn print_json<T: serde::Serialize>(schema: &str, value: &T) -> Result<()> {
    let doc = with_schema(schema, value)?;
    let s = serde_json::to_string_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
    outln!("{}", json_escaped(&s));
    Ok(())
}

/// serde_json escapes only C0 controls; DEL, C1 and the bidi and zero-width characters the text
/// rule refuses would still reach a terminal through `jq` or `cat`. Outside strings JSON holds
/// none of them but the pretty printer's line breaks (inside strings serde writes `\n`), so
/// each is written as its `\uXXXX` escape: the same document, byte-safe.
fn json_escaped(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c != '\n' && pinforge_base::text::is_unsafe_char(c);
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Print one JSON document on one line (JSON Lines, as `cargo --message-format json` does):
/// for commands that report several results of the same shape, one line each.
fn print_json_line<T: serde::Serialize>(schema: &str, value: &T) -> Result<()> {
    let doc = with_schema(schema, value)?;
    let s = serde_json::to_string(&doc).map_err(|e| Error::Internal(e.to_string()))?;
    outln!("{}", json_escaped(&s));
    Ok(())
}

/// `--installed [LAYER]`: `current` (the default) or a layer name.
fn installed_layer(arg: &str) -> Result<Option<Layer>> {
    match arg {
        "current" => Ok(None),
        other => Layer::parse(other).map(Some),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_output_escapes_what_serde_json_leaves_raw_and_stays_the_same_document() {
        let v = serde_json::json!({"name": "a\u{7f}b\u{85}c\u{202e}d\u{feff}e\nf"});
        let raw = serde_json::to_string_pretty(&v).expect("json");
        let out = super::json_escaped(&raw);
        assert!(
            !out.chars()
                .any(|c| c != '\n' && pinforge_base::text::is_unsafe_char(c)),
            "{out}"
        );
        let back: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
        assert_eq!(back, v);
    }
}
