//! The terminal reporter: library progress rendered on stderr. On a terminal, stage lines and
//! an indicatif bar; elsewhere (CI logs, `2> build.txt`) a line per stage and one line every
//! ~10% of the compile, each with the elapsed time, since a bar that redraws itself is useless
//! in a log and silence for three minutes looks like a hang.

use pinforge_base::progress::Reporter;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

/// Progress on stderr.
pub(super) struct TermReporter {
    bar: Mutex<Option<indicatif::ProgressBar>>,
    /// The last tenth of the compile reported as a plain line (non-terminal mode).
    last_tenth: Mutex<Option<u64>>,
    quiet: bool,
    terminal: bool,
    started: Instant,
    /// What the counted steps are (`compile`, `rows`); plain lines also carry the message
    /// when `lines_with_message` (validate's per-outcome counts).
    label: &'static str,
    lines_with_message: bool,
}

impl TermReporter {
    pub(super) fn new(quiet: bool) -> Self {
        TermReporter {
            bar: Mutex::new(None),
            last_tenth: Mutex::new(None),
            quiet,
            terminal: std::io::stderr().is_terminal(),
            started: Instant::now(),
            label: "compile",
            lines_with_message: false,
        }
    }

    /// A reporter whose steps are `label` and whose plain lines carry the message too.
    pub(super) fn counting(quiet: bool, label: &'static str) -> Self {
        TermReporter {
            label,
            lines_with_message: true,
            ..TermReporter::new(quiet)
        }
    }

    fn elapsed(&self) -> String {
        format!("{:.1}s", self.started.elapsed().as_secs_f64())
    }
}

/// The tenth (0..=10) that `done` of `total` has reached.
fn tenth(done: u64, total: u64) -> u64 {
    if total == 0 {
        return 10;
    }
    (done.min(total) * 10) / total
}

impl Reporter for TermReporter {
    fn stage(&self, name: &str, detail: &str) {
        self.finish();
        if self.quiet {
            return;
        }
        if self.terminal {
            eprintln!("{name:>10} {detail}");
        } else {
            eprintln!("{name:>10} {detail}  [{}]", self.elapsed());
        }
        if let Ok(mut t) = self.last_tenth.lock() {
            *t = None;
        }
    }

    fn progress(&self, done: u64, total: u64, message: &str) {
        if self.quiet {
            return;
        }
        if !self.terminal {
            let now = tenth(done, total);
            let Ok(mut last) = self.last_tenth.lock() else {
                return;
            };
            if *last != Some(now) {
                *last = Some(now);
                let msg = if self.lines_with_message && !message.is_empty() {
                    format!("  {message}")
                } else {
                    String::new()
                };
                eprintln!(
                    "{:>10} {:>3}% ({done}/{total}){msg}  [{}]",
                    self.label,
                    now * 10,
                    self.elapsed()
                );
            }
            return;
        }
        let Ok(mut guard) = self.bar.lock() else {
            return;
        };
        let bar = guard.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {elapsed} {wide_msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(self.label);
            b
        });
        bar.set_length(total);
        bar.set_position(done);
        bar.set_message(message.to_string());
    }

    fn finish(&self) {
        if let Ok(mut guard) = self.bar.lock() {
            if let Some(b) = guard.take() {
                b.finish_and_clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_fall_on_tenths_of_the_compile() {
        assert_eq!(tenth(0, 161), 0);
        assert_eq!(tenth(16, 161), 0);
        assert_eq!(tenth(17, 161), 1);
        assert_eq!(tenth(161, 161), 10);
        assert_eq!(tenth(5, 0), 10, "an empty build is complete");
        assert_eq!(
            tenth(200, 161),
            10,
            "ninja's count never overshoots the bar"
        );
    }
}
