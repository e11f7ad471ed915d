//! Toolchains: find the compilers, CMake, Ninja and (for CUDA variants) nvcc a variant names,
//! read their exact versions, check them against the recipe's requirements, and record what
//! was used (path, version, SHA-256 of the binary). Nothing is assumed from the machine.

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::process;
use pinforge_source::recipe::Toolchain;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a tool does in a toolchain. The spelling (`as_str`, and serde's) is the one the
/// manifests, stamps and `--json` output have always used (`tool:cc`, `${TOOL:ninja}`), so
/// typing the roles changes no byte a user sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The C compiler.
    Cc,
    /// The C++ compiler.
    Cxx,
    /// CMake.
    Cmake,
    /// Ninja.
    Ninja,
    /// The compile cache's launcher: every compile goes through it, cache on or off (see
    /// [`crate::build::cache`]), so it is part of the toolchain like Ninja.
    Ccache,
    /// The CUDA compiler, for CUDA toolchains.
    Nvcc,
}

impl Role {
    /// The role's name in manifests (`tool:NAME`), templates (`${TOOL:NAME}`) and recipes'
    /// requirement keys.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Cc => "cc",
            Role::Cxx => "cxx",
            Role::Cmake => "cmake",
            Role::Ninja => "ninja",
            Role::Ccache => "ccache",
            Role::Nvcc => "nvcc",
        }
    }

    /// The compilers, whose identity names a compile cache folder (in this order).
    pub(crate) const COMPILERS: [Role; 3] = [Role::Cc, Role::Cxx, Role::Nvcc];
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// Ordered by spelling, not by declaration: a map keyed by roles then lists them as the
// string-keyed maps always did (cc, ccache, cmake, cxx, ninja, nvcc), so records keep their bytes.
impl PartialOrd for Role {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Role {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

/// One tool as found and checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolRecord {
    /// Absolute path as invoked.
    pub path: PathBuf,
    /// The file it resolves to (symlinks followed); this is what was hashed.
    pub real_path: PathBuf,
    /// Version parsed from the tool's own output.
    pub version: String,
    /// The first line the tool printed about its version, verbatim.
    pub version_line: String,
    /// SHA-256 of the binary.
    pub sha256: Sha256,
}

/// A toolchain resolved on this machine.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResolvedToolchain {
    /// Name in the recipe.
    pub name: String,
    /// Tools by role: cc, cxx, cmake, ninja, ccache, and nvcc for CUDA. Keyed by the role's
    /// spelling ([`Role::as_str`]); read it through [`ResolvedToolchain::get`] and
    /// [`ResolvedToolchain::tool`]. (The key becomes [`Role`] once flip and the fixed build
    /// path stop naming roles as strings.)
    pub tools: BTreeMap<Role, ToolRecord>,
    /// CUDA toolkit root, for CUDA toolchains.
    pub cuda_root: Option<String>,
    /// CUDA architectures, for CUDA toolchains.
    pub cuda_architectures: Option<String>,
}

impl ResolvedToolchain {
    /// A tool by role; a missing one is an internal error (`resolve` finds every role a
    /// toolchain needs, or refuses it).
    pub(crate) fn tool(&self, role: Role) -> Result<&ToolRecord> {
        self.get(role)
            .ok_or_else(|| Error::Internal(format!("toolchain {} has no {role}", self.name)))
    }

    /// A tool by role, if the toolchain has one (nvcc only for CUDA).
    pub(crate) fn get(&self, role: Role) -> Option<&ToolRecord> {
        self.tools.get(&role)
    }

    /// Whether the toolchain has a tool for `role`.
    pub(crate) fn has(&self, role: Role) -> bool {
        self.tools.contains_key(&role)
    }
}

const BOOTSTRAP_HINT: &str =
    "run tools/bootstrap.sh (installs CMake, Ninja and ccache into .tools/ without root), or put them on PATH";

/// Find and check every tool of `tc`. `extra` directories are searched before `PATH`.
pub fn resolve(tc: &Toolchain, extra: &[PathBuf]) -> Result<ResolvedToolchain> {
    let mut tools = BTreeMap::new();
    let mut wanted: Vec<(Role, String, &str)> = vec![
        (
            Role::Cc,
            tc.cc.clone(),
            "install the C compiler, or point the toolchain's `cc` at it",
        ),
        (
            Role::Cxx,
            tc.cxx.clone(),
            "install the C++ compiler, or point the toolchain's `cxx` at it",
        ),
        (Role::Cmake, "cmake".into(), BOOTSTRAP_HINT),
        (Role::Ninja, "ninja".into(), BOOTSTRAP_HINT),
        (Role::Ccache, "ccache".into(), BOOTSTRAP_HINT),
    ];
    if let Some(nvcc) = &tc.nvcc {
        wanted.push((
            Role::Nvcc,
            nvcc.clone(),
            "install the CUDA toolkit this toolchain names, or fix its `nvcc` path",
        ));
    }
    for (role, name, hint) in wanted {
        let path = process::which(&name, extra).ok_or_else(|| {
            Error::input(
                format!("toolchain `{}`", tc.name),
                format!("{role} `{name}` not found"),
            )
            .with_hint(hint)
        })?;
        let record = probe(role, &path)?;
        if let Some(req) = tc.requirements.get(role.as_str()) {
            let v = lenient_semver(&record.version).ok_or_else(|| {
                Error::input(
                    path.display(),
                    format!("cannot read a version from `{}`", record.version_line),
                )
            })?;
            if !req.matches(&v) {
                return Err(Error::input(
                    format!("toolchain `{}`", tc.name),
                    format!(
                        "{role} {} is version {}, the recipe requires {req}",
                        path.display(),
                        record.version
                    ),
                )
                .with_hint("install the required version or change the recipe's requirement"));
            }
        }
        tools.insert(role, record);
    }
    Ok(ResolvedToolchain {
        name: tc.name.clone(),
        tools,
        cuda_root: tc.cuda_root.clone(),
        cuda_architectures: tc.cuda_architectures.clone(),
    })
}

/// Probe a tool outside the toolchain's roles whose `--version` prints `NAME VERSION` (the
/// distributed compile's sccache), as Ninja and ccache are probed.
pub(crate) fn probe_plain(path: &Path) -> Result<ToolRecord> {
    probe(Role::Ninja, path)
}

/// Ask a tool for its version and hash it.
fn probe(role: Role, path: &Path) -> Result<ToolRecord> {
    let mut cmd = Command::new(path);
    match role {
        // -dumpfullversion gives gcc's full x.y.z; clang answers -dumpversion.
        Role::Cc | Role::Cxx => cmd.args(["-dumpfullversion", "-dumpversion"]),
        _ => cmd.arg("--version"),
    };
    let out = process::run(&mut cmd, "")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version_line = match role {
        Role::Nvcc => text
            .lines()
            .find(|l| l.contains("release"))
            .unwrap_or("")
            .trim()
            .to_string(),
        _ => text.lines().next().unwrap_or("").trim().to_string(),
    };
    let version = parse_version(role, &version_line).ok_or_else(|| {
        Error::input(
            path.display(),
            format!("cannot read a version from `{version_line}`"),
        )
    })?;
    let real_path = std::fs::canonicalize(path).map_err(|e| Error::io("resolve", path, e))?;
    let (sha256, _) = Sha256::of_file(&real_path)?;
    Ok(ToolRecord {
        path: path.to_path_buf(),
        real_path,
        version,
        version_line,
        sha256,
    })
}

/// The version in a tool's version line: `cmake version 4.4.5` → 4.4.5;
/// `1.13.2.git.kitware...` → 1.13.2; nvcc's `release 12.8, V12.8.93` → 12.8.93.
pub(crate) fn parse_version(role: Role, line: &str) -> Option<String> {
    let candidate = match role {
        Role::Nvcc => line.rsplit(['V', ' ']).next()?,
        Role::Cmake => line.rsplit(' ').next()?,
        _ => line.split_whitespace().last()?,
    };
    let numeric: String = candidate
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let parts: Vec<&str> = numeric
        .split('.')
        .filter(|p| !p.is_empty())
        .take(3)
        .collect();
    (!parts.is_empty()).then(|| parts.join("."))
}

/// `12.8` → 12.8.0 so that semver requirements apply to two-part versions too.
pub(crate) fn lenient_semver(v: &str) -> Option<semver::Version> {
    let mut parts: Vec<u64> = v
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    parts.resize(3, 0);
    Some(semver::Version::new(parts[0], parts[1], parts[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_real_tool_output_shapes() {
        assert_eq!(
            parse_version(Role::Cmake, "cmake version 4.4.5").as_deref(),
            Some("4.4.5")
        );
        assert_eq!(
            parse_version(Role::Ninja, "1.13.2.git.kitware.jobserver-pipe-1").as_deref(),
            Some("1.13.2")
        );
        assert_eq!(
            parse_version(Role::Nvcc, "Cuda compilation tools, release 12.8, V12.8.93").as_deref(),
            Some("12.8.93")
        );
        assert_eq!(parse_version(Role::Cc, "12.2.0").as_deref(), Some("12.2.0"));
        assert_eq!(parse_version(Role::Cc, "no digits"), None);
    }

    #[test]
    fn roles_are_spelled_and_ordered_as_the_string_keys_were() {
        let all = [
            Role::Cc,
            Role::Cxx,
            Role::Cmake,
            Role::Ninja,
            Role::Ccache,
            Role::Nvcc,
        ];
        for r in all {
            assert_eq!(
                serde_json::to_value(r).expect("json"),
                serde_json::Value::from(r.as_str())
            );
            assert_eq!(r.to_string(), r.as_str());
        }
        let mut sorted = all;
        sorted.sort();
        let names: Vec<&str> = sorted.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, ["cc", "ccache", "cmake", "cxx", "ninja", "nvcc"]);
    }

    #[test]
    fn two_part_versions_meet_requirements() {
        let req = semver::VersionReq::parse(">=12.8.0, <12.9.0").expect("req");
        assert!(req.matches(&lenient_semver("12.8").expect("v")));
        assert!(!req.matches(&lenient_semver("13.1.115").expect("v")));
    }

    #[test]
    fn missing_compiler_is_an_input_error() {
        let tc = Toolchain {
            name: "cpu".into(),
            description: None,
            cc: "pinforge-no-such-cc".into(),
            cxx: "g++".into(),
            requirements: BTreeMap::new(),
            nvcc: None,
            cuda_root: None,
            cuda_architectures: None,
            cuda_toolkit: None,
        };
        let e = resolve(&tc, &[]).expect_err("missing cc");
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("cc `pinforge-no-such-cc` not found"),
            "{e}"
        );
    }

    #[test]
    fn host_gcc_is_probed_with_its_real_version() {
        let Some(gcc) = process::which("gcc", &[]) else {
            return; // the machine image always has gcc; nothing to check without it
        };
        let r = probe(Role::Cc, &gcc).expect("probe gcc");
        assert!(lenient_semver(&r.version).is_some(), "{r:?}");
    }
}
