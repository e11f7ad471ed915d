//! `audit --check` and `rebase --check` (issue #26 §2): a drop proven by behaviour. The shipped
//! bundle's 0001 and 0002 declare the #20093 over-read as their `Pinforge-Check`; the check
//! builds `unpatched-asan` on the recipe's pin (crate 0.1.135) and on the new pin and smokes
//! both. Onto 0.1.140 (upstream's own fix) that is `fixed-upstream`, onto 0.1.137 (pre-fix)
//! `still-needed`. The builds are real llama.cpp ASan builds in the run's shared workspace
//! ([`llama_ws`]): the old pin's is the one `smoke_checks` uses, and the two tests share it; the
//! new pins' builds are each made once. The checks that need no build (a malformed or
//! misdirected check) refuse before anything is built.

pub(crate) use crate::common::audit_check::shipped_copy;
use crate::{code, pinforge, stderr, stdout};
use std::time::Instant;

// issue #26 §2: a check that cannot be run is refused before anything is built (exit 2,
// naming the patch file).
#[test]
fn a_check_naming_a_variant_without_a_sanitizer_or_with_the_patch_is_refused_up_front() {
    let d = shipped_copy();
    let recipe = d.path().join("recipes/mrope-cpu.toml");
    let p1 = d
        .path()
        .join("patches/0001-batch-size-ubatch-reserve-pos-for-mrope.patch");
    let text = std::fs::read_to_string(&p1).expect("read");
    let ws = tempfile::tempdir().expect("ws");
    for (variant, says) in [
        ("unpatched", "builds without a sanitizer"),
        (
            "patched-asan",
            "applies 0001-batch-size-ubatch-reserve-pos-for-mrope.patch itself",
        ),
        ("nope", "is not a variant of recipe mrope-cpu"),
    ] {
        std::fs::write(
            &p1,
            text.replace("variant=unpatched-asan", &format!("variant={variant}")),
        )
        .expect("write");
        let t = Instant::now();
        let o = pinforge(
            ws.path(),
            &[
                "audit",
                recipe.to_str().expect("utf8"),
                "--onto",
                "crate:llama-cpp-sys-2@0.1.140",
                "--check",
            ],
        );
        assert_eq!(code(&o), 2, "{variant}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("0001-batch-size-ubatch-reserve-pos-for-mrope.patch: Pinforge-Check")
                && err.contains(says),
            "{variant}: {err}"
        );
        assert!(
            !ws.path().join("build").exists(),
            "{variant}: something was built"
        );
        assert!(
            t.elapsed().as_secs() < 60,
            "{variant}: not refused up front"
        );
    }
    // A malformed field is a lint error at its line, and the audit does not start.
    std::fs::write(
        &p1,
        text.replace("arch=qwen2vl tokens=16", "arch=qwen2vl tokens=lots"),
    )
    .expect("write");
    let o = pinforge(ws.path(), &["patch", "lint", p1.to_str().expect("utf8")]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        out.contains("malformed-check") && out.contains("tokens `lots`"),
        "{out}"
    );
}
