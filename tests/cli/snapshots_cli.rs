//! Snapshot tests of every command's human output, success and the main errors (issue #8), so
//! that a change of wording is a reviewed diff. Paths, digests, times, durations and sizes are
//! redacted; everything else is as a user sees it.

use crate::{pinforge, stderr, stdout, Installed, Tiny};
use std::process::Output;

/// Stdout and stderr with the exit code, the way a reviewer wants to read them.
fn shown(o: &Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        o.status.code().unwrap_or(-1),
        stdout(o),
        stderr(o)
    )
}

macro_rules! snap {
    ($name:expr, $output:expr) => {
        insta::with_settings!({filters => vec![
            (r"/tmp/[^\s:)'`]*", "[PATH]"),
            (r"\b[0-9a-f]{12,64}\b", "[HEX]"),
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]"),
            (r"\b\d+\.\d+s\b", "[SECS]"),
            (r"\b\d+ bytes\b", "[N] bytes"),
            (r"\(\d+/\d+\)", "(n/n)"),
            (r"\b\d+%", "[P]%"),
            (r"\b\d+ tok/s", "[N] tok/s"),
            // Reflinks or copies, as the test's file system allows.
            (r"\b\d+ reflinked, \d+ copied", "[N] reflinked, [N] copied"),
        ]}, {
            insta::assert_snapshot!($name, shown(&$output));
        });
    };
}

#[test]
fn human_output_of_every_command() {
    let i = Installed::new();
    let t: &Tiny = &i.t;
    let p = i.patched.to_str().expect("utf8").to_string();
    let u = i.unpatched.to_str().expect("utf8").to_string();

    snap!(
        "build_cached",
        pinforge(
            &t.ws,
            &["build", "recipes/tiny.toml", "--variant", "patched"]
        )
    );
    snap!(
        "build_cached_verbose",
        pinforge(
            &t.ws,
            &["build", "recipes/tiny.toml", "--variant", "patched", "-v"]
        )
    );
    snap!(
        "build_unknown_variant",
        pinforge(&t.ws, &["build", "recipes/tiny.toml", "--variant", "nope"])
    );
    snap!(
        "build_missing_recipe",
        pinforge(&t.ws, &["build", "recipes/none.toml"])
    );
    snap!("verify_ok", pinforge(&t.ws, &["verify", &p]));
    snap!(
        "verify_missing_manifest",
        pinforge(&t.ws, &["verify", "no/manifest.json"])
    );
    snap!("diff_patched_unpatched", pinforge(&t.ws, &["diff", &u, &p]));
    snap!("diff_identical", pinforge(&t.ws, &["diff", &p, &p]));
    snap!("install_live", i.run(&["install", &p, "--layer", "live"]));
    snap!(
        "install_unchanged",
        i.run(&["install", &p, "--layer", "live"])
    );
    snap!(
        "install_control",
        i.run(&["install", &u, "--layer", "control"])
    );
    snap!(
        "install_bad_layer",
        i.run(&["install", &p, "--layer", "staging"])
    );
    snap!("status", i.run(&["status"]));
    snap!("verify_installed", i.run(&["verify", "--installed"]));
    snap!(
        "rollback_to_control",
        i.run(&["rollback", "--to", "control"])
    );
    snap!("rollback_no_history", i.run(&["rollback"]));
    snap!("history", i.run(&["history"]));
    snap!("gc_dry_run", i.run(&["gc", "--dry-run"]));
    snap!("gc", i.run(&["gc"]));
    snap!(
        "status_missing_root",
        pinforge(&t.ws, &["status", "--root", "/nonexistent/root"])
    );
    snap!("smoke_without_libllama", pinforge(&t.ws, &["smoke", &p]));
    snap!("patch_list", pinforge(&t.ws, &["patch", "list"]));
    snap!("patch_lint", pinforge(&t.ws, &["patch", "lint"]));
    snap!(
        "patch_commit_message",
        pinforge(&t.ws, &["patch", "commit-message"])
    );
    let mbox = t.ws.join("b.mbox");
    snap!(
        "patch_bundle",
        pinforge(
            &t.ws,
            &["patch", "bundle", "-o", mbox.to_str().expect("utf8")]
        )
    );
    let model = t.ws.join("m.gguf");
    snap!(
        "model_tiny",
        pinforge(
            &t.ws,
            &[
                "model",
                "tiny",
                "--arch",
                "qwen2",
                "-o",
                model.to_str().expect("utf8")
            ]
        )
    );
    snap!(
        "model_tiny_bad_arch",
        pinforge(&t.ws, &["model", "tiny", "--arch", "gpt9", "-o", "x"])
    );
    snap!(
        "vendor_digest",
        pinforge(
            &t.ws,
            &[
                "vendor",
                "digest",
                t.upstream.join("tiny.c").to_str().expect("utf8")
            ]
        )
    );
    snap!(
        "vendor_digest_missing",
        pinforge(&t.ws, &["vendor", "digest", "no-such.tar.gz"])
    );
}
