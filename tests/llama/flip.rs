//! `pinforge flip` and `pinforge ablate` (issue #10): single-axis flips with a pre-registered
//! hypothesis, refused multi-axis flips, invalid trials, and the patch ablation, on the tiny
//! project and on the real default recipe (through the shared llama.cpp workspace).
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/flip.rs`.

use crate::common::flip::read_json;
use crate::{code, json, llama_build, llama_ws, pinforge, stderr};
use std::path::Path;
use std::time::Instant;

// issue #10 "flipping the patch set (unpatched -> patched) removes the signature (supported)
// and only libllama differs" — CPU, default recipe, ASan variants, tiny qwen2vl model.
#[test]
fn flipping_the_patch_set_under_asan_is_supported_and_only_libllama_differs() {
    llama_build("unpatched-asan");
    llama_build("patched-asan");
    let started = Instant::now();
    let o = pinforge(
        llama_ws(),
        &[
            "flip",
            "--from",
            "unpatched-asan",
            "--to",
            "patched-asan",
            "--arch",
            "qwen2vl",
            "--hypothesis",
            "the M-RoPE patch bundle removes issue #20093's overflow",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    eprintln!(
        "flip unpatched-asan -> patched-asan: {:.1}s (builds {}s / {}s)",
        started.elapsed().as_secs_f64(),
        j["builds"]["from"]["seconds"],
        j["builds"]["to"]["seconds"]
    );
    assert_eq!(j["verdict"], "supported", "{}", j["reason"]);
    assert_eq!(j["axis"], "patches");
    assert_eq!(j["smoke"]["from"], "crash");
    assert_eq!(j["smoke"]["to"], "ok");
    let sig = j["smokes"]["from"]["normalized_signature"]
        .as_str()
        .expect("signature");
    assert!(sig.starts_with("heap-buffer-overflow in "), "{sig}");
    let artifacts = j["artifacts"].as_array().expect("artifacts");
    let differ: Vec<&str> = artifacts
        .iter()
        .filter(|a| a["same"] == false)
        .map(|a| a["path"].as_str().expect("path"))
        .collect();
    assert!(!differ.is_empty(), "{j}");
    // Under gcc's ASan the ggml libraries embed the absolute source path of their tree (the
    // pristine and the patched vendor trees are two folders), which the record marks; the
    // issue asks for libllama alone, so this stays strict.
    assert!(
        differ.iter().all(|p| p.starts_with("lib/libllama.so")),
        "only libllama differs: {differ:?}"
    );
    assert!(artifacts.iter().any(|a| a["same"] == true));
    for a in artifacts {
        assert_eq!(
            a["same"] == true,
            a["from_sha256"] == a["to_sha256"] && !a["from_sha256"].is_null(),
            "{a}"
        );
    }
    let rec = read_json(Path::new(j["record"].as_str().expect("record")));
    assert_eq!(rec["verdict"], "supported");
    assert_eq!(
        rec["builds"]["to"]["manifest_sha256"],
        j["builds"]["to"]["manifest_sha256"]
    );
}

// issue #10 "flipping the host compiler (gcc -> clang, both unpatched) keeps the signature on
// both sides (falsified), and the record lists which artifacts differ".
#[test]
fn flipping_the_host_compiler_keeps_the_signature_and_is_falsified() {
    llama_build("unpatched-asan");
    let o = pinforge(
        llama_ws(),
        &[
            "flip",
            "--from",
            "unpatched-asan",
            "--to",
            "unpatched-asan-clang",
            "--arch",
            "qwen2vl",
            "--hypothesis",
            "the host compiler is the defect",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["axis"], "toolchain");
    assert_eq!(j["verdict"], "falsified", "{}", j["reason"]);
    assert_eq!(j["smoke"]["to"], "crash");
    let cc = j["diff"]
        .as_array()
        .expect("diff")
        .iter()
        .find(|r| r["key"] == "cc")
        .expect("cc row");
    assert!(
        cc["from"].as_str().is_some_and(|v| v.starts_with("gcc ")),
        "{cc}"
    );
    assert!(
        cc["to"].as_str().is_some_and(|v| v.starts_with("clang ")),
        "{cc}"
    );
    assert!(j["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .any(|a| a["same"] == false));
}

// issue #10 "ablation reproduces what the real trees show": the `pos` resize (0001) alone is
// sufficient; the broadcast (0002) alone still overflows; the K-shift guard (0003) does not
// touch the signature. 6 extra ASan builds (the empty and full subsets are unpatched-asan and
// patched-asan, reused).
#[test]
fn ablation_shows_the_resize_alone_is_sufficient_and_the_broadcast_alone_still_overflows() {
    llama_build("unpatched-asan");
    llama_build("patched-asan");
    let started = Instant::now();
    let o = pinforge(
        llama_ws(),
        &[
            "ablate",
            "--variant",
            "patched-asan",
            "--arch",
            "qwen2vl",
            "--json",
        ],
    );
    let wall = started.elapsed().as_secs_f64();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    assert_eq!(j["schema"], "pinforge.ablate/v1");
    let subsets = j["subsets"].as_array().expect("subsets");
    for s in subsets {
        eprintln!(
            "ablate {:<16} built as {:<36} build {:>7.1}s cached {} smoke {} {}",
            s["label"].as_str().unwrap_or(""),
            s["built_as"].as_str().unwrap_or(""),
            s["build_seconds"].as_f64().unwrap_or(0.0),
            s["cached"],
            s["smoke"]["verdict"],
            s["class"]
        );
    }
    eprintln!("ablation wall time {wall:.1}s");
    assert_eq!(subsets.len(), 8);
    let by = |label: &str| {
        subsets
            .iter()
            .find(|s| s["label"] == label)
            .unwrap_or_else(|| panic!("subset {label}: {j}"))
    };
    // The empty and the full subsets are the recipe's own variants, reused.
    assert_eq!(by("none")["built_as"], "unpatched-asan");
    assert_eq!(by("0001+0002+0003")["built_as"], "patched-asan");
    assert_eq!(by("none")["class"], "signature");
    assert_eq!(by("0001")["class"], "clean");
    assert_eq!(by("0001")["built_as"], "patched-asan.abl-0001");
    // The broadcast alone writes into the undersized buffer: still an overflow.
    let b = by("0002");
    assert_eq!(b["smoke"]["verdict"], "crash", "{b}");
    assert!(
        b["smoke"]["normalized_signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("heap-buffer-overflow")),
        "{b}"
    );
    assert_eq!(by("0003")["class"], "signature");
    let p1 = "0001-batch-size-ubatch-reserve-pos-for-mrope.patch";
    assert_eq!(j["sufficient"], serde_json::json!([[p1]]));
    // Leaving the resize out (0002+0003) still overflows the same undersized buffer, but the
    // top frame is the broadcast's (state_read_meta), not the signature under test: the
    // record says so apart rather than calling 0001 necessary for this signature.
    assert_eq!(j["necessary"], serde_json::json!([]), "{j}");
    assert_eq!(
        j["other_crash_when_left_out"],
        serde_json::json!([p1]),
        "{j}"
    );
    assert_eq!(by("0002+0003")["class"], "other-crash");
    assert_eq!(
        j["no_effect"],
        serde_json::json!(["0003-kv-cache-can-shift-mrope.patch"])
    );
    let rec = read_json(Path::new(j["record"].as_str().expect("record")));
    assert_eq!(rec["sufficient"], j["sufficient"]);
    assert!(Path::new(j["summary"].as_str().expect("summary")).is_file());
}
