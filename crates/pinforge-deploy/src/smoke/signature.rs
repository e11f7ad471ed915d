//! Crash signatures made comparable: the first line without addresses or allocation site, and
//! whether it names a frame at all. Smoke reads a signature (`sanitizer::asan_signature`); flip
//! and ablate compare two by this rule, so the rule lives beside the reader.

/// The comparable part of a crash signature: its first line (the ASan kind and the top frame's
/// function, or the signal), without the allocation site and with any hex address blanked, so
/// that two runs of the same defect compare equal whatever their addresses.
pub fn normalize_signature(sig: &str) -> String {
    let first = sig.lines().next().unwrap_or("").trim();
    let first = first.split(" (allocated in").next().unwrap_or(first).trim();
    let mut out = String::with_capacity(first.len());
    let mut chars = first.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && chars.peek() == Some(&'x') {
            chars.next();
            while chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                chars.next();
            }
            out.push_str("0x?");
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a signature carries a stack frame to compare (a sanitizer kind and the top frame's
/// function). A signal, a hang or an exit without a result names no frame: two unrelated
/// failures of that kind read the same, so they can neither falsify a hypothesis nor show that
/// "the" failure disappeared.
pub fn has_frame(sig: &str) -> bool {
    let first = normalize_signature(sig);
    if ["killed by signal", "hang:", "exited with"]
        .iter()
        .any(|p| first.starts_with(p))
    {
        return false;
    }
    match first.rsplit_once(" in ") {
        Some((kind, func)) => !kind.trim().is_empty() && !matches!(func.trim(), "" | "?"),
        None => false,
    }
}
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const SIG: &str = "heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)\nframes: llama_kv_cache::apply_ubatch <- x\nSUMMARY: AddressSanitizer: heap-buffer-overflow /pinforge/src/src/llama-kv-cache.cpp:1030 in llama_kv_cache::apply_ubatch";

    #[test]
    fn signatures_compare_by_kind_and_top_frame() {
        assert_eq!(
            normalize_signature(SIG),
            "heap-buffer-overflow in llama_kv_cache::apply_ubatch"
        );
        assert_eq!(
            normalize_signature("SEGV on unknown address 0x000000001234 in f"),
            "SEGV on unknown address 0x? in f"
        );
        assert_eq!(
            normalize_signature("killed by signal 11 (SIGSEGV)"),
            "killed by signal 11 (SIGSEGV)"
        );
        assert!(has_frame(SIG));
        assert!(has_frame("SEGV on unknown address 0x000000001234 in f"));
        assert!(!has_frame("killed by signal 11 (SIGSEGV)"));
        assert!(!has_frame("hang: no result within 60s"));
        assert!(!has_frame("exited with 3 without a result"));
        assert!(!has_frame("heap-buffer-overflow in ?"));
    }
}
