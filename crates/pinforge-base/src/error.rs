//! Typed errors for the whole library: every error names its subject (a path, patch, variant or
//! command) and carries a `hint:` where a fix is known. The exit code a command ends with is a
//! property of the error kind, so the CLI never has to guess.

use std::fmt;
use std::path::{Path, PathBuf};

/// Every exit code pinforge ends with: one enum, from which `--help`'s table and the README's
/// table are checked (a test compares them), so the three can never drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything checked out.
    Ok = 0,
    /// A check failed: verify mismatch, smoke failure, refused gate, reverted swap, builds that
    /// differ.
    CheckFailed = 1,
    /// Usage or input error: bad recipe, patch, pin, missing tool; nothing was half-written.
    Input = 2,
    /// An external tool ran and failed (CMake configure, the compiler): the log's tail is shown.
    ToolFailed = 3,
    /// Internal error: I/O failure, git store corruption, a bug in pinforge.
    Internal = 4,
}

impl ExitCode {
    /// All codes, in order.
    pub const ALL: [ExitCode; 5] = [
        ExitCode::Ok,
        ExitCode::CheckFailed,
        ExitCode::Input,
        ExitCode::ToolFailed,
        ExitCode::Internal,
    ];

    /// The numeric code.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// What the code means, as the help and the README say it.
    pub fn meaning(self) -> &'static str {
        match self {
            ExitCode::Ok => "ok",
            ExitCode::CheckFailed => {
                "a check failed: verify mismatch, smoke `mismatch` or `crash`, a refused smoke \
                 gate, a reverted swap, builds that differ (`diff`)"
            }
            ExitCode::Input => {
                "usage or input error: bad recipe, patch, pin, manifest, missing tool. Nothing \
                 is half-written."
            }
            ExitCode::ToolFailed => {
                "an external tool failed (CMake configure, the compiler); the log's tail and \
                 path are shown"
            }
            ExitCode::Internal => "internal error (I/O, repository corruption, a pinforge bug)",
        }
    }

    /// The table shown at the end of `pinforge --help`.
    pub fn help_table() -> String {
        let mut s = String::from("Exit codes:\n");
        for c in ExitCode::ALL {
            s.push_str(&format!("  {}  {}\n", c.code(), c.meaning()));
        }
        s
    }
}

impl fmt::Display for ExitCode {
    /// The number, as the shell shows it (`$?`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}

/// Tests and callers that hold a shell's status compare it with the enum directly.
impl PartialEq<i32> for ExitCode {
    fn eq(&self, other: &i32) -> bool {
        self.code() == *other
    }
}

/// How the process ends: one of pinforge's own codes, or the status of the command pinforge
/// ran for the user (`exec`, as `env` or `nice` do), passed through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// pinforge's own outcome.
    Pinforge(ExitCode),
    /// The child command's status (128 + the signal that ended it, as a shell reports it).
    Command(u8),
}

impl ExitStatus {
    /// The status of a finished child as a shell reports it: its code, or 128 + its signal.
    pub fn of_child(status: std::process::ExitStatus) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        // A Unix status is one byte; anything else is out of range, and says so with 255.
        ExitStatus::Command(u8::try_from(code).unwrap_or(u8::MAX))
    }
}

impl From<ExitCode> for ExitStatus {
    fn from(c: ExitCode) -> Self {
        ExitStatus::Pinforge(c)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Pinforge(c) => c.fmt(f),
            ExitStatus::Command(c) => write!(f, "{c}"),
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(s: ExitStatus) -> Self {
        match s {
            ExitStatus::Pinforge(c) => c.into(),
            ExitStatus::Command(c) => std::process::ExitCode::from(c),
        }
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(c: ExitCode) -> Self {
        // Every code is 0 to 4, so the byte is the code.
        std::process::ExitCode::from(c as u8)
    }
}

/// The library's error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: the user can fix it by changing a file or an argument.
    #[error("{subject}: {message}")]
    Input {
        /// What the error is about: a file (with line and column), a patch, a variant, a value.
        subject: String,
        /// What is wrong with it.
        message: String,
        /// Extra lines shown under the message (for example an expected/found diff).
        detail: Option<String>,
        /// The known fix, shown as `hint:`.
        hint: Option<String>,
    },
    /// A verification found a difference.
    #[error("{subject}: {message}")]
    Check {
        /// What was checked.
        subject: String,
        /// How it differs.
        message: String,
        /// The known fix, shown as `hint:`.
        hint: Option<String>,
    },
    /// A filesystem operation failed on a named path.
    #[error("{path}: cannot {action}: {source}", path = .path.display())]
    Io {
        /// What was being done (`read`, `rename into`).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// An external command ran and failed.
    #[error("{command}: {message}")]
    Tool {
        /// The command line that ran.
        command: String,
        /// How it failed (exit status, signal).
        message: String,
        /// The tail of the tool's output.
        detail: Option<String>,
        /// The known fix, shown as `hint:`.
        hint: Option<String>,
    },
    /// The git library reported an error while working on a repository. The source is boxed so
    /// that this leaf type does not name libgit2: only the crate that drives git links it.
    #[error("{subject}: git: {source}")]
    Git {
        /// The repository or object it was working on.
        subject: String,
        /// The git library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Something that should not happen; a bug report is the hint.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Shorthand used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An input error about `subject`.
    pub fn input(subject: impl fmt::Display, message: impl fmt::Display) -> Self {
        Error::Input {
            subject: subject.to_string(),
            message: message.to_string(),
            detail: None,
            hint: None,
        }
    }

    /// A failed check about `subject`.
    pub fn check(subject: impl fmt::Display, message: impl fmt::Display) -> Self {
        Error::Check {
            subject: subject.to_string(),
            message: message.to_string(),
            hint: None,
        }
    }

    /// A failed external command.
    pub fn tool(command: impl fmt::Display, message: impl fmt::Display) -> Self {
        Error::Tool {
            command: command.to_string(),
            message: message.to_string(),
            detail: None,
            hint: None,
        }
    }

    /// An I/O error on `path`.
    pub fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// A git library error while working on `subject`.
    pub fn git(
        subject: impl fmt::Display,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Git {
            subject: subject.to_string(),
            source: source.into(),
        }
    }

    /// Attach a hint (a known fix). Ignored for kinds that carry none.
    #[must_use]
    pub fn with_hint(mut self, text: impl fmt::Display) -> Self {
        match &mut self {
            Error::Input { hint, .. } | Error::Tool { hint, .. } | Error::Check { hint, .. } => {
                *hint = Some(text.to_string())
            }
            _ => {}
        }
        self
    }

    /// Attach detail lines (a diff, a log tail).
    #[must_use]
    pub fn with_detail(mut self, text: impl fmt::Display) -> Self {
        match &mut self {
            Error::Input { detail, .. } | Error::Tool { detail, .. } => {
                *detail = Some(text.to_string())
            }
            _ => {}
        }
        self
    }

    /// The hint, if any.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Input { hint, .. } | Error::Tool { hint, .. } | Error::Check { hint, .. } => {
                hint.as_deref()
            }
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
                Some("free disk space and run the command again; nothing was committed")
            }
            Error::Internal(_) => Some("this is a bug in pinforge; please report it"),
            _ => None,
        }
    }

    /// Detail lines, if any.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Error::Input { detail, .. } | Error::Tool { detail, .. } => detail.as_deref(),
            _ => None,
        }
    }

    /// The process exit code this error ends a command with.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Input { .. } => ExitCode::Input,
            Error::Check { .. } => ExitCode::CheckFailed,
            Error::Tool { .. } => ExitCode::ToolFailed,
            Error::Io { .. } | Error::Git { .. } | Error::Internal(_) => ExitCode::Internal,
        }
    }
}

/// Attach a path to `std::io::Result`s in one call.
pub trait IoContext<T> {
    /// Map an I/O error to [`Error::Io`] naming `path`.
    fn at(self, action: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, action: &'static str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(action, path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_status_passes_through_as_a_shell_reports_it() {
        let run = |script: &str| {
            let st = std::process::Command::new("sh")
                .args(["-c", script])
                .status()
                .expect("sh");
            ExitStatus::of_child(st)
        };
        assert_eq!(run("exit 7"), ExitStatus::Command(7));
        assert_eq!(run("exit 0"), ExitStatus::Command(0));
        // Killed by SIGKILL (9): 128 + 9, as bash's `$?`.
        assert_eq!(run("kill -9 $$"), ExitStatus::Command(137));
        assert_eq!(ExitStatus::from(ExitCode::Input).to_string(), "2");
        assert_eq!(ExitStatus::Command(137).to_string(), "137");
    }

    #[test]
    fn exit_codes_follow_kind() {
        assert_eq!(Error::input("r.toml", "bad").exit_code(), 2);
        assert_eq!(Error::check("lib.so", "differs").exit_code(), 1);
        assert_eq!(Error::tool("cmake", "failed").exit_code(), 3);
        assert_eq!(Error::Internal("x".into()).exit_code(), 4);
    }

    #[test]
    fn hint_and_detail_attach_to_input_errors() {
        let e = Error::input("p.patch", "does not apply")
            .with_hint("rebase the patch")
            .with_detail("-a\n+b");
        assert_eq!(e.hint(), Some("rebase the patch"));
        assert_eq!(e.detail(), Some("-a\n+b"));
        assert_eq!(e.to_string(), "p.patch: does not apply");
    }

    #[test]
    fn io_errors_name_the_path() {
        let e: Result<()> =
            Err(std::io::Error::from(std::io::ErrorKind::NotFound)).at("read", Path::new("/x/y"));
        let text = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.starts_with("/x/y: cannot read:"), "{text}");
    }
}
