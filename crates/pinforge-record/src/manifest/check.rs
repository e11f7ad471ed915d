//! The one validation of a manifest's content, run by [`super::Statement::parse`] and so by
//! every reader (`verify`, `diff`, `install`, flip, smoke): what `verify` needs to re-check a
//! build is also what `diff` needs to compare two, so a manifest that one refuses the other
//! refuses too, with the same words.
//!
//! What is checked, and why:
//! - the recipe and variant names hold no control character: they become names in the install
//!   root's state and receipts and head rows of `status` and `history`;
//! - subject and link names are relative paths by [`super::check_relative`], each listed once;
//! - every subject carries a `sha256` digest: an artifact without one cannot be re-hashed, and
//!   two of them would compare equal on "no sha256";
//! - every dependency is named once, by a name without control characters, and carries a
//!   digest: a name listed twice hides one of its values from a comparison, a newline in one
//!   forges a row, and a dependency without a digest compares on annotations only;
//! - every digest anywhere is one pinforge writes and checks (`sha256`: 64 lowercase hex digits,
//!   `gitCommit`: 40), so equal strings mean equal digests and nothing is compared that no
//!   check could confirm; a `normalized` digest and a `link_target` have their shapes too.
//!
//! Free text (link targets, tool versions, CMake arguments) is not refused here: it is only
//! shown, through [`pinforge_base::text::shown`], by whoever shows it (a link target becomes a
//! link when installed, and install refuses a control character in it there).

use super::{annotation, check_relative, Resource, Statement};
use pinforge_base::error::{Error, Result};
use pinforge_base::text::{self, Shown};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// Check a parsed statement; `path` names the manifest in every error (exit 2).
pub(super) fn statement(s: &Statement, path: &Path) -> Result<()> {
    let file = path.display();
    if s.type_ != super::STATEMENT_TYPE || s.predicate_type != super::PREDICATE_TYPE {
        return Err(Error::input(
            &file,
            "not an in-toto Statement v1 with SLSA provenance v1",
        ));
    }
    let def = &s.predicate.build_definition;
    let p = &def.external_parameters;
    for (field, value) in [("recipe", &p.recipe), ("variant", &p.variant)] {
        text::refuse_control(
            &format!("{file}: {field} name (externalParameters.{field})"),
            value,
        )?;
    }
    let root = &def.internal_parameters.artifact_root;
    check_relative(root).map_err(|m| {
        Error::input(&file, format!("artifact root `{}` {m}", Shown(root)))
            .with_hint("a manifest's artifact root is a folder beside it, such as `stage`")
    })?;
    outputs(s, path)?;
    let mut deps = BTreeSet::new();
    for d in &def.resolved_dependencies {
        // A dependency's name is an identifier (`patch:ID`, `tool:ROLE`), the key of its
        // local path in `inputs` and of its diff row: a name, not free text.
        text::refuse_control(
            &format!("{file}: dependency name (resolvedDependencies)"),
            &d.name,
        )?;
        if !deps.insert(d.name.as_str()) {
            return Err(Error::input(
                &file,
                format!("dependency `{}` is listed twice", Shown(&d.name)),
            )
            .with_hint(
                "a manifest names each dependency once; this one was edited or is not pinforge's",
            ));
        }
        if d.digest.is_empty() {
            return Err(Error::input(
                &file,
                format!("dependency `{}` has no digest", Shown(&d.name)),
            )
            .with_hint("pinforge records every input by `sha256` or `gitCommit`"));
        }
        digests(d, "dependency", path)?;
    }
    for b in &s.predicate.run_details.byproducts {
        digests(b, "byproduct", path)?;
    }
    Ok(())
}

/// Subjects and links: relative names, each listed once; every subject with a `sha256`, its
/// `normalized` digest well formed; every link's target a string.
fn outputs(s: &Statement, path: &Path) -> Result<()> {
    let file = path.display();
    let links = s
        .predicate
        .run_details
        .byproducts
        .iter()
        .filter(|b| b.annotations.contains_key(annotation::LINK_TARGET));
    let mut names = BTreeSet::new();
    for (what, r) in s
        .subject
        .iter()
        .map(|r| ("subject", r))
        .chain(links.map(|r| ("link", r)))
    {
        check_relative(&r.name)
            .map_err(|m| Error::input(&file, format!("{what} `{}` {m}", Shown(&r.name))))?;
        if !names.insert(r.name.as_str()) {
            return Err(Error::input(
                &file,
                format!(
                    "`{}` is listed twice among the subjects and links",
                    Shown(&r.name)
                ),
            )
            .with_hint(
                "a manifest names each artifact once; this one was edited or is not pinforge's",
            ));
        }
        if what == "link"
            && !r
                .annotations
                .get(annotation::LINK_TARGET)
                .is_some_and(Value::is_string)
        {
            return Err(Error::input(
                &file,
                format!("link `{}`: its target is not a string", r.name),
            ));
        }
    }
    for r in &s.subject {
        if !r.digest.contains_key("sha256") {
            return Err(Error::input(
                &file,
                format!("subject `{}` has no sha256 digest", r.name),
            )
            .with_hint("every artifact is recorded by its SHA-256; without one it can be neither re-hashed nor compared"));
        }
        digests(r, "subject", path)?;
        if let Some(n) = r.annotations.get(annotation::NORMALIZED) {
            let rule = n.get("rule").and_then(Value::as_str);
            let sha = n.get("sha256").and_then(Value::as_str);
            if rule.is_none() || !sha.is_some_and(|d| is_hex(d, 64)) {
                return Err(Error::input(
                    &file,
                    format!(
                        "subject `{}`: its `{}` annotation is not {{rule, sha256}} with a 64-hex-digit sha256",
                        r.name,
                        annotation::NORMALIZED
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Every digest of `r` is of an algorithm pinforge writes and checks, in its one spelling.
fn digests(r: &Resource, what: &str, path: &Path) -> Result<()> {
    for (alg, value) in &r.digest {
        let want = match alg.as_str() {
            "sha256" => 64,
            "gitCommit" => 40,
            _ => {
                return Err(Error::input(
                    path.display(),
                    format!(
                        "{what} `{}`: digest algorithm `{}` is not one pinforge records or checks",
                        Shown(&r.name),
                        Shown(alg)
                    ),
                )
                .with_hint("pinforge manifests record `sha256` (files) and `gitCommit` (trees)"))
            }
        };
        if !is_hex(value, want) {
            return Err(Error::input(
                path.display(),
                format!(
                    "{what} `{}`: `{alg}` digest `{}` is not {want} lowercase hex digits",
                    Shown(&r.name),
                    Shown(value)
                ),
            ));
        }
    }
    Ok(())
}

/// `s` is exactly `len` lowercase hex digits (the one spelling pinforge writes, so that two
/// equal digests are two equal strings).
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::super::Statement;
    use serde_json::{json, Value};
    use std::path::Path;

    const D: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// A valid manifest with one subject, one link and two dependencies.
    fn valid() -> Value {
        json!({"_type": "https://in-toto.io/Statement/v1",
            "predicateType": "https://slsa.dev/provenance/v1",
            "subject": [{"name": "lib/liba.so", "digest": {"sha256": D}}],
            "predicate": {"buildDefinition": {"buildType": "b",
                "externalParameters": {"recipe": "r", "variant": "v", "build_type": "Release",
                    "targets": [], "cmake_args": [], "patches": []},
                "internalParameters": {"artifact_root": "stage", "inputs": {}, "input_digest": D},
                "resolvedDependencies": [
                    {"name": "recipe", "digest": {"sha256": D}},
                    {"name": "source-tree", "digest": {"gitCommit": "0123456789abcdef0123456789abcdef01234567"}}
                ]},
             "runDetails": {"builder": {"id": "pinforge"},
                "metadata": {"invocationId": "x", "startedOn": "", "finishedOn": ""},
                "byproducts": [{"name": "lib/liba.so.1", "annotations": {"link_target": "liba.so"}},
                               {"name": "build.log", "digest": {"sha256": D}}]}}})
    }

    fn parse(v: &Value) -> pinforge_base::error::Result<Statement> {
        Statement::parse(
            serde_json::to_string(v).expect("json").as_bytes(),
            Path::new("m.json"),
        )
    }

    /// Each edit of a valid manifest, the words its refusal must hold.
    #[allow(clippy::type_complexity)]
    fn cases() -> Vec<(&'static str, Box<dyn Fn(&mut Value)>, &'static str)> {
        vec![
            (
                "subject with only a sha512",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["digest"] = json!({"sha512": "ab".repeat(64)});
                }),
                "subject `lib/liba.so` has no sha256",
            ),
            (
                "subject sha256 not a digest",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["digest"]["sha256"] = json!("not-a-digest");
                }),
                "`sha256` digest `not-a-digest` is not 64",
            ),
            (
                "subject sha256 upper case",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["digest"]["sha256"] = json!(D.to_uppercase());
                }),
                "is not 64 lowercase hex",
            ),
            (
                "subject sha256 with a prefix",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["digest"]["sha256"] = json!(format!("sha256:{D}"));
                }),
                "is not 64 lowercase hex",
            ),
            (
                "subject with an extra sha512",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["digest"]["sha512"] = json!("ab".repeat(64));
                }),
                "digest algorithm `sha512`",
            ),
            (
                "dependency twice, other digest",
                Box::new(|v: &mut Value| {
                    let mut d =
                        v["predicate"]["buildDefinition"]["resolvedDependencies"][0].clone();
                    d["digest"]["sha256"] = json!("0".repeat(64));
                    v["predicate"]["buildDefinition"]["resolvedDependencies"]
                        .as_array_mut()
                        .expect("a")
                        .push(d);
                }),
                "dependency `recipe` is listed twice",
            ),
            (
                "dependency twice, same digest",
                Box::new(|v: &mut Value| {
                    let d = v["predicate"]["buildDefinition"]["resolvedDependencies"][0].clone();
                    v["predicate"]["buildDefinition"]["resolvedDependencies"]
                        .as_array_mut()
                        .expect("a")
                        .push(d);
                }),
                "dependency `recipe` is listed twice",
            ),
            (
                "dependency without a digest",
                Box::new(|v: &mut Value| {
                    v["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"] =
                        json!({});
                }),
                "dependency `recipe` has no digest",
            ),
            (
                "dependency gitCommit short",
                Box::new(|v: &mut Value| {
                    v["predicate"]["buildDefinition"]["resolvedDependencies"][1]["digest"]
                        ["gitCommit"] = json!("0123abc");
                }),
                "`gitCommit` digest `0123abc` is not 40",
            ),
            (
                "dependency sha256 not hex",
                Box::new(|v: &mut Value| {
                    v["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]
                        ["sha256"] = json!("z".repeat(64));
                }),
                "dependency `recipe`: `sha256` digest",
            ),
            (
                "dependency name with a newline, listed twice",
                Box::new(|v: &mut Value| {
                    let deps = &mut v["predicate"]["buildDefinition"]["resolvedDependencies"];
                    deps[0]["name"] = json!("x\nartifact");
                    let d = deps[0].clone();
                    deps.as_array_mut().expect("a").push(d);
                }),
                "m.json: dependency name (resolvedDependencies): \"x\\nartifact\" holds",
            ),
            (
                "byproduct sha256 not a digest",
                Box::new(|v: &mut Value| {
                    v["predicate"]["runDetails"]["byproducts"][1]["digest"]["sha256"] = json!("x");
                }),
                "byproduct `build.log`",
            ),
            (
                "link target not a string",
                Box::new(|v: &mut Value| {
                    v["predicate"]["runDetails"]["byproducts"][0]["annotations"]["link_target"] =
                        json!(7);
                }),
                "its target is not a string",
            ),
            (
                "normalized digest not a digest",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["annotations"] =
                        json!({"normalized": {"rule": "nvcc-tmpxft/v1", "sha256": "same"}});
                }),
                "`normalized` annotation",
            ),
            (
                "recipe name with ESC",
                Box::new(|v: &mut Value| {
                    v["predicate"]["buildDefinition"]["externalParameters"]["recipe"] =
                        json!("r\u{1b}[2J");
                }),
                "m.json: recipe name (externalParameters.recipe)",
            ),
            (
                "variant name with a newline",
                Box::new(|v: &mut Value| {
                    v["predicate"]["buildDefinition"]["externalParameters"]["variant"] =
                        json!("v\n* gen 9");
                }),
                "m.json: variant name (externalParameters.variant)",
            ),
            (
                "subject name with a bidi override",
                Box::new(|v: &mut Value| {
                    v["subject"][0]["name"] = json!("lib/a\u{202e}os.so");
                }),
                "subject `\"lib/a\\u{202e}os.so\"`",
            ),
        ]
    }

    // issue #19 class 6: what verify cannot re-check, diff cannot compare; both refuse it
    // when the manifest is parsed, naming the manifest and the entry, never echoing it raw.
    #[test]
    fn every_uncomparable_entry_is_refused_naming_the_manifest_and_the_entry() {
        assert!(parse(&valid()).is_ok(), "the base manifest is valid");
        for (what, edit, want) in cases() {
            let mut v = valid();
            edit(&mut v);
            let e = parse(&v).expect_err(what);
            assert_eq!(e.exit_code(), 2, "{what}: {e}");
            let msg = e.to_string();
            assert!(msg.starts_with("m.json"), "{what}: {msg}");
            assert!(msg.contains(want), "{what}: {msg}");
            assert!(
                pinforge_base::text::first_unsafe(&msg).is_none(),
                "{what}: raw control character in {msg:?}"
            );
        }
    }

    // Free text is shown, not refused: a tool version or a link target with a control
    // character parses (the renderers escape it).
    #[test]
    fn free_text_parses_and_is_left_to_the_renderers() {
        let mut v = valid();
        v["predicate"]["buildDefinition"]["resolvedDependencies"][0]["annotations"] =
            json!({"version": "1.0\n  artifact x same"});
        v["predicate"]["runDetails"]["byproducts"][0]["annotations"]["link_target"] =
            json!("\u{1b}[31mred");
        assert!(parse(&v).is_ok());
    }
}
