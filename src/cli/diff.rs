//! `pinforge diff`: two builds' manifests compared, parameter by parameter and artifact by
//! artifact.

use super::{print_json, JsonArg};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::text::shown;
use pinforge_record::manifest;
use std::path::PathBuf;

/// Arguments of `diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Manifest of side A
    pub a: PathBuf,
    /// Manifest of side B
    pub b: PathBuf,
    /// Show the rows that are the same too
    #[arg(long)]
    pub all: bool,
    /// Byte for byte: an artifact equal only under a stated normalization rule (nvcc's
    /// pid-named temporary files, see the manifest's `normalization:` byproduct) counts as
    /// different
    #[arg(long)]
    pub exact: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `diff`.
pub(super) fn run(a: DiffArgs) -> Result<ExitCode> {
    cmd_diff(&a.a, &a.b, a.all, a.exact, a.out.json)
}

fn cmd_diff(
    a: &std::path::Path,
    b: &std::path::Path,
    all: bool,
    exact: bool,
    json: bool,
) -> Result<ExitCode> {
    let d = pinforge_build::diff::diff(
        &manifest::Statement::read(a)?,
        &manifest::Statement::read(b)?,
    );
    if json {
        print_json(pinforge_record::schema_id::DIFF, &d)?;
    } else {
        render_diff(&d, a, b, all);
    }
    Ok(if d.identical() || (!exact && d.equivalent()) {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

fn render_diff(
    d: &pinforge_build::diff::ManifestDiff,
    a: &std::path::Path,
    b: &std::path::Path,
    all: bool,
) {
    use pinforge_build::diff::Change;
    let path = |p: &std::path::Path| shown(&p.display().to_string()).into_owned();
    outln!("A {}  (input {})", path(a), short(&d.input_digest.0));
    outln!("B {}  (input {})", path(b), short(&d.input_digest.1));
    let sections = [
        ("parameter", &d.parameters),
        ("dependency", &d.dependencies),
        ("artifact", &d.artifacts),
        ("link", &d.links),
    ];
    for (section, rows) in sections {
        for r in rows.iter().filter(|r| all || r.change != Change::Same) {
            // An empty value (no patches) reads as `(none)`, a missing one as `-`. Names and
            // values are manifest data (a link target, a dependency name): shown escaped, so
            // that a newline or an ESC sequence in one can neither forge a row nor reach the
            // terminal.
            let value = |v: &Option<String>| match v.as_deref() {
                None => "-".to_string(),
                Some("") => "(none)".to_string(),
                Some(x) => shown(&short(x)).into_owned(),
            };
            let (va, vb) = (value(&r.a), value(&r.b));
            let what = match r.change {
                Change::Same => format!("same  {va}"),
                Change::Different => format!("A {va}  B {vb}"),
                Change::OnlyA => format!("only in A  {va}"),
                Change::OnlyB => format!("only in B  {vb}"),
                Change::Equivalent => format!(
                    "A {va}  B {vb}  equal under {}",
                    r.rule.as_deref().unwrap_or("?")
                ),
            };
            outln!("  {section:<10} {:<40} {what}", shown(&r.name));
        }
    }
    let count = |rows: &[pinforge_build::diff::Row], c: Change| {
        rows.iter().filter(|r| r.change == c).count()
    };
    let equivalent = count(&d.artifacts, Change::Equivalent);
    let rules: std::collections::BTreeSet<&str> = d
        .artifacts
        .iter()
        .filter_map(|r| r.rule.as_deref())
        .collect();
    let rules = rules.into_iter().collect::<Vec<_>>().join(", ");
    outln!(
        "{} artifact(s) same, {} different, {} only in A, {} only in B{}; {}",
        count(&d.artifacts, Change::Same),
        count(&d.artifacts, Change::Different),
        count(&d.artifacts, Change::OnlyA),
        count(&d.artifacts, Change::OnlyB),
        if equivalent > 0 {
            format!(", {equivalent} equal under {rules}")
        } else {
            String::new()
        },
        if d.identical() {
            "identical".to_string()
        } else if d.equivalent() {
            format!("equivalent: identical but for {rules}")
        } else {
            "the builds differ".to_string()
        }
    );
}

/// Long values (digests, digest lists) shortened for a terminal: the first 12 characters of
/// every 64-hex-digit word.
fn short(v: &str) -> String {
    v.split(' ')
        .map(|w| {
            let hex = w.rsplit(':').next().unwrap_or(w);
            if hex.len() == 64 && hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                w[..w.len() - 52].to_string()
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
