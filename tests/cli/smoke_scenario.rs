//! `smoke --scenario` on stub engines compiled here (fast tier, no llama.cpp build): the
//! context shift and the two embedding batches each drive the path they name, a ggml
//! assertion is read as its own signature (never as a hang behind ggml's debugger backtrace),
//! and a value smoke does not know is refused. The real engines' answers (0.1.135 asserts on
//! the shift, 0.1.161 does not; both pins over-read `pos` of `n_tokens`) are the slow tier's
//! and the audit's.

use crate::common::smoke_trust::{report, stub_build, Fx, STUB_ENGINE_OK_C};
use serde_json::Value;

/// A stub whose `seq_add` fails the assertion llama.cpp 0.1.135's does for M-RoPE, the way
/// ggml does: its line on stderr, then (unless GGML_NO_BACKTRACE is set) a debugger
/// backtrace, then abort. The "backtrace" here exits 3, so a smoke that forgot to turn it off
/// reads `exited with 3`, not the assertion.
fn asserting_engine() -> String {
    let e = STUB_ENGINE_OK_C.replace(
        "void llama_memory_seq_add(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) { (void) m; (void) s; (void) p0; (void) p1; (void) d; }",
        r#"void llama_memory_seq_add(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) {
    (void) m; (void) s; (void) p0; (void) p1; (void) d;
    fprintf(stderr, "/pinforge/src/src/llama-kv-cache.cpp:398: GGML_ASSERT(hparams.n_pos_per_embd() == 1 && \"seq_add() is only supported for n_pos_per_embd() == 1\") failed\n");
    if (getenv("GGML_NO_BACKTRACE") == NULL) { exit(3); }
    abort();
}"#,
    );
    assert_ne!(e, STUB_ENGINE_OK_C, "the stub's seq_add was replaced");
    format!("#include <stdio.h>\n{e}")
}

fn smoke(fx: &Fx, m: &std::path::Path, scenario: &str) -> (i32, Value) {
    let o = fx.run(&[
        "smoke",
        m.to_str().expect("utf8"),
        "--arch",
        "qwen2",
        "--scenario",
        scenario,
        "--json",
    ]);
    let v = crate::json(&o);
    assert_eq!(
        crate::schemas::validate(&v),
        "pinforge.smoke/v1",
        "{}",
        report(&o)
    );
    (crate::code(&o), v)
}

// issue #39 §1: 0003's behaviour check drives the server's context shift.
#[test]
fn kshift_shifts_when_the_engine_says_it_can_and_reads_its_assertion_as_the_signature() {
    let fx = Fx::new();
    let (ok, _) = stub_build(&fx, "ok", STUB_ENGINE_OK_C);
    let (code, r) = smoke(&fx, &ok, "kshift");
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        (r["verdict"].as_str(), r["scenario"].as_str()),
        (Some("ok"), Some("kshift"))
    );
    let note = r["scenario_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("shifted: the engine can shift"), "{r}");
    assert_eq!(r["tokens_generated"], 16, "{r}");
    // Nothing was restored, so nothing is claimed about a restore.
    assert!(
        r["restore_step"].is_null() && r["max_logit_diff"].is_null(),
        "{r}"
    );

    let (bad, _) = stub_build(&fx, "asserts", &asserting_engine());
    let (code, r) = smoke(&fx, &bad, "kshift");
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["verdict"], "crash", "{r}");
    let sig = r["signature"].as_str().unwrap_or_default();
    assert_eq!(
        sig.lines().next(),
        Some("GGML_ASSERT(hparams.n_pos_per_embd() == 1) in llama-kv-cache.cpp"),
        "{r}"
    );
    assert_eq!(r["signal"], 6, "{r}");

    // The same stub never reaches seq_add on the default decode.
    let (code, r) = smoke(&fx, &bad, "restore");
    assert_eq!((code, r["verdict"].as_str()), (0, Some("ok")), "{r}");
    assert!(r["scenario_note"].is_null(), "{r}");
}

#[test]
fn kshift_on_an_engine_that_cannot_shift_re_decodes_and_says_so() {
    let fx = Fx::new();
    let e = STUB_ENGINE_OK_C.replace(
        "bool llama_memory_can_shift(llama_memory_t m) { (void) m; return true; }",
        "bool llama_memory_can_shift(llama_memory_t m) { (void) m; return false; }\n",
    );
    assert_ne!(e, STUB_ENGINE_OK_C);
    let (m, _) = stub_build(&fx, "noshift", &format!("#include <stdio.h>\n{}", e.replace(
        "void llama_memory_seq_add(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) { (void) m; (void) s; (void) p0; (void) p1; (void) d; }",
        "void llama_memory_seq_add(llama_memory_t m, llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) { (void) m; (void) s; (void) p0; (void) p1; (void) d; abort(); }",
    )));
    let (code, r) = smoke(&fx, &m, "kshift");
    assert_eq!((code, r["verdict"].as_str()), (0, Some("ok")), "{r}");
    let note = r["scenario_note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("not shifted:") && note.contains("llama_memory_can_shift false"),
        "{r}"
    );
}

// issue #39 §4 (#28902): the two embedding batches differ exactly in `pos`.
#[test]
fn the_embedding_scenarios_pass_pos_null_or_the_n_tokens_array() {
    let fx = Fx::new();
    // This stub dies the way an over-read would be reported whenever an embedding batch
    // carries positions, and asserts it was given the embedding rows at all.
    let e = STUB_ENGINE_OK_C.replace(
        "int32_t llama_decode(struct llama_context *c, struct llama_batch b) {\n    (void) c;",
        "int32_t llama_decode(struct llama_context *c, struct llama_batch b) {\n    (void) c;\n    if (b.embd != NULL && b.embd[1] == 0.0f) { return -7; }\n    if (b.embd != NULL && b.pos != NULL) { fprintf(stderr, \"src/llama-batch.cpp:786: GGML_ASSERT(pos sized by n_tokens) failed\\n\"); abort(); }",
    );
    assert_ne!(e, STUB_ENGINE_OK_C);
    let (m, _) = stub_build(&fx, "embd", &format!("#include <stdio.h>\n{e}"));
    let (code, r) = smoke(&fx, &m, "embd-pos-null");
    assert_eq!((code, r["verdict"].as_str()), (0, Some("ok")), "{r}");
    assert!(
        r["scenario_note"]
            .as_str()
            .unwrap_or_default()
            .contains("with pos NULL"),
        "{r}"
    );
    let (code, r) = smoke(&fx, &m, "embd-pos-n-tokens");
    assert_eq!((code, r["verdict"].as_str()), (1, Some("crash")), "{r}");
    assert_eq!(
        r["signature"].as_str().unwrap_or_default().lines().next(),
        Some("GGML_ASSERT(pos sized by n_tokens) in llama-batch.cpp"),
        "{r}"
    );
}

#[test]
fn an_unknown_scenario_is_refused_with_the_list_and_exit_2() {
    let fx = Fx::new();
    let (m, _) = stub_build(&fx, "ok", STUB_ENGINE_OK_C);
    for bad in ["shift", "KSHIFT", "", "embd"] {
        let o = fx.run(&["smoke", m.to_str().expect("utf8"), "--scenario", bad]);
        assert_eq!(crate::code(&o), 2, "{}", report(&o));
        let err = crate::stderr(&o);
        assert!(
            err.contains(&format!("`{bad}` is not a scenario"))
                && err.contains("restore, kshift, embd-pos-null, embd-pos-n-tokens"),
            "{err}"
        );
    }
}

/// The embedding stub of the test above: it aborts, as ggml does, whenever an embedding
/// batch carries positions, and answers every other decode.
fn embd_pos_engine() -> String {
    let e = STUB_ENGINE_OK_C.replace(
        "int32_t llama_decode(struct llama_context *c, struct llama_batch b) {\n    (void) c;",
        "int32_t llama_decode(struct llama_context *c, struct llama_batch b) {\n    (void) c;\n    if (b.embd != NULL && b.pos != NULL) { fprintf(stderr, \"src/llama-batch.cpp:786: GGML_ASSERT(pos sized by n_tokens) failed\\n\"); abort(); }",
    );
    assert_ne!(e, STUB_ENGINE_OK_C);
    format!("#include <stdio.h>\n{e}")
}

// issue #39 §4 (#28902) as a soak: `validate --row-kind embd-pos-n-tokens` decodes an
// embedding batch with the n_tokens positions in every row, so an engine that dies on that
// path crashes in every row, with the assertion as its signature, and an engine that does not
// passes; `embd-pos-null` passes on both. The kind is a setting: recorded, refused on resume
// with another kind, and refused with --serve.
#[test]
fn validate_rows_of_an_embedding_kind_crash_the_engine_that_dies_on_that_path() {
    let fx = Fx::new();
    let (bad, _) = stub_build(&fx, "embd-dies", &embd_pos_engine());
    let (good, _) = stub_build(&fx, "ok", STUB_ENGINE_OK_C);
    let run = |kind: &str, extra: &[&str]| {
        let mut args = vec![
            "validate",
            bad.to_str().expect("utf8"),
            good.to_str().expect("utf8"),
            "--rows",
            "3",
            "--arch",
            "qwen2",
            "--json",
            "--row-kind",
            kind,
        ];
        args.extend_from_slice(extra);
        let o = fx.run(&args);
        (crate::code(&o), o)
    };
    let (code, o) = run("embd-pos-n-tokens", &[]);
    assert_eq!(code, 0, "the candidate passed: {}", report(&o));
    let j = crate::json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.validate/v1");
    let arms = j["arms"].as_array().expect("arms");
    let (control, cand) = (&arms[0], &arms[1]);
    assert_eq!(
        control["counts"]["crash"], 3,
        "every row crashes: {control}"
    );
    assert_eq!(cand["counts"]["crash"], 0, "{cand}");
    assert_eq!(cand["counts"]["ok"], 3, "{cand}");
    let sigs = control["signatures"].as_array().expect("signatures");
    assert!(
        sigs.iter().any(|s| s["signature"].as_str().is_some_and(
            |s| s.starts_with("GGML_ASSERT(pos sized by n_tokens) in llama-batch.cpp")
        ) && s["rows"] == 3),
        "the assertion is the signature: {sigs:?}"
    );
    let dir = std::path::PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let settings: Value =
        serde_json::from_slice(&std::fs::read(dir.join("settings.json")).expect("settings"))
            .expect("json");
    assert_eq!(settings["row_kind"], "embd-pos-n-tokens", "{settings}");
    // A resume of that run as prompt-cache rows is another run's settings.
    let id = dir.file_name().and_then(|n| n.to_str()).expect("id");
    let (code, o) = run("prompt-cache", &["--resume", id]);
    assert_eq!(code, 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("row_kind"), "{}", report(&o));
    // And the other way round: a prompt-cache run resumed as embedding rows names the kind
    // too (the default is not recorded, so only the new side holds the key).
    let (code, o) = run("prompt-cache", &[]);
    assert_eq!(code, 0, "{}", report(&o));
    let pc = std::path::PathBuf::from(crate::json(&o)["run_dir"].as_str().expect("run_dir"));
    let pc_id = pc
        .file_name()
        .and_then(|n| n.to_str())
        .expect("id")
        .to_string();
    let (code, o) = run("embd-pos-null", &["--resume", &pc_id]);
    assert_eq!(code, 2, "{}", report(&o));
    assert!(crate::stderr(&o).contains("in: row_kind"), "{}", report(&o));
    // pos NULL: neither engine dies.
    let (code, o) = run("embd-pos-null", &[]);
    assert_eq!(code, 0, "{}", report(&o));
    let j = crate::json(&o);
    for a in j["arms"].as_array().expect("arms") {
        assert_eq!(a["counts"]["crash"], 0, "{a}");
        assert_eq!(a["counts"]["ok"], 3, "{a}");
    }
    // The default records no kind: settings of runs before the option read the same.
    let (code, o) = run("prompt-cache", &[]);
    assert_eq!(code, 0, "{}", report(&o));
    let dir = std::path::PathBuf::from(crate::json(&o)["run_dir"].as_str().expect("run_dir"));
    let settings: Value =
        serde_json::from_slice(&std::fs::read(dir.join("settings.json")).expect("settings"))
            .expect("json");
    assert!(settings.get("row_kind").is_none(), "{settings}");
    // A served row is a chat request: another kind is refused before anything starts.
    let o = fx.run(&[
        "validate",
        "--serve",
        bad.to_str().expect("utf8"),
        good.to_str().expect("utf8"),
        "--rows",
        "1",
        "--row-kind",
        "embd-pos-null",
    ]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
    assert!(
        crate::stderr(&o).contains("--row-kind embd-pos-null"),
        "{}",
        report(&o)
    );
    let o = fx.run(&["validate", "--rows", "1", "--row-kind", "kshift", "x", "y"]);
    assert_eq!(crate::code(&o), 2, "{}", report(&o));
}
