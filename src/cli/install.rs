//! `pinforge install`: stage a build into the install root and commit a layer change.

use super::smoke::{render_smoke, smoke_options};
use super::verify::render_verification;
use super::{print_json, JsonArg, RootArg};
use crate::outln;
use pinforge_base::error::{Error, ExitCode, Result};
use pinforge_base::text::Shown;
use pinforge_base::workspace::Workspace;
use pinforge_deploy::install::{InstallOutcome, Layer, Root, StageMode};
use pinforge_deploy::serve::gate::{self, ServerCheck};
use pinforge_deploy::smoke::{self, Verdict};
use pinforge_source::recipe::Recipe;
use std::path::PathBuf;

/// Arguments of `install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// A manifest, a recipe (with --variant) whose build is in the workspace, or
    /// oci://HOST/REPO@sha256:DIGEST (pulled and checked first) [default: the embedded recipe]
    pub target: Option<PathBuf>,
    /// With oci://: require a signature by a key of this OpenSSH allowed_signers file
    #[arg(long)]
    pub allowed_signers: Option<PathBuf>,
    /// With oci://: allow plain HTTP to a registry that is not on this machine
    #[arg(long)]
    pub insecure_registry: bool,
    /// Variant (when TARGET is a recipe)
    #[arg(long)]
    pub variant: Option<String>,
    /// The layer to install into
    #[arg(long, value_parser = ["live", "control", "original"])]
    pub layer: String,
    #[command(flatten)]
    pub root: RootArg,
    /// Copy instead of hard-linking the build outputs
    #[arg(long)]
    pub copy: bool,
    /// Gate: smoke-decode the build first and refuse the swap unless the verdict is ok
    #[arg(long)]
    pub smoke: bool,
    /// Architecture of the gate's tiny model
    #[arg(long, default_value = "qwen2vl", value_parser = ["qwen2vl", "qwen2"])]
    pub smoke_arch: String,
    /// Gate of a build with bin/llama-server: how long the server may take to answer
    /// /health, and each read of its one chat completion (seconds)
    #[arg(long, default_value_t = 120, value_name = "SECS", requires = "smoke",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub smoke_server_timeout: u64,
    #[command(flatten)]
    pub sign: super::sign::SignWith,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Run `install`: the gate (with `--smoke`), then the install, then the rendering.
pub(super) fn run(ctx: &super::Ctx, a: InstallArgs) -> Result<ExitCode> {
    let ws_root = ctx.ws_root.as_path();
    let root = a.root.resolve(ws_root);
    let layer = Layer::parse(&a.layer)?;
    let json = a.out.json;
    let oci = a
        .target
        .as_ref()
        .and_then(|t| t.to_str())
        .filter(|t| t.starts_with("oci://"))
        .map(str::to_string);
    let manifest = match oci {
        // Pulled, with every digest and the signature policy checked, before the install
        // root is even opened: nothing enters it unless the pull succeeded.
        Some(text) => pull_for_install(ws_root, &text, &a, json)?,
        None => {
            if a.allowed_signers.is_some() || a.insecure_registry {
                return Err(Error::input(
                    "--allowed-signers / --insecure-registry",
                    "these go with an oci:// source",
                ));
            }
            manifest_for(ws_root, a.target, a.variant)?
        }
    };
    let server_timeout = std::time::Duration::from_secs(a.smoke_server_timeout);
    let gate = match a.smoke.then_some(a.smoke_arch) {
        Some(arch) => Some(smoke_gate(ws_root, &manifest, &arch, server_timeout, json)?),
        None => None,
    };
    let root = Root::open(&root)?.signed_by(ctx.signer.clone());
    let out = root.install(&manifest, layer, a.copy.then_some(StageMode::Copy))?;
    if json {
        print_json(
            pinforge_record::schema_id::INSTALL,
            &InstallJson {
                outcome: &out,
                smoke: gate.as_ref().map(|g| &g.0),
                server: gate.as_ref().and_then(|g| g.1.as_ref()),
            },
        )?;
    } else {
        render(layer, &out);
    }
    Ok(ExitCode::Ok)
}

/// `install oci://REF@sha256:…`: pull by digest only, under the signature policy; the
/// manifest of the pulled folder.
fn pull_for_install(
    ws_root: &std::path::Path,
    text: &str,
    a: &InstallArgs,
    json: bool,
) -> Result<PathBuf> {
    use pinforge_deploy::ship::{self, Access, PullOptions, Reference};
    if a.variant.is_some() {
        return Err(Error::input(
            text,
            "--variant goes with a recipe, not an oci:// source",
        ));
    }
    let r = Reference::parse(text)?;
    let opts = PullOptions {
        access: Access {
            insecure: a.insecure_registry,
        },
        allowed_signers: a.allowed_signers.clone(),
        require_digest: true,
    };
    let out = ship::pull(ws_root, &r, &opts)?;
    if !json {
        super::pull::render(&out);
    }
    Ok(out.manifest)
}

/// The manifest an install names: a manifest file, or a recipe + variant built in the workspace.
fn manifest_for(
    ws_root: &std::path::Path,
    target: Option<PathBuf>,
    variant: Option<String>,
) -> Result<PathBuf> {
    if let Some(t) = &target {
        if t.extension().is_some_and(|x| x == "json") {
            if variant.is_some() {
                return Err(Error::input(
                    t.display(),
                    "--variant goes with a recipe, not a manifest",
                ));
            }
            return Ok(t.clone());
        }
    }
    let recipe = Recipe::load_or_default(target.as_deref())?;
    let v = recipe.variant(
        variant
            .as_deref()
            .unwrap_or(recipe.default_variant.as_str()),
    )?;
    let ws = Workspace::new(ws_root)?;
    let m = ws
        .variant_dir(&recipe.name, v.name.as_str())
        .join("manifest.json");
    if !m.exists() {
        return Err(
            Error::input(m.display(), "no build of this variant in the workspace").with_hint(
                format!(
                    "run `pinforge build {}--variant {}` first",
                    target
                        .as_ref()
                        .map(|t| format!("{} ", t.display()))
                        .unwrap_or_default(),
                    v.name
                ),
            ),
        );
    }
    Ok(m)
}

/// The `install --json` document: the outcome, plus the gate's smoke report under `smoke`
/// when `--smoke` was given, and its server check under `server` when the build has
/// `bin/llama-server` (each absent otherwise, so the document is unchanged without them).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct InstallJson<'a> {
    #[serde(flatten)]
    outcome: &'a InstallOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    smoke: Option<&'a smoke::SmokeReport>,
    /// The gate's server check: the build's `bin/llama-server` started and answering one chat
    /// completion before the swap.
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<&'a ServerCheck>,
}

/// The `--smoke` gate: smoke the build and refuse (exit 1) unless the verdict is ok; the
/// report is printed either way. A build with `bin/llama-server` must then also start it
/// and answer one chat completion ([`gate::check`]), or the swap is refused (exit 1).
fn smoke_gate(
    ws_root: &std::path::Path,
    manifest: &std::path::Path,
    arch: &str,
    server_timeout: std::time::Duration,
    json: bool,
) -> Result<(smoke::SmokeReport, Option<ServerCheck>)> {
    // The gate smokes the build folder, but only after re-hashing every file it compiles
    // against or loads (libllama, the other lib/ shared libraries, every include/*.h)
    // against the digests this manifest names, refusing any difference (exit 1); the
    // shim compiles against copies of the verified headers. `Root::install` then checks
    // the staged (or reused) entry against the same digests before it commits, so an ok
    // verdict is for the bytes that are installed: a file changed between the two checks
    // fails the second, and nothing is committed.
    let target = smoke::target_from_manifest(manifest)?;
    let opts = smoke_options(ws_root, None, Some(arch.to_string()), 16, false)?;
    let report = smoke::run(&target, &opts)?;
    if report.verdict != Verdict::Ok {
        if json {
            // The swap is refused, but the report is the evidence: it goes to stdout as
            // the smoke document, the refusal to stderr (exit 1).
            print_json(pinforge_record::schema_id::SMOKE, &report)?;
        } else {
            render_smoke(&report);
        }
        return Err(Error::check(
            manifest.display(),
            format!(
                "smoke gate: verdict {:?}, not ok; the swap was not committed",
                report.verdict
            ),
        ));
    }
    if !json {
        render_smoke(&report);
    }
    // The server binary is re-hashed against this manifest right before it is started and
    // through the running process after; the libraries it loads are the ones just checked.
    let Some(build) = gate::server_of_manifest(manifest)? else {
        return Ok((report, None));
    };
    let check = gate::check(
        &build,
        &gate::GateOptions {
            model: smoke::model_file(&opts)?,
            timeout: server_timeout,
            gpu_layers: if report.device.starts_with("cuda:") {
                999
            } else {
                0
            },
            cuda: target.cuda,
        },
    )?;
    if !json {
        render_server(&check);
    }
    Ok((report, Some(check)))
}

/// The human rendering of the gate's server check.
fn render_server(c: &ServerCheck) {
    outln!(
        "server {} (sha256 {}): started on 127.0.0.1, /health 200 after {:.0} ms",
        c.binary,
        c.sha256.short(16),
        c.timings.start_ms
    );
    outln!(
        "  one chat completion: HTTP {}, finish_reason {}, {} tokens in {:.0} ms{}",
        c.answer.status,
        c.answer.finish_reason,
        c.answer.completion_tokens,
        c.timings.request_ms,
        c.build_info
            .as_deref()
            .map(|b| format!(" (build {b})"))
            .unwrap_or_default()
    );
    outln!(
        "  stopped in {:.0} ms, nothing of it left running; the check took {:.0} ms",
        c.timings.stop_ms,
        c.timings.total_ms
    );
}

/// The human rendering of an install.
fn render(layer: Layer, out: &InstallOutcome) {
    if let Some(r) = &out.recovered {
        outln!("recovered an interrupted transaction: {}", r.display());
    }
    if out.unchanged {
        outln!(
            "unchanged: {layer} already shows {}",
            super::rollback::slot(&out.reached)
        );
    } else {
        outln!(
            "installed into {layer}: left {}, reached {} (generation {})",
            super::rollback::slot(&out.left),
            super::rollback::slot(&out.reached),
            out.gen
        );
    }
    outln!("  entry {}", out.entry.display());
    if let Some(s) = out.store.as_ref().filter(|s| s.own_files > 0) {
        // The known-good layers hold files of their own (issue #36): say how they were made.
        outln!(
            "  own files: {} ({} bytes), {} reflinked, {} copied; no inode shared with another entry",
            s.own_files,
            s.bytes_written,
            s.own_reflinked,
            s.own_files - s.own_reflinked
        );
    } else if let Some(s) = &out.store {
        outln!(
            "  objects: {} written ({} bytes), {} reused, {} replaced as damaged",
            s.objects_written,
            s.bytes_written,
            s.objects_reused,
            s.objects_replaced
        );
        for c in &s.copied_not_linked {
            outln!("  warning: copied, not linked to its object: {}", Shown(c));
        }
    }
    render_verification(&out.verification);
    outln!("receipt {}", out.receipt.display());
}
