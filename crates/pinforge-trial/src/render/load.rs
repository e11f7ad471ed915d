//! Reading the inputs of `pinforge report`: what each path is, told from its content (a
//! record's `schema`, a manifest's `_type`), never from its name, and the views of the records
//! the report needs. The views are `Deserialize` structs of their own, lenient on fields they do
//! not name, so that the record types (owned by flip, ablate and validate) stay write-only; a
//! file that is not one of the known kinds, or that does not parse as its kind, is an input
//! error naming the file and what was expected.

use crate::validate::evidence::{EvidenceManifest, EVIDENCE_SCHEMA};
use crate::validate::rows::{self, Row};
use crate::validate::run_dir::Settings;
use crate::validate::summary::Derived;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_record::manifest::inputs::{Place, Scope};
use pinforge_record::manifest::{self, Statement};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest record or manifest read (a flip record with its soak is a few hundred KiB).
const MAX_JSON_BYTES: usize = 64 << 20;

/// What a report input was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A validate run folder (`evidence.json` with schema `pinforge.validate-evidence/v1`).
    ValidationRun,
    /// A flip record decided by one smoke per side.
    FlipRecord,
    /// A flip record whose trial is a soak (`soak` present).
    SoakFlipRecord,
    /// An ablation record.
    AblationRecord,
    /// A build manifest (in-toto Statement v1).
    Manifest,
    /// A served run folder (`serve-evidence.json`, from `validate --serve` or `--endpoint`).
    ServedRun,
}

impl Kind {
    /// The word shown in the report.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::ValidationRun => "validation run",
            Kind::FlipRecord => "flip record",
            Kind::SoakFlipRecord => "flip record (soak trial)",
            Kind::AblationRecord => "ablation record",
            Kind::Manifest => "build manifest",
            Kind::ServedRun => "served run",
        }
    }
}

/// What every report input is refused with: the kinds that are known.
const EXPECTED: &str = "expected a validation run folder (evidence.json, schema pinforge.validate-evidence/v1), a flip or ablation record (record.json, schema pinforge.flip/v1 or pinforge.ablate/v1) a build manifest (_type https://in-toto.io/Statement/v1) or a served run folder (serve-evidence.json)";

/// One input, read.
pub(crate) enum Input {
    /// A validate run.
    Run(Box<RunView>),
    /// A flip record (either trial).
    Flip(Box<FlipView>, PathBuf),
    /// An ablation record.
    Ablation(Box<AblationView>, PathBuf),
    /// A manifest, with its path.
    Manifest(Box<Statement>, PathBuf),
    /// A served run folder.
    Served(Box<super::served::ServedView>),
}

/// A validate run folder read whole.
pub(crate) struct RunView {
    /// The run folder.
    pub dir: PathBuf,
    /// Its evidence manifest.
    pub evidence: EvidenceManifest,
    /// sha256 of evidence.json as read.
    pub evidence_sha256: Sha256,
    /// The settings file.
    pub settings: Settings,
    /// Every row.
    pub rows: Vec<Row>,
    /// The stored summary.
    pub summary: Derived,
}

/// A value per side (the record's `Pair`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PairView<T> {
    /// The from side.
    pub from: T,
    /// The to side.
    pub to: T,
}

/// One side's build in a flip record.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BuildView {
    /// Variant.
    pub variant: String,
    /// Manifest path.
    pub manifest: Option<PathBuf>,
    /// Manifest digest as recorded.
    pub manifest_sha256: Option<Sha256>,
    /// Why the build failed.
    pub error: Option<String>,
}

/// One side's smoke in a flip record.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SmokeView {
    /// ok | mismatch | crash | error.
    pub verdict: String,
    /// Compared signature.
    pub normalized_signature: Option<String>,
    /// Where it ran.
    #[serde(default)]
    pub device: Option<String>,
    /// Why a CUDA build ran on the CPU.
    #[serde(default)]
    pub device_reason: Option<String>,
}

/// An artifact row of a flip record.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ArtifactView {
    /// Path.
    pub path: String,
    /// From digest.
    pub from_sha256: Option<String>,
    /// To digest.
    pub to_sha256: Option<String>,
    /// Same on both.
    pub same: bool,
}

/// The evidence link of a soak run.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EvidenceRefView {
    /// evidence.json path.
    pub manifest: PathBuf,
    /// Its recorded sha256.
    pub sha256: Sha256,
}

/// One soak run.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SoakRunView {
    /// Variant.
    pub variant: String,
    /// Run id.
    pub run: Option<String>,
    /// Its evidence.
    pub evidence: Option<EvidenceRefView>,
    /// Rows recorded.
    pub rows: u64,
    /// Why the run failed.
    pub error: Option<String>,
}

/// One soak repeat.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SoakRepeatView {
    /// 1-based.
    pub repeat: u32,
    /// Both runs.
    pub runs: PairView<SoakRunView>,
    /// The repeat's verdict.
    pub verdict: String,
    /// Why.
    pub reason: String,
}

/// The soak trial of a flip record.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SoakView {
    /// Every repeat.
    pub repeats: Vec<SoakRepeatView>,
}

/// A flip record.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct FlipView {
    /// Record id.
    pub id: String,
    /// registered | complete.
    pub state: String,
    /// Recipe.
    pub recipe: String,
    /// From variant.
    pub from: String,
    /// To variant.
    pub to: String,
    /// The hypothesis.
    pub hypothesis: String,
    /// The prediction.
    pub prediction: Option<String>,
    /// The axis.
    pub axis: String,
    /// Both builds.
    pub builds: PairView<Option<BuildView>>,
    /// Both smokes.
    pub smokes: PairView<Option<SmokeView>>,
    /// Artifacts.
    #[serde(default)]
    pub artifacts: Vec<ArtifactView>,
    /// The soak trial.
    #[serde(default)]
    pub soak: Option<SoakView>,
    /// The verdict.
    pub verdict: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// A patch as an ablation record lists it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PatchRefView {
    /// File name.
    pub file: String,
}

/// One ablation subset.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SubsetView {
    /// Label.
    pub label: String,
    /// Patches applied.
    pub applied: Vec<String>,
    /// Manifest.
    pub manifest: Option<PathBuf>,
    /// Its recorded digest.
    pub manifest_sha256: Option<Sha256>,
    /// The smoke.
    pub smoke: Option<SmokeView>,
    /// clean | signature | other-crash | undetermined.
    pub class: String,
    /// Why undetermined.
    pub reason: Option<String>,
    /// The soak trial's runs (`ablate --trial soak`).
    #[serde(default)]
    pub soak: Option<SubsetSoakView>,
}

/// A subset's soak runs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SubsetSoakView {
    /// One per repeat.
    pub runs: Vec<SoakRunView>,
}

/// An ablation record.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct AblationView {
    /// Record id.
    pub id: String,
    /// Recipe.
    pub recipe: String,
    /// Variant ablated.
    pub variant: String,
    /// Its patches.
    pub patches: Vec<PatchRefView>,
    /// Subsets tried.
    pub subsets: Vec<SubsetView>,
    /// The signature under test.
    pub target_signature: Option<String>,
    /// Necessary patches.
    pub necessary: Vec<String>,
    /// Minimal sufficient sets.
    pub sufficient: Vec<Vec<String>>,
    /// Patches without effect.
    pub no_effect: Vec<String>,
}

/// Read one input path: a folder holding `evidence.json` or `record.json`, or a file whose
/// content says what it is.
pub(crate) fn load(path: &Path) -> Result<(Kind, Input)> {
    if let Some(dir) = crate::validate::served::evidence::served_run_dir(path) {
        let v = super::served::load(&fsx::absolute(&dir)?)?;
        return Ok((Kind::ServedRun, Input::Served(Box::new(v))));
    }
    let file = if path.is_dir() {
        ["evidence.json", "record.json", "manifest.json"]
            .iter()
            .map(|n| path.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::input(path.display(), format!("is a folder without evidence.json, record.json or manifest.json: {EXPECTED}"))
            })?
    } else {
        path.to_path_buf()
    };
    let bytes = read_bounded(&file)?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::input(file.display(), format!("is not JSON ({e}): {EXPECTED}")))?;
    let schema = v.get("schema").and_then(|s| s.as_str());
    let type_ = v.get("_type").and_then(|s| s.as_str());
    match (schema, type_) {
        (Some(EVIDENCE_SCHEMA), _) => Ok((
            Kind::ValidationRun,
            Input::Run(Box::new(load_run(&file, &bytes)?)),
        )),
        (Some(crate::record::SCHEMA), _) => {
            let r: FlipView = parse_as(&file, v, "a flip record")?;
            let kind = if r.soak.is_some() {
                Kind::SoakFlipRecord
            } else {
                Kind::FlipRecord
            };
            Ok((kind, Input::Flip(Box::new(r), fsx::absolute(&file)?)))
        }
        (Some(crate::ablate::SCHEMA), _) => {
            let r: AblationView = parse_as(&file, v, "an ablation record")?;
            Ok((
                Kind::AblationRecord,
                Input::Ablation(Box::new(r), fsx::absolute(&file)?),
            ))
        }
        (_, Some(manifest::STATEMENT_TYPE)) => {
            let st = Statement::parse(&bytes, &file)?;
            Ok((Kind::Manifest, Input::Manifest(Box::new(st), file)))
        }
        (s, t) => Err(Error::input(
            file.display(),
            format!(
                "is JSON of an unknown kind (schema {}, _type {}): {EXPECTED}",
                pinforge_base::text::shown(s.unwrap_or("absent")),
                pinforge_base::text::shown(t.unwrap_or("absent"))
            ),
        )
        .with_hint("give a run folder rather than one of its files (settings.json, summary.json)")),
    }
}

/// A record's view from its JSON, or an input error naming the file and the field.
fn parse_as<T: for<'de> Deserialize<'de>>(
    file: &Path,
    v: serde_json::Value,
    what: &str,
) -> Result<T> {
    serde_json::from_value(v).map_err(|e| {
        Error::input(
            file.display(),
            format!("is not {what} this pinforge can read: {e}"),
        )
    })
}

/// A regular file read whole, refused beyond [`MAX_JSON_BYTES`] (a record is small; a huge
/// file given by mistake must not be read into memory).
pub(crate) fn read_bounded(file: &Path) -> Result<Vec<u8>> {
    let bytes = fsx::read(file)?;
    if bytes.len() > MAX_JSON_BYTES {
        return Err(Error::input(
            file.display(),
            format!("is larger than {MAX_JSON_BYTES} bytes: not a pinforge record"),
        ));
    }
    Ok(bytes)
}

/// A validate run folder from its evidence manifest: the settings, rows and summary beside it.
pub(crate) fn load_run(evidence_path: &Path, evidence_bytes: &[u8]) -> Result<RunView> {
    let evidence: EvidenceManifest = serde_json::from_slice(evidence_bytes).map_err(|e| {
        Error::input(
            evidence_path.display(),
            format!("is not a validate evidence manifest this pinforge can read: {e}"),
        )
    })?;
    let dir = fsx::parent_of(&fsx::absolute(evidence_path)?);
    let settings_path = dir.join("settings.json");
    let settings: Settings =
        serde_json::from_slice(&read_bounded(&settings_path)?).map_err(|e| {
            Error::input(
                settings_path.display(),
                format!("is not a run's settings: {e}"),
            )
        })?;
    let rows_path = dir.join("rows.jsonl");
    let rows = rows::parse_rows(&fsx::read(&rows_path)?, &rows_path)?.rows;
    let summary_path = dir.join("summary.json");
    let summary: Derived = serde_json::from_slice(&read_bounded(&summary_path)?).map_err(|e| {
        Error::input(
            summary_path.display(),
            format!("is not a run's summary: {e}"),
        )
    })?;
    Ok(RunView {
        dir,
        evidence,
        evidence_sha256: Sha256::of_bytes(evidence_bytes),
        settings,
        rows,
        summary,
    })
}

/// A linked run of a soak record, read when its evidence is still there and is the one the
/// record names (None with the reason otherwise: the report shows what it could not check).
pub(crate) fn linked_run(ev: &EvidenceRefView) -> std::result::Result<RunView, String> {
    let bytes = match fsx::read_if_present(&ev.manifest) {
        Ok(Some(b)) => b,
        Ok(None) => return Err("evidence no longer on disk".into()),
        Err(e) => return Err(crate::record::error_text(&e)),
    };
    let got = Sha256::of_bytes(&bytes);
    if got != ev.sha256 {
        return Err(format!("evidence changed since the record (sha256 {got})"));
    }
    load_run(&ev.manifest, &bytes).map_err(|e| crate::record::error_text(&e))
}

/// A manifest a record names, read when it is still the one recorded.
pub(crate) fn recorded_manifest(
    path: &Path,
    want: Option<Sha256>,
) -> std::result::Result<Statement, String> {
    let bytes = match fsx::read_if_present(path) {
        Ok(Some(b)) => b,
        Ok(None) => return Err("manifest no longer on disk".into()),
        Err(e) => return Err(crate::record::error_text(&e)),
    };
    let got = Sha256::of_bytes(&bytes);
    if want.is_some_and(|w| w != got) {
        return Err(format!("manifest changed since the record (sha256 {got})"));
    }
    Statement::parse(&bytes, path).map_err(|e| crate::record::error_text(&e))
}

/// The patch files of a manifest, in order: id, sha256, upstream status, and the header fields
/// of the patch file when it is still on disk with the recorded digest.
pub(crate) fn manifest_patches(st: &Statement, manifest_path: &Path) -> Vec<PatchSeen> {
    let def = &st.predicate.build_definition;
    let scope = Scope::of(manifest_path);
    let mut out = Vec::new();
    for dep in &def.resolved_dependencies {
        let Some(id) = dep.name.strip_prefix("patch:") else {
            continue;
        };
        let sha = dep.sha256();
        let status = dep
            .annotations
            .get("upstream_status")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        let order = dep
            .annotations
            .get("order")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        let fields = match def.internal_parameters.inputs.get(&dep.name) {
            // The embedded default recipe's patches live in the binary: read there, if the
            // same bytes (a patch of that name from another pinforge version is not it).
            None => match pinforge_source::patch::embedded_patch(id) {
                Some(t) if sha == Some(Sha256::of_bytes(t.as_bytes())) => {
                    Ok(header_fields(t.as_bytes()))
                }
                _ => Err("the manifest records no local path for it".to_string()),
            },
            // The path is the manifest's data: placed as `verify` places it (a pulled
            // manifest's, an escaping one or a FIFO are not read).
            Some(local) => match scope.place(&dep.name, local, false) {
                Place::Read(p) => patch_fields(&p, sha),
                Place::Absent("pulled") => Err("pulled: the patch file is not on disk".into()),
                Place::Absent(_) => Err("patch file no longer on disk".into()),
                Place::Refused(why) => Err(format!("refused: {why}")),
            },
        };
        out.push(PatchSeen {
            id: id.to_string(),
            order,
            sha256: sha,
            status,
            fields,
        });
    }
    out.sort_by_key(|p| p.order);
    out
}

/// A patch as a manifest records it.
pub(crate) struct PatchSeen {
    /// Patch id (file name).
    pub id: String,
    /// Order in the series.
    pub order: u64,
    /// Recorded digest.
    pub sha256: Option<Sha256>,
    /// Upstream-Status word.
    pub status: String,
    /// Header fields by name, or why they could not be read.
    pub fields: std::result::Result<BTreeMap<String, Vec<String>>, String>,
}

fn patch_fields(
    p: &Path,
    want: Option<Sha256>,
) -> std::result::Result<BTreeMap<String, Vec<String>>, String> {
    let bytes = match fsx::read_if_present(p) {
        Ok(Some(b)) => b,
        Ok(None) => return Err("patch file no longer on disk".into()),
        Err(e) => return Err(crate::record::error_text(&e)),
    };
    if want.is_some_and(|w| w != Sha256::of_bytes(&bytes)) {
        return Err("patch file changed since the build".into());
    }
    Ok(header_fields(&bytes))
}

/// A patch header's fields by name, every value of each.
fn header_fields(bytes: &[u8]) -> BTreeMap<String, Vec<String>> {
    let h = pinforge_source::patch::header::Header::parse(bytes);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &h.fields {
        out.entry(f.name.clone()).or_default().push(f.value.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_or_malformed_input_is_refused_naming_the_file_and_what_was_expected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases: [(&str, &[u8]); 4] = [
            ("not-json.json", b"\xff\xfe not json"),
            ("other.json", br#"{"schema":"pinforge.diff/v1"}"#),
            ("bad-flip.json", br#"{"schema":"pinforge.flip/v1","id":3}"#),
            ("summary.json", br#"{"arms":[]}"#),
        ];
        for (name, bytes) in cases {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).expect("write");
            let e = load(&p).err().expect("refused");
            assert_eq!(e.exit_code(), 2, "{name}: {e}");
            let text = e.to_string();
            assert!(text.contains(name), "{name}: {text}");
            assert!(
                text.contains("expected") || text.contains("flip record"),
                "{name}: {text}"
            );
        }
        let e = load(dir.path()).err().expect("empty folder");
        assert_eq!(e.exit_code(), 2, "{e}");
    }
}
