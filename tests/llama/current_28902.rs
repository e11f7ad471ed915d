//! llama.cpp #28902 (issue #39 §4) on real ASan builds: the embedding-batch over-read of an
//! M-RoPE model's `pos`, driven by `smoke --scenario embd-pos-null` and `embd-pos-n-tokens`,
//! on the seed pin (0.1.135, the default recipe's shared unpatched build) and on today's
//! (0.1.161, `recipes/mrope-current.toml`). What it shows is what the current recipe's bundle
//! rests on: 0.1.135 over-reads on both paths; 0.1.161 has closed the `pos` NULL path (the one
//! upstream PR #28910 fixes on master) but still reads past the `n_tokens` positions
//! `llama_batch_init` allocates, and the carried patch
//! (`patches-current/0001-llama-batch-init-allocate-mrope-position-planes.patch`) ends that.
//! Two 0.1.161 builds: the unpatched one shares every object with any other 0.1.161 ASan
//! build through the compile cache; the patched one recompiles what includes llama.h.

use crate::{code, json, llama_build, llama_ws, pinforge, repo_root, stderr};

const OLD_SIG: &str = "heap-buffer-overflow in llama_batch_allocr::ubatch_add";
const NEW_SIG: &str = "heap-buffer-overflow in llama_batch_compat::init";

/// `smoke MANIFEST --scenario S --json`: exit code, verdict, first signature line, note.
fn smoke(manifest: &str, scenario: &str) -> (i32, String, String, String) {
    let o = pinforge(
        llama_ws(),
        &["smoke", manifest, "--scenario", scenario, "--json"],
    );
    let j = json(&o);
    crate::schemas::validate(&j);
    eprintln!(
        "{manifest} {scenario}: {} {}",
        j["verdict"],
        j["signature"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or("")
    );
    let s = |k: &str| j[k].as_str().unwrap_or_default().to_string();
    (
        code(&o),
        s("verdict"),
        // Compared as smoke normalizes it: kind and top frame, not the allocation site.
        s("signature")
            .lines()
            .next()
            .unwrap_or_default()
            .split(" (allocated in")
            .next()
            .unwrap_or_default()
            .to_string(),
        s("scenario_note"),
    )
}

fn current_build(variant: &str) -> String {
    let recipe = repo_root().join("recipes/mrope-current.toml");
    let o = pinforge(
        llama_ws(),
        &[
            "build",
            recipe.to_str().expect("utf8"),
            "--variant",
            variant,
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "mrope-current {variant}: {}", stderr(&o));
    json(&o)["manifest"]
        .as_str()
        .expect("build --json names its manifest")
        .to_string()
}

#[test]
fn embedding_batches_over_read_pos_on_0_1_135_and_on_0_1_161_only_where_the_patch_is_absent() {
    llama_build("unpatched-asan");
    let old = llama_ws().join("build/mrope-cpu/unpatched-asan/manifest.json");
    let old = old.to_str().expect("utf8");
    for scenario in ["embd-pos-null", "embd-pos-n-tokens"] {
        let (c, v, sig, _) = smoke(old, scenario);
        assert_eq!(
            (c, v.as_str(), sig.as_str()),
            (1, "crash", OLD_SIG),
            "0.1.135 {scenario}"
        );
    }

    let unpatched = current_build("unpatched-asan");
    let (c, v, _, note) = smoke(&unpatched, "embd-pos-null");
    assert_eq!(
        (c, v.as_str()),
        (0, "ok"),
        "0.1.161 closed the pos NULL path"
    );
    assert!(note.contains("with pos NULL"), "{note}");
    let (c, v, sig, _) = smoke(&unpatched, "embd-pos-n-tokens");
    assert_eq!(
        (c, v.as_str(), sig.as_str()),
        (1, "crash", NEW_SIG),
        "0.1.161 n_tokens path"
    );

    let patched = current_build("current-asan");
    for scenario in ["embd-pos-null", "embd-pos-n-tokens", "restore"] {
        let (c, v, sig, _) = smoke(&patched, scenario);
        assert_eq!(
            (c, v.as_str()),
            (0, "ok"),
            "patched 0.1.161 {scenario}: {sig}"
        );
    }

    // The same as a soak (`validate --row-kind`): every row of the unpatched arm dies of the
    // over-read, every row of the patched arm completes; with pos NULL neither dies.
    let soak = |kind: &str| {
        let o = pinforge(
            llama_ws(),
            &[
                "validate",
                &unpatched,
                &patched,
                "--rows",
                "12",
                "--row-kind",
                kind,
                "--json",
            ],
        );
        assert_eq!(code(&o), 0, "validate --row-kind {kind}: {}", stderr(&o));
        let j = json(&o);
        crate::schemas::validate(&j);
        let arms = j["arms"].as_array().expect("arms").clone();
        eprintln!(
            "MEASURED soak {kind}: {} / {}",
            arms[0]["counts"], arms[1]["counts"]
        );
        (arms[0].clone(), arms[1].clone())
    };
    let (control, live) = soak("embd-pos-n-tokens");
    assert_eq!(control["counts"]["crash"], 12, "{control}");
    assert!(
        control["signatures"]
            .as_array()
            .is_some_and(|s| s.iter().any(|x| x["signature"]
                .as_str()
                .is_some_and(|t| t.starts_with(NEW_SIG)))),
        "{control}"
    );
    assert_eq!(
        (
            live["counts"]["crash"].as_u64(),
            live["counts"]["ok"].as_u64()
        ),
        (Some(0), Some(12)),
        "{live}"
    );
    let (control, live) = soak("embd-pos-null");
    for a in [control, live] {
        assert_eq!(a["counts"]["ok"], 12, "{a}");
    }
}
