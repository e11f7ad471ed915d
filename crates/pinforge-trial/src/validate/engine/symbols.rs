//! Naming the frames of an unsymbolized sanitizer report from the ones a symbolized report of
//! the same engine taught (symbolizing costs seconds per crash on an instrumented libllama).

/// Frame names learnt from symbolized sanitizer reports, keyed by `module+offset`: the first
/// crash of an engine is symbolized (seconds on an instrumented libllama), later ones are
/// not and get their names back from here. A frame not seen before is shown as
/// `module+offset` and the next engine symbolizes again.
#[derive(Debug, Clone)]
pub(crate) struct Symbols {
    names: std::collections::BTreeMap<String, String>,
    /// Whether the next engine should symbolize.
    pub need: bool,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols {
            names: Default::default(),
            need: true,
        }
    }
}

impl Symbols {
    /// Learn from a symbolized report, or name an unsymbolized one's frames; the text to read
    /// a signature from.
    pub(crate) fn process(&mut self, stderr: &str, symbolized: bool) -> String {
        let mut out = String::with_capacity(stderr.len());
        for line in stderr.lines() {
            out.push_str(
                &self
                    .frame(line, symbolized)
                    .unwrap_or_else(|| line.to_string()),
            );
            out.push('\n');
        }
        out
    }

    fn frame(&mut self, line: &str, symbolized: bool) -> Option<String> {
        let t = line.trim_start();
        if !t.starts_with('#') || !t.ends_with('>') {
            return None;
        }
        let open = t.rfind(" <")?;
        let key_full = &t[open + 2..t.len() - 1];
        let (module, off) = key_full.rsplit_once('+')?;
        let key = format!("{}+{off}", module.rsplit('/').next().unwrap_or(module));
        let mut parts = t[..open].splitn(3, ' ');
        let (n, pc, rest) = (
            parts.next()?,
            parts.next()?,
            parts.next().unwrap_or("").trim(),
        );
        if symbolized {
            if rest.starts_with("in ") {
                self.names.insert(key, rest.to_string());
            }
            return None;
        }
        let named = match self.names.get(&key) {
            Some(r) => r.clone(),
            None => {
                self.need = true;
                format!("in {key}")
            }
        };
        Some(format!("    {n} {pc} {named} <{key}>"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinforge_deploy::smoke;

    const SYMBOLIZED: &str = "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1
    #0 0x7f3a in llama_kv_cache::apply_ubatch(llama_ubatch const&) /src/llama-kv-cache.cpp:9 </b/lib/libllama.so.0+0x1f>
    #1 0x7f3b in llama_kv_cache::state_read_meta(int) /src/llama-kv-cache.cpp:20 </b/lib/libllama.so.0+0x2f>
allocated by thread T0 here:
    #0 0x7f10 in operator new(unsigned long) asan_new_delete.cpp:95 </usr/lib/libasan.so.8+0x10>
    #1 0x7f11 in llama_batch_allocr::ubatch_reserve(unsigned int) /src/llama-batch.cpp:5 </b/lib/libllama.so.0+0x4f>
";

    #[test]
    fn an_unsymbolized_report_gets_the_names_a_symbolized_one_taught() {
        let mut s = Symbols::default();
        assert!(s.need);
        let first = smoke::asan_signature(&s.process(SYMBOLIZED, true)).expect("sig");
        // Other load addresses, same module offsets: the next engine's report, unsymbolized.
        let raw = SYMBOLIZED
            .lines()
            .map(|l| match l.find(" in ") {
                Some(i) if l.trim_start().starts_with('#') => {
                    let loc = &l[l.rfind(" <").expect("key")..];
                    format!(
                        "{}  (/b/lib/libllama.so.0+0x0){loc}",
                        &l[..i].replace("0x7f", "0x5f")
                    )
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        s.need = false;
        let again = smoke::asan_signature(&s.process(&raw, false)).expect("sig");
        assert_eq!(first, again);
        assert!(
            again.starts_with("heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)"),
            "{again}"
        );
        assert!(!s.need, "every frame was known");
        // A frame never seen: shown by module+offset, and the next engine symbolizes again.
        let other = raw.replace("libllama.so.0+0x1f>", "libllama.so.0+0x99>");
        let sig = smoke::asan_signature(&s.process(&other, false)).expect("sig");
        assert!(
            sig.starts_with("heap-buffer-overflow in libllama.so.0+0x99"),
            "{sig}"
        );
        assert!(s.need);
    }
}
