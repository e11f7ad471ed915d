//! `pinforge verify`: re-hash a build's outputs and inputs, or an installed layer.

use super::{installed_layer, print_json, JsonArg, RootArg};
use crate::artifact::manifest;
use crate::base::error::{exit, Error, Result};
use crate::cli::output::{paint, Tone};
use crate::deploy::install::{Root, Verification};
use crate::outln;
use std::path::PathBuf;

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// A manifest written by `pinforge build`, or a validate run's evidence.json (or its run
    /// folder)
    #[arg(required_unless_present = "installed")]
    pub manifest: Option<PathBuf>,
    /// Verify the install root instead: `current`, or the named layer
    #[arg(long, num_args = 0..=1, default_missing_value = "current", value_name = "LAYER",
          value_parser = ["current", "live", "control", "original"])]
    pub installed: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `verify`.
pub(super) fn run(ctx: &super::Ctx, a: VerifyArgs) -> Result<i32> {
    let ws_root = ctx.ws_root.as_path();
    match (a.installed, a.manifest) {
        (Some(layer), _) => cmd_verify_installed(&a.root.resolve(ws_root), &layer, a.out.json),
        (None, Some(m)) => cmd_verify(&m, a.out.json),
        (None, None) => Err(Error::input("verify", "give a MANIFEST or --installed")),
    }
}

fn cmd_verify(path: &std::path::Path, json: bool) -> Result<i32> {
    if crate::trial::validate::is_evidence(path) {
        return cmd_verify_evidence(path, json);
    }
    let report = manifest::verify(path)?;
    if json {
        print_json(super::schema::id::VERIFY, &report)?;
    } else if report.ok {
        outln!(
            "{}: {} outputs and {} inputs match {} (input {})",
            paint(Tone::Good, "ok"),
            report.outputs_checked,
            report.inputs_checked,
            path.display(),
            report.input_digest.short(16)
        );
        if !report.inputs_absent.is_empty() {
            outln!(
                "  not on disk (skipped): {}",
                report.inputs_absent.join(", ")
            );
        }
    } else {
        for m in &report.mismatches {
            outln!("{} {} {}", paint(Tone::Bad, "MISMATCH"), m.role, m.path);
            outln!("  expected {}", m.expected);
            outln!("  found    {}", m.actual);
        }
        outln!(
            "{} mismatch(es) against {}",
            report.mismatches.len(),
            path.display()
        );
    }
    Ok(if report.ok {
        exit::OK
    } else {
        exit::CHECK_FAILED
    })
}

/// A validate run's evidence manifest (or its run folder): files re-hashed, the summary
/// recomputed from the rows.
fn cmd_verify_evidence(path: &std::path::Path, json: bool) -> Result<i32> {
    let c = crate::trial::validate::verify_evidence(path)?;
    if json {
        print_json(super::schema::id::VERIFY_EVIDENCE, &c)?;
    } else if c.ok {
        outln!(
            "{}: validate run {}: {} item(s) re-checked against {}",
            paint(Tone::Good, "ok"),
            c.run,
            c.checked.len(),
            path.display()
        );
        if !c.absent.is_empty() {
            outln!("  not on disk (skipped): {}", c.absent.join(", "));
        }
    } else {
        for m in &c.mismatches {
            outln!("{} {} {}", paint(Tone::Bad, "MISMATCH"), m.role, m.path);
            outln!("  expected {}", m.expected);
            outln!("  found    {}", m.actual);
        }
        outln!(
            "{} mismatch(es) against {}",
            c.mismatches.len(),
            path.display()
        );
    }
    Ok(if c.ok { exit::OK } else { exit::CHECK_FAILED })
}

pub(super) fn render_verification(v: &Verification) {
    if v.ok {
        outln!(
            "{}: {} file(s) verified through {}",
            paint(Tone::Good, "ok"),
            v.files,
            v.through
        );
    } else {
        for m in &v.mismatches {
            outln!("{} {}", paint(Tone::Bad, "MISMATCH"), m.path);
            outln!("  expected {}", m.expected);
            outln!("  found    {}", m.actual);
        }
        outln!("{} mismatch(es) through {}", v.mismatches.len(), v.through);
    }
}

fn cmd_verify_installed(root: &std::path::Path, layer: &str, json: bool) -> Result<i32> {
    let root = Root::open_existing(root)?;
    let layer = installed_layer(layer)?;
    let v = root.verify_installed(layer)?;
    if json {
        print_json(super::schema::id::VERIFY_INSTALLED, &v)?;
    } else {
        render_verification(&v);
    }
    Ok(if v.ok { exit::OK } else { exit::CHECK_FAILED })
}
