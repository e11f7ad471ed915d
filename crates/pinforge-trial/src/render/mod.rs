//! `pinforge report`: the records a trial leaves (validate runs, flip and ablation records,
//! soak flips and build manifests) turned into one page people can look at, as a
//! self-contained HTML file (inline CSS and SVG, no script, no network), or as text for the
//! terminal and Markdown for an issue. The three renderings show the same [`Report`]: the
//! hypotheses and verdicts, a timeline per arm (one mark per row, the onset marked), the
//! counts per outcome class (crash and token-budget apart), the latency distribution, the
//! artifact diff ([`pinforge_build::diff`]), the patch set with its attribution links, an
//! evidence index re-checked now by the verify libraries, and what the evidence does not cover.
//!
//! Every string taken from a record is data someone else wrote: the renderers escape it for
//! their medium ([`html::esc`], [`text`]), and only `http(s)` URLs become links. The output
//! is written atomically, never through a symlink.
//!
//! Parts: [`load`] (what each input is, and the record views), [`build`] (the report's
//! content from the inputs, with `facts` for what one record gives), [`served`] (a served
//! run folder), [`svg`], [`html`], [`text`].

pub(crate) mod build;
mod facts;
pub(crate) mod html;
pub(crate) mod load;
pub(crate) mod served;
pub(crate) mod svg;
pub(crate) mod text;

use crate::validate::rows::Outcome;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use serde::Serialize;
use std::path::{Path, PathBuf};

pub(crate) use load::Kind;

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One self-contained HTML page.
    Html,
    /// Plain text for the terminal.
    Text,
    /// Markdown for an issue.
    Md,
}

/// One input as the report lists it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct InputEntry {
    /// The path as given (escaped where it is not plain UTF-8 text).
    pub path: String,
    /// What it was found to be.
    pub kind: Kind,
}

/// A claim and its verdict (a flip's hypothesis, an ablation's finding, a run's verdict).
#[derive(Debug, Clone, Default)]
pub(crate) struct Claim {
    /// What the claim is about (`Flip mrope-cpu--unpatched-asan--patched-asan-0001`).
    pub title: String,
    /// The hypothesis, as registered.
    pub hypothesis: Option<String>,
    /// The prediction, as registered.
    pub prediction: Option<String>,
    /// The verdict word.
    pub verdict: String,
    /// Why.
    pub reason: Option<String>,
    /// Further facts, label and value.
    pub facts: Vec<(String, String)>,
}

/// One arm's rows in order.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    /// `run-id · arm` or `from#1 · variant`.
    pub label: String,
    /// Rows per arm of the run (the x axis runs from 0 to this).
    pub span: u64,
    /// Every row: its index and outcome.
    pub marks: Vec<(u64, Outcome)>,
    /// The first crash row.
    pub onset: Option<u64>,
    /// A row's own class name where it is finer than its drawn outcome (a served row's
    /// `follow-on` or `router-stop`, drawn grey as `error`): shown in the mark's title.
    pub names: std::collections::BTreeMap<u64, &'static str>,
}

/// Counts per outcome class of one arm.
#[derive(Debug, Clone)]
pub(crate) struct Counts {
    /// The arm's label.
    pub label: String,
    /// Rows per outcome, in [`Outcome::ALL`] order.
    pub counts: [u64; 5],
}

/// The latency of one arm's compared rows (harness errors left out).
#[derive(Debug, Clone)]
pub struct Latency {
    /// The arm's label.
    pub label: String,
    /// Wall ms per row, sorted.
    pub wall_ms: Vec<f64>,
}

/// One row of an artifact diff.
#[derive(Debug, Clone)]
pub(crate) struct DiffRow {
    /// parameter | dependency | artifact | link.
    pub section: String,
    /// Its name.
    pub name: String,
    /// Side A's value.
    pub a: String,
    /// Side B's value.
    pub b: String,
    /// How they compare.
    pub change: String,
}

/// Two builds compared.
#[derive(Debug, Clone)]
pub(crate) struct Diff {
    /// What A and B are.
    pub title: String,
    /// Where the rows come from (the manifests, or the record when they are gone).
    pub source: String,
    /// Rows that are not the same.
    pub rows: Vec<DiffRow>,
    /// Rows that are the same (counted, not listed).
    pub same: usize,
}

/// A link from a patch's attribution.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// The header field (`Upstream-Issue`).
    pub field: String,
    /// The value; only an `http(s)` URL is made a link.
    pub url: String,
}

/// One patch of a build.
#[derive(Debug, Clone)]
pub(crate) struct Patch {
    /// The build (`recipe/variant`).
    pub build: String,
    /// Order.
    pub order: u64,
    /// Patch id.
    pub id: String,
    /// Upstream-Status.
    pub status: String,
    /// Recorded sha256.
    pub sha256: String,
    /// Who reported or wrote it.
    pub people: Vec<String>,
    /// Attribution links.
    pub links: Vec<Link>,
    /// Why the attribution could not be read, when it could not.
    pub note: Option<String>,
}

/// Whether an evidence file checks now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// It verifies.
    Pass,
    /// It does not.
    Fail,
    /// It is not on disk (or not checkable): not evidence either way.
    Absent,
}

impl Status {
    /// The word shown.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Absent => "absent",
        }
    }
}

/// One evidence file.
#[derive(Debug, Clone)]
pub(crate) struct EvidenceItem {
    /// Its path.
    pub path: String,
    /// What it is.
    pub role: String,
    /// Its recorded sha256.
    pub sha256: String,
    /// Whether it verifies now.
    pub status: Status,
    /// What the check said.
    pub detail: String,
}

/// The whole report.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    /// Every input.
    pub inputs: Vec<InputEntry>,
    /// Claims and verdicts.
    pub claims: Vec<Claim>,
    /// Timelines.
    pub timelines: Vec<Timeline>,
    /// Counts.
    pub counts: Vec<Counts>,
    /// Latency.
    pub latency: Vec<Latency>,
    /// Artifact diffs.
    pub diffs: Vec<Diff>,
    /// Patches.
    pub patches: Vec<Patch>,
    /// The evidence index.
    pub evidence: Vec<EvidenceItem>,
    /// What was not tested.
    pub coverage: Vec<String>,
    /// Served runs' arms: every served class apart, identities, crash and stop lines.
    pub served: Vec<served::ServedArm>,
}

impl Report {
    /// Evidence files that fail their check now.
    pub(crate) fn failing(&self) -> usize {
        self.evidence
            .iter()
            .filter(|e| e.status == Status::Fail)
            .count()
    }
}

/// What `report --json` prints: the inputs and their kinds, where the page went, and how much
/// of the evidence failed to verify.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Written {
    /// The file written.
    pub output: PathBuf,
    /// Its format.
    pub format: Format,
    /// Every input and its kind.
    pub inputs: Vec<InputEntry>,
    /// Rows drawn on the timelines.
    pub rows: u64,
    /// Evidence files listed.
    pub evidence_files: usize,
    /// Evidence files that fail their check now.
    pub evidence_failing: usize,
}

/// Read every input, build the report, render it in `format` and write it to `out`
/// atomically; a symlink at `out` is refused (the page would land wherever it points).
pub fn write(paths: &[PathBuf], out: &Path, format: Format) -> Result<Written> {
    if paths.is_empty() {
        return Err(Error::input("report", "give at least one input path"));
    }
    check_output(out)?;
    let (bytes, written) = rendered(paths, out, format)?;
    fsx::write_atomic(out, bytes.as_bytes())?;
    Ok(written)
}

/// The report rendered, not written: for `-o -` (standard output). `out` is what
/// [`Written::output`] names.
pub fn rendered(paths: &[PathBuf], out: &Path, format: Format) -> Result<(String, Written)> {
    if paths.is_empty() {
        return Err(Error::input("report", "give at least one input path"));
    }
    let report = build::build(paths)?;
    let bytes = render(&report, format);
    Ok((bytes, summary_of(&report, out, format)))
}

fn summary_of(report: &Report, out: &Path, format: Format) -> Written {
    Written {
        output: out.to_path_buf(),
        format,
        inputs: report.inputs.clone(),
        rows: report.timelines.iter().map(|t| t.marks.len() as u64).sum(),
        evidence_files: report.evidence.len(),
        evidence_failing: report.failing(),
    }
}

/// The report rendered in `format`.
pub(crate) fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Html => html::page(report),
        Format::Text => text::render(report, text::Flavor::Text),
        Format::Md => text::render(report, text::Flavor::Markdown),
    }
}

/// The output path must be a regular file or nothing, in an existing folder.
fn check_output(out: &Path) -> Result<()> {
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.file_type().is_symlink() => Err(Error::input(
            out.display(),
            "is a symlink: the report is never written through a link",
        )
        .with_hint("remove the link or choose another -o path")),
        Ok(m) if !m.is_file() => Err(Error::input(
            out.display(),
            "is not a regular file: the report replaces only a file",
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = fsx::parent_of(out);
            if parent.is_dir() {
                Ok(())
            } else {
                Err(Error::input(out.display(), "its folder does not exist"))
            }
        }
        Err(e) => Err(Error::io("inspect", out, e)),
    }
}

/// A path for display: lossy where it is not UTF-8, control characters escaped.
pub fn shown_path(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    pinforge_base::text::shown_bytes(p.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_never_written_through_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere.html");
        std::fs::write(&target, b"keep").expect("write");
        let link = dir.path().join("report.html");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        let e = check_output(&link).expect_err("link refused");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert_eq!(std::fs::read(&target).expect("read"), b"keep");
        assert!(check_output(&dir.path().join("new.html")).is_ok());
        assert!(check_output(&dir.path().join("no/such/dir.html")).is_err());
    }
}
