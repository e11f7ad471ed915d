//! The sanitizer side of an engine process: the environment an instrumented libllama needs,
//! which ASan runtime it needs, and the crash signature read from an ASan report.

use super::SmokeTarget;
use pinforge_base::error::{Error, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The environment an engine process of `target` needs: an instrumented libllama needs the
/// ASan runtime loaded first; leaks of the Rust driver are not the engine's bug, and a
/// distinct exit code marks a sanitizer stop. (Shared by smoke and the validate engine.)
pub(crate) fn engine_env(cmd: &mut Command, target: &SmokeTarget) {
    no_ggml_backtrace(cmd);
    if let Some(so) = &target.sanitizer {
        cmd.env("LD_PRELOAD", so).env(
            "ASAN_OPTIONS",
            format!(
                "detect_leaks=0:exitcode={ASAN_EXIT}:abort_on_error=0:symbolize=1{}",
                cuda_asan_option(target)
            ),
        );
    }
}

/// A failed ggml assertion prints its line and then a backtrace, for which ggml forks `gdb`
/// (or `lldb`) to attach to the dying process. Where ptrace is restricted (a container, Yama
/// scope 1 with the fork not the tracer's parent) that attach never returns: the engine hangs
/// until the smoke's timeout and the assertion reads as a hang. The assertion's own line is the
/// signature (`ggml_abort_signature`), so the backtrace is turned off for every engine we run.
fn no_ggml_backtrace(cmd: &mut Command) {
    cmd.env("GGML_NO_BACKTRACE", "1");
}

/// The CUDA driver maps device memory into the range ASan keeps as its shadow gap: an
/// instrumented CUDA build needs `protect_shadow_gap=0`, or cuInit fails on a GPU machine.
fn cuda_asan_option(target: &SmokeTarget) -> &'static str {
    if target.cuda {
        ":protect_shadow_gap=0"
    } else {
        ""
    }
}

/// [`engine_env`] for the validate engine, choosing whether the sanitizer symbolizes its report. Symbolizing costs
/// seconds per report on an instrumented libllama; a harness that has already seen the
/// names of a crash's frames can map an unsymbolized report's `(module+offset)` frames back
/// to them. Every frame also carries `<module+offset>` either way, for that mapping.
pub fn engine_env_symbolized(cmd: &mut Command, target: &SmokeTarget, symbolize: bool) {
    no_ggml_backtrace(cmd);
    if let Some(so) = &target.sanitizer {
        cmd.env("LD_PRELOAD", so).env(
            "ASAN_OPTIONS",
            format!(
                "detect_leaks=0:exitcode={ASAN_EXIT}:abort_on_error=0:symbolize={}:stack_trace_format='    #%n %p %F %L <%m+%o>'{}",
                u8::from(symbolize),
                cuda_asan_option(target)
            ),
        );
    }
}

/// The exit code the sanitizer is told to use, so its stops are told apart from errors.
pub const ASAN_EXIT: i32 = 86;

/// The ASan runtime a library needs (`libasan.so.8`): its `DT_NEEDED` entry (the bytes
/// already checked against the record). A file `elf` does not read (not ELF64 little-endian)
/// falls back to a scan of its bytes for the name.
pub(super) fn asan_soname(bytes: &[u8]) -> Option<String> {
    if let Some(needed) = pinforge_base::elf::needed(bytes) {
        return needed.into_iter().find(|n| n.starts_with("libasan.so."));
    }
    let needle = b"libasan.so.";
    let at = bytes.windows(needle.len()).position(|w| w == needle)?;
    let end = bytes[at..]
        .iter()
        .position(|&b| b == 0)
        .map(|e| at + e)
        .unwrap_or(at + needle.len());
    Some(String::from_utf8_lossy(&bytes[at..end]).into_owned())
}

/// clang links its AddressSanitizer runtime into executables only: an instrumented shared
/// library built by clang names no runtime, it just calls `__asan_init`. The runtime that
/// belongs to the compiler version the library records (`clang version X.Y.Z` in its
/// `.comment`) is found in the distribution's LLVM folders, or else asked of the `clang` on
/// PATH; nothing named by the record itself is run.
pub(super) fn clang_asan_runtime(bytes: &[u8], name: &str) -> Result<Option<String>> {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if !has(b"__asan_init") {
        return Ok(None);
    }
    let arch = std::env::consts::ARCH;
    let file = format!("libclang_rt.asan-{arch}.so");
    let mut candidates = Vec::new();
    if let Some(v) = clang_version(bytes) {
        let major = v.split('.').next().unwrap_or(&v).to_string();
        for ver in [v.as_str(), major.as_str()] {
            candidates.push(PathBuf::from(format!(
                "/usr/lib/llvm-{major}/lib/clang/{ver}/lib/linux/{file}"
            )));
            candidates.push(PathBuf::from(format!(
                "/usr/lib/llvm-{major}/lib/clang/{ver}/lib/{arch}-unknown-linux-gnu/libclang_rt.asan.so"
            )));
        }
    }
    if let Ok(o) = Command::new("clang")
        .arg(format!("-print-file-name={file}"))
        .stdin(Stdio::null())
        .output()
    {
        let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && p.starts_with('/') {
            candidates.push(PathBuf::from(p));
        }
    }
    match candidates.into_iter().find(|p| p.is_file()) {
        Some(p) => Ok(Some(p.display().to_string())),
        None => Err(Error::input(
            name,
            "libllama is instrumented by clang's AddressSanitizer, but no clang ASan runtime \
             was found",
        )
        .with_hint(format!(
            "install the clang that built it (Debian: apt-get install clang; the runtime is \
             {file} in libclang-rt-*-dev)"
        ))),
    }
}

/// `14.0.6` from a `.comment` string `Debian clang version 14.0.6`.
fn clang_version(bytes: &[u8]) -> Option<String> {
    let needle = b"clang version ";
    let at = bytes.windows(needle.len()).position(|w| w == needle)? + needle.len();
    let v: String = bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .map(|&b| b as char)
        .collect();
    (!v.is_empty()).then_some(v)
}

/// `heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in ...)` from an ASan
/// report, plus its SUMMARY line and first frames.
pub fn asan_signature(stderr: &str) -> Option<String> {
    let err_line = stderr
        .lines()
        .find(|l| l.contains("ERROR: AddressSanitizer:"))?;
    let kind = err_line
        .split("ERROR: AddressSanitizer:")
        .nth(1)
        .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_default();
    let frame_fn = |line: &str| -> Option<String> {
        let l = line.trim_start();
        if !l.starts_with('#') {
            return None;
        }
        let after = l.split(" in ").nth(1)?;
        let func = after.split(" /").next().unwrap_or(after).trim();
        let func = func.split(" (").next().unwrap_or(func);
        Some(func.split('(').next().unwrap_or(func).trim().to_string())
    };
    let mut lines = stderr
        .lines()
        .skip_while(|l| !l.contains("ERROR: AddressSanitizer:"));
    let frames: Vec<String> = lines
        .by_ref()
        .skip(1)
        .skip_while(|l| !l.trim_start().starts_with("#0"))
        .take_while(|l| l.trim_start().starts_with('#'))
        .filter_map(frame_fn)
        .take(4)
        .collect();
    let alloc: Option<String> = stderr
        .lines()
        .skip_while(|l| !l.contains("allocated by thread"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('#'))
        .filter_map(frame_fn)
        .find(|f| f.contains("llama") || f.contains("ggml"));
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("SUMMARY: AddressSanitizer:"))
        .map(str::trim);
    let mut sig = format!(
        "{kind} in {}",
        frames.first().cloned().unwrap_or_else(|| "?".into())
    );
    if let Some(a) = alloc {
        sig.push_str(&format!(" (allocated in {a})"));
    }
    if !frames.is_empty() {
        sig.push_str(&format!("\nframes: {}", frames.join(" <- ")));
    }
    if let Some(s) = summary {
        sig.push_str(&format!("\n{s}"));
    }
    Some(sig)
}

/// The signature of a ggml assertion or abort from the engine's stderr: ggml prints
/// `FILE:LINE: GGML_ASSERT(COND) failed` (or `FILE:LINE: MESSAGE` for `GGML_ABORT`) before it
/// aborts. The first line is `GGML_ASSERT(COND) in FILE`, with the file's name only and no line
/// number (both drift between pins, the condition does not) and without the condition's
/// `&& "message"` literal, so that a `Pinforge-Check` can name it; the second line is ggml's
/// own. The last such line wins (an abort ends the process). `None` when there is none.
pub fn ggml_abort_signature(stderr: &str) -> Option<String> {
    stderr.lines().rev().find_map(|line| {
        let line = line.trim();
        let (path, rest) = split_file_line(line)?;
        let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
        let first = match rest
            .strip_prefix("GGML_ASSERT(")
            .and_then(|r| r.strip_suffix(") failed"))
        {
            Some(cond) => {
                let cond = match cond.split_once(" && \"") {
                    Some((c, lit)) if lit.ends_with('"') => c,
                    _ => cond,
                };
                format!("GGML_ASSERT({}) in {file}", cond.trim())
            }
            None => format!("GGML_ABORT({}) in {file}", rest.trim()),
        };
        Some(format!("{first}\n{line}"))
    })
}

/// `FILE:LINE: REST` where FILE is a C, C++ or CUDA source and LINE a number.
fn split_file_line(line: &str) -> Option<(&str, &str)> {
    let (head, rest) = line.split_once(": ")?;
    let (path, num) = head.rsplit_once(':')?;
    let source = [".c", ".cpp", ".cu", ".h", ".hpp", ".cc"]
        .iter()
        .any(|e| path.ends_with(e));
    (source && !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) && !rest.is_empty())
        .then_some((path, rest))
}

/// ASan ends its report with a map of shadow bytes and their legend; the lines worth showing
/// as "last lines of stderr" are the ones before it (and the ABORTING line after it).
pub fn without_shadow_legend(stderr: &str) -> String {
    let mut out = Vec::new();
    let mut skipping = false;
    for line in stderr.lines() {
        if line.starts_with("Shadow bytes around the buggy address") {
            skipping = true;
        }
        if skipping && line.contains("==ABORTING") {
            skipping = false;
        }
        if !skipping {
            out.push(line);
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_ggml_assertion_is_named_by_condition_and_file_not_line() {
        let err = "llama_context: n_ctx = 128\n/pinforge/src/src/llama-kv-cache.cpp:398: GGML_ASSERT(hparams.n_pos_per_embd() == 1 && \"seq_add() is only supported for n_pos_per_embd() == 1\") failed\n";
        let sig = ggml_abort_signature(err).unwrap();
        assert_eq!(
            sig.lines().next().unwrap(),
            "GGML_ASSERT(hparams.n_pos_per_embd() == 1) in llama-kv-cache.cpp"
        );
        assert!(sig.lines().nth(1).unwrap().contains(":398: GGML_ASSERT("));
        // Another pin's line number reads the same once normalized.
        let moved = err.replace(":398:", ":595:");
        assert_eq!(
            crate::smoke::signature::normalize_signature(&ggml_abort_signature(&moved).unwrap()),
            crate::smoke::signature::normalize_signature(&sig)
        );
        assert!(crate::smoke::signature::has_frame(&sig));
        let abort = "x\nsrc/llama-kv-cache.cpp:657: The current KV cache / model configuration does not support K-shift\n";
        assert_eq!(
            ggml_abort_signature(abort).unwrap().lines().next().unwrap(),
            "GGML_ABORT(The current KV cache / model configuration does not support K-shift) in llama-kv-cache.cpp"
        );
        // A plain assertion without a message literal keeps its condition whole.
        let plain = "ggml.c:12: GGML_ASSERT(a == b) failed";
        assert_eq!(
            ggml_abort_signature(plain).unwrap().lines().next().unwrap(),
            "GGML_ASSERT(a == b) in ggml.c"
        );
        for none in [
            "",
            "note: 12: not a file",
            "main.rs:3: panicked",
            "a.cpp:x1: y",
            "a.cpp:3: ",
        ] {
            assert_eq!(ggml_abort_signature(none), None, "{none:?}");
        }
    }

    const ASAN: &str = "=================================================================
==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020000001d8 at pc 0x7f00 bp 0x7ffd sp 0x7ffd
READ of size 4 at 0x6020000001d8 thread T0
    #0 0x7f3a in llama_kv_cache::apply_ubatch(llama_kv_cache::slot_info const&, llama_ubatch const&) (/b/bin/libllama.so.0+0x1f)
    #1 0x7f3b in llama_kv_cache::state_read_meta(llama_io_read_i&, unsigned int, unsigned int, llama_kv_cache::slot_info&, int) (/b/bin/libllama.so.0+0x2f)
    #2 0x7f3c in llama_kv_cache::state_read(llama_io_read_i&, int, unsigned int) (/b/bin/libllama.so.0+0x3f)

0x6020000001d8 is located 0 bytes after 8-byte region [0x6020000001d0,0x6020000001d8)
allocated by thread T0 here:
    #0 0x7f10 in operator new(unsigned long) ../../../../src/libsanitizer/asan/asan_new_delete.cpp:95
    #1 0x7f11 in llama_batch_allocr::ubatch_reserve(unsigned int, unsigned int) (/b/bin/libllama.so.0+0x4f)

SUMMARY: AddressSanitizer: heap-buffer-overflow (/b/bin/libllama.so.0+0x1f) in llama_kv_cache::apply_ubatch(llama_kv_cache::slot_info const&, llama_ubatch const&)
";

    #[test]
    fn a_clang_instrumented_library_gets_clangs_runtime_and_others_get_none() {
        assert_eq!(
            clang_version(b"\0GCC: (Debian 12.2.0-14) 12.2.0\0Debian clang version 14.0.6\0")
                .as_deref(),
            Some("14.0.6")
        );
        assert_eq!(clang_version(b"GCC: 12.2.0"), None);
        // Not instrumented: nothing to preload, nothing searched.
        assert_eq!(
            clang_asan_runtime(b"clang version 14.0.6", "x").expect("plain"),
            None
        );
        // Instrumented by Debian's clang 14 (tools/bootstrap.sh installs it): its runtime.
        if Path::new("/usr/lib/llvm-14").is_dir() {
            let so = clang_asan_runtime(b"__asan_init\0Debian clang version 14.0.6\0", "x")
                .expect("found")
                .expect("instrumented");
            assert!(so.contains("libclang_rt.asan"), "{so}");
            assert!(Path::new(&so).is_file(), "{so}");
        }
    }

    #[test]
    fn asan_reports_become_signatures() {
        let sig = asan_signature(ASAN).expect("signature");
        let first = sig.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            "heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)"
        );
        assert!(
            sig.contains("frames: llama_kv_cache::apply_ubatch <- llama_kv_cache::state_read_meta")
        );
        assert!(sig.contains("SUMMARY: AddressSanitizer: heap-buffer-overflow"));
        assert_eq!(asan_signature("all fine\n"), None);
    }

    #[test]
    fn shadow_legend_is_left_out_of_the_tail() {
        let text = "READ of size 4\nSUMMARY: x\nShadow bytes around the buggy address:\n  0x0c: fa\n  Heap left redzone: fa\n==1==ABORTING\n";
        assert_eq!(
            without_shadow_legend(text),
            "READ of size 4\nSUMMARY: x\n==1==ABORTING"
        );
    }

    #[test]
    fn asan_runtime_is_found_in_dynamic_strings() {
        assert_eq!(
            asan_soname(b"\x7fELF....libstdc++.so.6\0libasan.so.8\0libm.so.6\0").as_deref(),
            Some("libasan.so.8")
        );
        assert_eq!(asan_soname(b"\x7fELF....libm.so.6\0"), None);
    }

    #[test]
    fn asan_runtime_of_a_real_instrumented_library_is_its_dt_needed_entry() {
        let d = tempfile::tempdir().expect("tmp");
        let src = d.path().join("a.c");
        std::fs::write(
            &src,
            "int f(int *p) { return p[1]; }\nconst char *s = \"libasan.so.99\";\n",
        )
        .expect("write");
        let lib = d.path().join("liba.so");
        let ok = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-fsanitize=address", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return; // no compiler with ASan here
        }
        let bytes = std::fs::read(&lib).expect("read");
        let name = asan_soname(&bytes).expect("needs libasan");
        // The dynamic section's entry, not the decoy string in .rodata.
        assert!(
            name.starts_with("libasan.so.") && name != "libasan.so.99",
            "{name}"
        );
        // An uninstrumented library needs none, whatever its strings say.
        let plain = d.path().join("libp.so");
        let st = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&plain)
            .arg(&src)
            .status()
            .expect("cc");
        assert!(st.success());
        assert_eq!(asan_soname(&std::fs::read(&plain).expect("read")), None);
    }
}
