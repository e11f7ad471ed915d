//! The record schemas of a flip (`Pair`, `BuildSide`, `SmokeSide`, `ArtifactRow`, `FlipRecord`)
//! and of an ablation (`SubsetRecord`, `AblationRecord`), and the record-folder helpers flip and ablate share: claim a fresh numbered folder with one
//! `mkdir`, write canonical JSON atomically, commit a folder's final files at once
//! ([`commit_final`]), and put an error on one line.

use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::trial::axis::{Axis, AxisRow};
use crate::trial::config::{Config, PatchRef};
use crate::trial::verdict::FlipVerdict;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The schema id of a flip record and of `flip --json`.
pub(crate) const SCHEMA: &str = "pinforge.flip/v1";

/// A value for each side.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct Pair<T> {
    /// The `from` side.
    pub from: T,
    /// The `to` side.
    pub to: T,
}

/// One side's build, as recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct BuildSide {
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
pub(crate) struct SmokeSide {
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
pub(crate) struct ArtifactRow {
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
    /// see [`crate::artifact::normalize`]) masks them: nvcc's pid noise, not a difference in the code.
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
    pub(crate) fn differs(&self) -> bool {
        !self.same && self.equal_under.is_none()
    }
}

/// The smoke settings both sides ran with.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct SmokeSettings {
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
pub(crate) struct FlipRecord {
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
    pub soak: Option<crate::trial::soak::SoakTrial>,
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
pub(crate) struct SubsetRecord {
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
    pub soak: Option<crate::trial::ablate::soak::SubsetSoak>,
}

/// An ablation record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct AblationRecord {
    /// [`crate::trial::ablate::SCHEMA`].
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
    pub soak: Option<crate::trial::ablate::soak::AblationSoak>,
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

/// Claim a fresh record folder `ROOT/KIND/STEM-NNNN` with one `mkdir` (the first free
/// counter). `KIND` must be a real folder, never a link: a record written through a link
/// would land wherever it points.
pub(crate) fn claim_record_dir(root: &Path, kind: &str, stem: &str) -> Result<(String, PathBuf)> {
    let base = root.join(kind);
    if !real_folder(&base)? {
        // Two records claimed at once (two `ablate` runs in one workspace) both see no
        // folder; the loser's `mkdir` meets the winner's, which is fine as long as what is
        // there now is a real folder and not a link planted in between.
        match std::fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !real_folder(&base)? {
                    return Err(Error::io("create directory", &base, e));
                }
            }
            Err(e) => return Err(Error::io("create directory", &base, e)),
        }
    }
    remove_stale_finals(&base)?;
    for n in 1..=9999u32 {
        let id = format!("{stem}-{n:04}");
        let dir = base.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("create directory", &dir, e)),
        }
    }
    Err(Error::input(
        base.display(),
        format!("9999 records named {stem}-NNNN already exist"),
    )
    .with_hint("archive old records"))
}

/// The prefix of a record folder's staged final contents: `.pinforge-final-PID-ID` beside the
/// folder (a name no claimed id can have).
const FINAL_PREFIX: &str = ".pinforge-final-";

/// Make a record folder's final files visible at once: `record.json` (with its `.dsse.json`
/// and `.sig` under `--sign`, made by [`write_json`]) and `summary.md` are written into a
/// fresh stage folder beside `dir`, synced, and the stage is exchanged with `dir` by one
/// atomic exchange ([`fsx::exchange`]): the commit point. Before it, `dir` is what it was (the
/// record as last written, unfinished, without a summary); after it, every final file is
/// there, signed or not as the command was asked. The old contents, now in the stage's name,
/// are removed last. Crash points `OP:1` (stage written and synced) and `OP:2` (exchanged,
/// the old contents not yet removed); what a killed run leaves beside `dir` is removed by
/// the next claim or commit in that folder ([`remove_stale_finals`]).
pub(crate) fn commit_final<T: Serialize>(
    dir: &Path,
    op: &str,
    record: &T,
    summary: &str,
) -> Result<()> {
    let parent = fsx::parent_of(dir);
    let name = dir
        .file_name()
        .ok_or_else(|| Error::Internal(format!("record folder {} has no name", dir.display())))?;
    remove_stale_finals(&parent)?;
    let stage = parent.join(format!(
        "{FINAL_PREFIX}{}-{}",
        std::process::id(),
        name.to_string_lossy()
    ));
    if std::fs::symlink_metadata(&stage).is_ok() {
        // Ours by name (this PID): a failed earlier commit of this process.
        std::fs::remove_dir_all(&stage).at("remove", &stage)?;
    }
    std::fs::create_dir(&stage).at("create directory", &stage)?;
    let filled = (|| {
        fsx::write_atomic(&stage.join("summary.md"), summary.as_bytes())?;
        write_json(&stage.join("record.json"), record)?;
        fsx::sync_dir(&stage)
    })();
    if let Err(e) = filled {
        let _ = std::fs::remove_dir_all(&stage);
        return Err(e);
    }
    crate::base::hooks::crash_point(op, 1);
    if let Err(e) = fsx::exchange(&stage, dir, "exchange with") {
        let _ = std::fs::remove_dir_all(&stage);
        return Err(e);
    }
    fsx::sync_dir(&parent)?;
    crate::base::hooks::crash_point(op, 2);
    std::fs::remove_dir_all(&stage).at("remove", &stage)
}

/// Remove the staged final folders in `parent` whose writer is gone (a run killed before or
/// right after its commit: either way the record folder itself is whole). A live writer's
/// stage is never touched.
pub(crate) fn remove_stale_finals(parent: &Path) -> Result<usize> {
    let mut removed = 0;
    for p in fsx::dead_writer_entries(parent, FINAL_PREFIX)? {
        // remove_dir_all removes a link itself, never what it points to.
        match std::fs::remove_dir_all(&p) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove stale staged record folder", &p, e)),
        }
    }
    Ok(removed)
}

/// Whether `path`, a folder pinforge keeps records in (`flips/`, `ablations/`, `validate/`
/// and each validate run folder), is there: true for a real folder, false when nothing is
/// there; a link (to anywhere), a file or anything else in its place is an input error
/// naming it, since records written through a link would land wherever it points. The one
/// check of record folders, for flip, ablate and validate alike.
pub(crate) fn real_folder(path: &Path) -> Result<bool> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("inspect", path, e)),
    };
    if m.is_dir() {
        return Ok(true);
    }
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        "a symlink"
    } else {
        fsx::special_kind(&ft).unwrap_or("a file")
    };
    Err(Error::input(
        path.display(),
        format!("is {kind}, not a folder: pinforge keeps its records only in real folders, never through a link"),
    )
    .with_hint(format!("move {} away", path.display())))
}

/// Write a record as canonical JSON (sorted keys), atomically.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let v = serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))?;
    let mut s = serde_json::to_string_pretty(&v).map_err(|e| Error::Internal(e.to_string()))?;
    s.push('\n');
    // Signed with `--sign` (flip and ablation records): sidecars first, the record last.
    crate::artifact::sign::record::write_record(path, s.as_bytes())
}

/// An error as one line for a record: message, then the hint.
pub(crate) fn error_text(e: &Error) -> String {
    match e.hint() {
        Some(h) => format!("{e} (hint: {h})"),
        None => e.to_string(),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_folders_are_claimed_once_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, pa) = claim_record_dir(dir.path(), "flips", "r--x--y").expect("first");
        let (b, _) = claim_record_dir(dir.path(), "flips", "r--x--y").expect("second");
        assert_eq!(a, "r--x--y-0001");
        assert_eq!(b, "r--x--y-0002");
        assert!(pa.is_dir());
        let other = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(other.path(), dir.path().join("ablations")).expect("link");
        let e = claim_record_dir(dir.path(), "ablations", "s").expect_err("link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert_eq!(std::fs::read_dir(other.path()).expect("ls").count(), 0);
    }

    /// CI once saw `ablations: cannot create directory: File exists` when two ablate
    /// runs claimed their first record at once: both saw no folder and both ran `mkdir`.
    #[test]
    fn records_claimed_at_once_in_a_fresh_workspace_all_succeed_with_distinct_ids() {
        for _round in 0..20 {
            let dir = tempfile::tempdir().expect("tempdir");
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let root = dir.path().to_path_buf();
                    let start = start.clone();
                    std::thread::spawn(move || {
                        start.wait();
                        claim_record_dir(&root, "ablations", "s").map(|(id, _)| id)
                    })
                })
                .collect();
            let mut ids: Vec<String> = handles
                .into_iter()
                .map(|h| h.join().expect("thread").expect("claim"))
                .collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 8, "{ids:?}");
        }
    }
}
