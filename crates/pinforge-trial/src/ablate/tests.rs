//! Unit tests of the subset plan, the names and the analysis of an ablation.

use super::*;

#[test]
fn every_subset_up_to_four_then_singles_and_leave_one_out() {
    let s = subsets(3);
    assert_eq!(s.len(), 8);
    assert_eq!(s[0], Vec::<usize>::new());
    assert_eq!(s[7], vec![0, 1, 2]);
    assert_eq!(subsets(4).len(), 16);
    // 5 patches: none, 5 alone, 5 left out, all.
    let s = subsets(5);
    assert_eq!(s.len(), 12);
    assert!(s.contains(&vec![0, 1, 2, 4]));
    assert!(!s.contains(&vec![0, 1]));
}

#[test]
fn derived_names_are_folder_names_and_deterministic() {
    let p = |f: &str| PatchRef {
        file: f.into(),
        sha256: Sha256::of_bytes(b""),
    };
    let patches = vec![p("0001-a.patch"), p("fix-b.patch"), p("0003-c.patch")];
    assert_eq!(
        derived_name("patched-asan", &patches, &[]).as_str(),
        "patched-asan.abl-none"
    );
    assert_eq!(
        derived_name("patched-asan", &patches, &[0, 1, 2]).as_str(),
        "patched-asan.abl-0001-0002-0003"
    );
    let long = "v".repeat(60);
    let n = derived_name(&long, &patches, &[0]);
    assert!(
        n.as_str().starts_with("abl-") && n.as_str().len() == 20,
        "{n}"
    );
    assert_eq!(n, derived_name(&long, &patches, &[0]));
    assert_ne!(n, derived_name(&long, &patches, &[1]));
    // Every derived name is in the namespace a recipe variant is refused in.
    for v in ["patched-asan", long.as_str()] {
        for s in subsets(3) {
            let n = derived_name(v, &patches, &s);
            assert!(is_derived_name(v, n.as_str()), "{n}");
        }
    }
    assert!(!is_derived_name("patched", "patched-asan"));
    assert!(!is_derived_name("patched", "abl-0123"));
}

/// Issue #19 class 10: a recipe variant named like a subset of the ablated variant is
/// refused before anything is built, naming it; one outside the namespace is not.
#[test]
fn a_recipe_variant_named_like_a_subset_is_refused() {
    let text = pinforge_source::recipe::EMBEDDED_DEFAULT.to_string()
        + "\n[variants.\"patched.abl-0001\"]\ncmake = { GGML_NATIVE = true }\n";
    let recipe =
        Recipe::parse_bytes(text.as_bytes(), std::path::Path::new("r.toml"), None).expect("recipe");
    let e = check_derived_names_free(&recipe, "patched").expect_err("collides");
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(
        e.to_string()
            .starts_with("r.toml: variant `patched.abl-0001`"),
        "{e}"
    );
    assert!(check_derived_names_free(&recipe, "patched-asan").is_ok());
}

// review: labels name derived variants and build folders, so they must never collide —
// not for a repeated leading number, nor for a file without one next to `0001-…`.
#[test]
fn patch_labels_are_unique_whatever_the_file_names() {
    let p = |f: &str| PatchRef {
        file: f.into(),
        sha256: Sha256::of_bytes(f.as_bytes()),
    };
    let numbered = vec![p("0001-a.patch"), p("0002-b.patch")];
    assert_eq!(short_ids(&numbered), vec!["0001", "0002"]);
    for patches in [
        vec![p("0001-a.patch"), p("0001-b.patch")],
        vec![p("fix.patch"), p("0001-x.patch")],
        vec![p("0002-a.patch"), p("2-b.patch"), p("x.patch")],
    ] {
        let ids = short_ids(&patches);
        let unique: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), patches.len(), "{ids:?}");
        let all: Vec<usize> = (0..patches.len()).collect();
        let names: std::collections::BTreeSet<String> = subsets(patches.len())
            .iter()
            .map(|s| derived_name("v", &patches, s).to_string())
            .collect();
        assert_eq!(names.len(), subsets(patches.len()).len(), "{names:?}");
        assert_eq!(
            label(&patches, &all),
            (1..=patches.len())
                .map(|i| format!("{i:04}"))
                .collect::<Vec<_>>()
                .join("+")
        );
    }
}

fn sig() -> Class {
    Class::Crash("heap-buffer-overflow in llama_kv_cache::apply_ubatch".into())
}
fn other() -> Class {
    Class::Crash("heap-buffer-overflow in llama_kv_cache::state_read_meta".into())
}

// issue #10: the M-RoPE case as the real trees show it — resize (0) alone is sufficient,
// broadcast (1) alone still overflows, the K-shift guard (2) does not touch the signature.
#[test]
fn the_analysis_names_necessary_sufficient_and_untouched_patches() {
    let r = vec![
        (vec![], sig()),
        (vec![0], Class::Clean),
        (vec![1], other()),
        (vec![2], sig()),
        (vec![0, 1], Class::Clean),
        (vec![0, 2], Class::Clean),
        (vec![1, 2], other()),
        (vec![0, 1, 2], Class::Clean),
    ];
    let a = analyse(3, &r);
    assert_eq!(
        a.target_signature.as_deref(),
        Some("heap-buffer-overflow in llama_kv_cache::apply_ubatch")
    );
    assert_eq!(a.sufficient, vec![vec![0]]);
    // Leaving 0 out ({1,2}) overflows with another top frame: a different failure, so 0
    // is reported as "another crash when left out", not as necessary.
    assert!(a.necessary.is_empty());
    assert_eq!(a.other_crash_when_left_out, vec![0]);
    assert_eq!(a.no_effect, vec![2]);
    let mut same = r.clone();
    same[6].1 = sig();
    assert_eq!(analyse(3, &same).necessary, vec![0]);
}

#[test]
fn nothing_is_concluded_without_a_signature_or_from_undetermined_subsets() {
    let a = analyse(1, &[(vec![], Class::Clean), (vec![0], Class::Clean)]);
    assert_eq!(a.target_signature, None);
    assert!(a.sufficient.is_empty() && a.necessary.is_empty());
    let r = vec![
        (vec![], sig()),
        (vec![0], Class::Undetermined("did not build".into())),
        (vec![1], sig()),
        (vec![0, 1], Class::Clean),
    ];
    let a = analyse(2, &r);
    assert_eq!(a.sufficient, vec![vec![0, 1]]);
    // Leaving 0 out gives the signature; leaving 1 out is undetermined: not necessary.
    assert_eq!(a.necessary, vec![0]);
    // 1 never changes a determined pair (none -> {1}), 0 has no determined pair but one
    // that changes ({1} -> {0,1}).
    assert_eq!(a.no_effect, vec![1]);
}

// review: leaving a patch out of the full set and getting a *different* crash does not
// make it necessary; it is reported as another crash.
#[test]
fn only_the_target_signature_coming_back_makes_a_patch_necessary() {
    let r = vec![
        (vec![], sig()),
        (vec![0], other()),
        (vec![1], sig()),
        (vec![0, 1], Class::Clean),
    ];
    let a = analyse(2, &r);
    // Without 0 ({1}): the target signature -> 0 is necessary. Without 1 ({0}): another
    // crash -> not necessary, reported separately.
    assert_eq!(a.necessary, vec![0]);
    assert_eq!(a.other_crash_when_left_out, vec![1]);
}
