//! Issue #21, sharded soaks: `validate --shard I/N` runs merged by `validate merge` equal the
//! unsharded run row for row on real AddressSanitizer builds (the row-independent restore of
//! `engine::slot`), and every refusal of `merge`, its crash points and its JSON document, on
//! verified stub engines (fast: no llama.cpp build).

pub(crate) use crate::common::shard::run_dir;
use crate::smoke_trust::{report, run_timeout, stub_build, Fx, HANG, STUB_ENGINE_OK_C};
use crate::{code, listing, stderr, stdout};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Two stub builds and a workspace; shards of a `--rows 6` stub run.
struct Stubs {
    fx: Fx,
    arms: [String; 2],
}

impl Stubs {
    fn new() -> Stubs {
        let fx = Fx::new();
        let (a, _) = stub_build(&fx, "base", STUB_ENGINE_OK_C);
        let (b, _) = stub_build(&fx, "cand", STUB_ENGINE_OK_C);
        let arms = [a.display().to_string(), b.display().to_string()];
        Stubs { fx, arms }
    }

    /// A shard run `I/N` (extra options after); its folder.
    fn shard(&self, s: &str, extra: &[&str]) -> PathBuf {
        let mut args = vec![
            "validate",
            &self.arms[0],
            &self.arms[1],
            "--rows",
            "6",
            "--arch",
            "qwen2",
            "--json",
            "--shard",
            s,
        ];
        args.extend_from_slice(extra);
        let o = self.fx.run(&args);
        assert_eq!(code(&o), 0, "shard {s}: {}", report(&o));
        run_dir(&crate::json(&o))
    }

    fn merge(&self, runs: &[&Path], out: &Path) -> std::process::Output {
        let mut args: Vec<String> = vec!["validate".into(), "merge".into()];
        args.extend(runs.iter().map(|r| r.display().to_string()));
        args.extend(["-o".into(), out.display().to_string(), "--json".into()]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.fx.run(&refs)
    }

    fn out(&self, name: &str) -> PathBuf {
        self.fx.ws.join("merged").join(name)
    }
}

// issue #21: each refusal of `merge` from the CLI, naming its cause, with nothing written.
#[test]
fn merge_refuses_differing_settings_duplicates_missing_shards_and_bad_evidence() {
    let st = Stubs::new();
    let s0 = st.shard("0/3", &[]);
    let s1 = st.shard("1/3", &[]);
    let s2 = st.shard("2/3", &[]);
    let s1_budget = st.shard("1/3", &["--budget", "7"]);
    let s1_again = st.shard("1/3", &[]);
    let s2_tampered = st.shard("2/3", &[]);
    let rows = s2_tampered.join("rows.jsonl");
    let text = std::fs::read_to_string(&rows).expect("rows");
    std::fs::write(&rows, text.replacen("\"ok\"", "\"mismatch\"", 1)).expect("edit");
    std::fs::create_dir_all(st.fx.ws.join("merged")).expect("mkdir");
    let before = listing(&st.fx.ws);
    let out = st.out("m");
    for (runs, exit, says) in [
        (
            vec![&s0, &s1_budget, &s2],
            2,
            vec!["settings differ", "budget"],
        ),
        (vec![&s0, &s1, &s1, &s2], 2, vec!["is given twice"]),
        (
            vec![&s0, &s1, &s1_again, &s2],
            2,
            vec!["shard 1/3 is given twice"],
        ),
        (vec![&s0, &s2], 2, vec!["missing shard(s) 1 of 3"]),
        (vec![&s0, &s1], 2, vec!["missing shard(s) 2 of 3"]),
        (
            vec![&s0, &s1, &s2_tampered],
            1,
            vec!["evidence does not verify", "rows.jsonl"],
        ),
    ] {
        let refs: Vec<&Path> = runs.iter().map(|p| p.as_path()).collect();
        let o = st.merge(&refs, &out);
        let e = stderr(&o);
        assert_eq!(code(&o), exit, "{runs:?}: {e}");
        for s in says {
            assert!(e.contains(s), "{runs:?}: wants {s:?}: {e}");
        }
        assert!(o.stdout.is_empty(), "{runs:?}: no document on a refusal");
        assert_eq!(listing(&st.fx.ws), before, "{runs:?}: nothing written");
    }
    // The same shards, untampered, merge; the document validates against its schema.
    let o = st.merge(&[&s0, &s1, &s2], &out);
    assert_eq!(code(&o), 0, "{}", report(&o));
    let j = crate::json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.validate-merge/v1");
    assert_eq!(j["shards"].as_array().map(Vec::len), Some(3), "{j}");
    assert_eq!(j["arms"][0]["rows"], 6, "{j}");
    let o = st
        .fx
        .run(&["verify", out.join("evidence.json").to_str().expect("utf8")]);
    assert_eq!(code(&o), 0, "{}", report(&o));
    // Issue #35: the merged run's report names the shards it was joined from, each by run id
    // and the evidence the merge verified, and lists those evidence files as checked now.
    let o = st.fx.run(&[
        "report",
        out.to_str().expect("utf8"),
        "-o",
        "-",
        "--format",
        "text",
    ]);
    assert_eq!(code(&o), 0, "{}", report(&o));
    let text = stdout(&o);
    assert!(text.contains("merged from 3 shards"), "{text}");
    for (i, s) in [&s0, &s1, &s2].iter().enumerate() {
        let id = s.file_name().and_then(|n| n.to_str()).expect("run id");
        assert!(
            text.contains(&format!("shard {i}/3: run {id}")),
            "shard {i} ({id}) named: {text}"
        );
        assert!(
            text.contains(&format!("evidence of shard {i}/3 (run {id})")),
            "{text}"
        );
    }
    // Issue #38: the same merge again (a scheduler's merge job re-run) is a no-op that says
    // so: exit 0, the same document, not a byte written.
    let first = j;
    let before = listing(&st.fx.ws);
    let bytes = |d: &Path| -> Vec<Vec<u8>> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(d)
            .expect("ls")
            .map(|e| e.expect("entry").path())
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| std::fs::read(p).expect("read"))
            .collect()
    };
    let files = bytes(&out);
    let o = st.merge(&[&s2, &s0, &s1], &out);
    assert_eq!(code(&o), 0, "{}", report(&o));
    assert!(
        stderr(&o).contains("note: unchanged:") && stderr(&o).contains("nothing written"),
        "{}",
        report(&o)
    );
    assert_eq!(crate::json(&o), first, "the same document");
    assert_eq!(listing(&st.fx.ws), before, "nothing written");
    assert_eq!(bytes(&out), files, "not a byte changed");
    let o = st.fx.run(&[
        "validate",
        "merge",
        s0.to_str().expect("utf8"),
        s1.to_str().expect("utf8"),
        s2.to_str().expect("utf8"),
        "-o",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(code(&o), 0, "{}", report(&o));
    assert!(
        stdout(&o).starts_with("unchanged: run m "),
        "{}",
        report(&o)
    );
    // Another run of shard 1 into the same folder: refused, naming the shard; nothing written.
    let o = st.merge(&[&s0, &s1_again, &s2], &out);
    let e = stderr(&o);
    assert_eq!(code(&o), 2, "{}", report(&o));
    for want in [
        "already exists and is not the merge of these shards",
        "its shard 1/3 is run",
        "a merge never replaces it",
        "hint: give another -o",
    ] {
        assert!(e.contains(want), "wants {want:?}: {e}");
    }
    assert!(o.stdout.is_empty(), "no document on a refusal");
    assert_eq!(listing(&st.fx.ws), before, "nothing written");
    assert_eq!(bytes(&out), files);
}

// issue #21: a merge killed at each crash point leaves no half-written merged folder: before
// the rename (merge:1, merge:2) the folder is absent and a rerun makes it; after it (merge:3)
// it is whole and verifies.
#[test]
fn a_merge_killed_at_each_step_leaves_no_half_written_folder() {
    use std::os::unix::process::ExitStatusExt;
    let st = Stubs::new();
    let s0 = st.shard("0/2", &[]);
    let s1 = st.shard("1/2", &[]);
    use pinforge_base::txn::Step;
    use pinforge_trial::validate::merge::MergeStep;
    for &at in MergeStep::ALL {
        let n = at.index();
        let out = st.out(&format!("killed-{n}"));
        let mut c = crate::pinforge_cmd(&st.fx.ws);
        c.args([
            "validate",
            "merge",
            s0.to_str().expect("utf8"),
            s1.to_str().expect("utf8"),
            "-o",
            out.to_str().expect("utf8"),
        ])
        .env("PINFORGE_CRASH_AT", at.crash_at());
        let o = run_timeout(c, HANG).expect("merge hung");
        assert_eq!(o.status.signal(), Some(9), "merge:{n}: {}", report(&o));
        let verify = || {
            st.fx
                .run(&["verify", out.join("evidence.json").to_str().expect("utf8")])
        };
        if at != MergeStep::Committed {
            assert!(
                std::fs::symlink_metadata(&out).is_err(),
                "merge:{n}: {} exists before the commit",
                out.display()
            );
            let o = st.merge(&[&s0, &s1], &out);
            assert_eq!(code(&o), 0, "merge:{n} rerun: {}", report(&o));
        }
        let o = verify();
        assert_eq!(code(&o), 0, "merge:{n}: {}", report(&o));
        // Whatever a kill left beside the runs is a dot-folder, never a run.
        let runs: BTreeSet<String> = std::fs::read_dir(st.fx.ws.join("merged"))
            .expect("merged")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect();
        let want: BTreeSet<String> = (1..=n).map(|k| format!("killed-{k}")).collect();
        assert_eq!(runs, want, "merge:{n}");
    }
}

// Issue #35: a validation run from a soak folder (no `build/`, shared between operators) keeps
// its run there and its compiled shims in the user's cache: it creates no `build/.smoke/` in
// the folder. A workspace with builds keeps them beside its builds, as before.
#[test]
fn validate_in_a_soak_folder_creates_no_build_folder_there() {
    let st = Stubs::new();
    let soak = st.fx.dir.path().join("soak");
    let cache = st.fx.dir.path().join("xdg-cache");
    std::fs::create_dir_all(&soak).expect("mkdir");
    let validate = |xdg: &std::ffi::OsStr, rows: &str| {
        crate::pinforge_cmd(&soak)
            .env("XDG_CACHE_HOME", xdg)
            .args([
                "validate",
                &st.arms[0],
                &st.arms[1],
                "--rows",
                rows,
                "--arch",
                "qwen2",
                "--json",
            ])
            .output()
            .expect("run pinforge")
    };
    let o = validate(cache.as_os_str(), "2");
    assert_eq!(code(&o), 0, "{}", report(&o));
    let top: BTreeSet<String> = std::fs::read_dir(&soak)
        .expect("soak")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !top.contains("build"),
        "no build/ in the soak folder: {top:?}"
    );
    assert!(top.contains("validate"), "the run is kept there: {top:?}");
    let shims: Vec<String> = std::fs::read_dir(cache.join("pinforge/smoke"))
        .expect("the user's smoke cache")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pinforge-smoke-") && n.ends_with(".so"))
        .collect();
    assert_eq!(shims.len(), 2, "one shim per arm's build folder: {shims:?}");
    // A relative XDG_CACHE_HOME is ignored (the XDG rule): HOME's cache is used instead.
    let o = validate(std::ffi::OsStr::new("relative"), "1");
    assert_eq!(code(&o), 0, "{}", report(&o));
    assert!(!soak.join("relative").exists() && !soak.join("build").exists());
}
