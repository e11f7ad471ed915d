//! `pinforge build`: resolve, materialize, patch, configure, build, write the manifest.

use super::reporter::TermReporter;
use super::{print_json_line, JsonArg, Verbosity};
use crate::outln;
use pinforge_base::error::{ExitCode, Result};
use pinforge_base::workspace::Workspace;
use pinforge_build::build::{self, BuildOptions, BuildOutcome};
use pinforge_record::manifest;
use pinforge_source::recipe::Recipe;
use std::path::PathBuf;

/// Arguments of `build`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Recipe TOML [default: the embedded recipes/mrope-cpu.toml]
    pub recipe: Option<PathBuf>,
    /// Variant(s) to build [default: the recipe's default-variant]
    #[arg(long = "variant")]
    pub variants: Vec<String>,
    /// Ninja parallelism
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub sign: super::sign::SignWith,
    #[command(flatten)]
    pub out: JsonArg,
}

/// The compile cache flags (shared by every command that builds).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CacheArgs {
    /// Compile every translation unit; read and store nothing in the compile cache
    /// [env: PINFORGE_CACHE=off]
    #[arg(long)]
    pub no_cache: bool,
    /// Compile cache folder [env: PINFORGE_CACHE_DIR] [default: $XDG_CACHE_HOME/pinforge/ccache]
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Shared compile cache backend, e.g. redis://127.0.0.1:6379 [env: PINFORGE_CACHE_REMOTE]
    #[arg(long, value_name = "URL")]
    pub cache_remote: Option<String>,
    /// Distribute the compiles that miss the cache through an sccache-dist scheduler, e.g.
    /// http://10.0.0.5:10600; its client token in PINFORGE_DIST_TOKEN [env: PINFORGE_DIST]
    #[arg(long, value_name = "URL")]
    pub dist: Option<String>,
}

impl CacheArgs {
    /// The environment's settings with these flags applied over them.
    pub fn settings(&self) -> build::cache::Settings {
        let mut s = build::cache::Settings::from_env();
        if self.no_cache {
            s.enabled = false;
        }
        if let Some(d) = &self.cache_dir {
            s.dir = Some(d.clone());
        }
        if let Some(r) = &self.cache_remote {
            s.remote = Some(r.clone());
        }
        if let Some(d) = &self.dist {
            s.dist = Some(d.clone());
        }
        s
    }
}

/// Run `build`.
pub(super) fn run(ctx: &super::Ctx, a: BuildArgs) -> Result<ExitCode> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load_or_default(a.recipe.as_deref())?;
    let names = if a.variants.is_empty() {
        vec![recipe.default_variant.to_string()]
    } else {
        a.variants
    };
    // Resolve every name first: a typo in the third variant must not cost two builds.
    let selected = names
        .iter()
        .map(|n| recipe.variant(n))
        .collect::<Result<Vec<_>>>()?;
    let reporter = TermReporter::new(ctx.verbosity == Verbosity::Quiet);
    for v in selected {
        // The previous manifest, read before the build replaces it, says why this one ran.
        let manifest_path = ws
            .variant_dir(&recipe.name, v.name.as_str())
            .join("manifest.json");
        let previous = manifest::Statement::read(&manifest_path).ok();
        let outcome = build::build(
            &ws,
            &recipe,
            v,
            &BuildOptions {
                jobs: a.jobs,
                reporter: &reporter,
                compile_cache: a.cache.settings(),
                signer: ctx.signer.clone(),
            },
        )?;
        let because = if outcome.cached {
            Vec::new()
        } else {
            let now = manifest::Statement::read(&outcome.manifest)?;
            pinforge_build::diff::rebuild_reasons(previous.as_ref(), &now)
        };
        // One JSON line per build, written as soon as it is done: the same shape for one
        // variant or many, and a consumer sees each result without waiting for the rest.
        if a.out.json {
            print_json_line(
                pinforge_record::schema_id::BUILD,
                &BuildLine {
                    outcome: &outcome,
                    rebuilt_because: &because,
                },
            )?;
        } else if ctx.verbosity != Verbosity::Quiet {
            // `-q`: nothing on success (the exit code says it); errors still reach stderr.
            render_build(&outcome, &because, ctx.verbosity);
        }
    }
    Ok(ExitCode::Ok)
}

fn render_build(o: &BuildOutcome, because: &[String], verbosity: Verbosity) {
    outln!(
        "{} {}/{}  input {}  {:.1}s",
        if o.cached { "cached" } else { "built " },
        o.recipe,
        o.variant,
        o.input_digest.short(16),
        o.seconds
    );
    // A cached build is one line: nothing happened, and the listing is the one shown before.
    if o.cached && verbosity < Verbosity::Verbose {
        return;
    }
    if !because.is_empty() {
        outln!("  because    {}", because.join("; "));
    }
    outln!("  manifest   {}", o.manifest.display());
    outln!("  artifacts  {}", o.artifact_root.display());
    for a in &o.artifacts {
        outln!(
            "    {:<28} sha256:{}  {} bytes",
            a.path,
            a.sha256.short(16),
            a.size
        );
    }
    outln!("  cache      {}", o.compile_cache.summary());
    if let Some(d) = &o.dist {
        outln!("  dist       {}", d.summary());
    }
    outln!("  log        {}", o.log.display());
}

/// One line of `build --json` (JSON Lines, one per variant; see `cli::schema`).
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(super) struct BuildLine<'a> {
    #[serde(flatten)]
    outcome: &'a BuildOutcome,
    rebuilt_because: &'a [String],
}
