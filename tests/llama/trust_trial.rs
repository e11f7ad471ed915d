//! Issue #19 classes 7 and 10: `validate --resume` trusts nothing of its run folder (every
//! recorded row is checked against the run's settings, a link anywhere in or at the folder is
//! refused, exit 2 naming it), and `ablate` never takes a recipe variant named like one of its
//! subsets for the subset's build.
//! These are the tests that build real llama.cpp; the rest are in `tests/cli/trust_trial.rs`.

use crate::{code, json, llama_build, llama_ws, pinforge, stderr, Tiny};
use std::path::PathBuf;

/// Issue #19 class 10: a recipe variant literally named like a subset of the ablated
/// variant (`patched.abl-0001`), with other CMake flags and built first, is refused by
/// `ablate` (exit 2 naming it) before anything is built or recorded; its build is left as
/// it was, never taken as the subset's. Renamed, the same variant is no obstacle.
#[test]
fn ablate_refuses_a_recipe_variant_named_like_a_subset_and_leaves_its_build() {
    let t = Tiny::new();
    let path = t.ws.join("recipes/tiny.toml");
    let mut text = std::fs::read_to_string(&path).expect("recipe");
    text.push_str(
        "[variants.\"patched.abl-0001\"]\ncmake = { CMAKE_C_FLAGS = \"-DTINY_OTHER_FLAGS=1\" }\n",
    );
    std::fs::write(&path, &text).expect("write recipe");
    let o = t.build("patched.abl-0001");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let manifest = PathBuf::from(json(&o)["manifest"].as_str().expect("manifest"));
    let built = std::fs::read(&manifest).expect("manifest");
    let o = pinforge(
        &t.ws,
        &[
            "ablate",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--json",
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("variant `patched.abl-0001`"), "{err}");
    assert!(err.contains("rename the variant"), "{err}");
    assert_eq!(std::fs::read(&manifest).expect("manifest"), built);
    assert!(!t.ws.join("ablations").exists(), "nothing recorded");
    // The fast path still answers the variant's own build (the refusal changed nothing).
    let o = t.build("patched.abl-0001");
    assert_eq!(json(&o)["cached"], true, "{}", stderr(&o));
    assert_eq!(std::fs::read(&manifest).expect("manifest"), built);
}

/// A run of `validate` comparing the default recipe's `unpatched` build with itself, in a
/// workspace of the test's own.
struct Run {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    args: Vec<String>,
}

impl Run {
    fn new(rows: u32) -> Run {
        llama_build("unpatched");
        let m = llama_ws()
            .join("build/mrope-cpu/unpatched/manifest.json")
            .display()
            .to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("ws");
        let args = [
            "validate",
            &m,
            &m,
            "--rows",
            &rows.to_string(),
            "--arch",
            "qwen2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Run {
            _dir: dir,
            ws,
            args,
        }
    }

    fn validate(&self, extra: &[&str]) -> std::process::Output {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        pinforge(&self.ws, &args)
    }
}

/// The file's lines with one damage of `kind` at line `k` (picked with `n`), as bytes, and
/// the 1-based line the refusal must name.
fn damage(lines: &[String], kind: u64, k: usize, n: u64, rows: u64) -> (Vec<u8>, usize) {
    let mut lines: Vec<Vec<u8>> = lines.iter().map(|l| l.clone().into_bytes()).collect();
    let edit = |line: &[u8], f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_slice(line).expect("row");
        f(&mut v);
        v.to_string().into_bytes()
    };
    let other = format!("{:064x}", u128::from(n) * 7919 + 1);
    let mut at = k + 1;
    match kind {
        0 => lines[k] = edit(&lines[k], &|v| v["layer_digest"] = other.clone().into()),
        1 => lines[k] = edit(&lines[k], &|v| v["prompt_digest"] = other.clone().into()),
        2 => lines[k] = edit(&lines[k], &|v| v["row"] = (rows + n % 100).into()),
        3 => {
            lines.push(lines[k].clone());
            at = lines.len();
        }
        4 => {
            let cut = 1 + n as usize % (lines[k].len() - 1);
            lines[k].truncate(cut);
        }
        _ => {
            let i = lines[k]
                .windows(7)
                .position(|w| w == b"\"arm\":\"")
                .expect("arm")
                + 7;
            lines[k].insert(i, 0xff);
        }
    }
    let mut out = Vec::new();
    for l in lines {
        out.extend(l);
        out.push(b'\n');
    }
    (out, at)
}

/// Issue #19 class 7: a real run's row file, damaged at random (another arm digest, another
/// prompt digest, an index outside the run, a duplicate, a line cut short, a non-UTF-8 byte),
/// is refused by `--resume` with exit 2 naming rows.jsonl and the line, and left as it was;
/// `verify` of the run's evidence fails over it. The undamaged file resumes with every row.
#[test]
fn a_resumed_run_refuses_every_damaged_row_file_naming_its_line() {
    let run = Run::new(3);
    let o = run.validate(&["--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    let run_dir = PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let id = j["run"].as_str().expect("run").to_string();
    let evidence = j["evidence"]["manifest"].as_str().expect("ev").to_string();
    let rows_path = run_dir.join("rows.jsonl");
    let good = std::fs::read_to_string(&rows_path).expect("rows");
    let lines: Vec<String> = good.lines().map(String::from).collect();
    assert_eq!(lines.len(), 6);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for case in 0..18u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let kind = case % 6;
        let (bad, at) = damage(&lines, kind, (x % 6) as usize, x >> 8, 3);
        std::fs::write(&rows_path, &bad).expect("damage");
        let o = run.validate(&["--resume", &id]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "case {case} kind {kind}: {err}");
        assert!(
            err.contains(&format!("rows.jsonl:{at}:")),
            "case {case} kind {kind}: want line {at}: {err}"
        );
        assert_eq!(
            std::fs::read(&rows_path).expect("rows"),
            bad,
            "refused and left alone"
        );
        let o = pinforge(&run.ws, &["verify", &evidence]);
        assert_ne!(
            code(&o),
            0,
            "case {case}: verify ok over a damaged row file"
        );
    }
    std::fs::write(&rows_path, &good).expect("restore");
    let o = run.validate(&["--resume", &id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["resumed_rows"], 6);
    let o = pinforge(&run.ws, &["verify", &evidence]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}
