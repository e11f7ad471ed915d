//! The serialized documents of the trial layer: the flip record (`Pair`, `BuildSide`,
//! `SmokeSide`, `ArtifactRow`, `FlipRecord`), the ablation record (`SubsetRecord`,
//! `AblationRecord`) and the soak trial each of them may hold (`SoakTrial`, `SoakRun`, …,
//! `AblationSoak`, `SubsetSoak`), and the soak's `Timing` and `EvidenceRef` they embed. Types and their accessors only, as cargo keeps its manifest
//! types in `cargo-util-schemas`: the logic that fills them (`trial::soak`, `trial::ablate`)
//! imports this module, never the reverse.

use crate::axis::{Axis, AxisRow};
use crate::config::{Config, PatchRef};
use crate::verdict::FlipVerdict;
use pinforge_base::digest::Sha256;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The schema id of a flip record and of `flip --json`.
pub const SCHEMA: &str = pinforge_record::schema_id::FLIP;

/// A value for each side.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Pair<T> {
    /// The `from` side.
    pub from: T,
    /// The `to` side.
    pub to: T,
}

/// One side's build, as recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BuildSide {
    /// Variant built.
    pub variant: String,
    /// Manifest path.
    pub manifest: Option<PathBuf>,
    /// SHA-256 of the manifest file as it was read for this record.
    pub manifest_sha256: Option<Sha256>,
    /// Input digest of the build.
    pub input_digest: Option<Sha256>,
    /// Whether the build was reused unchanged.
    pub cached: bool,
    /// Wall time of the build in seconds.
    pub seconds: f64,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// One side's smoke, as recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeSide {
    /// ok | mismatch | crash | error.
    pub verdict: String,
    /// The full signature.
    pub signature: Option<String>,
    /// The compared part of it.
    pub normalized_signature: Option<String>,
    /// The smoke's detail.
    pub detail: Option<String>,
    /// Wall time of the smoke in seconds.
    pub seconds: f64,
    /// Where the decode ran (`cpu`, `cuda:N (name)`), None where no smoke report came back.
    #[serde(default)]
    pub device: Option<String>,
    /// Why a CUDA build ran on the CPU: its CUDA kernels were then not exercised.
    #[serde(default)]
    pub device_reason: Option<String>,
}

/// One artifact on both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ArtifactRow {
    /// Path relative to the artifact root.
    pub path: String,
    /// SHA-256 on the from side (None: not there).
    pub from_sha256: Option<String>,
    /// SHA-256 on the to side.
    pub to_sha256: Option<String>,
    /// Present on both sides with the same digest.
    pub same: bool,
    /// Either manifest marks the file as embedding this machine's build paths: a difference
    /// may then be only the two trees' paths, not the code.
    pub embeds_machine_path: bool,
    /// The bytes differ, but only where this normalization rule (stated in both manifests,
    /// see [`pinforge_record::normalize`]) masks them: nvcc's pid noise, not a difference in the code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equal_under: Option<String>,
}

impl ArtifactRow {
    /// The row's word: same, equal under a rule, or different (and why it may be).
    pub(crate) fn word(&self) -> String {
        match (self.same, &self.equal_under, self.embeds_machine_path) {
            (true, _, _) => "same".into(),
            (false, Some(rule), _) => format!("equal under {rule}"),
            (false, None, false) => "different".into(),
            (false, None, true) => "different (embeds build paths)".into(),
        }
    }

    /// Whether the row is a real difference (not the same, not equal under a stated rule).
    pub fn differs(&self) -> bool {
        !self.same && self.equal_under.is_none()
    }
}

/// The smoke settings both sides ran with.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeSettings {
    /// Model file, or None for the generated tiny model of `arch`.
    pub model: Option<PathBuf>,
    /// Tiny model architecture.
    pub arch: String,
    /// Tokens generated.
    pub tokens: usize,
}

/// A flip record: written when the trial is registered (state `registered`, no results), and
/// completed in place (state `complete`) when both sides have run.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FlipRecord {
    /// [`SCHEMA`].
    pub schema: String,
    /// The record id (its folder name under `flips/`).
    pub id: String,
    /// `registered` or `complete`.
    pub state: String,
    /// Recipe name.
    pub recipe: String,
    /// SHA-256 of the recipe bytes.
    pub recipe_sha256: Sha256,
    /// The from variant.
    pub from: String,
    /// The to variant.
    pub to: String,
    /// The hypothesis, as registered.
    pub hypothesis: String,
    /// The prediction, as registered.
    pub prediction: Option<String>,
    /// The axis that differs (`+`-joined when several do).
    pub axis: String,
    /// Every axis that differs.
    pub axes: Vec<Axis>,
    /// The axis values on each side (`key=value; ...` per side).
    pub values: Pair<String>,
    /// False when `--allow-multi` let more than one axis differ: not a single-setting trial.
    pub single_setting: bool,
    /// The mechanical diff.
    pub diff: Vec<AxisRow>,
    /// Both resolved configurations.
    pub configurations: Pair<Config>,
    /// The smoke settings, the same for both sides.
    pub smoke_settings: SmokeSettings,
    /// pinforge's version.
    pub pinforge_version: String,
    /// When the trial was registered (before anything was built).
    pub registered_at: String,
    /// When the record was completed.
    pub completed_at: Option<String>,
    /// Both builds.
    pub builds: Pair<Option<BuildSide>>,
    /// Every artifact on either side.
    pub artifacts: Vec<ArtifactRow>,
    /// The smoke verdict words (`ok`, `crash`, ...), None where no smoke ran.
    pub smoke: Pair<Option<String>>,
    /// Both smokes in full.
    pub smokes: Pair<Option<SmokeSide>>,
    /// The soak trial (`--trial soak`): each side's validation runs, per repeat; absent for a
    /// smoke flip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<SoakTrial>,
    /// supported | falsified | invalid | inconclusive (None while registered).
    pub verdict: Option<FlipVerdict>,
    /// Why that verdict.
    pub reason: Option<String>,
    /// Where this record is.
    pub record: PathBuf,
    /// Where its readable summary is.
    pub summary: PathBuf,
}

/// One subset, as recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SubsetRecord {
    /// `none`, `0001+0003`.
    pub label: String,
    /// The patch files asked for.
    pub patches: Vec<String>,
    /// The patch files actually applied (more than asked when a dependency was added).
    pub applied: Vec<String>,
    /// Why patches were added, when they were.
    pub dependency: Option<String>,
    /// The folder name the subset was built under (an existing variant's when equal).
    pub built_as: String,
    /// Whether that is a variant the recipe defines.
    pub existing_variant: bool,
    /// Whether the build was reused unchanged.
    pub cached: bool,
    /// Manifest path.
    pub manifest: Option<PathBuf>,
    /// The manifest's digest when the subset was built, so that a later rebuild or gc of that
    /// folder cannot silently change what the record points to.
    pub manifest_sha256: Option<Sha256>,
    /// Build wall time in seconds.
    pub build_seconds: f64,
    /// The smoke.
    pub smoke: Option<SmokeSide>,
    /// clean | signature | other-crash | undetermined.
    pub class: String,
    /// Why undetermined.
    pub reason: Option<String>,
    /// The soak trial's runs of this subset (`ablate --trial soak`; then no smoke).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<SubsetSoak>,
}

/// An ablation record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct AblationRecord {
    /// [`crate::ablate::SCHEMA`].
    pub schema: String,
    /// The record id (its folder under `ablations/`).
    pub id: String,
    /// Recipe name.
    pub recipe: String,
    /// The variant ablated.
    pub variant: String,
    /// Its resolved patch list.
    pub patches: Vec<PatchRef>,
    /// `every-subset` or `each-alone-and-each-left-out`.
    pub mode: String,
    /// The smoke settings every subset ran with.
    pub smoke_settings: SmokeSettings,
    /// The soak trial's settings and run order (`ablate --trial soak`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<AblationSoak>,
    /// Every subset tried, in order.
    pub subsets: Vec<SubsetRecord>,
    /// The normalized signature of the empty subset.
    pub target_signature: Option<String>,
    /// Patch files whose removal alone brings the target signature back.
    pub necessary: Vec<String>,
    /// Patch files whose removal alone gives a crash with another signature.
    pub other_crash_when_left_out: Vec<String>,
    /// Minimal sets sufficient to remove the signature.
    pub sufficient: Vec<Vec<String>>,
    /// Patch files that do not touch the signature.
    pub no_effect: Vec<String>,
    /// pinforge's version.
    pub pinforge_version: String,
    /// When it started.
    pub started_at: String,
    /// When it ended (None while running).
    pub finished_at: Option<String>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Where this record is.
    pub record: PathBuf,
    /// Where its summary is.
    pub summary: PathBuf,
}

/// The soak trial's settings, as registered before anything runs.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SoakSettings {
    /// Rows per run.
    pub rows: u64,
    /// Interleaved repeats.
    pub repeats: u32,
    /// Prompt generator seed (None with a prompt file).
    pub seed: Option<u64>,
    /// The prompt file, when given.
    pub prompts: Option<PathBuf>,
    /// Token budget per row.
    pub budget: u32,
    /// Engine processes per run.
    pub jobs: u32,
    /// Seconds a row may take before it counts as hung.
    pub row_timeout_seconds: u64,
    /// The confidence the verdict's row counts are computed for.
    pub confidence: f64,
}

/// A crash signature of one run, compared as flips compare them (normalized first line).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SoakSignature {
    /// The normalized signature.
    pub signature: String,
    /// Crash rows with it.
    pub rows: u64,
    /// Its first row.
    pub first_row: u64,
    /// Whether it names a frame to compare (a sanitizer kind and the top function).
    pub framed: bool,
}

/// One side's run of one repeat.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SoakRun {
    /// The variant run.
    pub variant: String,
    /// The validate run id (None when the run could not start).
    pub run: Option<String>,
    /// Its folder.
    pub run_dir: Option<PathBuf>,
    /// Its evidence manifest (path and sha256), which `verify` of the flip record re-checks.
    pub evidence: Option<EvidenceRef>,
    /// Rows recorded.
    pub rows: u64,
    /// Rows per outcome.
    pub counts: BTreeMap<String, u64>,
    /// The first crash row.
    pub onset_row: Option<u64>,
    /// Crash signatures, most rows first.
    pub signatures: Vec<SoakSignature>,
    /// Mean times of the rows that completed (crash and error rows left out).
    pub timing: Option<Timing>,
    /// Why the run failed: kept here, never compared.
    pub error: Option<String>,
    /// What a test hook changed in how this run is read (never set outside pinforge's tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<String>,
}

impl SoakRun {
    pub(crate) fn count(&self, outcome: &str) -> u64 {
        self.counts.get(outcome).copied().unwrap_or(0)
    }

    /// Rows compared: every row but the harness errors.
    pub(crate) fn compared(&self) -> u64 {
        self.rows - self.count("error")
    }

    /// The signature of the first crash row.
    pub(crate) fn onset_signature(&self) -> Option<&SoakSignature> {
        self.signatures.iter().min_by_key(|s| s.first_row)
    }

    pub(crate) fn with(&self, signature: &str) -> Option<&SoakSignature> {
        self.signatures.iter().find(|s| s.signature == signature)
    }

    /// One cell of a table: failed, crash at row R (k of n), or clean (n rows).
    pub(crate) fn word(&self) -> String {
        if let Some(e) = &self.error {
            return format!("failed ({})", e.lines().next().unwrap_or(""));
        }
        match self.onset_row {
            Some(r) => format!(
                "crash at row {r} ({} of {})",
                self.count("crash"),
                self.rows
            ),
            None => format!("clean ({} rows)", self.compared()),
        }
    }
}

/// One repeat: both sides' runs and what they give.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SoakRepeat {
    /// 1-based.
    pub repeat: u32,
    /// Both runs.
    pub runs: Pair<SoakRun>,
    /// This repeat's verdict.
    pub verdict: FlipVerdict,
    /// Why.
    pub reason: String,
}

/// An observed rate: `rows` of `of` compared rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Rate {
    /// Rows that showed it.
    pub rows: u64,
    /// Rows compared.
    pub of: u64,
    /// rows / of.
    pub p: f64,
}

/// One side's timing over the runs that may be compared.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SideTiming {
    /// Rows timed (completed rows of runs that ran).
    pub rows: u64,
    /// Rows left out: crash and harness-error rows.
    pub excluded_rows: u64,
    /// Runs left out because they failed.
    pub excluded_runs: u32,
    /// Mean wall ms per timed row (None: nothing timed).
    pub mean_wall_ms: Option<f64>,
    /// Mean bare decode ms per timed row.
    pub mean_decode_ms: Option<f64>,
}

/// The soak trial in a flip record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SoakTrial {
    /// The settings, as registered.
    pub settings: SoakSettings,
    /// The order the runs ran in (`from#1`, `to#1`, `from#2`, …).
    pub order: Vec<String>,
    /// Every repeat, in order.
    pub repeats: Vec<SoakRepeat>,
    /// The from side's rate of its onset signature over every from run, when it showed one.
    pub from_rate: Option<Rate>,
    /// Timing per side, from completed rows of runs that ran.
    pub timing: Option<Pair<SideTiming>>,
}

/// The soak trial's settings and run order in an ablation record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct AblationSoak {
    /// The settings, as registered before anything was built.
    pub settings: SoakSettings,
    /// The order the runs ran in (`none#1`, `0001#1`, …, `none#2`, …).
    pub order: Vec<String>,
    /// The target signature's rate over the unpatched subset's runs, when it showed one.
    pub target_rate: Option<Rate>,
}

/// One subset's soak runs.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SubsetSoak {
    /// One run per repeat, in order; each links its evidence, which `verify` re-checks.
    pub runs: Vec<SoakRun>,
    /// Timing over the completed rows of the runs that ran (crash, error rows and failed runs
    /// left out).
    pub timing: Option<SideTiming>,
}

// The two validate documents a soak trial embeds; validate re-exports them, so the trial
// records depend on no logic of the soak.

/// Timing per arm, from the rows (wall as the harness saw it, the engine's own time, and the
/// bare decode loop inside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Timing {
    /// Mean wall ms per row.
    pub mean_wall_ms: f64,
    /// Mean engine ms per row (restore, restored decode, reference decode, save).
    pub mean_engine_ms: f64,
    /// Mean bare decode loop ms per row (prompt decode + generation, restored path).
    pub mean_decode_ms: f64,
    /// Share of wall time outside the engine (pipe, JSON, row file write + fsync, restarts
    /// excluded: crash rows are left out).
    pub harness_overhead: f64,
}

/// Where the evidence manifest is.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvidenceRef {
    /// Path of evidence.json.
    pub manifest: PathBuf,
    /// Its sha256.
    pub sha256: Sha256,
}
