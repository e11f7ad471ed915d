//! Build manifests: an in-toto Statement v1 whose subjects are the output artifacts and whose
//! predicate is SLSA provenance v1 (resolved dependencies: upstream pin, source tree, each
//! patch, recipe, toolchain binaries; parameters: variant, CMake arguments, targets). The input
//! digest is SHA-256 over the canonical JSON of the build definition's inputs, so it names a
//! build independently of where the workspace is. `verify` re-hashes outputs and inputs.

use crate::digest::{GitOid, Sha256};
use crate::error::{Error, Result};
use crate::fsx;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// SLSA provenance predicate type.
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// pinforge's build type (a URI naming how to read the parameters).
pub const BUILD_TYPE: &str = "https://pinforge.invalid/cmake-variant/v1";

/// An in-toto ResourceDescriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// Name (artifact path relative to the artifact root, or a dependency name).
    pub name: String,
    /// URI, where one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Digests by algorithm (`sha256`, `gitCommit`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digest: BTreeMap<String, String>,
    /// Extra facts (size, order, version, link target).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, Value>,
}

impl Resource {
    /// The `sha256` digest, typed.
    pub fn sha256(&self) -> Option<Sha256> {
        self.digest.get("sha256").and_then(|d| d.parse().ok())
    }
}

/// The in-toto Statement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Statement {
    /// Always [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub type_: String,
    /// Output artifacts.
    pub subject: Vec<Resource>,
    /// Always [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// SLSA provenance.
    pub predicate: Provenance,
}

/// SLSA provenance v1.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Provenance {
    /// What was built from what.
    #[serde(rename = "buildDefinition")]
    pub build_definition: BuildDefinition,
    /// Who built it, when.
    #[serde(rename = "runDetails")]
    pub run_details: RunDetails,
}

/// SLSA BuildDefinition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildDefinition {
    /// [`BUILD_TYPE`].
    #[serde(rename = "buildType")]
    pub build_type: String,
    /// The variant's parameters (part of the input digest).
    #[serde(rename = "externalParameters")]
    pub external_parameters: ExternalParameters,
    /// Where things are on this machine (not part of the input digest).
    #[serde(rename = "internalParameters")]
    pub internal_parameters: InternalParameters,
    /// Inputs (part of the input digest).
    #[serde(rename = "resolvedDependencies")]
    pub resolved_dependencies: Vec<Resource>,
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalParameters {
    /// Recipe name.
    pub recipe: String,
    /// Variant name.
    pub variant: String,
    /// CMAKE_BUILD_TYPE.
    pub build_type: String,
    /// Targets built.
    pub targets: Vec<String>,
    /// The CMake configure arguments, with `${SRC}`, `${BUILD}` and `${TOOL:role}` standing for
    /// machine-specific paths.
    pub cmake_args: Vec<String>,
    /// Patch files in order.
    pub patches: Vec<String>,
}

/// Machine-local facts that let `verify` find the inputs and outputs again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InternalParameters {
    /// Artifact root, relative to the manifest's folder.
    pub artifact_root: String,
    /// Local path of each dependency that is a file or tree, by dependency name.
    pub inputs: BTreeMap<String, PathBuf>,
    /// The input digest (also `runDetails.metadata.invocationId`).
    pub input_digest: Sha256,
}

/// SLSA RunDetails.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunDetails {
    /// The builder.
    pub builder: Builder,
    /// Times and id.
    pub metadata: Metadata,
    /// Build log and links among the outputs.
    #[serde(default)]
    pub byproducts: Vec<Resource>,
}

/// SLSA Builder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Builder {
    /// `pinforge`.
    pub id: String,
    /// Versions.
    #[serde(default)]
    pub version: BTreeMap<String, String>,
}

/// SLSA BuildMetadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    /// The input digest.
    #[serde(rename = "invocationId")]
    pub invocation_id: String,
    /// RFC 3339.
    #[serde(rename = "startedOn")]
    pub started_on: String,
    /// RFC 3339.
    #[serde(rename = "finishedOn")]
    pub finished_on: String,
}

impl Statement {
    /// Read and check a manifest file.
    pub fn read(path: &Path) -> Result<Statement> {
        let text = fsx::read_to_string(path).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::input(path.display(), "manifest not found")
                    .with_hint("`pinforge build` prints the path of the manifest it writes")
            }
            other => other,
        })?;
        let s: Statement = serde_json::from_str(&text).map_err(|e| {
            Error::input(
                format!("{}:{}:{}", path.display(), e.line(), e.column()),
                format!("not a pinforge manifest: {e}"),
            )
        })?;
        if s.type_ != STATEMENT_TYPE || s.predicate_type != PREDICATE_TYPE {
            return Err(Error::input(
                path.display(),
                "not an in-toto Statement v1 with SLSA provenance v1",
            ));
        }
        Ok(s)
    }

    /// Canonical, pretty JSON (sorted keys, trailing newline).
    pub fn to_json(&self) -> Result<String> {
        let v = serde_json::to_value(self).map_err(|e| Error::Internal(e.to_string()))?;
        let mut s =
            serde_json::to_string_pretty(&sort(v)).map_err(|e| Error::Internal(e.to_string()))?;
        s.push('\n');
        Ok(s)
    }

    /// The input digest recorded in the manifest.
    pub fn input_digest(&self) -> Sha256 {
        self.predicate
            .build_definition
            .internal_parameters
            .input_digest
    }

    /// The folder artifacts are relative to.
    pub fn artifact_root(&self, manifest_path: &Path) -> PathBuf {
        fsx::parent_of(manifest_path).join(
            &self
                .predicate
                .build_definition
                .internal_parameters
                .artifact_root,
        )
    }
}

/// Recursively sort object keys (serde_json keeps insertion order only with a feature some
/// dependency might turn on; canonical form must not depend on that).
fn sort(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let sorted: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sort(v))).collect();
            Value::Object(sorted.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort).collect()),
        other => other,
    }
}

/// Canonical compact JSON of a value (sorted keys, no whitespace).
pub fn canonical_json<T: Serialize>(value: &T) -> Result<String> {
    let v = serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))?;
    serde_json::to_string(&sort(v)).map_err(|e| Error::Internal(e.to_string()))
}

/// The input digest: what was asked for and what it was built from, nothing machine-local.
pub fn input_digest(params: &ExternalParameters, deps: &[Resource]) -> Result<Sha256> {
    #[derive(Serialize)]
    struct Inputs<'a> {
        #[serde(rename = "buildType")]
        build_type: &'a str,
        #[serde(rename = "externalParameters")]
        external: &'a ExternalParameters,
        #[serde(rename = "resolvedDependencies")]
        deps: &'a [Resource],
    }
    let json = canonical_json(&Inputs {
        build_type: BUILD_TYPE,
        external: params,
        deps,
    })?;
    Ok(Sha256::of_bytes(json.as_bytes()))
}

/// A difference found by `verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// The file (or tree) that differs.
    pub path: String,
    /// What the manifest records.
    pub expected: String,
    /// What is there now (`missing` when absent).
    pub actual: String,
    /// `output` or `input`.
    pub role: String,
}

/// The result of `verify`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// No mismatch.
    pub ok: bool,
    /// Every difference.
    pub mismatches: Vec<Mismatch>,
    /// Outputs re-hashed.
    pub outputs_checked: usize,
    /// Inputs re-hashed (those still on disk).
    pub inputs_checked: usize,
    /// Inputs not on disk any more (not an error: a manifest outlives its workspace).
    pub inputs_absent: Vec<String>,
    /// The manifest's input digest.
    pub input_digest: Sha256,
}

/// Re-hash every output and every input still on disk.
pub fn verify(manifest_path: &Path) -> Result<VerifyReport> {
    let st = Statement::read(manifest_path)?;
    let root = st.artifact_root(manifest_path);
    let mut mismatches = Vec::new();
    for s in &st.subject {
        let path = root.join(&s.name);
        let expected = s.sha256().ok_or_else(|| {
            Error::input(
                manifest_path.display(),
                format!("subject `{}` has no sha256", s.name),
            )
        })?;
        let shown = path.display().to_string();
        match std::fs::symlink_metadata(&path) {
            Err(_) => mismatches.push(Mismatch {
                path: shown,
                expected: expected.to_string(),
                actual: "missing".into(),
                role: "output".into(),
            }),
            Ok(_) => {
                let (actual, _) = Sha256::of_file(&path)?;
                if actual != expected {
                    mismatches.push(Mismatch {
                        path: shown,
                        expected: expected.to_string(),
                        actual: actual.to_string(),
                        role: "output".into(),
                    });
                }
            }
        }
    }
    for b in &st.predicate.run_details.byproducts {
        if let Some(Value::String(target)) = b.annotations.get("link_target") {
            let path = root.join(&b.name);
            let actual = std::fs::read_link(&path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "missing".into());
            if &actual != target {
                mismatches.push(Mismatch {
                    path: path.display().to_string(),
                    expected: format!("link to {target}"),
                    actual,
                    role: "output".into(),
                });
            }
        }
    }

    let internal = &st.predicate.build_definition.internal_parameters;
    let base = fsx::parent_of(manifest_path);
    let mut inputs_checked = 0;
    let mut inputs_absent = Vec::new();
    for dep in &st.predicate.build_definition.resolved_dependencies {
        let Some(local) = internal.inputs.get(&dep.name) else {
            continue;
        };
        let path = if local.is_absolute() {
            local.clone()
        } else {
            base.join(local)
        };
        if !path.exists() {
            inputs_absent.push(dep.name.clone());
            continue;
        }
        inputs_checked += 1;
        if let Some(commit) = dep.digest.get("gitCommit") {
            let head: GitOid = commit.parse()?;
            if let Err(e) = crate::upstream::check_clean(&path, head) {
                mismatches.push(Mismatch {
                    path: path.display().to_string(),
                    expected: format!("git tree at {commit}, unmodified"),
                    actual: e.to_string(),
                    role: "input".into(),
                });
            }
        } else if let Some(expected) = dep.sha256() {
            let (actual, _) = Sha256::of_file(&path)?;
            if actual != expected {
                mismatches.push(Mismatch {
                    path: path.display().to_string(),
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                    role: "input".into(),
                });
            }
        }
    }
    Ok(VerifyReport {
        ok: mismatches.is_empty(),
        mismatches,
        outputs_checked: st.subject.len(),
        inputs_checked,
        inputs_absent,
        input_digest: internal.input_digest,
    })
}

/// RFC 3339 UTC time of now (no external time crate: seconds resolution is enough here).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    rfc3339(secs)
}

/// Format epoch seconds as RFC 3339 UTC.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // civil_from_days (Howard Hinnant)
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let v = serde_json::json!({"b": 1, "a": {"d": [ {"z": 1, "y": 2} ], "c": 3}});
        assert_eq!(
            canonical_json(&v).expect("json"),
            r#"{"a":{"c":3,"d":[{"y":2,"z":1}]},"b":1}"#
        );
    }

    #[test]
    fn input_digest_ignores_nothing_it_covers() {
        let p = ExternalParameters {
            recipe: "r".into(),
            variant: "v".into(),
            build_type: "Release".into(),
            targets: vec!["llama".into()],
            cmake_args: vec!["-DX=1".into()],
            patches: vec![],
        };
        let d1 = input_digest(&p, &[]).expect("digest");
        let mut p2 = p.clone();
        p2.cmake_args.push("-DY=1".into());
        assert_ne!(d1, input_digest(&p2, &[]).expect("digest"));
        assert_eq!(d1, input_digest(&p, &[]).expect("digest"));
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_996_800), "2026-11-30T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
