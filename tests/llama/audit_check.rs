//! `audit --check` and `rebase --check` (issue #26 §2): a drop proven by behaviour. The shipped
//! bundle's 0001 and 0002 declare the #20093 over-read as their `Pinforge-Check`; the check
//! builds `unpatched-asan` on the recipe's pin (crate 0.1.135) and on the new pin and smokes
//! both. Onto 0.1.140 (upstream's own fix) that is `fixed-upstream`, onto 0.1.137 (pre-fix)
//! `still-needed`. The builds are real llama.cpp ASan builds in the run's shared workspace
//! ([`llama_ws`]): the old pin's is the one `smoke_checks` uses, and the two tests share it; the
//! new pins' builds are each made once. The checks that need no build (a malformed or
//! misdirected check) refuse before anything is built.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/audit_check.rs`.

use crate::common::audit_check::shipped_copy;
use crate::{code, json, listing, llama_build, llama_ws, pinforge, stderr, stdout};
use std::path::Path;
use std::time::Instant;

const SIG: &str = "heap-buffer-overflow in llama_kv_cache::apply_ubatch";
const KSHIFT_SIG: &str = "GGML_ASSERT(hparams.n_pos_per_embd() == 1) in llama-kv-cache.cpp";

/// `audit RECIPE --onto ONTO --check --json` in the shared workspace: exit code, report, and
/// the wall seconds it took (what the check adds to CI).
fn audit_check(recipe: &Path, onto: &str) -> (i32, serde_json::Value, f64) {
    let t = Instant::now();
    let o = pinforge(
        llama_ws(),
        &[
            "audit",
            recipe.to_str().expect("utf8"),
            "--onto",
            onto,
            "--check",
            "--json",
        ],
    );
    let c = code(&o);
    assert!(
        c == 0 || c == 1,
        "audit --check failed ({c}): {}",
        stderr(&o)
    );
    (c, json(&o), t.elapsed().as_secs_f64())
}

fn patch<'a>(j: &'a serde_json::Value, file_prefix: &str) -> &'a serde_json::Value {
    j["patches"]
        .as_array()
        .expect("patches")
        .iter()
        .find(|p| {
            p["file"]
                .as_str()
                .is_some_and(|f| f.starts_with(file_prefix))
        })
        .unwrap_or_else(|| panic!("no {file_prefix} in {j:#}"))
}

fn evidence<'a>(p: &'a serde_json::Value, kind: &str) -> Option<&'a str> {
    p["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .find(|e| e["kind"] == kind)
        .and_then(|e| e["detail"].as_str())
}

/// The check's cost as the report states it, checked for shape: two builds of `unpatched-asan`
/// (old and new pin), shared by 0001 and 0002 (one smoke each), with their seconds.
fn cost_is_stated(j: &serde_json::Value, new_recipe: &str) {
    let c = &j["check"];
    let builds = c["builds"].as_array().expect("builds");
    let sides: Vec<(&str, &str)> = builds
        .iter()
        .map(|b| {
            (
                b["side"].as_str().expect("side"),
                b["built_as"].as_str().expect("built_as"),
            )
        })
        .collect();
    assert_eq!(
        sides,
        [
            ("old", "mrope-cpu/unpatched-asan"),
            ("new", &*format!("{new_recipe}/unpatched-asan"))
        ],
        "{c:#}"
    );
    for b in builds {
        // One smoke per distinct check: 0001 and 0002 share the restore decode, 0003 drives
        // the context shift.
        let settings: Vec<&str> = b["smokes"]
            .as_array()
            .expect("smokes")
            .iter()
            .filter_map(|s| s["settings"].as_str())
            .collect();
        assert_eq!(
            settings,
            [
                "arch=qwen2vl tokens=16",
                "arch=qwen2vl tokens=16 scenario=kshift"
            ],
            "{b:#}"
        );
        assert!(b["seconds"].as_f64().expect("seconds") > 0.0, "{b:#}");
    }
    assert!(c["build_seconds"].as_f64().expect("build_seconds") > 0.0);
    eprintln!(
        "audit --check cost: {:.1} s building ({} current), {:.1} s smoking, compile cache {} hits / {} misses",
        c["build_seconds"].as_f64().unwrap_or_default(),
        c["cached_builds"],
        c["smoke_seconds"].as_f64().unwrap_or_default(),
        c["compile_cache_hits"],
        c["compile_cache_misses"]
    );
}

// issue #26 §2: upstream fixed #20093 in 0.1.140 (in other words: the text says superseded);
// the behaviour shows it: the old pin without the patch overflows, the new one runs clean.
#[test]
fn onto_0_1_140_the_check_says_fixed_upstream_for_0001_and_0002() {
    // The old pin's build is the shared one smoke_checks uses.
    llama_build("unpatched-asan");
    let d = shipped_copy();
    let recipe = d.path().join("recipes/mrope-cpu.toml");
    let (c, j, secs) = audit_check(&recipe, "crate:llama-cpp-sys-2@0.1.140");
    eprintln!("audit --check onto 0.1.140: {secs:.1} s");
    assert_eq!(c, 1, "not every patch carries: {j:#}");
    for f in ["0001", "0002"] {
        let p = patch(&j, f);
        assert_eq!(p["check"], "fixed-upstream", "{p:#}");
        let e = evidence(p, "fixed-upstream").expect("fixed-upstream evidence");
        assert!(
            e.contains(&format!("old pin: crash `{SIG}`"))
                && e.contains("new pin crate:llama-cpp-sys-2@0.1.140: ok")
                && e.contains("builds of unpatched-asan: old "),
            "{e}"
        );
        // A check that proves the drop is the verdict (issue #39 §1); what the text alone
        // said (0001 superseded, 0002 carries-review) is kept beside it as `contradicted`.
        assert_eq!(p["verdict"], "fixed-upstream", "{p:#}");
        assert!(evidence(p, "contradicted").is_some(), "{p:#}");
    }
    // 0003's check drives the context shift (issue #39 §1): 0.1.135 without it asserts in
    // seq_add, 0.1.140 says it cannot shift an M-RoPE model and runs clean.
    let p3 = patch(&j, "0003");
    assert_eq!(
        (p3["check"].as_str(), p3["verdict"].as_str()),
        (Some("fixed-upstream"), Some("fixed-upstream")),
        "{p3:#}"
    );
    let e = evidence(p3, "fixed-upstream").expect("0003 fixed-upstream evidence");
    assert!(
        e.contains(&format!("old pin: crash `{KSHIFT_SIG}`"))
            && e.contains("scenario=kshift")
            && e.contains("new pin crate:llama-cpp-sys-2@0.1.140: ok"),
        "{e}"
    );
    cost_is_stated(&j, "mrope-cpu.onto-crate-llama-cpp-sys-2-0.1.140");

    // Again, in words: every build is now current, and the cost line says so.
    let o = pinforge(
        llama_ws(),
        &[
            "audit",
            recipe.to_str().expect("utf8"),
            "--onto",
            "crate:llama-cpp-sys-2@0.1.140",
            "--check",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("[strong] fixed-upstream:"), "{out}");
    assert!(out.contains("check: 2 build(s) (2 current)"), "{out}");

    // check-invalid: a check whose smoke cannot show the defect (the classical-RoPE control is
    // clean on every build) says so about the check, on the same two builds.
    let p1 = d
        .path()
        .join("patches/0001-batch-size-ubatch-reserve-pos-for-mrope.patch");
    let text = std::fs::read_to_string(&p1).expect("read");
    std::fs::write(
        &p1,
        text.replace(
            "Pinforge-Check: variant=unpatched-asan arch=qwen2vl",
            "Pinforge-Check: variant=unpatched-asan arch=qwen2",
        ),
    )
    .expect("write");
    let (c, j, _) = audit_check(&recipe, "crate:llama-cpp-sys-2@0.1.140");
    assert_eq!(c, 1);
    let p = patch(&j, "0001");
    assert_eq!(p["check"], "check-invalid", "{p:#}");
    let e = evidence(p, "check-invalid").expect("check-invalid evidence");
    assert!(
        e.contains("old pin: ok") && e.contains("fix the Pinforge-Check"),
        "{e}"
    );
    assert_eq!(patch(&j, "0002")["check"], "fixed-upstream");
}

// issue #26 §2: 0.1.137 is still pre-fix: the new pin without the patches still overflows, so
// the patches are still needed (and carried), and `rebase --check` refuses to drop one.
#[test]
fn onto_0_1_137_the_check_says_still_needed_and_rebase_check_refuses_the_drop() {
    llama_build("unpatched-asan");
    let d = shipped_copy();
    let recipe = d.path().join("recipes/mrope-cpu.toml");
    let (c, j, secs) = audit_check(&recipe, "crate:llama-cpp-sys-2@0.1.137");
    eprintln!("audit --check onto 0.1.137: {secs:.1} s");
    assert_eq!(c, 1);
    for f in ["0001", "0002"] {
        let p = patch(&j, f);
        assert_eq!(p["check"], "still-needed", "{p:#}");
        let e = evidence(p, "still-needed").expect("still-needed evidence");
        assert!(
            e.contains(&format!(
                "new pin crate:llama-cpp-sys-2@0.1.137: crash `{SIG}`"
            )),
            "{e}"
        );
        assert_eq!(p["verdict"], "carries", "{p:#}");
    }
    // 0.1.137 lacks the K-shift guard too: its shift still asserts.
    assert_eq!(patch(&j, "0003")["check"], "still-needed", "{j:#}");
    cost_is_stated(&j, "mrope-cpu.onto-crate-llama-cpp-sys-2-0.1.137");

    // Dropping a still-needed patch is refused before anything is written.
    let before = listing(d.path());
    let o = pinforge(
        llama_ws(),
        &[
            "rebase",
            recipe.to_str().expect("utf8"),
            "--onto",
            "crate:llama-cpp-sys-2@0.1.137",
            "--check",
            "--drop",
            "0001-batch-size-ubatch-reserve-pos-for-mrope.patch",
            "--drop",
            "0003-kv-cache-can-shift-mrope.patch",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("still needed")
            && err.contains("0001-batch-size-ubatch-reserve-pos-for-mrope.patch (named in --drop)"),
        "{err}"
    );
    assert_eq!(listing(d.path()), before, "rebase --check wrote something");
}
