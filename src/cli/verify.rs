//! `pinforge verify`: re-hash a build's outputs and inputs, or an installed layer. What a
//! mismatch names (paths, link targets, digests read back) is shown escaped.

use super::{installed_layer, print_json, JsonArg, RootArg};
use crate::cli::output::{paint, Tone};
use crate::outln;
use pinforge_base::error::{Error, ExitCode, Result};
use pinforge_base::text::Shown;
use pinforge_deploy::install::{Root, Verification};
use pinforge_record::manifest;
use pinforge_record::sign;
use std::path::PathBuf;

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// A manifest written by `pinforge build`, a validate run's evidence.json (or its run
    /// folder; a served run's folder or its serve-evidence.json), or a soak flip's or soak ablation's record.json (or its record folder)
    #[arg(required_unless_present = "installed")]
    pub manifest: Option<PathBuf>,
    /// Verify the install root instead: `current`, or the named layer
    #[arg(long, num_args = 0..=1, default_missing_value = "current", value_name = "LAYER",
          value_parser = ["current", "live", "control", "original"])]
    pub installed: Option<String>,
    /// Also require a good signature (FILE.dsse.json and FILE.sig) by a key this
    /// allowed_signers file trusts for namespace pinforge; the report names the signer.
    /// With --installed: the install receipt that put the layer's entry there must be signed
    /// so (install --sign KEY), and the layer's bytes must match that entry
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    #[command(flatten)]
    pub root: RootArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `verify`.
pub(super) fn run(ctx: &super::Ctx, a: VerifyArgs) -> Result<ExitCode> {
    let ws_root = ctx.ws_root.as_path();
    match (a.installed, a.manifest) {
        (Some(layer), _) => cmd_verify_installed(
            &a.root.resolve(ws_root),
            &layer,
            a.allowed_signers.as_deref(),
            a.out.json,
        ),
        (None, Some(m)) => match a.allowed_signers {
            Some(f) => cmd_verify_signed(&m, &f, a.out.json),
            None => cmd_verify(&m, a.out.json),
        },
        (None, None) => Err(Error::input("verify", "give a MANIFEST or --installed")),
    }
}

fn cmd_verify(path: &std::path::Path, json: bool) -> Result<ExitCode> {
    if let Some(dir) = pinforge_trial::validate::served::evidence::served_run_dir(path) {
        let c = pinforge_trial::validate::served::evidence::verify(&dir)?;
        return render_evidence_check(path, &c, json);
    }
    if pinforge_trial::validate::is_evidence(path) {
        return cmd_verify_evidence(path, json);
    }
    if pinforge_trial::soak::verify::is_soak_record(path) {
        return super::flip::verify_soak_record(path, json);
    }
    let report = manifest::verify(path, Some(&pinforge_source::git::GitTrees))?;
    if json {
        print_json(pinforge_record::schema_id::VERIFY, &report)?;
    } else if report.ok {
        outln!(
            "{}: {} outputs and {} inputs match {} (input {}); {} bytes hashed",
            paint(Tone::Good, "ok"),
            report.outputs_checked,
            report.inputs_checked,
            path.display(),
            report.input_digest.short(16),
            report.bytes_hashed
        );
        if !report.inputs_absent.is_empty() {
            // A pulled build's inputs are another machine's files: none was looked for.
            let why = if report.pulled { "pulled" } else { "skipped" };
            outln!(
                "  not on disk ({why}): {}",
                shown_list(&report.inputs_absent)
            );
        }
    } else {
        render_mismatches(&report.mismatches);
        outln!(
            "{} mismatch(es) against {}",
            report.mismatches.len(),
            path.display()
        );
    }
    Ok(if report.ok {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

/// The `verify --allowed-signers --json` document: the re-hash report and who signed it.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct VerifySigned<'a> {
    #[serde(flatten)]
    report: &'a manifest::VerifyReport,
    signature: &'a sign::Verified,
}

/// The `verify --installed --allowed-signers --json` document: the layer's re-hash, the
/// receipt whose signature was checked, and who signed it.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct VerifyInstalledSigned<'a> {
    #[serde(flatten)]
    verification: &'a pinforge_deploy::install::Verification,
    /// The signed install receipt of the layer.
    receipt: &'a std::path::Path,
    signature: &'a sign::Verified,
}

/// A manifest re-hashed as [`cmd_verify`] does, and its signature checked against the
/// policy first: an unsigned or badly signed record fails (exit 1) before anything else.
fn cmd_verify_signed(
    path: &std::path::Path,
    allowed: &std::path::Path,
    json: bool,
) -> Result<ExitCode> {
    let policy = sign::Policy::load(allowed)?;
    let signer = sign::verify_signed(path, &policy)?;
    if !json {
        outln!(
            "{}: signed by {} (key {}, {}, trusted by {})",
            paint(Tone::Good, "ok"),
            signer
                .principals
                .iter()
                .map(|p| Shown(p).to_string())
                .collect::<Vec<_>>()
                .join(", "),
            signer.keyid,
            signer.payload_type,
            Shown(&signer.policy_line)
        );
        return cmd_verify(path, false);
    }
    let report = manifest::verify(path, Some(&pinforge_source::git::GitTrees))?;
    print_json(
        pinforge_record::schema_id::VERIFY_SIGNED,
        &VerifySigned {
            report: &report,
            signature: &signer,
        },
    )?;
    Ok(if report.ok {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

/// A validate run's evidence manifest (or its run folder): files re-hashed, the summary
/// recomputed from the rows.
fn cmd_verify_evidence(path: &std::path::Path, json: bool) -> Result<ExitCode> {
    let c = pinforge_trial::validate::verify_evidence(path)?;
    render_evidence_check(path, &c, json)
}

/// A run's evidence check (in-process or served) rendered; exit 1 when anything differs.
fn render_evidence_check(
    path: &std::path::Path,
    c: &pinforge_trial::validate::EvidenceCheck,
    json: bool,
) -> Result<ExitCode> {
    if json {
        print_json(pinforge_record::schema_id::VERIFY_EVIDENCE, c)?;
    } else if c.ok {
        outln!(
            "{}: validate run {}: {} item(s) re-checked against {}",
            paint(Tone::Good, "ok"),
            c.run,
            c.checked.len(),
            path.display()
        );
        if !c.absent.is_empty() {
            outln!("  not on disk (skipped): {}", shown_list(&c.absent));
        }
    } else {
        for m in &c.mismatches {
            outln!(
                "{} {} {}",
                paint(Tone::Bad, "MISMATCH"),
                Shown(&m.role),
                Shown(&m.path)
            );
            outln!("  expected {}", Shown(&m.expected));
            outln!("  found    {}", Shown(&m.actual));
        }
        outln!(
            "{} mismatch(es) against {}",
            c.mismatches.len(),
            path.display()
        );
    }
    Ok(if c.ok {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}

/// One mismatch as three lines. A path, a link target or an expected value comes from a
/// manifest or from the disk (data): shown escaped, so that it cannot forge a line.
fn render_mismatches(mismatches: &[manifest::Mismatch]) {
    for m in mismatches {
        outln!(
            "{} {} {}",
            paint(Tone::Bad, "MISMATCH"),
            Shown(&m.role),
            Shown(&m.path)
        );
        outln!("  expected {}", Shown(&m.expected));
        outln!("  found    {}", Shown(&m.actual));
    }
}

/// Names from data, comma separated, each shown escaped.
fn shown_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| Shown(n).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn render_verification(v: &Verification) {
    if v.ok {
        outln!(
            "{}: {} file(s) verified through {} ({} bytes hashed)",
            paint(Tone::Good, "ok"),
            v.files,
            v.through,
            v.bytes_hashed
        );
    } else {
        for m in &v.mismatches {
            outln!("{} {}", paint(Tone::Bad, "MISMATCH"), Shown(&m.path));
            outln!("  expected {}", Shown(&m.expected));
            outln!("  found    {}", Shown(&m.actual));
        }
        outln!("{} mismatch(es) through {}", v.mismatches.len(), v.through);
    }
}

fn cmd_verify_installed(
    root: &std::path::Path,
    layer: &str,
    allowed: Option<&std::path::Path>,
    json: bool,
) -> Result<ExitCode> {
    let root = Root::open_existing(root)?;
    let layer = installed_layer(layer)?;
    // The signature first: an unsigned or foreign receipt fails (exit 1) before the re-hash.
    let signed = match allowed {
        Some(allowed) => {
            let policy = sign::Policy::load(allowed)?;
            Some(root.verify_layer_signed(layer, &policy)?)
        }
        None => None,
    };
    if let (Some((receipt, signer)), false) = (&signed, json) {
        outln!(
            "{}: installed by {} (key {}, receipt {}, trusted by {})",
            paint(Tone::Good, "signed"),
            signer
                .principals
                .iter()
                .map(|p| Shown(p).to_string())
                .collect::<Vec<_>>()
                .join(", "),
            signer.keyid,
            receipt.display(),
            Shown(&signer.policy_line)
        );
    }
    let v = root.verify_installed(layer)?;
    match (json, &signed) {
        (true, Some((receipt, signer))) => print_json(
            pinforge_record::schema_id::VERIFY_INSTALLED_SIGNED,
            &VerifyInstalledSigned {
                verification: &v,
                receipt,
                signature: signer,
            },
        )?,
        (true, None) => print_json(pinforge_record::schema_id::VERIFY_INSTALLED, &v)?,
        (false, _) => render_verification(&v),
    }
    Ok(if v.ok {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}
