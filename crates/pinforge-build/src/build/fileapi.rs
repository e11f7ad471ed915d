//! CMake's file API (codemodel v2): the query written before configure, and the reply read
//! after it — which targets exist, what each one builds (its artifacts), which in-project
//! targets it depends on, and which targets the install rules name. This is how a build knows
//! its libraries whatever folder the project puts them in.

use pinforge_base::error::{Error, IoContext, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The client name pinforge's query and reply live under.
const CLIENT: &str = "client-pinforge";

/// Write the (empty) codemodel query so that the next configure writes a reply.
pub(crate) fn write_query(cmake_dir: &Path) -> Result<()> {
    let q = cmake_dir
        .join(".cmake/api/v1/query")
        .join(CLIENT)
        .join("codemodel-v2");
    if !q.is_file() {
        pinforge_base::fsx::write_atomic(&q, b"")?;
    }
    Ok(())
}

/// One target of the code model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// CMake target name.
    pub name: String,
    /// `SHARED_LIBRARY`, `STATIC_LIBRARY`, `MODULE_LIBRARY`, `EXECUTABLE`, …
    pub kind: String,
    /// Files the target builds, absolute.
    pub artifacts: Vec<PathBuf>,
    /// Ids of the in-project targets it depends on.
    pub dependencies: Vec<String>,
    /// The compile command fragments of its sources (flags, defines excluded), in CMake's
    /// order: what a distributed build checks for debug information.
    pub compile_flags: Vec<String>,
}

impl Target {
    /// Whether the target builds a library file (an OBJECT library builds none).
    pub(crate) fn is_library(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "SHARED_LIBRARY" | "STATIC_LIBRARY" | "MODULE_LIBRARY"
        )
    }
}

/// The reply, reduced to what the build needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct CodeModel {
    /// Targets by id.
    pub targets: BTreeMap<String, Target>,
    /// Names of the targets that install rules name.
    pub installed_targets: BTreeSet<String>,
}

#[derive(Deserialize)]
struct Index {
    reply: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct JsonFile {
    #[serde(rename = "jsonFile")]
    json_file: String,
}

#[derive(Deserialize)]
struct RawCodeModel {
    configurations: Vec<RawConfiguration>,
}

#[derive(Deserialize)]
struct RawConfiguration {
    #[serde(default)]
    directories: Vec<RawDirRef>,
    targets: Vec<RawTargetRef>,
}

#[derive(Deserialize)]
struct RawDirRef {
    #[serde(rename = "jsonFile")]
    json_file: Option<String>,
}

#[derive(Deserialize)]
struct RawDirectory {
    #[serde(default)]
    installers: Vec<RawInstaller>,
}

#[derive(Deserialize)]
struct RawInstaller {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "targetId")]
    target_id: Option<String>,
}

#[derive(Deserialize)]
struct RawTargetRef {
    id: String,
    #[serde(rename = "jsonFile")]
    json_file: String,
}

#[derive(Deserialize)]
struct RawTarget {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    artifacts: Vec<RawArtifact>,
    #[serde(default)]
    dependencies: Vec<RawDependency>,
    #[serde(default, rename = "compileGroups")]
    compile_groups: Vec<RawCompileGroup>,
}

#[derive(Deserialize)]
struct RawCompileGroup {
    #[serde(default, rename = "compileCommandFragments")]
    fragments: Vec<RawFragment>,
}

#[derive(Deserialize)]
struct RawFragment {
    fragment: String,
}

#[derive(Deserialize)]
struct RawArtifact {
    path: String,
}

#[derive(Deserialize)]
struct RawDependency {
    id: String,
}

/// A reply file name must be a plain file name inside the reply folder: the reply is CMake's
/// output, but it is read back from disk like any other data.
fn reply_file(reply: &Path, name: &str) -> Result<PathBuf> {
    let ok = !name.is_empty()
        && !name.contains('/')
        && name != "."
        && name != ".."
        && name.ends_with(".json");
    if !ok {
        return Err(Error::Internal(format!(
            "CMake file API reply names `{name}`, which is not a file in {}",
            reply.display()
        )));
    }
    Ok(reply.join(name))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let bytes = pinforge_base::fsx::read(path)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::Internal(format!(
            "{}: unexpected CMake file API reply: {e}",
            path.display()
        ))
    })
}

/// Read the newest codemodel reply of the build folder.
pub(crate) fn read(cmake_dir: &Path) -> Result<CodeModel> {
    let reply = cmake_dir.join(".cmake/api/v1/reply");
    let mut indexes: Vec<PathBuf> = std::fs::read_dir(&reply)
        .at("read directory", &reply)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index-") && n.ends_with(".json"))
        })
        .collect();
    // Index names carry a timestamp, so the greatest name is the newest reply.
    indexes.sort();
    let index_path = indexes.pop().ok_or_else(|| {
        Error::Internal(format!(
            "{}: CMake wrote no file API reply (CMake >= 3.14 writes one)",
            reply.display()
        ))
    })?;
    let index: Index = read_json(&index_path)?;
    let codemodel_ref = index
        .reply
        .get(CLIENT)
        .and_then(|c| c.get("codemodel-v2"))
        .cloned()
        .ok_or_else(|| {
            Error::Internal(format!(
                "{}: no codemodel-v2 reply for {CLIENT}",
                index_path.display()
            ))
        })?;
    let codemodel_ref: JsonFile = serde_json::from_value(codemodel_ref)
        .map_err(|e| Error::Internal(format!("{}: {e}", index_path.display())))?;
    let raw: RawCodeModel = read_json(&reply_file(&reply, &codemodel_ref.json_file)?)?;
    let config = raw.configurations.into_iter().next().ok_or_else(|| {
        Error::Internal(format!(
            "{}: the code model has no configuration",
            reply.display()
        ))
    })?;

    let mut model = CodeModel::default();
    for t in &config.targets {
        let rt: RawTarget = read_json(&reply_file(&reply, &t.json_file)?)?;
        let artifacts = rt
            .artifacts
            .iter()
            .map(|a| {
                let p = Path::new(&a.path);
                if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    cmake_dir.join(p)
                }
            })
            .collect();
        model.targets.insert(
            t.id.clone(),
            Target {
                name: rt.name,
                kind: rt.kind,
                artifacts,
                dependencies: rt.dependencies.into_iter().map(|d| d.id).collect(),
                compile_flags: rt
                    .compile_groups
                    .into_iter()
                    .flat_map(|g| g.fragments)
                    .map(|f| f.fragment)
                    .collect(),
            },
        );
    }
    for d in &config.directories {
        let Some(f) = &d.json_file else { continue };
        let dir: RawDirectory = read_json(&reply_file(&reply, f)?)?;
        for i in dir.installers {
            if i.kind != "target" {
                continue;
            }
            if let Some(t) = i.target_id.as_ref().and_then(|id| model.targets.get(id)) {
                model.installed_targets.insert(t.name.clone());
            }
        }
    }
    Ok(model)
}

impl CodeModel {
    /// The requested targets and every in-project target they depend on, sorted by name.
    /// A requested name the project does not define is an input error.
    pub(crate) fn closure(&self, requested: &[String]) -> Result<Vec<&Target>> {
        let by_name: BTreeMap<&str, &str> = self
            .targets
            .iter()
            .map(|(id, t)| (t.name.as_str(), id.as_str()))
            .collect();
        let mut todo: Vec<&str> = Vec::new();
        for r in requested {
            let id = by_name.get(r.as_str()).ok_or_else(|| {
                Error::input(
                    format!("target `{r}`"),
                    "the project defines no such CMake target",
                )
                .with_hint("fix the recipe's `targets`")
            })?;
            todo.push(id);
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        while let Some(id) = todo.pop() {
            if !seen.insert(id) {
                continue;
            }
            if let Some(t) = self.targets.get(id) {
                todo.extend(t.dependencies.iter().map(String::as_str));
            }
        }
        let mut out: Vec<&Target> = seen.iter().filter_map(|id| self.targets.get(*id)).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, v: serde_json::Value) {
        std::fs::write(dir.join(name), serde_json::to_vec(&v).expect("json")).expect("write");
    }

    #[test]
    fn reply_is_read_into_targets_dependencies_and_installed_names() {
        let d = tempfile::tempdir().expect("tempdir");
        let reply = d.path().join(".cmake/api/v1/reply");
        std::fs::create_dir_all(&reply).expect("mkdir");
        write(
            &reply,
            "index-2026-01-01T00-00-00-0000.json",
            serde_json::json!({"reply": {CLIENT: {"codemodel-v2": {"jsonFile": "codemodel-v2-x.json"}}}}),
        );
        write(
            &reply,
            "codemodel-v2-x.json",
            serde_json::json!({"configurations": [{
            "directories": [{"jsonFile": "directory-.json"}],
            "targets": [
                {"id": "a::@1", "jsonFile": "target-a.json"},
                {"id": "b::@1", "jsonFile": "target-b.json"},
                {"id": "c::@1", "jsonFile": "target-c.json"}
            ]}]}),
        );
        write(
            &reply,
            "directory-.json",
            serde_json::json!({"installers": [{"type": "target", "targetId": "b::@1"}, {"type": "file"}]}),
        );
        write(
            &reply,
            "target-a.json",
            serde_json::json!({"name": "a", "type": "SHARED_LIBRARY",
                "artifacts": [{"path": "src/liba.so"}], "dependencies": [{"id": "b::@1"}]}),
        );
        write(
            &reply,
            "target-b.json",
            serde_json::json!({"name": "b", "type": "STATIC_LIBRARY", "artifacts": [{"path": "/abs/libb.a"}]}),
        );
        write(
            &reply,
            "target-c.json",
            serde_json::json!({"name": "c", "type": "EXECUTABLE"}),
        );
        let m = read(d.path()).expect("read");
        assert_eq!(m.installed_targets, BTreeSet::from(["b".to_string()]));
        let names: Vec<_> = m
            .closure(&["a".into()])
            .expect("closure")
            .iter()
            .map(|t| (t.name.clone(), t.artifacts.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("a".into(), vec![d.path().join("src/liba.so")]),
                ("b".into(), vec![PathBuf::from("/abs/libb.a")])
            ]
        );
        let e = m.closure(&["zz".into()]).expect_err("unknown target");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn reply_file_names_cannot_leave_the_reply_folder() {
        let r = Path::new("/b/reply");
        assert!(reply_file(r, "../x.json").is_err());
        assert!(reply_file(r, "..").is_err());
        assert!(reply_file(r, "/etc/passwd").is_err());
        assert!(reply_file(r, "target-a.json").is_ok());
    }
}
