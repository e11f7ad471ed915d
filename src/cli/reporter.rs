//! The terminal reporter: library progress rendered on stderr (stage lines, an indicatif bar).

use crate::progress::Reporter;
use std::sync::Mutex;

/// Progress on stderr with indicatif; it hides itself when stderr is not a terminal, and the
/// stage lines still go to stderr so logs of non-interactive runs say what happened.
pub(super) struct TermReporter {
    bar: Mutex<Option<indicatif::ProgressBar>>,
    quiet: bool,
}

impl TermReporter {
    pub(super) fn new(quiet: bool) -> Self {
        TermReporter {
            bar: Mutex::new(None),
            quiet,
        }
    }
}

impl Reporter for TermReporter {
    fn stage(&self, name: &str, detail: &str) {
        self.finish();
        if !self.quiet {
            eprintln!("{name:>10} {detail}");
        }
    }
    fn progress(&self, done: u64, total: u64, message: &str) {
        let Ok(mut guard) = self.bar.lock() else {
            return;
        };
        let bar = guard.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {wide_msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix("compile");
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
