//! `patch export` as a transaction (`patch::export::write`, steps `patch-write`): killed at
//! every step it leaves no bundle or the whole new one, never a part, and its stage is removed
//! by the next export (the stage is named by the writer's process id, which is then dead).

use crate::{code, pinforge, pinforge_cmd, stderr, Tiny};
use std::path::Path;

fn git(dir: &Path, args: &[&str]) {
    let st = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

/// The bundle's files and their bytes (modification times differ between runs).
fn contents(out: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(out)
        .expect("ls")
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect();
    v.sort();
    v
}

/// The stages `patch export` left beside `out`.
fn stages(out: &Path) -> Vec<String> {
    std::fs::read_dir(out.parent().expect("parent"))
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".pinforge-bundle-"))
        .collect()
}

#[test]
fn export_killed_at_every_step_leaves_no_bundle_or_the_whole_one_and_the_next_cleans_up() {
    use pinforge_base::txn::Step;
    let t = Tiny::new();
    let co = t.ws.join("co");
    git(
        &t.ws,
        &["clone", "-q", t.upstream.to_str().expect("utf8"), "co"],
    );
    git(&co, &["checkout", "-q", &t.v1.to_string()]);
    let o = pinforge(&t.ws, &["patch", "apply", co.to_str().expect("utf8")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = t.ws.join("exported");
    let args = [
        "patch",
        "export",
        co.to_str().expect("utf8"),
        "--base",
        &t.v1.to_string(),
        "--dir",
        out.to_str().expect("utf8"),
    ];
    // The whole bundle, as an export that is not interrupted writes it.
    let o = pinforge(&t.ws, &args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let whole = contents(&out);
    assert!(whole.iter().any(|(n, _)| n == "series"), "{whole:?}");
    for &at in pinforge_source::patch::export::BundleWriteStep::ALL {
        let step = at.index();
        std::fs::remove_dir_all(&out).expect("rm");
        let o = pinforge_cmd(&t.ws)
            .args(args)
            .env("PINFORGE_CRASH_AT", at.crash_at())
            .output()
            .expect("export");
        assert_eq!(o.status.code(), None, "step {step}: killed: {}", stderr(&o));
        match step {
            1 => {
                assert!(!out.exists(), "step 1: nothing published");
                assert_eq!(stages(&out).len(), 1, "step 1: the stage is left");
            }
            _ => {
                assert_eq!(contents(&out), whole, "step {step}: the whole bundle");
                assert!(stages(&out).is_empty(), "step {step}: no stage is left");
            }
        }
        let o = pinforge(&t.ws, &args);
        assert_eq!(code(&o), 0, "step {step}: the rerun: {}", stderr(&o));
        assert_eq!(
            contents(&out),
            whole,
            "step {step}: the rerun writes the whole bundle"
        );
        assert!(
            stages(&out).is_empty(),
            "step {step}: the rerun removed the dead stage"
        );
    }
}
