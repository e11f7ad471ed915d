//! Standard output for the command layer: every report line goes through [`write_line`], which
//! never panics. A closed pipe (`pinforge patch list | head -1`) ends the output quietly; any
//! other write error (a full disk behind `> /dev/full`) is remembered, so that the command can
//! finish its own work (an install that already committed stays committed) and the CLI then
//! says that the work was done but its report could not be written.

use std::fmt;
use std::io::Write;
use std::sync::Mutex;

/// What went wrong with standard output, if anything. Only the first failure is kept: later
/// writes after a failure are skipped, so a report is never half-interleaved with errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutputFailure {
    /// The reader went away (EPIPE): not an error of the command.
    Closed,
    /// Any other write error, with its text.
    Failed(String),
}

static FAILURE: Mutex<Option<OutputFailure>> = Mutex::new(None);
static COLOR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turn color on or off for [`paint`] (the CLI decides from `--color` and `NO_COLOR`).
pub(crate) fn set_color(on: bool) {
    COLOR.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The colors pinforge uses: one meaning each.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tone {
    /// Success (`ok`, `identical`).
    Good,
    /// A failed check (`MISMATCH`, `crash`).
    Bad,
}

/// `text` in the tone's color when color is on, as it is otherwise.
pub(crate) fn paint(tone: Tone, text: &str) -> String {
    if !COLOR.load(std::sync::atomic::Ordering::Relaxed) {
        return text.to_string();
    }
    let code = match tone {
        Tone::Good => "32",
        Tone::Bad => "31",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

fn record(e: &std::io::Error) {
    let kind = if e.kind() == std::io::ErrorKind::BrokenPipe {
        OutputFailure::Closed
    } else {
        OutputFailure::Failed(e.to_string())
    };
    if let Ok(mut slot) = FAILURE.lock() {
        slot.get_or_insert(kind);
    }
}

fn failed() -> bool {
    FAILURE.lock().map(|s| s.is_some()).unwrap_or(true)
}

/// Write one line (the arguments and a newline) to standard output; errors are recorded, never
/// raised, and after the first one nothing more is written.
pub(crate) fn write_line(args: fmt::Arguments<'_>) {
    if failed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        record(&e);
    }
}

/// Flush standard output and return the first failure seen, if any. Called once, by the CLI,
/// after the command's work is done.
pub(crate) fn finish() -> Option<OutputFailure> {
    if !failed() {
        if let Err(e) = std::io::stdout().lock().flush() {
            record(&e);
        }
    }
    FAILURE.lock().map(|s| s.clone()).unwrap_or(None)
}

/// `outln!(...)`: `println!` for the command layer, through [`write_line`].
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::output::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::write_line(format_args!($($arg)*))
    };
}
