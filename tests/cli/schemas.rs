//! The JSON Schemas in `schemas/` (issue #8): generated from the Rust types, never stale, and
//! real output of every command with `--json` validates against the schema it names.
//! `validate` is shared: other modules that produce a document this one cannot make cheaply
//! (a smoke report needs a compiled stub engine) call `crate::schemas::validate`.

pub(crate) use crate::common::schemas::schema_file;
pub(crate) use crate::common::schemas::validate;
use crate::{code, pinforge, repo_root, stderr, stdout, Tiny};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const REGENERATE: &str = "cargo run -- __schemas --out schemas";

/// Every document a command printed: one pretty document, or JSON Lines.
fn documents(o: &std::process::Output) -> Vec<Value> {
    let text = stdout(o);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return vec![v];
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

// issue #8: the committed schemas are exactly what the types generate now.
#[test]
fn the_committed_schema_files_are_the_ones_the_types_generate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = pinforge(
        dir.path(),
        &["__schemas", "--out", dir.path().to_str().expect("utf8")],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let names = |d: &Path| -> BTreeSet<String> {
        std::fs::read_dir(d)
            .expect("read schemas")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect()
    };
    let committed = repo_root().join("schemas");
    let generated = names(dir.path());
    assert!(generated.len() >= 16, "{generated:?}");
    assert_eq!(
        names(&committed),
        generated,
        "schemas/ holds other files than the registry generates; run `{REGENERATE}`"
    );
    for n in &generated {
        let want = std::fs::read_to_string(dir.path().join(n)).expect("generated");
        let have = std::fs::read_to_string(committed.join(n)).expect("committed");
        assert!(
            want == have,
            "schemas/{n} is stale (the type changed); run `{REGENERATE}` and commit it"
        );
    }
}

// issue #8: a stale or wrong schema is caught: a document missing a required member, or
// with a digest that is not one, fails validation (the validator is not a formality).
#[test]
fn a_document_that_breaks_its_schema_fails_validation() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(schema_file("pinforge.vendor-digest/v1")).expect("schema"),
    )
    .expect("json");
    let v = jsonschema::validator_for(&schema).expect("validator");
    let good = serde_json::json!({"schema": "pinforge.vendor-digest/v1", "path": "x",
        "kind": "sha256", "digest": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"});
    assert!(v.is_valid(&good));
    let mut no_digest = good.clone();
    no_digest.as_object_mut().expect("obj").remove("digest");
    assert!(!v.is_valid(&no_digest));
    let mut bad_digest = good.clone();
    bad_digest["digest"] = Value::from("sha256:abc");
    assert!(!v.is_valid(&bad_digest));
    let mut other_id = good;
    other_id["schema"] = Value::from("pinforge.build/v1");
    assert!(!v.is_valid(&other_id));
}

// issue #8: real output of every command with --json validates against its schema. The
// smoke report (pinforge.smoke/v1) is validated where a stub engine is compiled
// (smoke_trust), from `smoke --json` and from `install --smoke --json`; so are the
// `validate --json` and `verify EVIDENCE --json` documents.
#[test]
fn real_output_of_every_command_validates_against_its_schema() {
    let t = Tiny::new();
    let mut seen = BTreeSet::new();
    let mut check = |o: &std::process::Output, want: i32, args: &[&str]| -> Vec<Value> {
        assert_eq!(code(o), want, "{args:?}: {}", stderr(o));
        let docs = documents(o);
        assert!(!docs.is_empty(), "{args:?} printed no document");
        for d in &docs {
            seen.insert(validate(d));
        }
        docs
    };
    let ws = &t.ws;
    let run = |args: &[&str]| pinforge(ws, args);

    // build: fresh, then cached (the stamp path), and two variants as JSON Lines.
    let args = [
        "build",
        "recipes/tiny.toml",
        "--variant",
        "patched",
        "--json",
    ];
    let first = check(&run(&args), 0, &args)[0].clone();
    check(&run(&args), 0, &args);
    let args = [
        "build",
        "recipes/tiny.toml",
        "--variant",
        "patched",
        "--variant",
        "unpatched",
        "--json",
    ];
    let both = check(&run(&args), 0, &args);
    assert_eq!(both.len(), 2);
    let m = first["manifest"].as_str().expect("manifest").to_string();
    let mu = both[1]["manifest"].as_str().expect("manifest").to_string();

    let root = ws.join("rollback");
    let root = root.to_str().expect("utf8");
    let model = ws.join("tiny.gguf");
    let model = model.to_str().expect("utf8");
    let bundle = ws.join("bundle.mbox");
    let bundle = bundle.to_str().expect("utf8");
    let upstream_file = t.upstream.join("tiny.c");
    let clone = ws.join("clone");
    git2::Repository::clone(t.upstream.to_str().expect("utf8"), &clone).expect("clone");
    let clone = clone.to_str().expect("utf8");

    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["verify", &m], 0),
        (vec!["diff", &m, &m], 0),
        (vec!["diff", &mu, &m], 1),
        (vec!["patch", "list"], 0),
        (vec!["patch", "lint"], 0),
        (vec!["patch", "apply", clone], 0),
        (vec!["patch", "bundle", "-o", bundle], 0),
        (vec!["model", "tiny", "--arch", "qwen2", "-o", model], 0),
        (
            vec!["vendor", "digest", upstream_file.to_str().expect("utf8")],
            0,
        ),
        (vec!["install", &mu, "--layer", "live", "--root", root], 0),
        (vec!["install", &m, "--layer", "live", "--root", root], 0),
        // Installing what the layer already shows: "unchanged".
        (vec!["install", &m, "--layer", "live", "--root", root], 0),
        (
            vec!["install", &mu, "--layer", "control", "--root", root],
            0,
        ),
        (vec!["status", "--root", root], 0),
        (vec!["status", "--verify", "--root", root], 0),
        (vec!["verify", "--installed", "--root", root], 0),
        (vec!["verify", "--installed", "control", "--root", root], 0),
        (vec!["rollback", "--root", root], 0),
        (vec!["rollback", "--to", "control", "--root", root], 0),
        (vec!["rollback", "--to-generation", "2", "--root", root], 0),
        (vec!["history", "--root", root], 0),
        (vec!["gc", "--dry-run", "--root", root], 0),
        (vec!["gc", "--root", root], 0),
    ];
    for (mut args, want) in cases {
        args.push("--json");
        let o = run(&args);
        check(&o, want, &args);
    }
    // A lint finding: the report with findings validates too (exit 2).
    let bad = ws.join("bad.patch");
    std::fs::write(&bad, "Subject: x\n\n---\n").expect("write");
    let args = ["patch", "lint", bad.to_str().expect("utf8"), "--json"];
    let docs = check(&run(&args), 2, &args);
    assert!(!docs[0]["findings"].as_array().expect("findings").is_empty());

    // patch export: the patch applied to the clone (at v2) back as a bundle.
    let exported = ws.join("exported");
    let v2 = t.v2.to_string();
    let args = [
        "patch",
        "export",
        clone,
        "--base",
        &v2,
        "--dir",
        exported.to_str().expect("utf8"),
        "--json",
    ];
    let docs = check(&run(&args), 0, &args);
    assert_eq!(docs[0]["patches"][0]["from"], "note", "{:#}", docs[0]);

    // patch check-attribution: the bundle's claims against the tiny upstream's own history.
    let upstream = format!("git:{}@{v2}", t.upstream.display());
    let args = [
        "patch",
        "check-attribution",
        "--upstream",
        &upstream,
        "--json",
    ];
    let docs = check(&run(&args), 0, &args);
    assert_eq!(
        docs[0]["patches"].as_array().map(Vec::len),
        Some(1),
        "{:#}",
        docs[0]
    );

    // toolkit: the stand-in toolkit of the cuda module (verified wheels, no pip).
    let cache = crate::cuda::fake_toolkit(ws);
    let args = [
        "toolkit",
        "recipes/toolkits/fake-13.1.1.toml",
        "--cache-dir",
        cache.to_str().expect("utf8"),
        "--json",
    ];
    check(&run(&args), 0, &args);

    // ablate: every subset of the one patch builds (the builds above, reused), and none can
    // be smoked (the tiny project has no libllama): undetermined, exit 1, a full record.
    let args = [
        "ablate",
        "recipes/tiny.toml",
        "--variant",
        "patched",
        "--model",
        model,
        "--json",
    ];
    let docs = check(&run(&args), 1, &args);
    assert_eq!(docs[0]["subsets"].as_array().map(Vec::len), Some(2));

    // flip: the to side fails to configure, so the trial is invalid (exit 1); the from side
    // is the build above (cached).
    let recipe = ws.join("recipes/tiny.toml");
    let mut text = std::fs::read_to_string(&recipe).expect("recipe");
    text.push_str("[variants.broken]\ncmake = { CMAKE_C_FLAGS = \"-fpinforge-no-such-flag\" }\n");
    std::fs::write(&recipe, text).expect("write recipe");
    let args = [
        "flip",
        "recipes/tiny.toml",
        "--from",
        "patched",
        "--to",
        "broken",
        "--hypothesis",
        "the C flags are the defect",
        "--json",
    ];
    let docs = check(&run(&args), 1, &args);
    assert_eq!(docs[0]["verdict"], "invalid");

    // audit and rebase on the tiny git pin: onto v3, which rewrote the patched line, the patch
    // conflicts (a stopped rebase, exit 1); onto v2 it carries and the rebase completes.
    let repo = git2::Repository::open(&t.upstream).expect("upstream");
    let v3 = crate::commit_files(
        &repo,
        &[(
            "tiny.c",
            "const char *tiny_where(void) { return __FILE__; }\nint tiny_value(void) {\n    return 3;\n}\n",
        )],
        "v3",
    );
    let up = t.upstream.display();
    let (v2, v3) = (format!("git:{up}@{}", t.v2), format!("git:{up}@{v3}"));
    for (args, want) in [
        (vec!["audit", "recipes/tiny.toml", "--onto", &v2], 0),
        (vec!["audit", "recipes/tiny.toml", "--onto", &v3], 1),
        (vec!["rebase", "recipes/tiny.toml", "--onto", &v3], 1),
        (vec!["rebase", "recipes/tiny.toml", "--onto", &v2], 0),
    ] {
        let mut args = args;
        args.push("--json");
        let docs = check(&run(&args), want, &args);
        if args[0] == "rebase" {
            assert_eq!(docs[0]["completed"], want == 0, "{args:?}");
        }
    }

    // Documents whose real output needs more than this test builds are validated where it
    // is made: smoke, validate and verify-evidence need compiled stub engines (smoke_trust).
    const ELSEWHERE: &[&str] = &[
        "pinforge.smoke/v1",
        "pinforge.validate/v1",
        "pinforge.verify-evidence/v1",
        // A soak flip's or soak ablation's record verified: real ASan builds (flip_soak,
        // ablate_soak).
        "pinforge.verify-soak/v1",
        // push and pull: a real registry (ship); sign and a signed verify: real keys (sign).
        "pinforge.push/v1",
        "pinforge.pull/v1",
        "pinforge.sign/v1",
        "pinforge.verify-signed/v1",
        "pinforge.verify-installed-signed/v1",
        // validate --serve / --endpoint: real llama-server builds (serve_soak).
        "pinforge.validate-serve/v1",
        // validate merge: shards of stub engines and of real ASan builds (shard).
        "pinforge.validate-merge/v1",
        // report: real builds' manifests and a real run and soak flip (report).
        "pinforge.report/v1",
        // bisect: real ASan builds of several releases (tests/llama/bisect.rs), and a recorded
        // real run with the crate's repository (tests/cli/bisect.rs).
        "pinforge.bisect/v1",
        // repair: the plan (--dry-run --json) and the report of a damaged layer (layers).
        "pinforge.repair/v1",
    ];
    let want: BTreeSet<String> = pinforge::cli::schema::DOCUMENTS
        .iter()
        .map(|d| d.id.to_string())
        .filter(|id| !ELSEWHERE.contains(&id.as_str()))
        .collect();
    let missing: Vec<&String> = want.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "no real output validated for {missing:?}"
    );
}
