//! `pinforge completions SHELL` and `pinforge man`: generated from the clap definition itself.

use clap::CommandFactory;
use pinforge_base::error::{Error, ExitCode, Result};

/// Arguments of `completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Write the completion script for `shell` to stdout.
pub(super) fn completions(a: CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = super::Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "pinforge", &mut buf);
    write_stdout(&buf)
}

/// Write the man page (roff) to stdout.
pub(super) fn man() -> Result<ExitCode> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(super::Cli::command())
        .render(&mut buf)
        .map_err(|e| Error::Internal(format!("rendering the man page: {e}")))?;
    write_stdout(&buf)
}

fn write_stdout(bytes: &[u8]) -> Result<ExitCode> {
    // Generated text is UTF-8 (clap strings); lossy decoding would only hide a bug.
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::Internal(format!("generated text is not UTF-8: {e}")))?;
    crate::cli::output::write_line(format_args!("{}", text.trim_end_matches('\n')));
    Ok(ExitCode::Ok)
}
