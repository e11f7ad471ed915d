//! Sanitizer reports in a router log. The router forwards each child's output prefixed with
//! `[port]`, so an AddressSanitizer report of a child lands in the router's log; a crash row's
//! evidence is the report's lines written while that row ran, and an arm's signatures are the
//! distinct `ERROR: AddressSanitizer: KIND` kinds with the first frame in llama code.
//!
//! Signatures are path-free: a frame the sanitizer could not symbolize names its module by
//! absolute path (`(/opt/x/lib/libllama.so+0x1234)`), which differs between hosts that install
//! at different places, so every path in a signature is cut to its file name
//! (`libllama.so+0x1234`). The in-process validate's signature (`deploy::smoke::signature`)
//! compares only the first line (the kind and the top frame's function) and so never holds the
//! `SUMMARY:` line's path; the path cut here is the served counterpart.

use pinforge_base::error::{Error, IoContext, Result};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

/// The most report lines kept per crash row.
const MAX_LINES: usize = 24;

/// The log's length now (0 when it cannot be read: it is pinforge's own file).
pub(super) fn len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

fn read_from(log: &Path, from: u64) -> Result<(String, u64)> {
    let mut f = pinforge_base::fsx::open_regular(log, "router log", false)?;
    f.seek(SeekFrom::Start(from)).at("seek in", log)?;
    let mut b = Vec::new();
    f.read_to_end(&mut b).at("read", log)?;
    let end = from + b.len() as u64;
    Ok((String::from_utf8_lossy(&b).into_owned(), end))
}

/// How long a crash row waits for a report to begin in the log.
const REPORT_START: Duration = Duration::from_secs(3);
/// How long it waits in all for a begun report's `SUMMARY:` line (symbolizing a report on a
/// loaded host takes seconds).
const REPORT_END: Duration = Duration::from_secs(10);
/// A begun report whose log has not grown for this long is taken as it is.
const QUIET: Duration = Duration::from_millis(750);

/// A child's failed ggml assertion (or `GGML_ABORT`) in a router log line, as smoke names it
/// (`GGML_ASSERT(COND) in FILE`, [`pinforge_deploy::smoke::ggml_abort_signature`]), with the
/// router's `[port] ` prefix taken off first. ggml prints the line and aborts: the line is the
/// whole report (the child runs with `GGML_NO_BACKTRACE`).
pub(crate) fn ggml_abort(line: &str) -> Option<String> {
    // Only a child's line (the router prefixes each with `[PORT] `): the router's own lines
    // are never a child's death.
    let (port, rest) = line.trim_start().strip_prefix('[')?.split_once("] ")?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // A sanitizer's `FILE:LINE: runtime error:` has the same shape and is its own report.
    if rest.contains("runtime error:") {
        return None;
    }
    let sig = pinforge_deploy::smoke::ggml_abort_signature(rest)?;
    sig.lines().next().map(str::to_string)
}

/// Whether a signature is a ggml abort's (`GGML_ASSERT(…) in FILE`, `GGML_ABORT(…) in FILE`).
pub(crate) fn is_ggml_signature(sig: &str) -> bool {
    sig.starts_with("GGML_ASSERT(") || sig.starts_with("GGML_ABORT(")
}

/// Whether `text` holds a report's `SUMMARY:` line after its `ERROR:` line, or a ggml abort
/// (a report of one line).
fn report_complete(text: &str) -> bool {
    if text.lines().any(|l| ggml_abort(l).is_some()) {
        return true;
    }
    let Some(at) = text
        .find("ERROR: AddressSanitizer:")
        .or_else(|| text.find("runtime error:"))
    else {
        return false;
    };
    text[at..].contains("SUMMARY: ")
}

/// The sanitizer report lines written to `log` since byte `from`, and the new end. The child's
/// report reaches the router's log a moment after the proxy answered, and is written over
/// seconds while it is symbolized: this waits (bounded) for it to begin, then for its
/// `SUMMARY:` line or for the log to stop growing, so a crash row carries the whole report.
pub(super) fn excerpt_since(log: &Path, from: u64) -> Result<(Vec<String>, u64)> {
    let t0 = Instant::now();
    let (mut seen_len, mut grew_at) = (0u64, Instant::now());
    loop {
        let (text, end) = read_from(log, from)?;
        if end != seen_len {
            (seen_len, grew_at) = (end, Instant::now());
        }
        let lines = report_lines(&text);
        let waited = t0.elapsed();
        let done = if lines.is_empty() {
            waited >= REPORT_START
        } else {
            report_complete(&text) || grew_at.elapsed() >= QUIET || waited >= REPORT_END
        };
        if done {
            return Ok((lines, end));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The router's own lines, written between bytes `from` and `end` of `log`, that show it
/// stopping `preset`'s child itself: `stopping model instance name=PRESET`, the child's
/// `exit command received` and `instance name=PRESET exited with status N`. A row cut while
/// the router stopped the fresh child it had just spawned (the stale stop left from evicting
/// a dead one) carries these and no sanitizer report: not a death (issue #35).
pub(super) fn router_stop_lines(
    log: &Path,
    from: u64,
    end: u64,
    preset: &str,
) -> Result<Vec<String>> {
    let (text, _) = read_from(log, from)?;
    let window = text
        .as_bytes()
        .get(..(end.saturating_sub(from) as usize).min(text.len()))
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    Ok(stop_lines(&window, preset))
}

/// [`router_stop_lines`] over text already read; empty unless the stop line names `preset`.
pub(crate) fn stop_lines(text: &str, preset: &str) -> Vec<String> {
    let stop = format!("stopping model instance name={preset}");
    let exited = format!("instance name={preset} exited with status");
    let stopped = text.lines().any(|l| l.trim_end().ends_with(&stop));
    if !stopped {
        return Vec::new();
    }
    text.lines()
        .filter(|l| {
            l.trim_end().ends_with(&stop)
                || l.contains(&exited)
                || l.contains("exit command received")
        })
        .take(MAX_LINES)
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// The lines of the first sanitizer report in `text`: the `ERROR:` line and the stack frames
/// after it, at most [`MAX_LINES`], and the `SUMMARY:` line (kept past the cap).
pub(crate) fn report_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if !inside && ggml_abort(l).is_some() {
            out.push(l.trim_end().to_string());
            break;
        }
        if !inside && (l.contains("ERROR: AddressSanitizer:") || l.contains("runtime error:")) {
            inside = true;
        }
        if inside {
            let summary = l.contains("SUMMARY: ");
            if out.len() < MAX_LINES || summary {
                out.push(l.trim_end().to_string());
            }
            if summary {
                break;
            }
        }
    }
    out
}

/// `text` with every path in it cut to its file name: `(/a/b/libllama.so+0x12)` reads
/// `(libllama.so+0x12)`, `/src/llama-kv-cache.cpp:10` reads `llama-kv-cache.cpp:10`.
pub(crate) fn path_free(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let lead = word.len() - word.trim_start_matches('(').len();
        let (open, rest) = word.split_at(lead);
        out.push_str(open);
        match rest.rfind('/') {
            Some(at) if rest.starts_with('/') || rest.starts_with("./") => {
                out.push_str(&rest[at + 1..])
            }
            _ => out.push_str(rest),
        }
    }
    out
}

/// `heap-buffer-overflow in llama_kv_cache::apply_ubatch` from a report's lines: the kind
/// from the ERROR line, the first frame inside llama.cpp (its function, or for a frame the
/// sanitizer could not symbolize its module and offset), path-free ([`path_free`]).
pub(crate) fn signature(lines: &[String]) -> Option<String> {
    let err = lines.iter().find_map(|l| {
        let (_, rest) = l.split_once("ERROR: AddressSanitizer: ")?;
        rest.split_whitespace().next().map(str::to_string)
    });
    // No sanitizer report: a ggml abort is the death's own evidence.
    let Some(err) = err else {
        return lines.iter().find_map(|l| ggml_abort(l));
    };
    let frame = lines.iter().find_map(|l| {
        let t = l.split_once("] ").map(|(_, r)| r).unwrap_or(l).trim_start();
        if !t.starts_with('#') {
            return None;
        }
        let func = match t.split_once(" in ") {
            // `#1 0x7f in FUNC /src/file.cpp:1` or `#1 0x7f in FUNC (/lib/libllama.so+0x1)`.
            Some((_, f)) => f.split(" /").next()?.trim().to_string(),
            // `#1 0x7f (/lib/libllama.so+0x1)`: the module and offset.
            None => t.split_once(" (")?.1.trim_end_matches(')').to_string(),
        };
        let func = path_free(&func);
        (func.contains("llama") || func.contains("ggml")).then_some(func)
    });
    Some(match frame {
        Some(f) => format!("{err} in {f}"),
        None => err,
    })
}

/// Whether a summary's stored signatures are what its log gives (`got`). A run sealed before
/// ggml aborts became signatures counted sanitizer reports alone: its summary names no ggml
/// abort and equals the log's count without them, and it agrees too.
pub(crate) fn signatures_agree(
    got: &BTreeMap<String, u64>,
    stored: &BTreeMap<String, u64>,
) -> bool {
    if got == stored {
        return true;
    }
    let older_rule: BTreeMap<&String, &u64> =
        got.iter().filter(|(k, _)| !is_ggml_signature(k)).collect();
    !stored.keys().any(|k| is_ggml_signature(k))
        && older_rule == stored.iter().collect::<BTreeMap<_, _>>()
}

/// Every distinct signature in a whole log, with how many reports carried it.
pub(super) fn signatures_in(log: &Path) -> Result<BTreeMap<String, u64>> {
    let (text, _) = read_from(log, 0)
        .map_err(|e| Error::check(log.display(), format!("the router log: {e}")))?;
    let mut out = BTreeMap::new();
    // Each report begins at its own line: an AddressSanitizer ERROR line or a ggml abort.
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.contains("ERROR: AddressSanitizer:") || ggml_abort(line).is_some() {
            let lines = report_lines(&text[at..]);
            if let Some(sig) = signature(&lines) {
                *out.entry(sig).or_insert(0) += 1;
            }
        }
        at += line.len();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_router_stop_of_the_rows_preset_is_found_and_another_presets_is_not() {
        let log = "srv  load: spawning server instance with name=fake-a on port 40001\n\
                   srv  operator(): stopping model instance name=fake-a\n\
                   [40001] srv  operator(): exit command received, exiting...\n\
                   srv  operator(): instance name=fake-a exited with status 0\n";
        let lines = stop_lines(log, "fake-a");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].ends_with("stopping model instance name=fake-a"));
        assert!(stop_lines(log, "fake-b").is_empty());
        assert!(
            stop_lines(log, "fake").is_empty(),
            "a prefix of the name is not the name"
        );
        assert!(stop_lines("[40001] exit command received\n", "fake-a").is_empty());
    }

    use super::*;

    const LOG: &str = "srv  log: loaded\n\
[40123] =================================================================\n\
[40123] ==9==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x5 at pc 0x6\n\
[40123] READ of size 4 at 0x5 thread T0\n\
[40123]     #0 0x7f in memcpy (/lib/libasan.so+0x1)\n\
[40123]     #1 0x7f in llama_kv_cache::state_read_meta(llama_io_read_i&, unsigned int, int) /src/llama-kv-cache.cpp:1\n\
[40123] SUMMARY: AddressSanitizer: heap-buffer-overflow in memcpy\n\
srv  after\n";

    #[test]
    fn the_signature_names_the_kind_and_the_first_llama_frame() {
        let lines = report_lines(LOG);
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].contains("ERROR: AddressSanitizer"));
        assert_eq!(
            signature(&lines).as_deref(),
            Some(
                "heap-buffer-overflow in llama_kv_cache::state_read_meta(llama_io_read_i&, \
                 unsigned int, int)"
            )
        );
        assert!(report_lines("no report here\n").is_empty());
        assert_eq!(signature(&[]), None);
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("router.log");
        pinforge_base::fsx::write_atomic(&p, format!("{LOG}{LOG}").as_bytes()).expect("write");
        let sigs = signatures_in(&p).expect("sigs");
        assert_eq!(sigs.values().copied().collect::<Vec<_>>(), [2]);
        let (lines, end) = excerpt_since(&p, LOG.len() as u64).expect("since");
        assert_eq!((lines.len(), end), (5, 2 * LOG.len() as u64));
    }

    #[test]
    fn a_signature_holds_no_path_so_hosts_installing_elsewhere_agree() {
        let at = |dir: &str| -> Vec<String> {
            [
                "[1] ==9==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x5".to_string(),
                "[1]     #0 0x7f in __asan_memcpy (/usr/lib/libasan.so.8+0x1)".to_string(),
                format!("[1]     #1 0x7f ({dir}/lib/libllama.so+0x2a1b)"),
                format!("[1] SUMMARY: AddressSanitizer: heap-buffer-overflow ({dir}/lib/libllama.so+0x2a1b)"),
            ]
            .into()
        };
        let a = signature(&at("/opt/pinforge/rollback/store/abc")).expect("sig");
        let b = signature(&at("/home/op/root/store/def")).expect("sig");
        assert_eq!(a, "heap-buffer-overflow in libllama.so+0x2a1b");
        assert_eq!(a, b);
        let symbolized = [
            "[1] ==9==ERROR: AddressSanitizer: heap-buffer-overflow on x".to_string(),
            "[1]     #1 0x7f in llama_kv_cache::apply_ubatch(x) (/a/b/libllama.so+0x2)".to_string(),
        ];
        assert_eq!(
            signature(&symbolized).as_deref(),
            Some("heap-buffer-overflow in llama_kv_cache::apply_ubatch(x) (libllama.so+0x2)")
        );
        assert_eq!(
            path_free("x /a/b.cpp:3 (./c/d.so+0x1) a/b"),
            "x b.cpp:3 (d.so+0x1) a/b"
        );
    }

    // A served engine's failed ggml assertion is a death with its own signature, the one
    // smoke and `Pinforge-Check` use, not a bare SIGABRT.
    #[test]
    fn a_childs_ggml_assertion_in_the_router_log_is_a_report_with_smokes_signature() {
        let log = "srv  log: loaded\n\
[40123] /build/src/llama-kv-cache.cpp:1021: GGML_ASSERT(hparams.n_pos_per_embd() == 1 && \"x\") failed\n\
srv  operator(): instance name=tiny-a exited with status 1\n";
        let lines = report_lines(log);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            signature(&lines).as_deref(),
            Some("GGML_ASSERT(hparams.n_pos_per_embd() == 1) in llama-kv-cache.cpp")
        );
        assert!(report_complete(log));
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("router.log");
        pinforge_base::fsx::write_atomic(&p, format!("{log}{LOG}{log}").as_bytes()).expect("write");
        let sigs = signatures_in(&p).expect("sigs");
        assert_eq!(sigs.len(), 2, "{sigs:?}");
        assert_eq!(
            sigs["GGML_ASSERT(hparams.n_pos_per_embd() == 1) in llama-kv-cache.cpp"],
            2
        );
        // The port prefix is not part of a relative file name; the router's own lines are
        // not a child's abort.
        assert_eq!(
            ggml_abort("[40123] llama-batch.cpp:5: GGML_ASSERT(a) failed").as_deref(),
            Some("GGML_ASSERT(a) in llama-batch.cpp")
        );
        assert_eq!(
            ggml_abort("srv  load: /src/server.cpp:12: GGML_ASSERT(x) failed"),
            None
        );
        assert_eq!(
            ggml_abort("/src/server.cpp:12: GGML_ASSERT(x) failed"),
            None
        );
        assert_eq!(ggml_abort("[x] a.cpp:1: GGML_ASSERT(y) failed"), None);
        assert_eq!(
            ggml_abort("[401] /s/llama.cpp:3: runtime error: shift exponent"),
            None
        );
        assert!(ggml_abort("[401] /a/ggml.c:7: fatal error").is_some());
        assert!(is_ggml_signature("GGML_ABORT(fatal error) in ggml.c"));
        // A summary sealed before ggml aborts were counted still verifies; one fewer ASan
        // report, or a ggml count that is wrong, does not.
        let m = |v: &[(&str, u64)]| -> BTreeMap<String, u64> {
            v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        let got = m(&[
            ("GGML_ASSERT(a) in b.cpp", 2),
            ("heap-buffer-overflow in f", 3),
        ]);
        assert!(signatures_agree(&got, &got));
        assert!(signatures_agree(
            &got,
            &m(&[("heap-buffer-overflow in f", 3)])
        ));
        assert!(!signatures_agree(
            &got,
            &m(&[("heap-buffer-overflow in f", 2)])
        ));
        assert!(!signatures_agree(
            &got,
            &m(&[
                ("GGML_ASSERT(a) in b.cpp", 1),
                ("heap-buffer-overflow in f", 3)
            ])
        ));
        assert!(!is_ggml_signature("heap-buffer-overflow in f"));
    }

    #[test]
    fn a_report_is_taken_whole_when_its_summary_arrives_late() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("router.log");
        let head: String = LOG.lines().take(5).map(|l| format!("{l}\n")).collect();
        pinforge_base::fsx::write_atomic(&p, head.as_bytes()).expect("write");
        let p2 = p.clone();
        // The rest of the report (its summary) is written 1.2 s later, as a slow symbolizer
        // does; a reader that stopped at the first lines would miss it.
        let writer = std::thread::spawn(move || {
            for l in LOG.lines().skip(5) {
                std::thread::sleep(Duration::from_millis(400));
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&p2)
                    .expect("open");
                std::io::Write::write_all(&mut f, format!("{l}\n").as_bytes()).expect("append");
            }
        });
        let (lines, _) = excerpt_since(&p, 0).expect("since");
        writer.join().expect("writer");
        assert!(
            lines
                .last()
                .is_some_and(|l| l.contains("SUMMARY: AddressSanitizer")),
            "{lines:#?}"
        );
        let long: String = (0..40).map(|i| format!("    #{i} 0x1 in f{i}\n")).collect();
        let text =
            format!("==1==ERROR: AddressSanitizer: SEGV\n{long}SUMMARY: AddressSanitizer: SEGV\n");
        let lines = report_lines(&text);
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert!(lines[MAX_LINES].starts_with("SUMMARY"));
    }
}
