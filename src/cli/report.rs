//! `pinforge report`: validate runs, flip and ablation records and build manifests rendered
//! as one self-contained HTML page (or text, or Markdown). Exit 0 when the report is written
//! and no evidence file fails its check now, 1 when it is written and some evidence fails
//! (the page says which), 2 for an input it cannot read (nothing written).

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_trial::render::{self, Format};
use std::path::PathBuf;

/// Arguments of `report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Validate run folders (or their evidence.json), flip or ablation records (record.json or
    /// its folder) and build manifests, in any mix; the kind is read from each file's content
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The file to write (replaced atomically; a symlink there is refused), or `-` for
    /// standard output
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// html (one self-contained page), text (for the terminal) or md (for an issue)
    #[arg(long, default_value = "html", value_parser = ["html", "text", "md"])]
    pub format: String,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `report`.
pub(super) fn run(a: ReportArgs) -> Result<ExitCode> {
    let format = match a.format.as_str() {
        "text" => Format::Text,
        "md" => Format::Md,
        _ => Format::Html,
    };
    if a.output.as_os_str() == "-" {
        return to_stdout(&a, format);
    }
    let w = render::write(&a.paths, &a.output, format)?;
    if a.out.json {
        print_json(pinforge_record::schema_id::REPORT, &w)?;
    } else {
        outln!(
            "wrote {} ({} inputs, {} rows drawn, {} evidence files, {} failing now)",
            pinforge_trial::render::shown_path(&w.output),
            w.inputs.len(),
            w.rows,
            w.evidence_files,
            w.evidence_failing
        );
    }
    Ok(if w.evidence_failing == 0 {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

/// `-o -`: the report itself is standard output, so no summary line follows it; `--json`
/// would put a second document there and is refused.
fn to_stdout(a: &ReportArgs, format: Format) -> Result<ExitCode> {
    if a.out.json {
        return Err(pinforge_base::error::Error::input(
            "-o -",
            "the report is written to standard output, where --json would print a second document",
        )
        .with_hint("write the report to a file (`-o report.html`) to get the --json summary"));
    }
    let (text, w) = render::rendered(&a.paths, &a.output, format)?;
    outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
    Ok(if w.evidence_failing == 0 {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}
