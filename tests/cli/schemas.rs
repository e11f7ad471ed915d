//! The JSON Schemas in `schemas/` (issue #8): generated from the Rust types, never stale, and
//! real output of every command with `--json` validates against the schema it names.
//! `validate` is shared: other modules that produce a document this one cannot make cheaply
//! (a smoke report needs a compiled stub engine) call `crate::schemas::validate`.

use crate::{code, pinforge, repo_root, stderr, stdout, Tiny};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const REGENERATE: &str = "cargo run -- __schemas --out schemas";

fn schema_file(id: &str) -> std::path::PathBuf {
    repo_root()
        .join("schemas")
        .join(format!("{}.json", id.replace('/', ".")))
}

/// Validate one document against the committed schema its `schema` member names; returns
/// the id.
pub(crate) fn validate(doc: &Value) -> String {
    let id = doc["schema"]
        .as_str()
        .unwrap_or_else(|| panic!("a document without a schema id: {doc}"))
        .to_string();
    let path = schema_file(&id);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{id}: no schema file {} ({e})", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("schema JSON");
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", path.display()));
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{id} output does not match {}:\n{}\n{doc:#}",
        path.display(),
        errors.join("\n")
    );
    id
}

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
// (smoke_trust), from `smoke --json` and from `install --smoke --json`.
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

    let want: BTreeSet<String> = pinforge::cli::schema::DOCUMENTS
        .iter()
        .map(|d| d.id.to_string())
        .filter(|id| id != "pinforge.smoke/v1")
        .collect();
    let missing: Vec<&String> = want.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "no real output validated for {missing:?}"
    );
}
