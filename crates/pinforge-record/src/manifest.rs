//! Build manifests: an in-toto Statement v1 whose subjects are the output artifacts and whose
//! predicate is SLSA provenance v1 (resolved dependencies: upstream pin, source tree, each
//! patch, recipe, toolchain binaries; parameters: variant, CMake arguments, targets). The input
//! digest is SHA-256 over the canonical JSON of the build definition's inputs, so it names a
//! build independently of where the workspace is. `verify` re-hashes outputs and inputs.
//!
//! A manifest is data someone else may have written: it is checked once, when it is parsed,
//! by [`check`] (names, paths, duplicates, digests; the one validation every reader gets), and
//! `verify` opens nothing that is not a regular file (a FIFO or a device would hang it) and
//! walks through no link on the way to an artifact.

mod check;
pub mod inputs;
mod verify;

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
#[cfg(test)]
use verify::hash_regular;
pub use verify::{verify, TreeCheck, VerifyReport};

/// in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// SLSA provenance predicate type.
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// pinforge's build type (a URI naming how to read the parameters).
pub const BUILD_TYPE: &str = "https://pinforge.invalid/cmake-variant/v1";

/// The annotation keys of a manifest's subjects and byproducts: one spelling for the build that
/// writes them and every reader (verify, diff, install, smoke, flip).
pub mod annotation {
    /// A subject's size in bytes.
    pub const SIZE: &str = "size";
    /// A subject whose bytes name a folder of this machine (the build, the source, the fixed
    /// build folder): another workspace or user builds other bytes.
    pub const EMBEDS_MACHINE_PATH: &str = "embeds_machine_path";
    /// A subject copied from a CUDA toolkit, not built: the dependency it came from.
    pub const SHIPPED_FROM: &str = "shipped_from";
    /// A subject's normalized digest: `{rule, sha256, masked_names, build_id_masked}`.
    pub const NORMALIZED: &str = "normalized";
    /// A subject that holds nvcc names hashed from the source's real path.
    pub const NVCC_PATH_HASHED_NAMES: &str = "nvcc_path_hashed_names";
    /// The source path those names hash, when the build ran at the fixed path.
    pub const HASHED_SOURCE_PATH: &str = "hashed_source_path";
    /// A byproduct that is a link among the outputs: its target.
    pub const LINK_TARGET: &str = "link_target";
    /// A `built:` byproduct's CMake target.
    pub const TARGET: &str = "target";
    /// A `built:` byproduct's artifact: the staged file that installs it.
    pub const INSTALLED_AS: &str = "installed_as";
    /// A `normalization:` byproduct's rule, in words.
    pub const RULE: &str = "rule";
}

/// An in-toto ResourceDescriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Provenance {
    /// What was built from what.
    #[serde(rename = "buildDefinition")]
    pub build_definition: BuildDefinition,
    /// Who built it, when.
    #[serde(rename = "runDetails")]
    pub run_details: RunDetails,
}

/// SLSA BuildDefinition.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InternalParameters {
    /// Artifact root, relative to the manifest's folder (`stage`: the staged install prefix).
    pub artifact_root: String,
    /// How the artifacts were staged (`cmake-install`, or `built-libraries` for a project
    /// without install rules); empty in manifests written before staging existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub staging: String,
    /// Local path of each dependency that is a file or tree, by dependency name.
    pub inputs: BTreeMap<String, PathBuf>,
    /// The input digest (also `runDetails.metadata.invocationId`).
    pub input_digest: Sha256,
}

/// SLSA RunDetails.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Builder {
    /// `pinforge`.
    pub id: String,
    /// Versions.
    #[serde(default)]
    pub version: BTreeMap<String, String>,
}

/// SLSA BuildMetadata.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Read and check a manifest file (a regular file; a FIFO or device is refused unopened).
    pub fn read(path: &Path) -> Result<Statement> {
        if matches!(std::fs::metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            return Err(Error::input(path.display(), "manifest not found")
                .with_hint("`pinforge build` prints the path of the manifest it writes"));
        }
        let file = fsx::open_regular(path, "manifest", true)?;
        let mut bytes = Vec::new();
        use std::io::Read;
        (&file)
            .take(MAX_MANIFEST_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read", path, e))?;
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(Error::input(
                path.display(),
                format!("larger than {MAX_MANIFEST_BYTES} bytes: not a pinforge manifest"),
            ));
        }
        Statement::parse(&bytes, path)
    }

    /// Parse and check manifest bytes; `path` names them in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Statement> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Error::input(path.display(), format!("manifest is not UTF-8: {e}")))?;
        let s: Statement = serde_json::from_str(text).map_err(|e| {
            Error::input(
                format!("{}:{}:{}", path.display(), e.line(), e.column()),
                format!("not a pinforge manifest: {e}"),
            )
        })?;
        check::statement(&s, path)?;
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

    /// The folder artifacts are relative to, checked: no link on the way from the manifest's
    /// folder, and a directory (the name itself was checked when the manifest was parsed).
    pub fn checked_artifact_root(&self, manifest_path: &Path) -> Result<PathBuf> {
        let base = fsx::parent_of(manifest_path);
        let rel = &self
            .predicate
            .build_definition
            .internal_parameters
            .artifact_root;
        let mut cur = base.clone();
        for c in Path::new(rel).components() {
            cur.push(c);
            match std::fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::input(
                        cur.display(),
                        "the manifest's artifact root passes through something that is not a folder (a link?)",
                    ))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::input(cur.display(), "artifact root not found")
                        .with_hint("the build folder was removed; rebuild the variant"))
                }
                Err(e) => return Err(Error::io("stat", &cur, e)),
            }
        }
        Ok(cur)
    }
}

/// The largest manifest read (a manifest of a large build is a few hundred kilobytes).
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Why a relative path from data may not be used, if it may not: empty, absolute, `.`/`..`
/// or an empty component, a NUL or any other control character (as [`pinforge_base::text`]
/// counts them). The one rule for manifest
/// names and install-root entry paths (the install root's identity lines are newline
/// separated), so a manifest that parses names only paths that install accepts.
pub fn check_relative(p: &str) -> std::result::Result<(), &'static str> {
    if p.is_empty() {
        return Err("is empty");
    }
    if p.starts_with('/') {
        return Err("is absolute");
    }
    if p.contains('\0') {
        return Err("holds a NUL");
    }
    // The shared rule for values that become names (base::text): C0, DEL, C1 and the format
    // characters that reorder or hide text (a bidi override makes `a\u{202e}os.so` read as
    // `aso.so`).
    if pinforge_base::text::first_unsafe(p).is_some() {
        return Err("holds a control character (a line break, ESC, a bidi override?)");
    }
    for c in p.split('/') {
        match c {
            "" => return Err("has an empty component"),
            "." | ".." => return Err("has a `.` or `..` component"),
            _ => {}
        }
    }
    Ok(())
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
pub(crate) fn canonical_json<T: Serialize>(value: &T) -> Result<String> {
    let v = serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))?;
    serde_json::to_string(&sort(v)).map_err(|e| Error::Internal(e.to_string()))
}

/// The input digest: what was asked for and what it was built from, nothing machine-local.
pub fn input_digest(params: &ExternalParameters, deps: &[Resource]) -> Result<Sha256> {
    #[derive(Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

// Time formatting lives in `pinforge_base::time`; these names stay for callers of this module.
pub use pinforge_base::time::now_rfc3339;

/// Fixtures for the tests of the crates that compare or render statements (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use pinforge_base::digest::Sha256;

    /// A resource named `name` whose sha256 is the digest of `sha`.
    pub fn res(name: &str, sha: &str) -> Resource {
        let mut digest = BTreeMap::new();
        digest.insert(
            "sha256".to_string(),
            Sha256::of_bytes(sha.as_bytes()).to_string(),
        );
        Resource {
            name: name.into(),
            uri: None,
            digest,
            annotations: BTreeMap::new(),
        }
    }

    /// A statement of `variant` with these CMake arguments and subjects, every other field fixed.
    pub fn statement(variant: &str, cmake: &[&str], subjects: Vec<Resource>) -> Statement {
        Statement {
            type_: STATEMENT_TYPE.into(),
            subject: subjects,
            predicate_type: PREDICATE_TYPE.into(),
            predicate: Provenance {
                build_definition: BuildDefinition {
                    build_type: BUILD_TYPE.into(),
                    external_parameters: ExternalParameters {
                        recipe: "r".into(),
                        variant: variant.into(),
                        build_type: "Release".into(),
                        targets: vec!["llama".into()],
                        cmake_args: cmake.iter().map(|s| s.to_string()).collect(),
                        patches: vec![],
                    },
                    internal_parameters: InternalParameters {
                        artifact_root: ".".into(),
                        inputs: BTreeMap::new(),
                        input_digest: Sha256::of_bytes(variant.as_bytes()),
                        staging: String::new(),
                    },
                    resolved_dependencies: vec![res("pin", "p")],
                },
                run_details: RunDetails {
                    builder: Builder {
                        id: "pinforge".into(),
                        version: BTreeMap::new(),
                    },
                    metadata: Metadata {
                        invocation_id: String::new(),
                        started_on: String::new(),
                        finished_on: String::new(),
                    },
                    byproducts: vec![],
                },
            },
        }
    }
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

    const VALID: &str = r#"{"_type": "https://in-toto.io/Statement/v1",
 "predicateType": "https://slsa.dev/provenance/v1",
 "subject": [{"name": "lib/liba.so", "digest": {"sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}],
 "predicate": {"buildDefinition": {"buildType": "b",
   "externalParameters": {"recipe": "r", "variant": "v", "build_type": "Release", "targets": [], "cmake_args": [], "patches": []},
   "internalParameters": {"artifact_root": "stage", "inputs": {"recipe": "../r.toml"},
     "input_digest": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
   "resolvedDependencies": [{"name": "recipe", "digest": {"sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}]},
  "runDetails": {"builder": {"id": "pinforge"}, "metadata": {"invocationId": "x", "startedOn": "", "finishedOn": ""},
   "byproducts": [{"name": "lib/liba.so.1", "annotations": {"link_target": "liba.so"}}]}}}"#;

    #[test]
    fn a_valid_manifest_parses_and_round_trips() {
        let s = Statement::parse(VALID.as_bytes(), Path::new("m.json")).expect("parse");
        assert_eq!(s.predicate.build_definition.internal_parameters.staging, "");
        let again = Statement::parse(s.to_json().expect("json").as_bytes(), Path::new("m.json"))
            .expect("reparse");
        assert_eq!(again.subject, s.subject);
    }

    // issue #7 classes 1 and 10: names and roots from a manifest are checked when parsed.
    #[test]
    fn escaping_names_roots_and_duplicates_are_refused_at_parse_time() {
        for (from, to, want) in [
            (
                "\"name\": \"lib/liba.so\"",
                "\"name\": \"/dev/zero\"",
                "is absolute",
            ),
            ("\"name\": \"lib/liba.so\"", "\"name\": \"../x\"", "`..`"),
            ("\"name\": \"lib/liba.so\"", "\"name\": \"lib/./x\"", "`..`"),
            ("\"name\": \"lib/liba.so\"", "\"name\": \"\"", "is empty"),
            (
                "\"name\": \"lib/liba.so.1\"",
                "\"name\": \"lib/liba.so\"",
                "listed twice",
            ),
            (
                "\"name\": \"lib/liba.so.1\"",
                "\"name\": \"/etc/x\"",
                "link `/etc/x`",
            ),
            (
                "\"artifact_root\": \"stage\"",
                "\"artifact_root\": \"../..\"",
                "artifact root",
            ),
            (
                "\"artifact_root\": \"stage\"",
                "\"artifact_root\": \"/\"",
                "artifact root",
            ),
        ] {
            let text = VALID.replacen(from, to, 1);
            assert_ne!(text, VALID);
            let e = Statement::parse(text.as_bytes(), Path::new("m.json")).expect_err(to);
            assert_eq!(e.exit_code(), 2, "{to}");
            assert!(e.to_string().contains(want), "{to}: {e}");
        }
        let twice = VALID.replacen(
            "\"subject\": [",
            "\"subject\": [{\"name\": \"lib/liba.so\", \"digest\": {}},",
            1,
        );
        let e = Statement::parse(twice.as_bytes(), Path::new("m.json")).expect_err("dup");
        assert!(e.to_string().contains("listed twice"), "{e}");
    }

    #[test]
    fn relative_paths_are_checked_component_by_component() {
        // issue #7: a line break in a name breaks install's identity lines, so the manifest
        // parser refuses what install would refuse.
        for bad in [
            "", "/a", "a/../b", "..", "a//b", "a/", "./a", "a\0b", "a\nb", "a\tb", "a\u{7f}",
        ] {
            assert!(check_relative(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "lib/liba.so", "a/b.c/d", "...", "..a"] {
            assert!(check_relative(good).is_ok(), "{good:?}");
        }
    }

    // issue #7 class 4: a FIFO or a device is refused before a byte is read.
    #[test]
    fn special_files_are_refused_unopened() {
        let d = tempfile::tempdir().expect("tempdir");
        let fifo = d.path().join("f");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("cstr");
        assert_eq!(pinforge_sys::mkfifo(c.as_c_str(), 0o644), 0);
        for (p, follow) in [
            (fifo.as_path(), true),
            (Path::new("/dev/zero"), true),
            (Path::new("/dev/null"), false),
        ] {
            let e = hash_regular(p, follow, "artifact").expect_err("special");
            assert_eq!(e.exit_code(), 2, "{}", p.display());
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        std::os::unix::fs::symlink("f", d.path().join("l")).expect("link");
        let e = hash_regular(&d.path().join("l"), false, "artifact").expect_err("link");
        assert!(e.to_string().contains("a symlink"), "{e}");
        let e = Statement::read(&fifo).expect_err("manifest fifo");
        assert_eq!(e.exit_code(), 2);
        std::fs::write(d.path().join("r"), b"abc").expect("write");
        assert_eq!(
            hash_regular(&d.path().join("r"), false, "artifact").expect("hash"),
            (Sha256::of_bytes(b"abc"), 3)
        );
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 10_000, .. ProptestConfig::default() })]

            // issue #7: arbitrary bytes never panic the manifest parser.
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = Statement::parse(&bytes, Path::new("m.json"));
            }

            // Mutations of a valid manifest reach the path and duplicate checks.
            #[test]
            fn mutated_manifests_never_panic(
                at in 0usize..VALID.len(),
                cut in 0usize..12,
                insert in "[\\PC/.\"{}\\[\\],:]{0,10}",
            ) {
                let mut text = VALID.to_string();
                let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
                let end = (at..=(at + cut).min(text.len()))
                    .rev()
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(at);
                text.replace_range(at..end, &insert);
                if let Ok(s) = Statement::parse(text.as_bytes(), Path::new("m.json")) {
                    // What parses has only relative, unique names.
                    for r in &s.subject {
                        prop_assert!(check_relative(&r.name).is_ok());
                    }
                }
            }
        }
    }
}
