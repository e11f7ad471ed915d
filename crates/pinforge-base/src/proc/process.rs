//! Process spawning at the edge: every failure names the command line, the exit status and the
//! tail of what the command printed.

use crate::error::{Error, Result};
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

/// How many lines of output an error keeps.
pub const TAIL_LINES: usize = 30;

/// Render a command line for messages (arguments quoted when they need it).
pub fn display(cmd: &Command) -> String {
    let mut parts = vec![quote(cmd.get_program())];
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

fn quote(s: &OsStr) -> String {
    shell_word(&s.to_string_lossy())
}

/// Quote one word for a POSIX shell, only when it needs it: a word of letters, digits and
/// `-_./=:+,@%` stays as it is; anything else (an empty word, a space, a quote, `$`) is put in
/// single quotes, with each `'` written as `'\''`. CMake's `separate_arguments(UNIX_COMMAND)`
/// follows the same rules, so a build's flag strings use this too: the one rule for command
/// lines shown to people, hints to paste, and words handed to a shell.
pub fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:+,@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// Run a command to completion and return its output; a spawn failure or a non-zero exit is
/// an error naming the command. `missing_hint` is shown when the program cannot be found.
pub fn run(cmd: &mut Command, missing_hint: &str) -> Result<Output> {
    let line = display(cmd);
    let out = cmd
        .output()
        .map_err(|e| spawn_error(&line, e, missing_hint))?;
    if !out.status.success() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return Err(Error::tool(&line, format!("exited with {}", out.status))
            .with_detail(tail(&text, TAIL_LINES)));
    }
    Ok(out)
}

/// The error for a command that could not be started.
pub fn spawn_error(line: &str, e: std::io::Error, missing_hint: &str) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::input(line, "program not found").with_hint(missing_hint)
    } else {
        Error::tool(line, format!("cannot start: {e}"))
    }
}

/// Find an executable: a path with a slash is taken as given, a bare name is searched in
/// `extra` directories first and then in `PATH`.
pub fn which(name: &str, extra: &[std::path::PathBuf]) -> Option<std::path::PathBuf> {
    if name.contains('/') {
        let p = Path::new(name);
        return is_executable(p).then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    extra
        .iter()
        .cloned()
        .chain(std::env::split_paths(&path))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_when_needed() {
        let mut c = Command::new("cmake");
        c.args(["-DA=ON", "-DFLAGS=-x -y", "it's"]);
        assert_eq!(display(&c), "cmake -DA=ON '-DFLAGS=-x -y' 'it'\\''s'");
    }

    // issue #7 class 7: a machine path with a space stays one word inside a flags string.
    #[test]
    fn flag_words_with_spaces_or_quotes_are_shell_quoted() {
        assert_eq!(
            shell_word("-ffile-prefix-map=/a/b=/x"),
            "-ffile-prefix-map=/a/b=/x"
        );
        assert_eq!(
            shell_word("-ffile-prefix-map=/my ws/src=/x"),
            "'-ffile-prefix-map=/my ws/src=/x'"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        // What the shell makes of it is the original word.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s|' {}", shell_word("/a b/it's=$HOME")))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/a b/it's=$HOME|");
    }

    #[test]
    fn failing_command_is_a_tool_error_with_tail() {
        let e =
            run(Command::new("sh").args(["-c", "echo boom; exit 3"]), "").expect_err("must fail");
        assert_eq!(e.exit_code(), crate::error::ExitCode::ToolFailed);
        assert_eq!(e.detail(), Some("boom"));
    }

    #[test]
    fn missing_program_is_an_input_error_with_hint() {
        let e = run(
            &mut Command::new("/nonexistent/pinforge-no-such-tool"),
            "install it",
        )
        .expect_err("must fail");
        assert_eq!(e.exit_code(), crate::error::ExitCode::Input);
        assert_eq!(e.hint(), Some("install it"));
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
