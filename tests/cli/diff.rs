//! `pinforge diff` over two real builds' manifests (issue #8: the mechanical comparison flip
//! records need).

use crate::{code, json, pinforge, stderr, stdout, Tiny};
use std::path::PathBuf;

fn manifest(t: &Tiny, variant: &str) -> PathBuf {
    let o = t.build(variant);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    PathBuf::from(json(&o)["manifest"].as_str().expect("manifest"))
}

#[test]
fn diff_of_patched_and_unpatched_names_the_patch_and_the_one_library_that_differs() {
    let t = Tiny::new();
    let p = manifest(&t, "patched");
    let u = manifest(&t, "unpatched");
    let (ps, us) = (p.to_str().expect("utf8"), u.to_str().expect("utf8"));

    let o = pinforge(&t.ws, &["diff", us, ps, "--json"]);
    assert_eq!(code(&o), 1, "differing builds exit 1: {}", stderr(&o));
    let d = json(&o);
    assert_eq!(d["schema"], "pinforge.diff/v1");
    let changed = |section: &str| -> Vec<(String, String)> {
        d[section]
            .as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["change"] != "same")
            .map(|r| {
                (
                    r["name"].as_str().expect("name").to_string(),
                    r["change"].as_str().expect("change").to_string(),
                )
            })
            .collect()
    };
    let params = changed("parameters");
    assert!(
        params.contains(&("patches".into(), "different".into())),
        "{params:?}"
    );
    assert!(params.contains(&("variant".into(), "different".into())));
    let deps = changed("dependencies");
    assert!(
        deps.iter()
            .any(|(n, c)| n.contains("0001-tiny-return-2") && c == "only-b"),
        "{deps:?}"
    );
    let arts = changed("artifacts");
    assert_eq!(arts.len(), 1, "only the library differs: {arts:?}");
    assert!(arts[0].0.contains("libtiny.so"), "{arts:?}");
    assert_eq!(arts[0].1, "different");

    let human = pinforge(&t.ws, &["diff", us, ps]);
    assert_eq!(code(&human), 1);
    let text = stdout(&human);
    assert!(text.contains("1 different"), "{text}");
    assert!(text.contains("the builds differ"), "{text}");
}

#[test]
fn diff_of_a_manifest_with_itself_is_identical_and_exits_0() {
    let t = Tiny::new();
    let p = manifest(&t, "patched");
    let ps = p.to_str().expect("utf8");
    let o = pinforge(&t.ws, &["diff", ps, ps]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("identical"), "{}", stdout(&o));
}

#[test]
fn diff_of_a_missing_manifest_is_an_input_error() {
    let t = Tiny::new();
    let o = pinforge(&t.ws, &["diff", "nope.json", "nope2.json"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("nope.json"), "{}", stderr(&o));
}
