//! Moved from tests/cli/smoke_trust.rs: shared by both test tiers.

use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// A command that runs longer than this is a hang.
pub(crate) const HANG: Duration = Duration::from_secs(30);

pub(crate) fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) const FAKE_LIB: &[u8] = b"\x7fELF not really a library\0libm.so.6\0";

pub(crate) const FAKE_HEADER: &[u8] = b"/* not llama.h: declares nothing the shim needs */\n";

pub(crate) const FAKE_GGML: &[u8] = b"/* ggml.h */\n";

/// A workspace and a synthetic build of a fake llama.cpp under `builds/<name>/out`.
pub(crate) struct Fx {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) ws: PathBuf,
}

impl Fx {
    pub(crate) fn new() -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        // A build workspace (it has `build/`), so smoke keeps its shims in `build/.smoke`
        // where `compiled_anything` looks; a folder without one uses the user's cache.
        std::fs::create_dir_all(ws.join("build")).expect("mkdir");
        Fx { dir, ws }
    }

    pub(crate) fn base(&self, name: &str) -> PathBuf {
        self.dir.path().join("builds").join(name)
    }

    /// `lib/libllama.so.0` (the file), `lib/libllama.so` (a link to it), `include/llama.h`,
    /// `include/ggml.h`; `edit` may change the manifest before it is written.
    pub(crate) fn build_with(&self, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        self.build_of(
            name,
            [
                ("lib/libllama.so.0", FAKE_LIB, 0o755),
                ("include/llama.h", FAKE_HEADER, 0o644),
                ("include/ggml.h", FAKE_GGML, 0o644),
            ],
            edit,
        )
    }

    pub(crate) fn build_of(
        &self,
        name: &str,
        arts: [(&str, &[u8], u32); 3],
        edit: impl FnOnce(&mut Value),
    ) -> PathBuf {
        let base = self.base(name);
        let out = base.join("out");
        let mut subjects = Vec::new();
        for (n, bytes, mode) in arts {
            let p = out.join(n);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, bytes).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
            subjects.push(json!({"name": n, "digest": {"sha256": sha_hex(bytes)},
                "annotations": {"size": bytes.len()}}));
        }
        let _ = std::fs::remove_file(out.join("lib/libllama.so"));
        std::os::unix::fs::symlink("libllama.so.0", out.join("lib/libllama.so")).expect("link");
        let mut m = json!({
            "_type": "https://in-toto.io/Statement/v1",
            "predicateType": "https://slsa.dev/provenance/v1",
            "subject": subjects,
            "predicate": {
                "buildDefinition": {
                    "buildType": "https://pinforge.invalid/cmake-variant/v1",
                    "externalParameters": {"recipe": "synthetic", "variant": name,
                        "build_type": "Release", "targets": [], "cmake_args": [], "patches": []},
                    "internalParameters": {"artifact_root": "out", "inputs": {},
                        "input_digest": "0000000000000000000000000000000000000000000000000000000000000000"},
                    "resolvedDependencies": []
                },
                "runDetails": {"builder": {"id": "test"}, "metadata": {"invocationId": "x",
                    "startedOn": "", "finishedOn": ""}, "byproducts": [
                        {"name": "lib/libllama.so", "annotations": {"link_target": "libllama.so.0"}},
                        {"name": "build.log", "digest": {"sha256": sha_hex(b"")}}
                    ]}
            }
        });
        edit(&mut m);
        let path = base.join("manifest.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
        path
    }

    pub(crate) fn build(&self, name: &str) -> PathBuf {
        self.build_with(name, |_| {})
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.ws.join("rollback")
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        let mut c = crate::pinforge_cmd(&self.ws);
        c.args(args);
        run_timeout(c, HANG).unwrap_or_else(|| panic!("pinforge {args:?} hung (> {HANG:?})"))
    }

    pub(crate) fn smoke(&self, manifest: &Path) -> Output {
        self.run(&["smoke", manifest.to_str().expect("utf8"), "--arch", "qwen2"])
    }

    /// Whatever smoke left in its cache: a compiled shim or a shim source means something
    /// was compiled (or about to be).
    pub(crate) fn compiled_anything(&self) -> Vec<String> {
        let cache = self.ws.join("build").join(".smoke");
        let Ok(rd) = std::fs::read_dir(&cache) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("pinforge-smoke-") || n.starts_with("shim-"))
            .collect()
    }
}

pub(crate) fn run_timeout(mut c: std::process::Command, limit: Duration) -> Option<Output> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return Some(child.wait_with_output().expect("output"));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub(crate) fn report(o: &Output) -> String {
    format!("{}{}", crate::stdout(o), crate::stderr(o))
}

/// Just enough of llama.h for the shim to compile: the types and functions it uses, with the
/// fields it sets. It includes ggml.h, so the shim compiles against two verified headers.
pub(crate) const STUB_LLAMA_H: &str = r#"#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ggml.h"
typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;
struct llama_model;
struct llama_context;
struct llama_vocab;
typedef struct llama_memory_i *llama_memory_t;
struct llama_model_params { int32_t n_gpu_layers; };
struct llama_context_params {
    uint32_t n_ctx, n_batch, n_ubatch, n_seq_max;
    int32_t n_threads, n_threads_batch;
};
typedef struct llama_batch {
    int32_t n_tokens;
    llama_token *token;
    float *embd;
    llama_pos *pos;
    int32_t *n_seq_id;
    llama_seq_id **seq_id;
    int8_t *logits;
} llama_batch;
const char *llama_print_system_info(void);
void llama_log_set(ggml_log_callback cb, void *user_data);
void llama_backend_init(void);
struct llama_model_params llama_model_default_params(void);
struct llama_context_params llama_context_default_params(void);
struct llama_model *llama_model_load_from_file(const char *path, struct llama_model_params p);
struct llama_context *llama_init_from_model(struct llama_model *m, struct llama_context_params p);
void llama_model_free(struct llama_model *m);
void llama_free(struct llama_context *c);
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *m);
int32_t llama_vocab_n_tokens(const struct llama_vocab *v);
int32_t llama_tokenize(const struct llama_vocab *v, const char *text, int32_t len,
                       llama_token *out, int32_t max, bool add_special, bool parse_special);
struct llama_batch llama_batch_init(int32_t n, int32_t embd, int32_t n_seq_max);
void llama_batch_free(struct llama_batch b);
int32_t llama_decode(struct llama_context *c, struct llama_batch b);
float *llama_get_logits_ith(struct llama_context *c, int32_t i);
size_t llama_state_seq_get_size(struct llama_context *c, llama_seq_id s);
size_t llama_state_seq_get_data(struct llama_context *c, uint8_t *dst, size_t size, llama_seq_id s);
size_t llama_state_seq_set_data(struct llama_context *c, const uint8_t *src, size_t size, llama_seq_id s);
llama_memory_t llama_get_memory(const struct llama_context *c);
void llama_memory_clear(llama_memory_t m, bool data);
typedef struct llama_token_data { llama_token id; float logit; float p; } llama_token_data;
typedef struct llama_token_data_array {
    llama_token_data *data;
    size_t size;
    int64_t selected;
    bool sorted;
} llama_token_data_array;
struct llama_sampler;
bool llama_memory_seq_rm(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1);
bool llama_memory_can_shift(llama_memory_t m);
void llama_memory_seq_add(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos delta);
int32_t llama_model_n_embd(const struct llama_model *m);
struct llama_sampler *llama_sampler_init_grammar(const struct llama_vocab *v, const char *g, const char *root);
void llama_sampler_apply(struct llama_sampler *s, llama_token_data_array *a);
void llama_sampler_accept(struct llama_sampler *s, llama_token t);
void llama_sampler_free(struct llama_sampler *s);
bool llama_vocab_is_eog(const struct llama_vocab *v, llama_token t);
int32_t llama_token_to_piece(const struct llama_vocab *v, llama_token t, char *buf, int32_t len, int32_t lstrip, bool special);
"#;

pub(crate) const STUB_GGML_H: &str = r#"#pragma once
enum ggml_log_level { GGML_LOG_LEVEL_NONE, GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_INFO,
                      GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT };
typedef void (*ggml_log_callback)(enum ggml_log_level level, const char *text, void *user_data);
"#;

/// Compile `engine` (C, against the stub headers) into a real libllama.so.0 and write a
/// synthetic build of it with the stub headers; returns the manifest and the library's bytes.
pub(crate) fn stub_build(fx: &Fx, name: &str, engine: &str) -> (PathBuf, Vec<u8>) {
    let src = fx.dir.path().join(format!("stub-src-{name}"));
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("llama.h"), STUB_LLAMA_H).expect("write");
    std::fs::write(src.join("ggml.h"), STUB_GGML_H).expect("write");
    std::fs::write(src.join("stub.c"), engine).expect("write");
    let so = src.join("libllama.so.0");
    let st = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libllama.so.0", "-o"])
        .arg(&so)
        .arg(src.join("stub.c"))
        .arg(format!("-I{}", src.display()))
        .status()
        .expect("run cc");
    assert!(st.success(), "the stub libllama compiles");
    let lib = std::fs::read(&so).expect("read");
    let m = fx.build_of(
        name,
        [
            ("lib/libllama.so.0", &lib, 0o755),
            ("include/llama.h", STUB_LLAMA_H.as_bytes(), 0o644),
            ("include/ggml.h", STUB_GGML_H.as_bytes(), 0o644),
        ],
        |_| {},
    );
    (m, lib)
}

/// A deterministic engine: the logits depend only on the last token and its position, and
/// the state round-trips, so a save/clear/restore decode equals the reference (verdict ok).
pub(crate) const STUB_ENGINE_OK_C: &str = r#"#include "llama.h"
#include <stdlib.h>
#include <string.h>
static int model_, ctx_, mem_;
static float logits_[8];
const char *llama_print_system_info(void) { return "stub engine"; }
void llama_log_set(ggml_log_callback cb, void *u) { (void) cb; (void) u; }
void llama_backend_init(void) {}
struct llama_model_params llama_model_default_params(void) { struct llama_model_params p = {0}; return p; }
struct llama_context_params llama_context_default_params(void) { struct llama_context_params p; memset(&p, 0, sizeof p); return p; }
struct llama_model *llama_model_load_from_file(const char *path, struct llama_model_params p) { (void) path; (void) p; return (struct llama_model *) &model_; }
struct llama_context *llama_init_from_model(struct llama_model *m, struct llama_context_params p) { (void) m; (void) p; return (struct llama_context *) &ctx_; }
void llama_model_free(struct llama_model *m) { (void) m; }
void llama_free(struct llama_context *c) { (void) c; }
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *m) { (void) m; return (const struct llama_vocab *) &model_; }
int32_t llama_vocab_n_tokens(const struct llama_vocab *v) { (void) v; return 8; }
int32_t llama_tokenize(const struct llama_vocab *v, const char *t, int32_t l, llama_token *o, int32_t m, bool a, bool p) {
    (void) v; (void) t; (void) l; (void) a; (void) p;
    if (m < 3) return -3;
    o[0] = 1; o[1] = 2; o[2] = 3;
    return 3;
}
struct llama_batch llama_batch_init(int32_t n, int32_t e, int32_t s) {
    (void) s;
    struct llama_batch b;
    memset(&b, 0, sizeof b);
    b.token = calloc((size_t) n, sizeof(llama_token));
    b.embd = e ? calloc((size_t) n * (size_t) e, sizeof(float)) : NULL;
    b.pos = calloc((size_t) n, sizeof(llama_pos));
    b.n_seq_id = calloc((size_t) n, sizeof(int32_t));
    b.seq_id = calloc((size_t) n, sizeof(llama_seq_id *));
    for (int32_t i = 0; i < n; i++) b.seq_id[i] = calloc(1, sizeof(llama_seq_id));
    b.logits = calloc((size_t) n, sizeof(int8_t));
    return b;
}
void llama_batch_free(struct llama_batch b) {
    for (int32_t i = 0; i < b.n_tokens; i++) free(b.seq_id[i]);
    free(b.token); free(b.embd); free(b.pos); free(b.n_seq_id); free(b.seq_id); free(b.logits);
}
int32_t llama_decode(struct llama_context *c, struct llama_batch b) {
    (void) c;
    int32_t last = b.n_tokens - 1;
    int hot = (int) ((b.token[last] * 3 + (b.pos ? b.pos[last] : last)) % 8);
    for (int i = 0; i < 8; i++) logits_[i] = i == hot ? 1.0f : 0.0f;
    return 0;
}
float *llama_get_logits_ith(struct llama_context *c, int32_t i) { (void) c; (void) i; return logits_; }
size_t llama_state_seq_get_size(struct llama_context *c, llama_seq_id s) { (void) c; (void) s; return 4; }
size_t llama_state_seq_get_data(struct llama_context *c, uint8_t *d, size_t n, llama_seq_id s) { (void) c; (void) s; if (n < 4) return 0; memset(d, 7, 4); return 4; }
size_t llama_state_seq_set_data(struct llama_context *c, const uint8_t *d, size_t n, llama_seq_id s) { (void) c; (void) d; (void) s; return n; }
llama_memory_t llama_get_memory(const struct llama_context *c) { (void) c; return (llama_memory_t) &mem_; }
void llama_memory_clear(llama_memory_t m, bool d) { (void) m; (void) d; }
bool llama_memory_seq_rm(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1) { (void) m; (void) s; (void) p0; (void) p1; return true; }
bool llama_memory_can_shift(llama_memory_t m) { (void) m; return true; }
void llama_memory_seq_add(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) { (void) m; (void) s; (void) p0; (void) p1; (void) d; }
int32_t llama_model_n_embd(const struct llama_model *m) { (void) m; return 4; }
struct llama_sampler *llama_sampler_init_grammar(const struct llama_vocab *v, const char *g, const char *r) { (void) v; (void) g; (void) r; return NULL; }
void llama_sampler_apply(struct llama_sampler *s, llama_token_data_array *a) { (void) s; (void) a; }
void llama_sampler_accept(struct llama_sampler *s, llama_token t) { (void) s; (void) t; }
void llama_sampler_free(struct llama_sampler *s) { (void) s; }
bool llama_vocab_is_eog(const struct llama_vocab *v, llama_token t) { (void) v; (void) t; return false; }
int32_t llama_token_to_piece(const struct llama_vocab *v, llama_token t, char *b, int32_t n, int32_t l, bool sp) { (void) v; (void) t; (void) b; (void) n; (void) l; (void) sp; return 0; }
"#;
