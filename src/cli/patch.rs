//! `pinforge patch lint|list|apply|bundle|commit-message|export`: the attributed bundle's
//! checks, bibliography, application onto a checkout, and export back from one.

use super::{print_json, JsonArg};
use crate::outln;
use clap::Subcommand;
use pinforge_base::error::{ExitCode, Result};
use pinforge_source::patch::lint::Severity;
use pinforge_source::patch::{Bundle, PatchFile};
use std::path::PathBuf;

/// `pinforge patch ...`
#[derive(Debug, Subcommand)]
pub enum PatchCommand {
    /// Check attribution headers (every patch in patches/ by default); exit 2 on any error.
    #[command(
        after_help = "Examples:\n  pinforge patch lint\n  pinforge patch lint patches/0001-batch-size-ubatch-reserve-pos-for-mrope.patch"
    )]
    Lint {
        /// Patch files or bundle folders [default: <workspace>/patches]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Apply the series onto a clean git checkout, one commit per patch with attribution
    /// trailers. Hunks are placed as `git apply` places them: exact context, at the stated
    /// line or the nearest one where it matches (a note names every offset); never fuzz. A
    /// hunk that matches nowhere is shown beside the closest lines; nothing is committed.
    #[command(
        after_help = "Example:\n  pinforge patch apply vendor/llama-cpp-sys-2-0.1.135 --dir patches"
    )]
    Apply {
        /// The checkout
        repo: PathBuf,
        /// Bundle folder [default: <workspace>/patches]
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Write the whole series as one portable file: an mbox that `git am` applies, with the
    /// bibliography in the first message's notes (where `git am` ignores text).
    #[command(
        after_help = "Examples:\n  pinforge patch bundle -o mrope-fixes.mbox\n  git -C checkout am ../mrope-fixes.mbox"
    )]
    Bundle {
        /// The file to write
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Bundle folder [default: <workspace>/patches]
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Print the commit message for applying the bundle as one commit: the bibliography and a
    /// digest trailer per patch, so the attribution survives in git history.
    #[command(
        name = "commit-message",
        after_help = "Example:\n  git commit -F <(pinforge patch commit-message)"
    )]
    CommitMessage {
        /// Bundle folder [default: <workspace>/patches]
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// The reverse of apply: the vendor tree's commits above its pristine base written back
    /// as patch files with their headers (a commit pinforge made gives back its file byte for
    /// byte; a commit added by hand is rebuilt from its message and trailers) and a series.
    /// Every file is linted: a commit without attribution exits 2 with its findings.
    #[command(
        after_help = "Examples:\n  pinforge patch export vendor/llama-cpp-sys-2-0.1.135-0123abcd+4567 --dir patches\n  pinforge patch export checkout --base v1 --dir /tmp/bundle --json"
    )]
    Export {
        /// The vendor tree or checkout
        repo: PathBuf,
        /// Folder to write the patches and series into [default: <workspace>/patches]
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The upstream commit the patches sit on [default: the pristine tag pinforge/pristine]
        #[arg(long)]
        base: Option<String>,
        /// Write an empty series when no commit sits above the base (the pristine tree);
        /// without it such an export is refused, since it would wipe the bundle
        #[arg(long)]
        allow_empty: bool,
        #[command(flatten)]
        out: JsonArg,
    },
    /// Check the attribution claims against an upstream, not only their form: each
    /// `Upstream-Commit` exists in the upstream's history, its message names the header's PR,
    /// the first tag containing it is the `Applied-Upstream` claimed, `From:` is its git author,
    /// and a Pending/Submitted patch has not landed. Without history (a registry, tarball or
    /// folder pin) it says so and checks what content can show. Exit 1 when a claim is false.
    #[command(
        name = "check-attribution",
        after_help = "Examples:\n  pinforge patch check-attribution --upstream git:../llama.cpp@b8233\n  pinforge patch check-attribution --upstream crate:llama-cpp-sys-2@0.1.140 --json"
    )]
    CheckAttribution {
        /// The upstream: git:URL@REV (the upstream repository or a mirror, with its tags),
        /// crate:NAME@VERSION, tarball:PATH or dir:PATH
        #[arg(long)]
        upstream: String,
        /// Bundle folder [default: <workspace>/patches]
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        out: JsonArg,
    },
    /// The bibliography: one row per patch in series order.
    #[command(
        after_help = "Examples:\n  pinforge patch list\n  pinforge patch list --json | jq '.[].issue'"
    )]
    List {
        /// Bundle folder [default: <workspace>/patches]
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        out: JsonArg,
    },
}

/// Run `patch ...`.
pub(super) fn run(ctx: &super::Ctx, c: PatchCommand) -> Result<ExitCode> {
    // The bundle belongs to the workspace, like vendor/ and build/: `--workspace` moves it too.
    let bundle_dir = |dir: Option<PathBuf>| dir.unwrap_or_else(|| ctx.ws_root.join("patches"));
    match c {
        PatchCommand::Lint { paths, out } => {
            let paths = if paths.is_empty() {
                vec![bundle_dir(None)]
            } else {
                paths
            };
            cmd_lint(paths, out.json)
        }
        PatchCommand::List { dir, out } => cmd_list(&bundle_dir(dir), out.json),
        PatchCommand::Apply { repo, dir, out } => cmd_apply(&repo, &bundle_dir(dir), out.json),
        PatchCommand::Bundle { output, dir, out } => {
            cmd_bundle(&bundle_dir(dir), &output, out.json)
        }
        PatchCommand::Export {
            repo,
            dir,
            base,
            allow_empty,
            out,
        } => cmd_export(
            ctx,
            &repo,
            &bundle_dir(dir),
            base.as_deref(),
            allow_empty,
            out.json,
        ),
        PatchCommand::CheckAttribution { upstream, dir, out } => {
            cmd_check_attribution(ctx, &bundle_dir(dir), &upstream, out.json)
        }
        PatchCommand::CommitMessage { dir } => {
            let bundle = Bundle::load(&bundle_dir(dir))?;
            bundle.select(None)?;
            let text = pinforge_source::patch::bundle::commit_message(&bundle.bibliography());
            outln!("{}", text.trim_end());
            Ok(ExitCode::Ok)
        }
    }
}

fn cmd_lint(paths: Vec<PathBuf>, json: bool) -> Result<ExitCode> {
    let mut findings = Vec::new();
    let mut files = 0usize;
    for p in &paths {
        if p.is_dir() {
            let b = Bundle::load(p)?;
            files += b.files.len();
            findings.extend(b.lint());
        } else {
            let f = PatchFile::read(p)?;
            files += 1;
            findings.extend(f.findings.iter().map(|x| (f.origin.clone(), x.clone())));
        }
    }
    let errors = findings
        .iter()
        .filter(|(_, f)| f.severity == Severity::Error)
        .count();
    if json {
        let rows = findings
            .iter()
            .map(|(path, f)| LintRow {
                file: path.display().to_string(),
                finding: f,
            })
            .collect();
        print_json(
            pinforge_record::schema_id::PATCH_LINT,
            &LintReport {
                ok: errors == 0,
                patches: files,
                errors,
                warnings: findings.len() - errors,
                findings: rows,
            },
        )?;
        return Ok(if errors > 0 {
            ExitCode::Input
        } else {
            ExitCode::Ok
        });
    }
    for (path, f) in &findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        outln!(
            "{}:{}: {sev}: {} [{}]",
            path.display(),
            f.line,
            f.message,
            f.rule
        );
        if let Some(h) = &f.hint {
            outln!("  hint: {h}");
        }
    }
    outln!(
        "{files} patch(es): {errors} error(s), {} warning(s)",
        findings.len() - errors
    );
    Ok(if errors > 0 {
        ExitCode::Input
    } else {
        ExitCode::Ok
    })
}

fn cmd_check_attribution(
    ctx: &super::Ctx,
    dir: &std::path::Path,
    upstream: &str,
    json: bool,
) -> Result<ExitCode> {
    use pinforge_base::text::Shown;
    let ws = pinforge_base::workspace::Workspace::new(&ctx.ws_root)?;
    let bundle = Bundle::load(dir)?;
    let onto = pinforge_source::audit::parse_onto(upstream)?;
    let report = pinforge_source::attribution::check(&ws, &bundle, &onto)?;
    let code = if report.false_claims() > 0 {
        ExitCode::CheckFailed
    } else {
        ExitCode::Ok
    };
    if json {
        print_json(pinforge_record::schema_id::PATCH_CHECK_ATTRIBUTION, &report)?;
        return Ok(code);
    }
    outln!(
        "attribution of {} against {}",
        dir.display(),
        report.upstream
    );
    outln!("history: {}", report.history);
    for p in &report.patches {
        let mut facts = Vec::new();
        if let (Some(c), Some(found)) = (&p.commit_claimed, p.commit_found) {
            facts.push(format!(
                "commit {c} {}",
                if found { "found" } else { "not found" }
            ));
        }
        if let Some(a) = &p.upstream_author {
            facts.push(format!("author {}", Shown(a)));
        }
        if let Some(t) = &p.first_tag {
            facts.push(format!("first in {}", Shown(t)));
        }
        if let Some(c) = p.content {
            facts.push(format!("change {}", pinforge_source::audit::word(&c)));
        }
        let verdict = if p.findings.is_empty() {
            "ok"
        } else {
            "FALSE CLAIM"
        };
        outln!(
            "{}: {verdict}{}",
            p.file,
            if facts.is_empty() {
                String::new()
            } else {
                format!(" ({})", facts.join(", "))
            }
        );
        for f in &p.findings {
            outln!(
                "  {}:{}: {}: claims {}, upstream shows {}",
                dir.join(&p.file).display(),
                f.line,
                f.field,
                Shown(&f.claimed),
                Shown(&f.found)
            );
            outln!("    hint: {}", f.hint);
        }
    }
    outln!(
        "{} patch(es): {} false claim(s)",
        report.patches.len(),
        report.false_claims()
    );
    Ok(code)
}

fn cmd_apply(repo: &std::path::Path, dir: &std::path::Path, json: bool) -> Result<ExitCode> {
    let bundle = Bundle::load(dir)?;
    let patches = bundle.select(None)?;
    let applied = pinforge_source::patch::apply::apply_to_checkout(repo, &patches)?;
    // A moved hunk applied, but the patch is due a refresh: say so on stderr in every mode.
    for note in applied.iter().flat_map(|a| a.notes()) {
        eprintln!("note: {note}");
    }
    if json {
        let rows = applied
            .iter()
            .map(|a| ApplyRow {
                patch: a.id.to_string(),
                commit: a.commit,
                hunk_offsets: a.offsets.iter().map(ToString::to_string).collect(),
            })
            .collect();
        print_json(
            pinforge_record::schema_id::PATCH_APPLY,
            &ApplyReport {
                repo: repo.display().to_string(),
                applied: rows,
            },
        )?;
        return Ok(ExitCode::Ok);
    }
    for a in &applied {
        outln!("{} {}", a.commit.short(12), a.id);
    }
    outln!(
        "applied {} patch(es) onto {}",
        applied.len(),
        repo.display()
    );
    Ok(ExitCode::Ok)
}

fn cmd_list(dir: &std::path::Path, json: bool) -> Result<ExitCode> {
    let bundle = Bundle::load(dir)?;
    let rows = bundle.bibliography();
    if json {
        print_json(
            pinforge_record::schema_id::PATCH_LIST,
            &PatchList { patches: &rows },
        )?;
        return Ok(ExitCode::Ok);
    }
    let short = |u: &Option<String>| {
        u.as_deref()
            .and_then(|u| u.rsplit('/').next())
            .map(|n| format!("#{n}"))
            .unwrap_or_else(|| "-".into())
    };
    let fw = rows.iter().map(|r| r.file.len()).max().unwrap_or(4).max(4);
    outln!(
        "{:<3} {:<fw$} {:<14} {:<7} {:<7} {:<10} {:<24} URL",
        "#",
        "FILE",
        "STATUS",
        "ISSUE",
        "PR",
        "COMMIT",
        "HANDLES"
    );
    for (i, r) in rows.iter().enumerate() {
        let status = r
            .status
            .as_deref()
            .map(|s| s.split(' ').next().unwrap_or(s).to_string())
            .unwrap_or_else(|| "INVALID".into());
        outln!(
            "{:<3} {:<fw$} {:<14} {:<7} {:<7} {:<10} {:<24} {}",
            i + 1,
            r.file,
            status,
            short(&r.issue),
            short(&r.pr),
            r.commit.as_deref().unwrap_or("-"),
            if r.handles.is_empty() {
                "-".to_string()
            } else {
                r.handles.join(",")
            },
            r.url.as_deref().unwrap_or("-")
        );
    }
    Ok(ExitCode::Ok)
}

fn cmd_bundle(dir: &std::path::Path, output: &std::path::Path, json: bool) -> Result<ExitCode> {
    let bundle = Bundle::load(dir)?;
    // The mbox must never land on a file of the bundle it is made from (any spelling, link).
    pinforge_source::patch::bundle::refuse_bundle_file(&bundle, output)?;
    let patches = bundle.select(None)?;
    let rows = bundle.bibliography();
    let bytes = pinforge_source::patch::bundle::mbox(&patches, &rows)?;
    pinforge_base::fsx::write_atomic(output, &bytes)?;
    let sha256 = pinforge_base::digest::Sha256::of_bytes(&bytes);
    if json {
        print_json(
            pinforge_record::schema_id::PATCH_BUNDLE,
            &BundleWritten {
                path: output.display().to_string(),
                patches: patches.len(),
                bytes: bytes.len(),
                sha256,
            },
        )?;
    } else {
        outln!(
            "wrote {} ({} patch(es), {} bytes, sha256 {})",
            output.display(),
            patches.len(),
            bytes.len(),
            sha256.short(16)
        );
    }
    Ok(ExitCode::Ok)
}

fn cmd_export(
    ctx: &super::Ctx,
    repo: &std::path::Path,
    dir: &std::path::Path,
    base: Option<&str>,
    allow_empty: bool,
    json: bool,
) -> Result<ExitCode> {
    // The workspace lock, as rebase holds it from its first read to its last write: an export
    // never swaps the bundle under a rebase that audited the old one (and vendor/, which the
    // checkout may be, is not rewritten meanwhile).
    let ws = pinforge_base::workspace::Workspace::new(&ctx.ws_root)?;
    let _lock = ws.lock()?;
    let exported = pinforge_source::patch::export::export(repo, base, allow_empty)?;
    // Staged whole and swapped in once: a failure leaves the old bundle as it was.
    pinforge_source::patch::export::write_bundle(dir, &exported)?;
    let errors = exported
        .iter()
        .flat_map(|e| &e.findings)
        .filter(|f| f.severity == Severity::Error)
        .count();
    let code = if errors > 0 {
        ExitCode::Input
    } else {
        ExitCode::Ok
    };
    if json {
        print_json(
            pinforge_record::schema_id::PATCH_EXPORT,
            &ExportReport {
                dir: dir.display().to_string(),
                ok: errors == 0,
                errors,
                patches: &exported,
            },
        )?;
        return Ok(code);
    }
    for e in &exported {
        outln!("{} {} (from the {})", e.commit.short(12), e.file, e.from);
        for f in &e.findings {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            outln!(
                "{}:{}: {sev}: {} [{}]",
                dir.join(&e.file).display(),
                f.line,
                f.message,
                f.rule
            );
        }
    }
    outln!(
        "exported {} patch(es) into {}: {errors} lint error(s)",
        exported.len(),
        dir.display()
    );
    Ok(code)
}

/// One finding of `patch lint --json`, with its file.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct LintRow<'a> {
    file: String,
    #[serde(flatten)]
    finding: &'a pinforge_source::patch::lint::Finding,
}

/// The `patch lint --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct LintReport<'a> {
    ok: bool,
    patches: usize,
    errors: usize,
    warnings: usize,
    findings: Vec<LintRow<'a>>,
}

/// One applied patch of `patch apply --json`.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct ApplyRow {
    patch: String,
    // The schema keeps the plain string it has always published.
    #[schemars(with = "String")]
    commit: pinforge_base::digest::GitOid,
    /// Hunks that applied at another line (`FILE#N ±K`).
    hunk_offsets: Vec<String>,
}

/// The `patch apply --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct ApplyReport {
    repo: String,
    applied: Vec<ApplyRow>,
}

/// The `patch list --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct PatchList<'a> {
    patches: &'a [pinforge_source::patch::BibRow],
}

/// The `patch bundle --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct BundleWritten {
    path: String,
    patches: usize,
    bytes: usize,
    sha256: pinforge_base::digest::Sha256,
}

/// The `patch export --json` document (see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct ExportReport<'a> {
    dir: String,
    ok: bool,
    errors: usize,
    patches: &'a [pinforge_source::patch::export::Exported],
}
