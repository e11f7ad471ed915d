//! How library operations report progress without printing: a trait the CLI implements
//! (with indicatif) and tests implement silently.

/// Receives progress from long operations.
pub trait Reporter: Send + Sync {
    /// A new stage began (`fetch`, `materialize`, `configure`, `build`, ...).
    fn stage(&self, name: &str, detail: &str);
    /// `done` of `total` steps finished; `message` says what just finished.
    fn progress(&self, done: u64, total: u64, message: &str);
    /// The current stage ended.
    fn finish(&self);
}

/// Parse Ninja's default status prefix `[done/total] message`.
pub fn parse_ninja_status(line: &str) -> Option<(u64, u64, &str)> {
    let rest = line.strip_prefix('[')?;
    let (counts, message) = rest.split_once(']')?;
    let (done, total) = counts.split_once('/')?;
    Some((
        done.trim().parse().ok()?,
        total.trim().parse().ok()?,
        message.trim(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ninja_status_lines_parse() {
        assert_eq!(
            parse_ninja_status("[12/161] Building CXX object src/x.o"),
            Some((12, 161, "Building CXX object src/x.o"))
        );
        assert_eq!(parse_ninja_status("ninja: no work to do."), None);
        assert_eq!(parse_ninja_status("[a/b] x"), None);
    }
}
