//! Test hooks, compiled only with the cargo feature `test-hooks`: the crash-consistency,
//! full-disk, filesystem-probe and smoke-crash tests steer a real `pinforge` process through
//! these environment variables. A normal build (`cargo build --release`) has none of this code
//! and none of these names: every function below is then a constant that reads nothing, so no
//! variable of an operator's environment can kill, fail or bend a production run.
//!
//! `cargo test` enables the feature through the self dev-dependency in Cargo.toml, so
//! `CARGO_BIN_EXE_pinforge` (the binary the integration tests run) has the hooks.
//!
//! | variable | effect |
//! |---|---|
//! | `PINFORGE_CRASH_AT=op:N` | SIGKILL right after step N of `op` (install or rollback) |
//! | `PINFORGE_CRASH_AT=rebase:N` | SIGKILL right after step N (1-8) of a rebase's commit protocol (`source::rebase::commit`), a `rebase --continue`'s too |
//! | `PINFORGE_CRASH_AT=rebase-resolve:replayed` | SIGKILL after a `rebase --continue` committed the rest of the series in its checkout, before the commit protocol (`source::rebase::resolve`) |
//! | `PINFORGE_FAIL_WRITE_AFTER=BYTES` | staging copies fail with ENOSPC after that many bytes |
//! | `PINFORGE_CRASH_AT=install-object:written` / `install-object:named` | SIGKILL after an install's first new object is written (temp file fsynced) / renamed to its name |
//! | `PINFORGE_OBJECT_LINK=emlink` | linking an entry file to its object fails with EMLINK (the copy fallback) |
//! | `PINFORGE_FS_PROBE=nosymlink` | the install root's filesystem probe reports no symlinks |
//! | `PINFORGE_CRASH_AT=sign:N` | SIGKILL after step N (1-3) of `sign FILE` (`artifact::sign::sign_file`) |
//! | `PINFORGE_CRASH_AT=key:N` | SIGKILL after step N of `key generate` (`artifact::sign::keygen`): 1 both staged, 2 the `.pub` published, 3 the private key published (the commit) |
//! | `PINFORGE_CRASH_AT=ablate:N` | SIGKILL after an ablation's final files are staged (1) or exchanged into its record folder (2, the old contents not yet removed) (`trial::record::commit_final`) |
//! | `PINFORGE_CRASH_AT=sign-record:N` | SIGKILL after a record's sidecars are staged (1) or renamed (2), before the record (`artifact::sign::record`) |
//! | `PINFORGE_CRASH_AT=install-server:answered` | SIGKILL once the `install --smoke` server check's server answered, before it is stopped (`deploy::serve::gate`) |
//! | `PINFORGE_CRASH_AT=pull:N` | SIGKILL after step N of `pull` (`deploy::ship::pull`): 1 the layer downloaded, 2 the stage filled and synced, 3 before the commit, 4 the stage renamed (or exchanged) into `pulled/<digest>/` |
//! | `PINFORGE_CRASH_AT=merge:N` | SIGKILL after step N of `validate --merge` (`trial::validate::merge`): 1 the model staged, 2 the evidence staged, 3 the staged folder renamed into place (the commit) |
//! | `PINFORGE_CRASH_AT=flip:registered` | SIGKILL right after a flip's pre-registration is written |
//! | `PINFORGE_CRASH_AT=flip:N` | SIGKILL after a flip's final files are staged (1) or exchanged into its record folder (2) (`trial::record::commit_final`) |
//! | `PINFORGE_VALIDATE_CRASH_ROWS=N,M` | the validate engine crashes on those rows |
//! | `PINFORGE_SOAK_FORCE_CLEAN=SIDE:R` | a soak flip reads the crash rows of SIDE's (`from`/`to`) run in repeat R as clean |
//! | `PINFORGE_CRASH_AT=serve:settings` / `serve:row:ARM:K` / `serve:summary` / `serve:evidence` | SIGKILL a served `validate` after its settings are written, after row K of arm ARM is appended, before the summary, before the evidence (`trial::validate::served`) |
//! | `PINFORGE_SERVE_KILL_CHILD_AT=N` | `validate --serve` SIGKILLs the router's children once row N's response headers arrived (mid-stream with `--stream`) |
//! | `PINFORGE_SMOKE_CRASH_TEST=1` | the smoke child crashes inside the engine call (set by `smoke --crash-test`) |

/// Whether this binary was built with the test hooks.
pub const ENABLED: bool = cfg!(feature = "test-hooks");

#[cfg(feature = "test-hooks")]
mod imp {
    fn var(name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    pub(crate) fn crash_point(op: &str, step: u32) {
        crash_named(&format!("{op}:{step}"));
    }

    pub(crate) fn crash_named(at: &str) {
        if var("PINFORGE_CRASH_AT").is_some_and(|v| v == at) {
            kill_self();
        }
    }

    pub(crate) fn validate_crash_rows() -> Vec<u64> {
        var("PINFORGE_VALIDATE_CRASH_ROWS")
            .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    fn kill_self() {
        // SIGKILL ends the process here, which is what the crash-consistency tests need (no
        // destructors, no flushing).
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }

    pub(crate) fn soak_force_clean() -> Option<(String, u32)> {
        let v = var("PINFORGE_SOAK_FORCE_CLEAN")?;
        let (side, r) = v.split_once(':')?;
        Some((side.to_string(), r.parse().ok()?))
    }

    pub(crate) fn fail_write_after() -> Option<u64> {
        var("PINFORGE_FAIL_WRITE_AFTER").and_then(|v| v.parse().ok())
    }

    pub(crate) fn object_link_emlink() -> bool {
        var("PINFORGE_OBJECT_LINK").as_deref() == Some("emlink")
    }

    pub(crate) fn fs_probe_nosymlink() -> bool {
        var("PINFORGE_FS_PROBE").as_deref() == Some("nosymlink")
    }

    pub(crate) fn serve_kill_child_at() -> Option<u64> {
        var("PINFORGE_SERVE_KILL_CHILD_AT").and_then(|v| v.parse().ok())
    }

    pub(crate) const SMOKE_CRASH_VAR: &str = "PINFORGE_SMOKE_CRASH_TEST";

    pub(crate) fn smoke_crash() -> bool {
        var(SMOKE_CRASH_VAR).as_deref() == Some("1")
    }
}

#[cfg(not(feature = "test-hooks"))]
mod imp {
    pub(crate) fn crash_point(_op: &str, _step: u32) {}
    pub(crate) fn crash_named(_at: &str) {}
    pub(crate) fn validate_crash_rows() -> Vec<u64> {
        Vec::new()
    }
    pub(crate) fn soak_force_clean() -> Option<(String, u32)> {
        None
    }
    pub(crate) fn fail_write_after() -> Option<u64> {
        None
    }
    pub(crate) fn object_link_emlink() -> bool {
        false
    }
    pub(crate) fn fs_probe_nosymlink() -> bool {
        false
    }
    pub(crate) fn smoke_crash() -> bool {
        false
    }
    pub(crate) fn serve_kill_child_at() -> Option<u64> {
        None
    }
}

/// `PINFORGE_CRASH_AT=op:N`: SIGKILL this process right after step `step` of `op`.
pub fn crash_point(op: &str, step: u32) {
    imp::crash_point(op, step)
}

/// `PINFORGE_CRASH_AT=NAME`: SIGKILL this process at the named point (`flip:registered`).
pub fn crash_named(at: &str) {
    imp::crash_named(at)
}

/// `PINFORGE_VALIDATE_CRASH_ROWS=3,7`: the validate engine crashes inside the engine call on
/// those rows (the stub-engine containment test).
pub fn validate_crash_rows() -> Vec<u64> {
    imp::validate_crash_rows()
}

/// `PINFORGE_SOAK_FORCE_CLEAN=to:2`: a soak flip (or, `LABEL:2`, an ablation soak of that subset)
/// reads the crash rows of that side's run in
/// that repeat as clean (the flip-flop test of `--repeats`); the run's evidence is untouched.
pub fn soak_force_clean() -> Option<(String, u32)> {
    imp::soak_force_clean()
}

/// `PINFORGE_FAIL_WRITE_AFTER=BYTES`: staging copies fail with ENOSPC after that many bytes.
pub fn fail_write_after() -> Option<u64> {
    imp::fail_write_after()
}

/// `PINFORGE_OBJECT_LINK=emlink`: linking an entry file to its object fails as it does at
/// the file system's link-count limit (the copy fallback's test).
pub fn object_link_emlink() -> bool {
    imp::object_link_emlink()
}

/// `PINFORGE_FS_PROBE=nosymlink`: the filesystem probe reports no symlink support.
pub fn fs_probe_nosymlink() -> bool {
    imp::fs_probe_nosymlink()
}

/// `PINFORGE_SERVE_KILL_CHILD_AT=N`: `validate --serve` kills the router's children once row
/// N's response headers arrived (the mid-stream child death test).
pub fn serve_kill_child_at() -> Option<u64> {
    imp::serve_kill_child_at()
}

/// `PINFORGE_SMOKE_CRASH_TEST=1` in the smoke child: crash inside the engine call.
pub fn smoke_crash() -> bool {
    imp::smoke_crash()
}

/// The environment the smoke parent hands its child for `smoke --crash-test`; `None` in a
/// build without hooks (the command refuses the flag there).
pub fn smoke_crash_env() -> Option<(&'static str, &'static str)> {
    #[cfg(feature = "test-hooks")]
    {
        Some((imp::SMOKE_CRASH_VAR, "1"))
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    /// The hook variables' names, as they appear in code.
    const NAMES: &[&str] = &[
        "PINFORGE_CRASH_AT",
        "PINFORGE_FAIL_WRITE_AFTER",
        "PINFORGE_FS_PROBE",
        "PINFORGE_SMOKE_CRASH_TEST",
        "PINFORGE_VALIDATE_CRASH_ROWS",
    ];

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    // issue #8: a release build has no hook. The names and every environment read of them
    // live in this file's feature-gated `imp` module only, so a build without the feature
    // cannot contain them (`tools/check-release-hooks.sh` checks the release binary's bytes).
    #[test]
    fn hook_variables_are_read_only_inside_the_feature_gated_module() {
        // Every crate of the workspace, and the command line.
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let mut files = Vec::new();
        rust_files(&root.join("src"), &mut files);
        rust_files(&root.join("crates"), &mut files);
        assert!(files.len() > 20, "{files:?}");
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read");
            if f.ends_with("hooks.rs") {
                let gated = text
                    .split("#[cfg(feature = \"test-hooks\")]\nmod imp {")
                    .nth(1)
                    .and_then(|rest| rest.split("\n}\n").next())
                    .expect("the gated imp module");
                let code = text.split("#[cfg(test)]").next().expect("code");
                assert_eq!(code.matches("std::env::var").count(), 1, "one reader");
                assert!(gated.contains("std::env::var"), "the reader is gated");
                for n in NAMES {
                    let outside = code.replace(gated, "");
                    let in_docs = outside.lines().filter(|l| l.contains(n));
                    assert!(
                        in_docs.clone().all(|l| l.trim_start().starts_with("//")),
                        "{n} outside the gated module: {:?}",
                        in_docs.collect::<Vec<_>>()
                    );
                }
            } else {
                for n in NAMES {
                    assert!(!text.contains(n), "{} names {n}", f.display());
                }
            }
        }
    }

    // `cargo test` builds with the feature (the workspace crates' dev-dependencies on
    // pinforge-base enable it): a test build without the hooks does not compile.
    const _: () = assert!(
        super::ENABLED,
        "pinforge-base's own dev-dependency on itself must enable test-hooks"
    );

    #[test]
    fn cargo_test_builds_have_the_hooks() {
        assert!(super::smoke_crash_env().is_some());
    }
}
