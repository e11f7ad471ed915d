//! Notices: lines the library has for a person while it waits (a lock another command holds),
//! which are neither results nor errors and change nothing a command returns.
//!
//! Why one process-wide sink, when the signing key and the reporter are passed in options: a
//! notice is a logger's line. The command line decides once (stderr, or nothing under `-q`),
//! and threading a parameter through the twenty places that take a lock would make every
//! caller carry it for a line that alters no result. With no sink set, notices go nowhere,
//! which is what a library embedded elsewhere wants.

use std::sync::RwLock;

type Sink = Box<dyn Fn(&str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Where notices go from now on (`None`: nowhere).
pub fn set_sink(sink: Option<Sink>) {
    if let Ok(mut s) = SINK.write() {
        *s = sink;
    }
}

/// Send one notice to the sink, if there is one.
pub fn emit(line: &str) {
    if let Ok(s) = SINK.read() {
        if let Some(f) = s.as_ref() {
            f(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn notices_reach_the_sink_set_and_nothing_after_it_is_cleared() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s2 = Arc::clone(&seen);
        set_sink(Some(Box::new(move |l| {
            if let Ok(mut v) = s2.lock() {
                v.push(l.to_string());
            }
        })));
        emit("one");
        set_sink(None);
        emit("two");
        assert_eq!(*seen.lock().expect("lock"), vec!["one".to_string()]);
    }
}
