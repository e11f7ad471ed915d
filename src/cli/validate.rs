//! `pinforge validate` and its hidden engine process: the A/B row harness over two installed
//! layers or two manifests, rendered as a side-by-side summary (or `--json`).

use super::reporter::TermReporter;
use super::{print_json, JsonArg, RootArg, Verbosity};
use crate::cli::output::{paint, Tone};
use crate::outln;
use pinforge_base::error::{Error, ExitCode, Result};
use pinforge_deploy::install::Layer;
use pinforge_deploy::model::Arch;
use pinforge_trial::validate::{self, ArmSource, Options};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ValidateArgs {
    #[command(subcommand)]
    pub action: Option<ValidateAction>,
    /// Two manifests written by `pinforge build`: baseline, then candidate
    #[arg(num_args = 0..=2, value_name = "MANIFEST")]
    pub manifests: Vec<PathBuf>,
    /// Two installed layers, baseline then candidate: `control,live`
    #[arg(long, value_name = "A,B", conflicts_with = "manifests")]
    pub installed: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
    /// Rows per arm
    #[arg(long)]
    pub rows: Option<u64>,
    /// Run one shard of the rows: those with index ≡ I (mod N). `--shard /N` takes I from
    /// JOB_COMPLETION_INDEX (Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID (Slurm array)
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// A GGUF model [default: the tiny model of --arch]
    #[arg(long, conflicts_with = "arch")]
    pub model: Option<PathBuf>,
    /// Architecture of the generated tiny model: qwen2vl (M-RoPE) or qwen2 (control)
    #[arg(long, value_parser = ["qwen2vl", "qwen2"])]
    pub arch: Option<String>,
    /// Seed of the prompt generator
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Prompts from a JSON Lines file (`{"prompt": "..."}` per line), cycled over the rows
    #[arg(long, value_name = "FILE.jsonl")]
    pub prompts: Option<PathBuf>,
    /// Token budget per row: 1 to 128 (half the soak engine's 256-token context)
    #[arg(long, default_value_t = 24)]
    pub budget: u32,
    /// What each row drives: prompt-cache (a saved state restored, the prompt's new part
    /// decoded, issue #20093's path), embd-pos-null or embd-pos-n-tokens (an embedding batch
    /// with pos NULL or with the n_tokens positions llama_batch_init allocates, then the
    /// prompt, issue #28902's path); not with --serve or --endpoint
    #[arg(long, value_name = "KIND", default_value = "prompt-cache",
          value_parser = clap::builder::PossibleValuesParser::new(validate::RowKind::ALL.map(validate::RowKind::name)))]
    pub row_kind: String,
    /// Constrain every row with this JSON schema (converted to a grammar for the engine's
    /// own grammar sampler)
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Engine processes per arm (rows striped over them)
    #[arg(long, default_value_t = 1)]
    pub jobs: u32,
    /// llama.cpp threads per engine process
    #[arg(long, default_value_t = 1)]
    pub threads: i32,
    /// Seconds an engine may take for one row before it counts as hung
    #[arg(long, default_value_t = 120, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub row_timeout: u64,
    /// Continue the run with this id (the folder under validate/), skipping recorded rows
    /// (each checked against the run's settings first: a row they do not give is exit 2)
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    #[command(flatten)]
    pub sign: super::sign::SignWith,
    #[command(flatten)]
    pub served: super::validate_serve::ServeArgs,
    #[command(flatten)]
    pub out: JsonArg,
}

/// `validate merge`.
#[derive(Debug, clap::Subcommand)]
pub enum ValidateAction {
    /// Merge the shards of a `validate --shard I/N` soak into one run folder (every shard's
    /// evidence verified first; settings must agree; every index exactly once)
    Merge(MergeArgs),
}

/// Arguments of `validate merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The shard run folders (or their evidence.json, or the `validate --json` document each
    /// shard printed, as `shards/*.json`)
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// The merged run folder to create [default: a new run under validate/]
    #[arg(short = 'o', long = "out", value_name = "OUT")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub json: JsonArg,
}

/// Run `validate merge`.
fn run_merge(ctx: &super::Ctx, a: MergeArgs) -> Result<ExitCode> {
    let report = validate::merge::merge(&validate::merge::MergeOptions {
        runs: a.runs,
        out: a.out,
        workspace: ctx.ws_root.clone(),
    })?;
    if a.json.json {
        // A re-run merge (a scheduler's merge job run again) is a no-op, said as `install`
        // says one; the document keeps its shape, so the note goes to stderr.
        if report.unchanged && ctx.verbosity != Verbosity::Quiet {
            eprintln!(
                "note: unchanged: {} already holds the merge of these {} shard(s); nothing written",
                report.run_dir.display(),
                report.shards.len()
            );
        }
        print_json(pinforge_record::schema_id::VALIDATE_MERGE, &report)?;
    } else {
        if report.unchanged {
            outln!(
                "unchanged: run {} ({}) already holds the merge of these {} shard(s); nothing written",
                report.run,
                report.run_dir.display(),
                report.shards.len()
            );
        } else {
            outln!(
                "merged {} shard(s) into run {} ({})",
                report.shards.len(),
                report.run,
                report.run_dir.display()
            );
        }
        outln!("verdict: {}", report.derived.verdict);
        outln!(
            "evidence: {} (sha256 {})",
            report.evidence.manifest.display(),
            report.evidence.sha256.short(16)
        );
    }
    Ok(if validate::summary::candidate_passed(&report.derived) {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

/// Arguments of the hidden `__validate-engine` command.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    #[arg(long)]
    pub shim: PathBuf,
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long)]
    pub grammar: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub threads: i32,
}

/// Run the engine process until its stdin closes.
pub(super) fn run_engine(a: EngineArgs) -> ExitCode {
    validate::engine::serve(&validate::engine::EngineArgs {
        shim: a.shim,
        model: a.model,
        grammar: a.grammar,
        threads: a.threads,
    })
}

fn arms(a: &ValidateArgs, ws_root: &std::path::Path) -> Result<[ArmSource; 2]> {
    match (&a.installed, a.manifests.as_slice()) {
        (Some(list), []) => {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            let [x, y] = names.as_slice() else {
                return Err(Error::input(
                    format!("--installed {list}"),
                    "give two layers, baseline then candidate",
                )
                .with_hint("for example --installed control,live"));
            };
            let root = a.root.resolve(ws_root);
            Ok([
                ArmSource::Installed {
                    root: root.clone(),
                    layer: Layer::parse(x)?,
                },
                ArmSource::Installed {
                    root,
                    layer: Layer::parse(y)?,
                },
            ])
        }
        (None, [x, y]) => Ok([
            ArmSource::Manifest(x.clone()),
            ArmSource::Manifest(y.clone()),
        ]),
        _ => Err(Error::input(
            "validate",
            "give two manifests (baseline, candidate) or --installed A,B",
        )),
    }
}

/// Run `validate`.
pub(super) fn run(ctx: &super::Ctx, a: ValidateArgs) -> Result<ExitCode> {
    let mut a = a;
    if let Some(ValidateAction::Merge(m)) = a.action.take() {
        return run_merge(ctx, m);
    }
    let shard = match &a.shard {
        Some(t) => Some(validate::shard::Shard::parse(t, &|v| {
            std::env::var(v).ok()
        })?),
        None => None,
    };
    let opts = Options {
        arms: if a.served.endpoint_alone(&a.installed, &a.manifests) {
            super::validate_serve::no_arms()
        } else {
            arms(&a, &ctx.ws_root)?
        },
        rows: a
            .rows
            .ok_or_else(|| Error::input("validate", "--rows N is required"))?,
        shard,
        model: a.model.clone(),
        arch: Arch::parse(a.arch.as_deref().unwrap_or("qwen2vl"))?,
        seed: a.seed,
        prompts: a.prompts.clone(),
        budget: a.budget,
        row_kind: validate::RowKind::parse(&a.row_kind)?,
        schema: a.schema.clone(),
        jobs: a.jobs,
        resume: a.resume.clone(),
        timeout: Duration::from_secs(a.row_timeout.max(1)),
        threads: a.threads.max(1),
        workspace: ctx.ws_root.clone(),
        signer: ctx.signer.clone(),
    };
    if a.served.wanted() {
        if !opts.row_kind.is_default() {
            return Err(Error::input(
                format!("--row-kind {}", opts.row_kind.name()),
                "a served row is a chat request; only the in-process harness drives other row kinds",
            )
            .with_hint("drop --row-kind, or run the arms without --serve/--endpoint"));
        }
        return super::validate_serve::run(ctx, &a.served, opts, a.out.json);
    }
    let reporter = TermReporter::counting(ctx.verbosity == Verbosity::Quiet, "rows");
    let report = validate::run(&opts, &reporter)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::VALIDATE, &report)?;
    } else {
        render(&report);
    }
    Ok(if validate::summary::candidate_passed(&report.derived) {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

fn render(r: &validate::Report) {
    let d = &r.derived;
    outln!("validate run {} ({})", r.run, r.run_dir.display());
    if r.resumed_rows > 0 {
        outln!(
            "  resumed: {} row(s) were already recorded{}",
            r.resumed_rows,
            if r.torn_bytes > 0 {
                format!(
                    ", a torn last line of {} bytes was cut off and redone",
                    r.torn_bytes
                )
            } else {
                String::new()
            }
        );
    }
    let (header, rows) = summary_rows(r);
    for line in table_lines(&header, &rows) {
        outln!("{line}");
    }
    render_findings(d);
    let good = validate::summary::candidate_passed(d);
    outln!(
        "verdict: {}",
        paint(if good { Tone::Good } else { Tone::Bad }, &d.verdict)
    );
    outln!(
        "evidence: {} (sha256 {})",
        r.evidence.manifest.display(),
        r.evidence.sha256.short(16)
    );
}

/// The width of the label column (every label fits).
const LABEL_WIDTH: usize = 14;
/// The narrowest value column: arm names that fit read as they always did.
const MIN_COLUMN: usize = 16;
/// The least space between two columns, so that two long arm names never run together.
const COLUMN_GAP: usize = 2;

/// The summary table's cells: a heading per arm (the candidate marked), then one labelled row
/// per figure.
fn summary_rows(r: &validate::Report) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    use validate::rows::Outcome;
    let d = &r.derived;
    let header = d
        .arms
        .iter()
        .map(|arm| {
            if arm.candidate {
                format!("{} (cand.)", arm.name)
            } else {
                arm.name.clone()
            }
        })
        .collect();
    let per_arm = |f: &dyn Fn(&validate::summary::ArmSummary) -> String| -> Vec<String> {
        d.arms.iter().map(f).collect()
    };
    let mut rows = vec![("rows".to_string(), per_arm(&|a| a.rows.to_string()))];
    for o in Outcome::ALL {
        rows.push((
            o.as_str().to_string(),
            per_arm(&|a| a.counts[o.as_str()].to_string()),
        ));
    }
    rows.push((
        "onset row".into(),
        per_arm(&|a| {
            a.onset_row
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into())
        }),
    ));
    for (k, f) in [("p50 ms", 0), ("p90 ms", 1), ("p99 ms", 2)] {
        rows.push((
            k.into(),
            per_arm(&|a| {
                let l = &d.latency_ms[&a.name];
                format!("{:.1}", [l.p50, l.p90, l.p99][f])
            }),
        ));
    }
    rows.push((
        "rows/s".into(),
        per_arm(&|a| {
            r.throughput
                .get(&a.name)
                .map(|t| format!("{:.1}", t.rows_per_second))
                .unwrap_or_default()
        }),
    ));
    rows.push((
        "overhead".into(),
        per_arm(&|a| format!("{:.0}%", d.timing[&a.name].harness_overhead * 100.0)),
    ));
    (header, rows)
}

/// The table as lines: labels left-aligned, values right-aligned in columns sized to their
/// content (at least [`MIN_COLUMN`], and [`COLUMN_GAP`] wider than the widest cell).
fn table_lines(header: &[String], rows: &[(String, Vec<String>)]) -> Vec<String> {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            let widest = std::iter::once(&header[i])
                .chain(rows.iter().filter_map(|(_, vals)| vals.get(i)))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0);
            (widest + COLUMN_GAP).max(MIN_COLUMN)
        })
        .collect();
    let line = |label: &str, vals: &[String]| {
        let mut s = format!("  {label:<LABEL_WIDTH$}");
        for (v, w) in vals.iter().zip(&widths) {
            s.push_str(&format!("{v:>w$}"));
        }
        s
    };
    std::iter::once(line("", header))
        .chain(rows.iter().map(|(label, vals)| line(label, vals)))
        .collect()
}

/// What the table does not show: crash signatures, rows that failed on both arms, and the
/// harness errors left out of every comparison.
fn render_findings(d: &validate::summary::Derived) {
    for a in &d.arms {
        for s in &a.signatures {
            outln!(
                "  {} crash signature ({} rows, first {}): {}",
                a.name,
                s.rows,
                s.first_row,
                s.signature
            );
        }
    }
    if !d.common_failures.is_empty() {
        let rows: Vec<String> = d
            .common_failures
            .iter()
            .take(20)
            .map(|c| c.row.to_string())
            .collect();
        outln!(
            "  failed on both arms ({}): rows {}{}",
            d.common_failures.len(),
            rows.join(", "),
            if d.common_failures.len() > 20 {
                ", ..."
            } else {
                ""
            }
        );
    }
    if !d.errors.is_empty() {
        outln!("  harness errors (excluded from every comparison):");
        for e in d.errors.iter().take(10) {
            outln!("    {} row {}: {}", e.arm, e.row, e.detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(header: &[&str]) -> (Vec<String>, Vec<(String, Vec<String>)>) {
        let header = header.iter().map(|h| h.to_string()).collect();
        let rows = vec![
            (
                "rows".to_string(),
                vec!["100".to_string(), "100".to_string()],
            ),
            ("crash".to_string(), vec!["37".to_string(), "0".to_string()]),
        ];
        (header, rows)
    }

    // Operator report: `unpatched-asanpatched-asan (cand.)` — long arm names ran together
    // because every column was 16 wide whatever it held.
    #[test]
    fn two_long_arm_names_are_kept_apart_by_at_least_two_spaces() {
        let (header, rows) = cells(&["unpatched-asan", "patched-asan (cand.)"]);
        let lines = table_lines(&header, &rows);
        assert!(
            lines[0].contains("unpatched-asan  ") && !lines[0].contains("asanpatched"),
            "{lines:#?}"
        );
        let names: Vec<&str> = lines[0]
            .split("  ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(
            names,
            ["unpatched-asan", "patched-asan (cand.)"],
            "{lines:#?}"
        );
        // Every value ends where its heading ends: the columns stay aligned.
        let end_of = |line: &str, cell: &str| line.rfind(cell).map(|i| i + cell.len());
        assert_eq!(end_of(&lines[0], "(cand.)"), Some(lines[0].len()));
        assert_eq!(lines[1].len(), lines[0].len(), "{lines:#?}");
        assert_eq!(lines[2].len(), lines[0].len(), "{lines:#?}");
        assert_eq!(
            end_of(&lines[0], "unpatched-asan"),
            lines[1].find("100").map(|i| i + 3),
            "{lines:#?}"
        );
    }

    #[test]
    fn short_arm_names_keep_the_sixteen_wide_columns() {
        let (header, rows) = cells(&["control", "live (cand.)"]);
        let lines = table_lines(&header, &rows);
        assert_eq!(
            lines[0],
            format!("  {:<14}{:>16}{:>16}", "", "control", "live (cand.)")
        );
        assert_eq!(
            lines[1],
            format!("  {:<14}{:>16}{:>16}", "rows", "100", "100")
        );
        assert_eq!(
            lines[2],
            format!("  {:<14}{:>16}{:>16}", "crash", "37", "0")
        );
    }
}
