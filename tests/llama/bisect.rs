//! `bisect` on real llama.cpp ASan builds (issue #39 §2): 0001's #20093 over-read over the
//! releases 0.1.137..0.1.140, in version order (CI has no clone of the crate's repository, so
//! no `--vcs-repo`). Both ends are the builds `audit_check` makes in the shared workspace
//! (0.1.137 shows the overflow, 0.1.140 runs clean), so the bisect adds 0.1.138 (the same
//! llama.cpp as 0.1.137: every object a compile-cache hit) and 0.1.139 (a cold build). The
//! answer is exact: 0.1.139 is the first release without the defect, 0.1.138 the last with it.

use crate::common::audit_check::shipped_copy;
use crate::{code, json, llama_build, llama_ws, pinforge, stderr, stdout};
use std::time::Instant;

const P1: &str = "0001-batch-size-ubatch-reserve-pos-for-mrope.patch";

#[test]
fn bisect_of_0001_over_0_1_137_to_0_1_140_names_0_1_139_and_writes_it() {
    llama_build("unpatched-asan");
    let d = shipped_copy();
    let recipe = d.path().join("recipes/mrope-cpu.toml");
    let recipe = recipe.to_str().expect("utf8");
    let args = [
        "bisect",
        recipe,
        "--patch",
        P1,
        "--range",
        "crate:llama-cpp-sys-2@0.1.137..0.1.140",
        "--json",
    ];
    let t = Instant::now();
    let o = pinforge(llama_ws(), &args);
    eprintln!(
        "bisect 0.1.137..0.1.140: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    crate::schemas::validate(&j);
    assert_eq!(j["found"]["kind"], "exact", "{j:#}");
    assert_eq!(j["first_fixed_release"], "0.1.139", "{j:#}");
    assert_eq!(j["last_bad"]["releases"][0], "0.1.138", "{j:#}");
    assert_eq!(j["plan"]["order"], "version", "{j:#}");
    let probes = j["probes"].as_array().expect("probes");
    assert!(
        probes.len() <= j["bound"].as_u64().expect("bound") as usize,
        "{j:#}"
    );
    // Every probe is decided by the check's own signature or a clean run, never skipped here.
    for p in probes {
        assert!(p["mark"] == "bad" || p["mark"] == "good", "{p:#}");
        if p["mark"] == "bad" {
            assert_eq!(
                p["signature"], "heap-buffer-overflow in llama_kv_cache::apply_ubatch",
                "{p:#}"
            );
        }
    }
    // The log is the same document.
    let log = llama_ws()
        .join("build/.bisect/mrope-cpu")
        .join(format!("{P1}.json"));
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&log).expect("log")).expect("log json");
    assert_eq!(kept["found"], j["found"]);

    // --write, run again: every build is current, and the header names 0.1.139.
    let mut w = args.to_vec();
    w.retain(|a| *a != "--json");
    w.push("--write");
    // Killed at each step of the bundle's rewrite: before the swap the header is the old one,
    // after it the new one; either way the log is this run's (its answer, `written: false`),
    // never an older run's beside a new header, and no stage is left once a writer runs again.
    let patch = d.path().join("patches").join(P1);
    // The header as it was before any bisect wrote it (the shipped one carries the line of
    // the run with the crate's repository, 2026-12-07).
    let before: String = std::fs::read_to_string(&patch)
        .expect("patch")
        .split_inclusive('\n')
        .filter(|l| !l.starts_with("Applied-Upstream:"))
        .collect();
    use pinforge_base::txn::Step;
    for &at in pinforge_source::patch::export::BundleWriteStep::ALL {
        std::fs::write(&patch, &before).expect("restore the patch");
        std::fs::remove_file(&log).expect("rm log");
        let o = crate::pinforge_cmd(llama_ws())
            .args(&w)
            .env("PINFORGE_CRASH_AT", at.crash_at())
            .output()
            .expect("bisect");
        assert_eq!(
            o.status.code(),
            None,
            "{}: killed: {}",
            at.crash_at(),
            stderr(&o)
        );
        let kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&log).expect("this run's log")).expect("json");
        assert_eq!(kept["found"], j["found"], "{}", at.crash_at());
        assert_eq!(kept["written"], false, "{}", at.crash_at());
        let now = std::fs::read_to_string(&patch).expect("patch");
        let written = now
            .lines()
            .any(|l| l.starts_with("Applied-Upstream:") && l.contains("0.1.139"));
        assert_eq!(written, at.index() == 2, "{}: {now}", at.crash_at());
        if at.index() == 1 {
            assert_eq!(now, before, "step 1: the bundle is the old one");
        }
    }
    std::fs::write(&patch, &before).expect("restore the patch");
    let o = pinforge(llama_ws(), &w);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("Applied-Upstream written:"),
        "{}",
        stdout(&o)
    );
    let text = std::fs::read_to_string(d.path().join("patches").join(P1)).expect("read");
    let line = text
        .lines()
        .find(|l| l.starts_with("Applied-Upstream:"))
        .expect("Applied-Upstream line");
    assert!(line.contains("crate llama-cpp-sys-2 0.1.139"), "{line}");
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&log).expect("log")).expect("log json");
    assert_eq!(kept["written"], true, "{kept:#}");
    let stages: Vec<String> = std::fs::read_dir(d.path())
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".pinforge-bundle-"))
        .collect();
    assert!(
        stages.is_empty(),
        "the dead writers' stages are gone: {stages:?}"
    );
    let lint = pinforge(
        llama_ws(),
        &[
            "patch",
            "lint",
            d.path().join("patches").to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&lint), 0, "{}", stderr(&lint));
}

/// The vendored tree of `crate:llama-cpp-sys-2@VERSION` in the shared workspace (its
/// `llama.cpp/`, as pinforge unpacked it, beside pinforge's `.git`), fetched by a text audit when no test has yet.
fn vendored_tree(recipe: &str, version: &str) -> std::path::PathBuf {
    let find = || {
        std::fs::read_dir(llama_ws().join("vendor"))
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let n = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                n.starts_with(&format!("llama-cpp-sys-2-{version}-")) && !n.contains('+')
            })
    };
    if let Some(p) = find() {
        return p;
    }
    let onto = format!("crate:llama-cpp-sys-2@{version}");
    let o = pinforge(llama_ws(), &["audit", recipe, "--onto", &onto]);
    assert!(code(&o) <= 1, "audit --onto {onto}: {}", stderr(&o));
    find().expect("the audit vendored the tree")
}

/// `bisect --range git:` over a real git repository of llama.cpp trees: the trees three
/// releases vendor, committed in upstream order (0.1.138's b8148, 0.1.140's b8233, 0.1.139's
/// b8310: the release order is not upstream's) and tagged as the crate's bumps name them. The
/// repository's root is the tree (as in llama.cpp's own repository, unlike the crate's
/// `llama.cpp/`). The answer is the b8233 commit, and the header line names its tag; every
/// probe is a tree the crate bisect or the audit built, so each is a compile-cache hit.
#[test]
fn bisect_of_0001_over_a_git_range_of_upstream_trees_names_the_b8233_tag() {
    llama_build("unpatched-asan");
    let d = shipped_copy();
    let recipe_path = d.path().join("recipes/mrope-cpu.toml");
    let recipe = recipe_path.to_str().expect("utf8");
    // Its own recipe name, so its probe folders and log are not the crate bisect's.
    let text = std::fs::read_to_string(&recipe_path).expect("recipe");
    std::fs::write(
        &recipe_path,
        text.replacen("name = \"mrope-cpu\"", "name = \"mrope-git\"", 1),
    )
    .expect("rename recipe");
    let repo = d.path().join("upstream").join("llama.cpp");
    std::fs::create_dir_all(&repo).expect("mkdir");
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
            .args(args)
            .current_dir(&repo)
            .output()
            .expect("git");
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    git(&["init", "-q"]);
    for (version, tag) in [
        ("0.1.138", "b8148"),
        ("0.1.140", "b8233"),
        ("0.1.139", "b8310"),
    ] {
        let tree = vendored_tree(recipe, version);
        for e in std::fs::read_dir(&repo).expect("ls").flatten() {
            if e.file_name() != ".git" {
                let p = e.path();
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).expect("rm");
                } else {
                    std::fs::remove_file(&p).expect("rm");
                }
            }
        }
        // The vendored tree is itself a git work tree (pinforge's pristine repository): its
        // files are copied, not its .git.
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg("tar -C \"$1\" --exclude=./.git -cf - . | tar -C \"$2\" -xf -")
            .arg("sh")
            .arg(&tree)
            .arg(&repo)
            .status()
            .expect("tar");
        assert!(st.success());
        // -f: the tree's own .gitignore must not leave files out of the commit.
        git(&["add", "-A", "-f", "."]);
        git(&[
            "commit",
            "-q",
            "-m",
            &format!("llama.cpp {tag} (the tree of crate {version})"),
        ]);
        git(&["tag", tag]);
    }
    let range = format!("git:{}@b8148..b8310", repo.display());
    let args = ["bisect", recipe, "--patch", P1, "--range", &range, "--json"];
    let t = Instant::now();
    let o = pinforge(llama_ws(), &args);
    eprintln!("bisect {range}: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    crate::schemas::validate(&j);
    assert_eq!(j["plan"]["kind"], "git", "{j:#}");
    assert_eq!(j["plan"]["order"], "upstream", "{j:#}");
    assert_eq!(j["plan"]["pins"].as_array().map(Vec::len), Some(3), "{j:#}");
    assert!(j["plan"]["subdir"].is_null(), "{j:#}");
    assert_eq!(j["found"]["kind"], "exact", "{j:#}");
    assert_eq!(j["first_good"]["tags"][0], "b8233", "{j:#}");
    assert_eq!(j["last_bad"]["tags"][0], "b8148", "{j:#}");
    let probes = j["probes"].as_array().expect("probes");
    assert!(
        probes.len() <= j["bound"].as_u64().expect("bound") as usize,
        "{j:#}"
    );
    for p in probes {
        assert!(p["mark"] == "bad" || p["mark"] == "good", "{p:#}");
        eprintln!(
            "probe {}: {} {} ({} s, {} misses)",
            p["step"],
            p["releases"][0],
            p["mark"],
            p["build"]["seconds"],
            p["build"]["compile_cache_misses"]
        );
    }
    let line = j["applied_upstream"].as_str().expect("applied_upstream");
    assert!(line.starts_with("b8233 (llama.cpp "), "{line}");
    assert!(line.contains("the first fixed commit"), "{line}");
    // The human form names the tag beside the commit.
    let o = pinforge(llama_ws(), &args[..args.len() - 1]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("(b8233)"), "{}", stdout(&o));
}
