//! Mechanical comparison of two builds' manifests: parameters (recipe, variant, build type,
//! targets, CMake arguments, patch list), resolved dependencies (pin, source tree, each patch,
//! recipe, each tool with its version), and every artifact and link, same or different. This is
//! what a flip record and `pinforge diff` show; it reads nothing but the two statements, so it
//! is as trustworthy as the manifests it is given (verify them first).

use pinforge_record::manifest::{Resource, Statement};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// How one named thing compares across the two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Present on both sides with the same digests (and annotations, for dependencies).
    Same,
    /// Present on both sides, different.
    Different,
    /// Only on side A.
    OnlyA,
    /// Only on side B.
    OnlyB,
    /// An artifact whose bytes differ only where a normalization rule both manifests state
    /// masks them (the row's `rule`, see [`pinforge_record::normalize`]): equal under that rule.
    Equivalent,
}

/// One row of a comparison: a name, its value on each side, and how they compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Row {
    /// Artifact path, dependency name or parameter name.
    pub name: String,
    /// The value on side A (a digest, a version, a parameter), if present.
    pub a: Option<String>,
    /// The value on side B, if present.
    pub b: Option<String>,
    /// How they compare.
    pub change: Change,
    /// The normalization rule under which the two sides are equal ([`Change::Equivalent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ManifestDiff {
    /// Input digest of each side; equal digests mean the same inputs.
    pub input_digest: (String, String),
    /// Parameters: recipe, variant, build_type, targets, patches, and one row per CMake argument
    /// name (`-DNAME=...`), so that one changed option shows as one row.
    pub parameters: Vec<Row>,
    /// Resolved dependencies by name.
    pub dependencies: Vec<Row>,
    /// Output artifacts (subjects) by path, with their SHA-256.
    pub artifacts: Vec<Row>,
    /// Links among the outputs, by path, with their targets.
    pub links: Vec<Row>,
}

impl ManifestDiff {
    /// True when inputs and outputs are the same on both sides.
    pub fn identical(&self) -> bool {
        [
            &self.parameters,
            &self.dependencies,
            &self.artifacts,
            &self.links,
        ]
        .iter()
        .all(|rows| rows.iter().all(|r| r.change == Change::Same))
    }

    /// True when inputs are the same and every output is the same or equal under a stated
    /// normalization rule: what "the build is reproducible" means for a CUDA build.
    pub fn equivalent(&self) -> bool {
        [
            &self.parameters,
            &self.dependencies,
            &self.artifacts,
            &self.links,
        ]
        .iter()
        .all(|rows| {
            rows.iter()
                .all(|r| matches!(r.change, Change::Same | Change::Equivalent))
        })
    }

    /// The rows of every section that are not the same, with the section's name.
    pub fn changes(&self) -> impl Iterator<Item = (&'static str, &Row)> {
        let sections: [(&'static str, &Vec<Row>); 4] = [
            ("parameter", &self.parameters),
            ("dependency", &self.dependencies),
            ("artifact", &self.artifacts),
            ("link", &self.links),
        ];
        sections
            .into_iter()
            .flat_map(|(name, rows)| rows.iter().map(move |r| (name, r)))
            .filter(|(_, r)| r.change != Change::Same)
    }
}

/// Compare two manifests.
pub fn diff(a: &Statement, b: &Statement) -> ManifestDiff {
    let da = &a.predicate.build_definition;
    let db = &b.predicate.build_definition;
    ManifestDiff {
        input_digest: (
            da.internal_parameters.input_digest.to_string(),
            db.internal_parameters.input_digest.to_string(),
        ),
        parameters: rows(parameters(a), parameters(b)),
        dependencies: rows(
            resources(&da.resolved_dependencies),
            resources(&db.resolved_dependencies),
        ),
        artifacts: normalized(rows(digests(&a.subject), digests(&b.subject)), a, b),
        links: rows(links(a), links(b)),
    }
}

/// Why a build ran instead of being reused, in words an operator can act on: which input
/// changed (the recipe, a patch, a tool, the pin, a CMake option), or that the workspace moved
/// (same inputs, another folder, so every object is rebuilt), or that there was no previous
/// build. Empty when the inputs are the same as last time.
pub fn rebuild_reasons(previous: Option<&Statement>, now: &Statement) -> Vec<String> {
    let Some(prev) = previous else {
        return vec!["no previous build of this variant".into()];
    };
    let d = diff(prev, now);
    // The source tree's commit follows from the pin and the patches: it is named only when
    // nothing else explains the change.
    let others_changed = d
        .dependencies
        .iter()
        .any(|x| x.name != "source-tree" && x.change != Change::Same);
    let mut reasons: Vec<String> = d
        .changes()
        .filter(|(section, _)| matches!(*section, "parameter" | "dependency"))
        .filter(|(_, r)| !(r.name == "source-tree" && others_changed))
        .map(|(_, r)| {
            let what = describe_input(&r.name);
            match r.change {
                Change::OnlyA => format!("{what} was removed"),
                Change::OnlyB => format!("{what} was added"),
                _ => format!("{what} changed"),
            }
        })
        .collect();
    let moved = prev.predicate.build_definition.internal_parameters.inputs
        != now.predicate.build_definition.internal_parameters.inputs;
    if reasons.is_empty() && moved {
        reasons.push("the workspace moved: same inputs, another folder".into());
    }
    reasons
}

/// A dependency or parameter name as an operator says it. The name is manifest data: shown
/// escaped, since these reasons are printed on the terminal.
fn describe_input(name: &str) -> String {
    let shown = pinforge_base::text::Shown;
    if let Some(p) = name.strip_prefix("patch:") {
        format!("patch {}", shown(p))
    } else if let Some(t) = name.strip_prefix("tool:") {
        format!("tool {}", shown(t))
    } else if let Some(o) = name.strip_prefix("cmake -D") {
        format!("CMake option {}", shown(o))
    } else {
        match name {
            "upstream" => "the pin".into(),
            "source-tree" => "the source tree".into(),
            "recipe" => "the recipe".into(),
            "patches" => "the patch list".into(),
            other => pinforge_base::text::shown(other).replace('_', " "),
        }
    }
}

/// Merge two name → value maps into sorted rows.
fn rows(a: BTreeMap<String, String>, b: BTreeMap<String, String>) -> Vec<Row> {
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let (va, vb) = (a.get(name).cloned(), b.get(name).cloned());
            let change = match (&va, &vb) {
                (Some(x), Some(y)) if x == y => Change::Same,
                (Some(_), Some(_)) => Change::Different,
                (Some(_), None) => Change::OnlyA,
                _ => Change::OnlyB,
            };
            Row {
                name: name.clone(),
                a: va,
                b: vb,
                change,
                rule: None,
            }
        })
        .collect()
}

/// The parameters as named values; CMake arguments are keyed by their option name so that a
/// changed value is one `Different` row, not a removal and an addition.
fn parameters(s: &Statement) -> BTreeMap<String, String> {
    let p = &s.predicate.build_definition.external_parameters;
    let mut m = BTreeMap::new();
    m.insert("recipe".into(), p.recipe.clone());
    m.insert("variant".into(), p.variant.clone());
    m.insert("build_type".into(), p.build_type.clone());
    m.insert("targets".into(), p.targets.join(" "));
    m.insert("patches".into(), p.patches.join(" "));
    let mut positional = 0usize;
    for arg in &p.cmake_args {
        let (key, value) = match arg.strip_prefix("-D").and_then(|d| d.split_once('=')) {
            // `-DNAME:TYPE=value` and `-DNAME=value` name the same option.
            Some((k, v)) => (
                format!("cmake -D{}", k.split(':').next().unwrap_or(k)),
                v.to_string(),
            ),
            None => {
                positional += 1;
                (format!("cmake arg #{positional}"), arg.clone())
            }
        };
        m.insert(key, value);
    }
    m
}

/// A resource's comparable value: its digests, plus its annotations (a tool's version, a
/// patch's order and offsets), in canonical order.
fn resources(list: &[Resource]) -> BTreeMap<String, String> {
    list.iter()
        .map(|r| {
            let mut parts: Vec<String> = r.digest.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            parts.extend(
                r.annotations
                    .iter()
                    .filter(|(k, _)| k.as_str() != "path")
                    .map(|(k, v)| format!("{k}={}", scalar(v))),
            );
            (r.name.clone(), parts.join(" "))
        })
        .collect()
}

/// An artifact's comparable value: its SHA-256 (its size follows from the content).
fn digests(list: &[Resource]) -> BTreeMap<String, String> {
    list.iter()
        .map(|r| {
            let sha = r
                .sha256()
                .map(|d| d.to_string())
                .unwrap_or_else(|| "no sha256".into());
            (r.name.clone(), sha)
        })
        .collect()
}

/// A subject's normalized digest, by rule (the `normalized` annotation).
fn normalized_digest<'a>(s: &'a Statement, name: &str) -> Option<(&'a str, &'a str)> {
    let n = s
        .subject
        .iter()
        .find(|r| r.name == name)?
        .annotations
        .get(pinforge_record::manifest::annotation::NORMALIZED)?;
    Some((n.get("rule")?.as_str()?, n.get("sha256")?.as_str()?))
}

/// Artifacts whose bytes differ but whose normalized digests agree under the same rule are
/// [`Change::Equivalent`]; anything else keeps its plain comparison.
fn normalized(mut rows: Vec<Row>, a: &Statement, b: &Statement) -> Vec<Row> {
    for r in rows.iter_mut().filter(|r| r.change == Change::Different) {
        if let (Some((ra, da)), Some((rb, db))) =
            (normalized_digest(a, &r.name), normalized_digest(b, &r.name))
        {
            // Only a rule this pinforge knows: two manifests agreeing on a made-up rule name
            // prove nothing about the bytes.
            if ra == pinforge_record::normalize::NVCC_TMPXFT && ra == rb && da == db {
                r.change = Change::Equivalent;
                r.rule = Some(ra.to_string());
            }
        }
    }
    rows
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Links among the outputs are byproducts with a `target` annotation.
fn links(s: &Statement) -> BTreeMap<String, String> {
    s.predicate
        .run_details
        .byproducts
        .iter()
        .filter_map(|r| {
            r.annotations
                .get(pinforge_record::manifest::annotation::LINK_TARGET)
                .map(|t| (r.name.clone(), format!("-> {}", scalar(t))))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pinforge_record::manifest::testing::{res, statement};

    #[test]
    fn rebuild_reasons_name_the_input_that_changed() {
        let a = statement("x", &["-DGGML_NATIVE=OFF"], vec![]);
        assert_eq!(
            rebuild_reasons(None, &a),
            vec!["no previous build of this variant".to_string()]
        );
        assert!(rebuild_reasons(Some(&a), &a).is_empty());
        let mut b = statement("x", &["-DGGML_NATIVE=ON"], vec![]);
        b.predicate
            .build_definition
            .resolved_dependencies
            .push(res("patch:0001-fix.patch", "f"));
        let reasons = rebuild_reasons(Some(&a), &b);
        assert!(
            reasons.contains(&"CMake option GGML_NATIVE changed".to_string()),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&"patch 0001-fix.patch was added".to_string()),
            "{reasons:?}"
        );
        let mut moved = a.clone();
        moved
            .predicate
            .build_definition
            .internal_parameters
            .inputs
            .insert("recipe".into(), "/elsewhere/r.toml".into());
        assert_eq!(
            rebuild_reasons(Some(&a), &moved),
            vec!["the workspace moved: same inputs, another folder".to_string()]
        );
    }

    #[test]
    fn a_manifest_is_identical_to_itself() {
        let a = statement(
            "patched",
            &["-DGGML_NATIVE=OFF"],
            vec![res("lib/a.so", "1")],
        );
        let d = diff(&a, &a);
        assert!(d.identical());
        assert_eq!(d.changes().count(), 0);
    }

    #[test]
    fn one_changed_cmake_option_is_one_different_row_whatever_its_type_suffix() {
        let a = statement("x", &["-DLLAMA_SANITIZE_ADDRESS=OFF"], vec![]);
        let b = statement("x", &["-DLLAMA_SANITIZE_ADDRESS:BOOL=ON"], vec![]);
        let d = diff(&a, &b);
        let changed: Vec<_> = d.changes().collect();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].1.name, "cmake -DLLAMA_SANITIZE_ADDRESS");
        assert_eq!(changed[0].1.change, Change::Different);
    }

    #[test]
    fn artifacts_are_classified_same_different_and_one_sided() {
        let a = statement(
            "a",
            &[],
            vec![
                res("lib/same.so", "s"),
                res("lib/llama.so", "1"),
                res("lib/old.so", "o"),
            ],
        );
        let b = statement(
            "a",
            &[],
            vec![
                res("lib/same.so", "s"),
                res("lib/llama.so", "2"),
                res("lib/new.so", "n"),
            ],
        );
        let d = diff(&a, &b);
        let by: BTreeMap<&str, Change> = d
            .artifacts
            .iter()
            .map(|r| (r.name.as_str(), r.change))
            .collect();
        assert_eq!(by["lib/same.so"], Change::Same);
        assert_eq!(by["lib/llama.so"], Change::Different);
        assert_eq!(by["lib/old.so"], Change::OnlyA);
        assert_eq!(by["lib/new.so"], Change::OnlyB);
        assert!(!d.identical());
    }
}
