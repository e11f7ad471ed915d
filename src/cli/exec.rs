//! `pinforge exec`: run a command in a variant's build folder as the build saw it (the fixed
//! path's mount namespace), as `nix develop` does for a derivation's build environment.

use pinforge_base::error::{Error, ExitStatus, Result};
use pinforge_base::workspace::Workspace;
use pinforge_source::recipe::Recipe;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Arguments of `exec`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// Recipe TOML [default: the embedded recipes/mrope-cpu.toml]
    pub recipe: Option<PathBuf>,
    /// The variant whose build folder the command runs in [default: the recipe's
    /// default-variant]
    #[arg(long)]
    pub variant: Option<String>,
    /// The command and its arguments (after `--`)
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Run `exec`: the command's own exit code (128 + the signal that ended it).
pub(super) fn run(ctx: &super::Ctx, a: ExecArgs) -> Result<ExitStatus> {
    let ws = Workspace::new(&ctx.ws_root)?;
    let recipe = Recipe::load_or_default(a.recipe.as_deref())?;
    let variant = match &a.variant {
        Some(v) => recipe.variant(v)?,
        None => recipe.variant(recipe.default_variant.as_str())?,
    };
    let name = format!("{}/{}", recipe.name, variant.name.as_str());
    let vdir = ws.variant_dir(&recipe.name, variant.name.as_str());
    let Some((program, args)) = a.command.split_first() else {
        return Err(Error::input(
            "exec",
            "no command given (pinforge exec -- CMD...)",
        ));
    };
    let mut cmd =
        pinforge_build::build::fixed::exec_command(&vdir, &ws.vendor(), &name, Path::new(program))?;
    cmd.args(args);
    let line = pinforge_base::process::display(&cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| pinforge_base::process::spawn_error(&line, e, ""))?;
    // Ctrl-C is the command's to handle (an interactive shell ignores it): pinforge waits
    // rather than die and leave the command orphaned on the terminal.
    pinforge_sys::signal::ignore_terminal_interrupts();
    let status = child
        .wait()
        .map_err(|e| Error::io("wait for", Path::new(program), e))?;
    Ok(ExitStatus::of_child(status))
}
