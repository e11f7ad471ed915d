//! Sanitizer reports in a router log. The router forwards each child's output prefixed with
//! `[port]`, so an AddressSanitizer report of a child lands in the router's log; a crash row's
//! evidence is the report's lines written while that row ran, and an arm's signatures are the
//! distinct `ERROR: AddressSanitizer: KIND` kinds with the first frame in llama code.

use crate::base::error::{Error, IoContext, Result};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The most report lines kept per crash row.
const MAX_LINES: usize = 24;

/// The log's length now (0 when it cannot be read: it is pinforge's own file).
pub(super) fn len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

fn read_from(log: &Path, from: u64) -> Result<(String, u64)> {
    let mut f = crate::base::fsx::open_regular(log, "router log", false)?;
    f.seek(SeekFrom::Start(from)).at("seek in", log)?;
    let mut b = Vec::new();
    f.read_to_end(&mut b).at("read", log)?;
    let end = from + b.len() as u64;
    Ok((String::from_utf8_lossy(&b).into_owned(), end))
}

/// The sanitizer report lines written to `log` since byte `from`, and the new end. The router
/// may write the report a moment after the proxy answered, so this waits briefly for one.
pub(super) fn excerpt_since(log: &Path, from: u64) -> Result<(Vec<String>, u64)> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let (text, end) = read_from(log, from)?;
        let lines = report_lines(&text);
        if !lines.is_empty() || std::time::Instant::now() >= until {
            return Ok((lines, end));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The lines of the first sanitizer report in `text`: the `ERROR:` line, the summary, and the
/// stack frames between, at most [`MAX_LINES`].
pub(crate) fn report_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if l.contains("ERROR: AddressSanitizer:") || l.contains("runtime error:") {
            inside = true;
        }
        if inside {
            out.push(l.trim_end().to_string());
            if l.contains("SUMMARY: AddressSanitizer") || out.len() >= MAX_LINES {
                break;
            }
        }
    }
    out
}

/// `heap-buffer-overflow in llama_kv_cache::apply_ubatch` from a report's lines: the kind
/// from the ERROR line, the function of the first frame inside llama.cpp.
pub(crate) fn signature(lines: &[String]) -> Option<String> {
    let err = lines.iter().find_map(|l| {
        let (_, rest) = l.split_once("ERROR: AddressSanitizer: ")?;
        rest.split_whitespace().next().map(str::to_string)
    })?;
    let frame = lines.iter().find_map(|l| {
        let t = l.split_once("] ").map(|(_, r)| r).unwrap_or(l).trim_start();
        if !t.starts_with('#') {
            return None;
        }
        let (_, f) = t.split_once(" in ")?;
        let func = f.split(" /").next()?.trim();
        (func.contains("llama") || func.contains("ggml")).then(|| func.to_string())
    });
    Some(match frame {
        Some(f) => format!("{err} in {f}"),
        None => err,
    })
}

/// Every distinct signature in a whole log, with how many reports carried it.
pub(super) fn signatures_in(log: &Path) -> Result<BTreeMap<String, u64>> {
    let (text, _) = read_from(log, 0)
        .map_err(|e| Error::check(log.display(), format!("the router log: {e}")))?;
    let mut out = BTreeMap::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("ERROR: AddressSanitizer:") {
        let start = rest[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let chunk = &rest[start..];
        let lines = report_lines(chunk);
        if let Some(sig) = signature(&lines) {
            *out.entry(sig).or_insert(0) += 1;
        }
        rest = &rest[at + 1..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
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
        crate::base::fsx::write_atomic(&p, format!("{LOG}{LOG}").as_bytes()).expect("write");
        let sigs = signatures_in(&p).expect("sigs");
        assert_eq!(sigs.values().copied().collect::<Vec<_>>(), [2]);
        let (lines, end) = excerpt_since(&p, LOG.len() as u64).expect("since");
        assert_eq!((lines.len(), end), (5, 2 * LOG.len() as u64));
    }
}
