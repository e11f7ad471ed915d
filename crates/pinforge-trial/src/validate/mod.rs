//! `pinforge validate`: the A/B row harness. Two builds (installed layers or manifests), the
//! same rows in the same order on a long-lived engine process per arm (and per `--jobs`
//! worker), each row recorded as one JSON line with a mechanically classified outcome, a
//! summary computed from the row file alone, and an evidence manifest `verify` re-checks.
//!
//! Run folder `<workspace>/validate/<run-id>/`: `settings.json` (what the run compares; a
//! resume must match it), `prompts.jsonl` (the prompt of every row), `grammar.gbnf` and
//! `schema.json` (when constrained), `model.gguf` (the generated tiny model), `rows.jsonl`
//! (append-only, see [`rows`]), `summary.json` and `evidence.json` (written last).
//!
//! Trust: each arm's build is verified as smoke verifies it ([`smoke::target_from_manifest`],
//! [`smoke::target_from_installed`]) before the shim is compiled or anything is loaded; an
//! engine restart after a crash first re-checks that every verified library is still the
//! same file (device, inode, size, change times) and refuses to load one that is not.
//!
//! The parts: [`arm`] (resolve and verify both builds), [`run_dir`] (the inputs, the settings
//! and the run folder), `harness` (the engines and the row loop), [`evidence`] (the
//! evidence manifest and its re-check), with [`rows`] and [`summary`] for the row file and
//! what is derived from it, and [`row_check`] for what the settings determine about every
//! row read back (resume and verify check rows in that one place).

pub(crate) mod arm;
pub mod engine;
pub(crate) mod evidence;
pub(crate) mod grammar;
mod harness;
pub mod merge;
pub(crate) mod row_check;
pub mod rows;
pub(crate) mod run_dir;
pub(crate) mod serve;
pub mod served;
pub mod shard;
pub mod summary;

pub use arm::ArmSource;
pub use evidence::{is_evidence, verify_evidence, EvidenceCheck, EvidenceRef};
pub(crate) use harness::Throughput;
pub(crate) use run_dir::check_run_id;

pub use engine::RowKind;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::progress::Reporter;
use pinforge_deploy::model::Arch;
use pinforge_deploy::smoke;
pub use pinforge_record::sign::record::Signer;
use run_dir::{canonical, Inputs, RunDir};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use summary::{ArmId, Derived};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Baseline, then candidate.
    pub arms: [ArmSource; 2],
    /// Rows per arm.
    pub rows: u64,
    /// Run only this shard's rows (`--shard I/N`, see [`shard`]).
    pub shard: Option<shard::Shard>,
    /// A GGUF model (None: the tiny model of `arch`).
    pub model: Option<PathBuf>,
    /// Architecture of the tiny model.
    pub arch: Arch,
    /// Prompt generator seed.
    pub seed: u64,
    /// Prompts from a JSONL file instead of the generator (cycled over the rows).
    pub prompts: Option<PathBuf>,
    /// Token budget per row.
    pub budget: u32,
    /// What each row drives in the engine (`--row-kind`).
    pub row_kind: RowKind,
    /// JSON schema constraining every row.
    pub schema: Option<PathBuf>,
    /// Engine processes per arm.
    pub jobs: u32,
    /// Resume this run id.
    pub resume: Option<String>,
    /// Deadline per row.
    pub timeout: Duration,
    /// llama.cpp threads per engine.
    pub threads: i32,
    /// The workspace root.
    pub workspace: PathBuf,
    /// Who signs the evidence manifest (`--sign`); [`Signer::none`] for none.
    pub signer: Signer,
}

/// What one `validate` call did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// Run id.
    pub run: String,
    /// Run folder.
    pub run_dir: PathBuf,
    /// The summary (from the whole row file).
    #[serde(flatten)]
    pub derived: Derived,
    /// The evidence manifest.
    pub evidence: EvidenceRef,
    /// This invocation's throughput per arm (not part of the evidence).
    pub throughput: BTreeMap<String, Throughput>,
    /// Rows found already recorded (resume).
    pub resumed_rows: u64,
    /// Bytes of a torn last line cut off (resume).
    pub torn_bytes: u64,
}

/// Run (or resume) a validation: resolve the inputs and both arms, prepare the run folder,
/// run the rows, and summarize them into `summary.json` and the evidence manifest.
pub fn run(opts: &Options, reporter: &dyn Reporter) -> Result<Report> {
    run_arms(opts, &opts.arms, reporter)
}

/// Run a validation of one of `opts.arms` alone (`arm` 0 or 1): the same inputs, settings and
/// evidence as [`run`], over one build. A soak flip runs each side this way, one run per side
/// and repeat, so that the sides can be interleaved and each side's evidence stands alone.
pub(crate) fn run_one(opts: &Options, arm: usize, reporter: &dyn Reporter) -> Result<Report> {
    let source = opts.arms.get(arm).ok_or_else(|| {
        Error::Internal(format!(
            "invariant: a validation has arms 0 and 1, not {arm}"
        ))
    })?;
    run_arms(opts, std::slice::from_ref(source), reporter)
}

fn run_arms(opts: &Options, sources: &[ArmSource], reporter: &dyn Reporter) -> Result<Report> {
    check_options(opts)?;
    // Inputs first (exit 2 before anything is written), then the builds.
    let inputs = Inputs::load(opts)?;
    let ws = pinforge_base::workspace::Workspace::new(&opts.workspace)?;
    // The run folder's shape is an input too: a link there is refused before the builds are
    // looked at (and again when the folder is opened).
    run_dir::check_folder(ws.root(), opts.resume.as_deref())?;
    let arms = arm::resolve_arms(sources)?;
    // The shims compile before the run folder exists: a build whose llama.h the shim does not
    // cover is an input error that leaves nothing behind.
    let cache = smoke::shim_cache(ws.root())?;
    let shims: Vec<PathBuf> = arms
        .iter()
        .map(|a| smoke::shim_for(&a.target, &cache))
        .collect::<Result<_>>()?;
    let run = RunDir::open(opts, ws.root(), &inputs, &arms, false)?;
    let names: Vec<&str> = arms.iter().map(|a| a.record.name.as_str()).collect();
    reporter.stage(
        "validate",
        &format!(
            "run {}: {} rows per arm{}, {} (candidate), jobs {}",
            run.id,
            opts.rows,
            opts.shard
                .map(|s| format!(" (shard {s}: every {}th row from {})", s.count, s.index))
                .unwrap_or_default(),
            names.join(" vs "),
            opts.jobs
        ),
    );
    let ran = harness::run_rows(opts, &arms, shims, &run, &inputs, reporter)?;
    let (derived, evidence) = summarize(&run, &arms, &ran.rows, opts)?;
    Ok(Report {
        run: run.id,
        run_dir: run.dir,
        derived,
        evidence,
        throughput: ran.throughput,
        resumed_rows: ran.resumed_rows,
        torn_bytes: ran.torn_bytes,
    })
}

/// Derive the summary from every row of the run, write it, then the evidence manifest that
/// covers it (written last, after every file it names).
fn summarize(
    run: &RunDir,
    arms: &[arm::ResolvedArm],
    rows: &[rows::Row],
    opts: &Options,
) -> Result<(Derived, EvidenceRef)> {
    let ids: Vec<ArmId> = arms.iter().map(|a| ArmId::of(&a.record)).collect();
    let derived = summary::derive(&ids, rows);
    fsx::write_atomic(&run.dir.join("summary.json"), &canonical(&derived)?)?;
    let evidence = evidence::write(run, opts.jobs, &opts.signer)?;
    Ok((derived, evidence))
}

/// The numeric options' ranges and the run id's form, before anything is read.
fn check_options(opts: &Options) -> Result<()> {
    if opts.rows == 0 || opts.rows > 1_000_000 {
        return Err(Error::input(
            format!("--rows {}", opts.rows),
            "must be 1 to 1000000",
        ));
    }
    if opts.budget == 0 || opts.budget as usize > engine::N_CTX / 2 {
        return Err(Error::input(
            format!("--budget {}", opts.budget),
            format!("must be 1 to {} tokens", engine::N_CTX / 2),
        ));
    }
    if opts.jobs == 0 || opts.jobs > 64 {
        return Err(Error::input(
            format!("--jobs {}", opts.jobs),
            "must be 1 to 64",
        ));
    }
    if let Some(id) = &opts.resume {
        check_run_id(id)?;
    }
    Ok(())
}
