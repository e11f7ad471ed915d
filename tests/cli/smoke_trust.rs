//! Smoke (and the `install --smoke` gate) against files nobody verified: a FIFO or a swapped
//! file in place of libllama or a header, an artifact root through a link, an installed
//! entry whose manifest.json was edited. Synthetic builds (files written by the test, a
//! manifest naming them), so no CMake build is needed.

pub(crate) use crate::common::smoke_trust::sha_hex;
pub(crate) use crate::common::smoke_trust::{
    report, run_timeout, stub_build, Fx, FAKE_HEADER, FAKE_LIB, HANG, STUB_ENGINE_OK_C,
    STUB_GGML_H, STUB_LLAMA_H,
};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

fn mkfifo(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()));
}

// issue: smokefix item 1 (smoke decodes bytes nobody verified)
#[test]
fn a_fifo_in_place_of_libllama_is_refused_with_exit_2_and_never_opened() {
    let fx = Fx::new();
    let m = fx.build("fifo");
    let lib = fx.base("fifo").join("out/lib/libllama.so.0");
    std::fs::remove_file(&lib).expect("rm");
    mkfifo(&lib);
    let started = Instant::now();
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("FIFO"), "{}", report(&o));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(fx.compiled_anything().is_empty());
}

// issue: smokefix item 1
#[test]
fn a_libllama_whose_bytes_differ_from_the_manifest_fails_the_check_naming_it_and_compiles_nothing()
{
    let fx = Fx::new();
    let m = fx.build("swapped");
    let lib = fx.base("swapped").join("out/lib/libllama.so.0");
    std::fs::write(&lib, b"\x7fELF other bytes\0libasan.so.8\0").expect("write");
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let e = crate::stderr(&o);
    assert!(e.contains("lib/libllama.so.0"), "{e}");
    assert!(e.contains("nothing was compiled or loaded"), "{e}");
    assert!(
        fx.compiled_anything().is_empty(),
        "{:?}",
        fx.compiled_anything()
    );
}

// issue: smokefix item 1 (every header the shim compiles against, not only llama.h)
#[test]
fn a_header_whose_bytes_differ_from_the_manifest_fails_the_check_naming_it() {
    for header in ["include/llama.h", "include/ggml.h"] {
        let fx = Fx::new();
        let m = fx.build("hdr");
        std::fs::write(fx.base("hdr").join("out").join(header), b"#error swapped\n")
            .expect("write");
        let o = fx.smoke(&m);
        assert_eq!(crate::code(&o), 1, "{header}: {}", report(&o));
        assert!(crate::stderr(&o).contains(header), "{}", report(&o));
        assert!(fx.compiled_anything().is_empty());
    }
}

// issue: smokefix item 1
#[test]
fn a_header_that_is_a_fifo_or_a_link_out_of_the_build_is_refused_with_exit_2() {
    let fx = Fx::new();
    let m = fx.build("hfifo");
    let h = fx.base("hfifo").join("out/include/ggml.h");
    std::fs::remove_file(&h).expect("rm");
    mkfifo(&h);
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));

    let fx = Fx::new();
    let m = fx.build("hlink");
    let outside = fx.dir.path().join("outside.h");
    std::fs::write(&outside, FAKE_HEADER).expect("write");
    let h = fx.base("hlink").join("out/include/llama.h");
    std::fs::remove_file(&h).expect("rm");
    std::os::unix::fs::symlink(&outside, &h).expect("link");
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("symlink"), "{}", report(&o));
}

// issue: smokefix item 1 (checked artifact root; no folder on the way through a link)
#[test]
fn an_artifact_root_or_a_library_folder_reached_through_a_link_is_refused_with_exit_2() {
    let fx = Fx::new();
    let m = fx.build("rootlink");
    let base = fx.base("rootlink");
    let elsewhere = fx.dir.path().join("elsewhere");
    std::fs::rename(base.join("out"), &elsewhere).expect("mv");
    std::os::unix::fs::symlink(&elsewhere, base.join("out")).expect("link");
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(
        crate::stderr(&o).contains("artifact root"),
        "{}",
        report(&o)
    );

    let fx = Fx::new();
    let m = fx.build("liblink");
    let out = fx.base("liblink").join("out");
    let elsewhere = fx.dir.path().join("elsewhere-lib");
    std::fs::rename(out.join("lib"), &elsewhere).expect("mv");
    std::os::unix::fs::symlink(&elsewhere, out.join("lib")).expect("link");
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("not a folder"), "{}", report(&o));
    assert!(fx.compiled_anything().is_empty());
}

// issue: smokefix item 6 (builds stage lib/; the old bin/ layout is not smoked)
#[test]
fn a_manifest_naming_libllama_under_bin_is_refused_with_a_rebuild_hint() {
    let fx = Fx::new();
    let m = fx.build_with("oldlayout", |m| {
        m["subject"][0]["name"] = json!("bin/libllama.so.0");
        m["predicate"]["runDetails"]["byproducts"] =
            json!([{"name": "build.log", "digest": {"sha256": sha_hex(b"")}}]);
    });
    let out = fx.base("oldlayout").join("out");
    std::fs::create_dir_all(out.join("bin")).expect("mkdir");
    std::fs::copy(out.join("lib/libllama.so.0"), out.join("bin/libllama.so.0")).expect("cp");
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    let e = crate::stderr(&o);
    assert!(
        e.contains("lib/libllama.so") && e.contains("rebuild"),
        "{e}"
    );
}

// issue: smokefix items 1, 3 (the real path still runs once the checks pass)
#[test]
fn a_verified_fake_build_gets_past_the_checks_to_a_clean_shim_compile_failure() {
    let fx = Fx::new();
    let m = fx.build("fake");
    let o = fx.smoke(&m);
    // The files match the manifest, so smoke goes on to compile the shim against the copies
    // of the verified headers; the fake llama.h declares nothing, so that compile fails and
    // is reported as an input error naming the build, with the compiler's output.
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    let e = crate::stderr(&o);
    assert!(e.contains("smoke shim for synthetic/fake"), "{e}");
    assert!(
        e.contains("does not compile against this build's llama.h"),
        "{e}"
    );
    // The compiler saw the verified copy, in a folder of smoke's own, removed afterwards.
    let cache = fx.ws.join("build").join(".smoke");
    let left: Vec<String> = std::fs::read_dir(&cache)
        .expect("cache")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.iter().all(|n| !n.starts_with(".inc-")), "{left:?}");
    assert!(
        left.iter().all(|n| !n.starts_with("pinforge-smoke-")),
        "{left:?}"
    );

    // The install gate stops at the same point, and nothing is installed.
    let root = fx.root();
    let o = fx.run(&[
        "install",
        m.to_str().expect("utf8"),
        "--layer",
        "live",
        "--smoke",
        "--json",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(!root.join("state").exists());
}

// issue: smokefix item 1 (the install gate runs the same checks before anything is staged)
#[test]
fn the_install_gate_refuses_a_swapped_libllama_before_staging() {
    let fx = Fx::new();
    let m = fx.build("gate");
    std::fs::write(
        fx.base("gate").join("out/lib/libllama.so.0"),
        b"other bytes",
    )
    .expect("write");
    let root = fx.root();
    let o = fx.run(&[
        "install",
        m.to_str().expect("utf8"),
        "--layer",
        "live",
        "--smoke",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    assert!(
        crate::stderr(&o).contains("lib/libllama.so.0"),
        "{}",
        report(&o)
    );
    assert!(!root.join("state").exists());
}

/// Install `m` into `live` (no gate) and return the store entry it made.
fn install(fx: &Fx, m: &Path) -> PathBuf {
    let root = fx.root();
    let o = fx.run(&[
        "install",
        m.to_str().expect("utf8"),
        "--layer",
        "live",
        "--json",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 0, "{}", report(&o));
    PathBuf::from(crate::json(&o)["entry"].as_str().expect("entry"))
}

/// Replace a sealed entry's manifest.json with `edit` applied to it.
fn edit_entry_manifest(entry: &Path, edit: impl FnOnce(&mut Value)) {
    let p = entry.join("manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("json");
    edit(&mut m);
    std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::remove_file(&p).expect("rm");
    std::fs::write(&p, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    // Sealed as install seals it, so the entry still passes the install root's own check
    // (manifest.json is not part of the identity it re-hashes).
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o555)).expect("chmod");
}

fn smoke_installed(fx: &Fx) -> Output {
    let root = fx.root();
    fx.run(&[
        "smoke",
        "--installed",
        "--arch",
        "qwen2",
        "--root",
        root.to_str().expect("utf8"),
    ])
}

// issue: smokefix item 2 (manifest.json is not part of an entry's identity)
#[test]
fn an_installed_entry_whose_manifest_names_another_file_as_libllama_is_refused() {
    let fx = Fx::new();
    let m = fx.build("inst");
    let entry = install(&fx, &m);
    // Unedited, the installed entry passes the checks and reaches the shim compile.
    let o = smoke_installed(&fx);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(
        crate::stderr(&o).contains("does not compile against"),
        "{}",
        report(&o)
    );
    // The manifest now says libllama is ggml.h's bytes under another name.
    edit_entry_manifest(&entry, |m| {
        let ggml = m["subject"]
            .as_array()
            .expect("subjects")
            .iter()
            .find(|s| s["name"] == "include/ggml.h")
            .cloned()
            .expect("ggml");
        let mut evil = ggml.clone();
        evil["name"] = json!("lib/libllama.so.1");
        let subjects = m["subject"].as_array_mut().expect("subjects");
        subjects.retain(|s| s["name"] != "lib/libllama.so.0");
        subjects.insert(0, evil);
    });
    let o = smoke_installed(&fx);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let e = crate::stderr(&o);
    assert!(e.contains("disagrees with its record"), "{e}");
    assert!(e.contains("lib/libllama.so.1"), "{e}");
}

// issue: smokefix item 2
#[test]
fn an_installed_entry_whose_manifest_digests_were_edited_is_refused() {
    let fx = Fx::new();
    let m = fx.build("digest");
    let entry = install(&fx, &m);
    edit_entry_manifest(&entry, |m| {
        for s in m["subject"].as_array_mut().expect("subjects") {
            if s["name"] == "include/llama.h" {
                s["digest"]["sha256"] = json!(sha_hex(b"some other header"));
            }
        }
    });
    let o = smoke_installed(&fx);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let e = crate::stderr(&o);
    assert!(
        e.contains("include/llama.h") && e.contains("disagrees with its record"),
        "{e}"
    );
}

// issue: smokefix item 2 (the entry's manifest is read as a regular file, never followed)
#[test]
fn an_installed_entry_whose_manifest_is_a_fifo_is_refused_without_hanging() {
    let fx = Fx::new();
    let m = fx.build("mfifo");
    let entry = install(&fx, &m);
    let p = entry.join("manifest.json");
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::remove_file(&p).expect("rm");
    mkfifo(&p);
    let o = smoke_installed(&fx);
    assert_ne!(crate::code(&o), 0, "{}", report(&o));
    assert!(
        crate::stderr(&o).contains("manifest.json"),
        "{}",
        report(&o)
    );
}

// issue: smokefix item 5 (install stores the very bytes it parsed)
#[test]
fn install_refuses_a_fifo_manifest_without_hanging_and_stores_the_bytes_it_parsed() {
    let fx = Fx::new();
    let fifo = fx.dir.path().join("fifo.json");
    mkfifo(&fifo);
    let root = fx.root();
    let o = fx.run(&[
        "install",
        fifo.to_str().expect("utf8"),
        "--layer",
        "live",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("FIFO"), "{}", report(&o));

    let m = fx.build("bytes");
    let entry = install(&fx, &m);
    assert_eq!(
        std::fs::read(entry.join("manifest.json")).expect("read"),
        std::fs::read(&m).expect("read")
    );
}

/// A libllama that loads no model: every smoke against it ends in the error verdict the
/// engine's own refusal gets.
const STUB_LLAMA_C: &str = r#"#include "llama.h"
#include <string.h>
const char *llama_print_system_info(void) { return "stub"; }
void llama_log_set(ggml_log_callback cb, void *u) { (void) cb; (void) u; }
void llama_backend_init(void) {}
struct llama_model_params llama_model_default_params(void) { struct llama_model_params p = {0}; return p; }
struct llama_context_params llama_context_default_params(void) { struct llama_context_params p; memset(&p, 0, sizeof p); return p; }
struct llama_model *llama_model_load_from_file(const char *path, struct llama_model_params p) { (void) path; (void) p; return NULL; }
struct llama_context *llama_init_from_model(struct llama_model *m, struct llama_context_params p) { (void) m; (void) p; return NULL; }
void llama_model_free(struct llama_model *m) { (void) m; }
void llama_free(struct llama_context *c) { (void) c; }
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *m) { (void) m; return NULL; }
int32_t llama_vocab_n_tokens(const struct llama_vocab *v) { (void) v; return 0; }
int32_t llama_tokenize(const struct llama_vocab *v, const char *t, int32_t l, llama_token *o, int32_t m, bool a, bool p) { (void) v; (void) t; (void) l; (void) o; (void) m; (void) a; (void) p; return -1; }
struct llama_batch llama_batch_init(int32_t n, int32_t e, int32_t s) { (void) n; (void) e; (void) s; struct llama_batch b; memset(&b, 0, sizeof b); return b; }
void llama_batch_free(struct llama_batch b) { (void) b; }
int32_t llama_decode(struct llama_context *c, struct llama_batch b) { (void) c; (void) b; return -1; }
float *llama_get_logits_ith(struct llama_context *c, int32_t i) { (void) c; (void) i; return NULL; }
size_t llama_state_seq_get_size(struct llama_context *c, llama_seq_id s) { (void) c; (void) s; return 0; }
size_t llama_state_seq_get_data(struct llama_context *c, uint8_t *d, size_t n, llama_seq_id s) { (void) c; (void) d; (void) n; (void) s; return 0; }
size_t llama_state_seq_set_data(struct llama_context *c, const uint8_t *d, size_t n, llama_seq_id s) { (void) c; (void) d; (void) n; (void) s; return 0; }
llama_memory_t llama_get_memory(const struct llama_context *c) { (void) c; return NULL; }
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

// issue: smokefix items 1, 3 (the verified bytes are the ones compiled, linked and loaded)
#[test]
fn a_verified_stub_libllama_is_compiled_against_loaded_and_gets_the_error_verdict() {
    let fx = Fx::new();
    let (m, lib) = stub_build(&fx, "stub", STUB_LLAMA_C);
    let o = fx.run(&[
        "smoke",
        m.to_str().expect("utf8"),
        "--arch",
        "qwen2",
        "--json",
    ]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    let r = crate::json(&o);
    // issue #8: the smoke report validates against schemas/pinforge.smoke.v1.json.
    assert_eq!(crate::schemas::validate(&r), "pinforge.smoke/v1");
    assert_eq!(r["verdict"], "error", "{r}");
    assert!(
        r["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("llama_model_load_from_file failed"),
        "{r}"
    );
    assert_eq!(r["target"], "synthetic/stub");
    // One shim, cached under a key of the recomputed digests: a second run reuses it.
    let shims = fx.compiled_anything();
    assert_eq!(
        shims
            .iter()
            .filter(|n| n.starts_with("pinforge-smoke-"))
            .count(),
        1,
        "{shims:?}"
    );
    let o = fx.run(&["smoke", m.to_str().expect("utf8"), "--arch", "qwen2"]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert_eq!(fx.compiled_anything(), shims);

    // A header changed (and the manifest with it, so the check passes): a new key, a new
    // shim, never the old one reused.
    let ggml2 = format!("{STUB_GGML_H}/* changed */\n");
    let m2 = fx.build_of(
        "stub",
        [
            ("lib/libllama.so.0", &lib, 0o755),
            ("include/llama.h", STUB_LLAMA_H.as_bytes(), 0o644),
            ("include/ggml.h", ggml2.as_bytes(), 0o644),
        ],
        |_| {},
    );
    let o = fx.run(&["smoke", m2.to_str().expect("utf8"), "--arch", "qwen2"]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert_eq!(
        fx.compiled_anything()
            .iter()
            .filter(|n| n.starts_with("pinforge-smoke-"))
            .count(),
        2
    );
}

// issue: smokefix item 4 (install --smoke --json carries the gate's report)
#[test]
fn install_smoke_json_carries_the_gate_report_beside_the_install_outcome() {
    let fx = Fx::new();
    let (m, _) = stub_build(&fx, "engine", STUB_ENGINE_OK_C);
    let root = fx.root();
    let o = fx.run(&[
        "install",
        m.to_str().expect("utf8"),
        "--layer",
        "live",
        "--smoke",
        "--smoke-arch",
        "qwen2",
        "--json",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 0, "{}", report(&o));
    let j = crate::json(&o);
    assert_eq!(j["schema"], "pinforge.install/v1", "{j}");
    // issue #8: the install document with its gate report validates against its schema.
    crate::schemas::validate(&j);
    assert!(j["entry"].is_string() && j["gen"] == 1, "{j}");
    assert_eq!(j["smoke"]["verdict"], "ok", "{j}");
    assert_eq!(j["smoke"]["target"], "synthetic/engine", "{j}");
    // The installed entry smokes ok too, from the digests of its own record.
    let o = fx.run(&[
        "smoke",
        "--installed",
        "--arch",
        "qwen2",
        "--json",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 0, "{}", report(&o));
    assert_eq!(crate::json(&o)["verdict"], "ok");
    assert_eq!(
        crate::schemas::validate(&crate::json(&o)),
        "pinforge.smoke/v1"
    );

    // Without --smoke the document has no `smoke` field (the schema is otherwise unchanged).
    let (m2, _) = stub_build(&fx, "engine2", STUB_ENGINE_OK_C);
    let o = fx.run(&[
        "install",
        m2.to_str().expect("utf8"),
        "--layer",
        "control",
        "--json",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 0, "{}", report(&o));
    assert!(crate::json(&o).get("smoke").is_none());

    // A refused gate: the report is the smoke document on stdout, the refusal on stderr.
    let (m3, _) = stub_build(&fx, "noload", STUB_LLAMA_C);
    let o = fx.run(&[
        "install",
        m3.to_str().expect("utf8"),
        "--layer",
        "original",
        "--smoke",
        "--smoke-arch",
        "qwen2",
        "--json",
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let j = crate::json(&o);
    assert_eq!(j["schema"], "pinforge.smoke/v1", "{j}");
    assert_eq!(j["verdict"], "error", "{j}");
    assert!(crate::stderr(&o).contains("smoke gate"), "{}", report(&o));
}

// issue: smokefix item 1 (the loader reaches libllama through the links in lib/)
#[test]
fn a_libllama_link_redirected_out_of_the_build_fails_the_check() {
    let fx = Fx::new();
    let m = fx.build("redirect");
    let outside = fx.dir.path().join("evil.so");
    std::fs::write(&outside, FAKE_LIB).expect("write");
    let link = fx.base("redirect").join("out/lib/libllama.so");
    std::fs::remove_file(&link).expect("rm");
    std::os::unix::fs::symlink(&outside, &link).expect("link");
    let o = fx.smoke(&m);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let e = crate::stderr(&o);
    assert!(e.contains("link `lib/libllama.so`"), "{e}");
    assert!(fx.compiled_anything().is_empty());
}

/// Issue #11 without a llama.cpp build: two verified stub engines (manifests) through
/// `validate`; the engines die on chosen rows (a real invalid access, test hook): each such
/// row is a `crash` with the signal on both arms, the engine restarts and the run goes on,
/// the rows after a restart count from it, the verdict is the candidate's (exit 1), and the
/// evidence re-verifies. Fast: no llama.cpp build needed.
// review item 4: an engine that dies with a signal while loading is a crash of that arm (with
// its signature), not a harness `error` excluded from the comparison.
#[test]
fn validate_records_an_engine_crash_while_loading_as_a_crash_row() {
    let fx = Fx::new();
    let crashing = STUB_ENGINE_OK_C
    // A real fault (raise() would be swallowed by Rust's stack-overflow SIGSEGV handler).
        .replace(
            "(void) path; (void) p; return (struct llama_model *) &model_;",
            "(void) path; (void) p; *(volatile int *) 0 = 1; return (struct llama_model *) &model_;",
        );
    assert_ne!(crashing, STUB_ENGINE_OK_C);
    let (a, _) = stub_build(&fx, "base", STUB_ENGINE_OK_C);
    let (b, _) = stub_build(&fx, "cand", &crashing);
    let mut c = crate::pinforge_cmd(&fx.ws);
    c.args([
        "validate",
        a.to_str().expect("utf8"),
        b.to_str().expect("utf8"),
        "--rows",
        "4",
        "--arch",
        "qwen2",
        "--json",
    ]);
    let o = run_timeout(c, HANG).expect("validate hung");
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let j = crate::json(&o);
    let arms = j["arms"].as_array().expect("arms");
    assert_eq!(arms[0]["counts"]["crash"], 0, "{}", arms[0]);
    let cand = &arms[1];
    assert!(
        cand["counts"]["crash"].as_u64().is_some_and(|n| n >= 1),
        "{cand}"
    );
    let sig = cand["signatures"][0]["signature"].as_str().expect("sig");
    assert!(sig.contains("SIGSEGV"), "{sig}");
}

#[test]
fn validate_contains_engine_crashes_per_arm_on_verified_stub_engines() {
    let fx = Fx::new();
    let (a, _) = stub_build(&fx, "base", STUB_ENGINE_OK_C);
    let (b, _) = stub_build(&fx, "cand", STUB_ENGINE_OK_C);
    let mut c = crate::pinforge_cmd(&fx.ws);
    c.args([
        "validate",
        a.to_str().expect("utf8"),
        b.to_str().expect("utf8"),
        "--rows",
        "12",
        "--arch",
        "qwen2",
        "--json",
    ])
    .env("PINFORGE_VALIDATE_CRASH_ROWS", "3,7");
    let o = run_timeout(c, HANG).expect("validate hung");
    // Both arms crash on rows 3 and 7: the candidate too, so the run fails (exit 1).
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let j = crate::json(&o);
    assert_eq!(j["schema"], "pinforge.validate/v1");
    for arm in j["arms"].as_array().expect("arms") {
        assert_eq!(arm["counts"]["crash"], 2, "{arm}");
        assert_eq!(arm["counts"]["ok"], 10, "{arm}");
        assert_eq!(arm["onset_row"], 3, "{arm}");
        let sig = arm["signatures"][0]["signature"].as_str().expect("sig");
        assert!(sig.contains("SIGSEGV"), "{sig}");
    }
    assert_eq!(j["common_failures"].as_array().expect("common").len(), 2);
    assert!(
        j["verdict"]
            .as_str()
            .expect("verdict")
            .starts_with("cand: crash at row 3"),
        "{j}"
    );
    let rows = std::fs::read_to_string(
        Path::new(j["run_dir"].as_str().expect("run_dir")).join("rows.jsonl"),
    )
    .expect("rows");
    let crash7: Value = rows
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("row"))
        .find(|r| r["row"] == 7 && r["outcome"] == "crash")
        .expect("row 7 crashed");
    assert_eq!(
        crash7["evidence"]["rows_since_restart"], 4,
        "rows 4..=7 ran on the engine restarted after row 3"
    );
    let o = fx.run(&["verify", j["evidence"]["manifest"].as_str().expect("ev")]);
    assert_eq!(crate::code(&o), 0, "{}", report(&o));
    // issue #8: both documents match their committed schemas (the `schemas` module leaves
    // them to this test: they need compiled stub engines).
    assert_eq!(crate::schemas::validate(&j), "pinforge.validate/v1");
    let o = fx.run(&[
        "verify",
        j["evidence"]["manifest"].as_str().expect("ev"),
        "--json",
    ]);
    assert_eq!(crate::code(&o), 0, "{}", report(&o));
    assert_eq!(
        crate::schemas::validate(&crate::json(&o)),
        "pinforge.verify-evidence/v1"
    );
    // review item 6: a missing file of the run's own set is a mismatch, not "absent".
    let run_dir = Path::new(j["run_dir"].as_str().expect("run_dir"));
    std::fs::remove_file(run_dir.join("prompts.jsonl")).expect("rm prompts");
    let o = fx.run(&[
        "verify",
        j["evidence"]["manifest"].as_str().expect("ev"),
        "--json",
    ]);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("verify json");
    assert!(
        v["mismatches"]
            .as_array()
            .expect("mismatches")
            .iter()
            .any(|m| m["role"] == "prompts.jsonl" && m["actual"] == "missing"),
        "{v}"
    );
}

// review item 5: --resume refuses a grammar.gbnf that changed since the run started (exit 2,
// naming the file), and verify checks the grammar against the settings.
#[test]
fn validate_resume_refuses_a_changed_grammar_and_verify_reports_it() {
    let fx = Fx::new();
    let (a, _) = stub_build(&fx, "base", STUB_ENGINE_OK_C);
    let (b, _) = stub_build(&fx, "cand", STUB_ENGINE_OK_C);
    let schema = fx.dir.path().join("s.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}"#,
    )
    .expect("schema");
    let args = [
        "validate",
        a.to_str().expect("utf8"),
        b.to_str().expect("utf8"),
        "--rows",
        "2",
        "--arch",
        "qwen2",
        "--schema",
        schema.to_str().expect("utf8"),
    ];
    let mut c = crate::pinforge_cmd(&fx.ws);
    c.args(args).arg("--json");
    let o = run_timeout(c, HANG).expect("validate hung");
    let j = crate::json(&o);
    let run_dir = PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let grammar = run_dir.join("grammar.gbnf");
    let mut g = std::fs::read(&grammar).expect("grammar");
    g.extend_from_slice(b"\n# edited\n");
    std::fs::write(&grammar, &g).expect("edit");
    let run_id = run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("id")
        .to_string();
    let rows_before = std::fs::read(run_dir.join("rows.jsonl")).expect("rows");
    let mut c = crate::pinforge_cmd(&fx.ws);
    c.args(args).args(["--resume", &run_id]);
    let o = run_timeout(c, HANG).expect("resume hung");
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("grammar.gbnf"), "{}", report(&o));
    assert_eq!(
        std::fs::read(run_dir.join("rows.jsonl")).expect("rows"),
        rows_before
    );
    let o = fx.run(&[
        "verify",
        j["evidence"]["manifest"].as_str().expect("ev"),
        "--json",
    ]);
    assert_eq!(crate::code(&o), 1, "{}", report(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("verify json");
    assert!(
        v["mismatches"]
            .as_array()
            .expect("mismatches")
            .iter()
            .any(|m| m["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("grammar.gbnf"))),
        "{v}"
    );
}
