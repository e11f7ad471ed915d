//! The axes a flip can change and the mechanical diff of two resolved configurations: which
//! settings differ, grouped by axis, and how that diff reads as text.

use crate::config::{is_sanitizer_setting, Config, PatchRef, ToolConfig, ToolchainConfig};
use pinforge_build::toolchain::Role;
use pinforge_source::recipe::{cmake_key_name, Pin};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One setting a flip can change. The order is the order rows are shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// The upstream pin.
    Pin,
    /// The resolved, ordered patch list (file names and digests).
    Patches,
    /// The toolchain: its name and each tool's exact resolved version and binary.
    Toolchain,
    /// `CMAKE_BUILD_TYPE`.
    BuildType,
    /// The sanitizer switches (`LLAMA_SANITIZE_*`, `GGML_SANITIZE_*`).
    Sanitizer,
    /// Every other CMake cache entry of the recipe.
    Cmake,
    /// The build targets.
    Targets,
}

impl Axis {
    /// The name shown and recorded.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Axis::Pin => "pin",
            Axis::Patches => "patches",
            Axis::Toolchain => "toolchain",
            Axis::BuildType => "build-type",
            Axis::Sanitizer => "sanitizer",
            Axis::Cmake => "cmake",
            Axis::Targets => "targets",
        }
    }
}

/// One row of the mechanical diff: one setting that differs, with its value on each side
/// (None: not set on that side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct AxisRow {
    /// The axis the setting belongs to.
    pub axis: Axis,
    /// The setting (`series`, `cc`, `LLAMA_SANITIZE_ADDRESS`, ...).
    pub key: String,
    /// Its value on the `from` side.
    pub from: Option<String>,
    /// Its value on the `to` side.
    pub to: Option<String>,
}

fn patch_list(p: &[PatchRef]) -> String {
    if p.is_empty() {
        return "(none)".into();
    }
    p.iter()
        .map(|p| format!("{} (sha256:{})", p.file, p.sha256.short(12)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn tool_value(t: &ToolConfig) -> String {
    format!(
        "{} {} ({}, sha256:{})",
        t.program,
        t.version,
        t.path.display(),
        t.sha256.short(12)
    )
}

/// CMake entries keyed by variable name (a `:TYPE` suffix is part of the value shown), so
/// that `X` and `X:STRING` are one setting.
fn by_variable(m: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    m.iter()
        .map(|(k, v)| {
            let name = cmake_key_name(k).to_string();
            let shown = match k.split_once(':') {
                Some((_, ty)) => format!("{v} (:{ty})"),
                None => v.clone(),
            };
            (name, shown)
        })
        .collect()
}

fn map_rows(
    axis: Axis,
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
    out: &mut Vec<AxisRow>,
) {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let (va, vb) = (a.get(k), b.get(k));
        if va != vb {
            out.push(AxisRow {
                axis,
                key: k.clone(),
                from: va.cloned(),
                to: vb.cloned(),
            });
        }
    }
}

/// The mechanical diff of two configurations: every setting that differs, grouped by axis in
/// [`Axis`] order. Empty when the two would be the same build.
pub(crate) fn axis_rows(a: &Config, b: &Config) -> Vec<AxisRow> {
    let mut out = Vec::new();
    let row = |axis, key: &str, from: String, to: String| AxisRow {
        axis,
        key: key.to_string(),
        from: Some(from),
        to: Some(to),
    };
    if a.pin != b.pin {
        let j = |p: &Pin| serde_json::to_string(p).unwrap_or_else(|e| format!("({e})"));
        out.push(row(Axis::Pin, "source", j(&a.pin), j(&b.pin)));
    }
    if a.patches != b.patches {
        out.push(row(
            Axis::Patches,
            "series",
            patch_list(&a.patches),
            patch_list(&b.patches),
        ));
    }
    toolchain_rows(&a.toolchain, &b.toolchain, &mut out);
    if a.build_type != b.build_type {
        out.push(row(
            Axis::BuildType,
            "CMAKE_BUILD_TYPE",
            a.build_type.clone(),
            b.build_type.clone(),
        ));
    }
    cmake_rows(a, b, &mut out);
    if a.targets != b.targets {
        out.push(row(
            Axis::Targets,
            "targets",
            a.targets.join(", "),
            b.targets.join(", "),
        ));
    }
    out
}

/// The toolchain rows: the name, each tool by role, and the CUDA settings that differ.
fn toolchain_rows(ta: &ToolchainConfig, tb: &ToolchainConfig, out: &mut Vec<AxisRow>) {
    if ta != tb {
        if ta.name != tb.name {
            out.push(AxisRow {
                axis: Axis::Toolchain,
                key: "name".into(),
                from: Some(ta.name.clone()),
                to: Some(tb.name.clone()),
            });
        }
        let roles: BTreeSet<&Role> = ta.tools.keys().chain(tb.tools.keys()).collect();
        for role in roles {
            let (x, y) = (ta.tools.get(role), tb.tools.get(role));
            if x != y {
                out.push(AxisRow {
                    axis: Axis::Toolchain,
                    key: role.as_str().to_string(),
                    from: x.map(tool_value),
                    to: y.map(tool_value),
                });
            }
        }
        for (key, x, y) in [
            ("cuda-root", &ta.cuda_root, &tb.cuda_root),
            (
                "cuda-architectures",
                &ta.cuda_architectures,
                &tb.cuda_architectures,
            ),
        ] {
            if x != y {
                out.push(AxisRow {
                    axis: Axis::Toolchain,
                    key: key.into(),
                    from: x.clone(),
                    to: y.clone(),
                });
            }
        }
    }
}

/// The sanitizer and cmake rows, one per CMake variable that differs.
fn cmake_rows(a: &Config, b: &Config, out: &mut Vec<AxisRow>) {
    // One CMake variable is one setting: whether it is the sanitizer axis is decided from
    // both sides together (`-O2` against `-O2 -fsanitize=address` is one sanitizer row, not a
    // removed cmake row and an added sanitizer row).
    let all = |c: &Config| -> BTreeMap<String, String> {
        c.sanitizer
            .iter()
            .chain(&c.cmake)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (fa, fb) = (all(a), all(b));
    let (va, vb) = (by_variable(&fa), by_variable(&fb));
    let sanitizer_vars: BTreeSet<String> = fa
        .iter()
        .chain(&fb)
        .filter(|(k, v)| is_sanitizer_setting(k, v))
        .map(|(k, _)| cmake_key_name(k).to_string())
        .collect();
    let split = |m: &BTreeMap<String, String>, want: bool| -> BTreeMap<String, String> {
        m.iter()
            .filter(|(k, _)| sanitizer_vars.contains(*k) == want)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    map_rows(Axis::Sanitizer, &split(&va, true), &split(&vb, true), out);
    map_rows(Axis::Cmake, &split(&va, false), &split(&vb, false), out);
}

/// The distinct axes of a diff, in order.
pub(crate) fn axes_of(rows: &[AxisRow]) -> Vec<Axis> {
    rows.iter()
        .map(|r| r.axis)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The mechanical diff as text: one line per differing setting, `-` the from side and `+` the
/// to side (unified-diff style, so it reads the same in a terminal and in a review).
pub fn render_rows(rows: &[AxisRow]) -> String {
    let mut s = String::new();
    for r in rows {
        let v = |x: &Option<String>| x.clone().unwrap_or_else(|| "(not set)".into());
        s.push_str(&format!("{} {}:\n", r.axis.name(), r.key));
        s.push_str(&format!("  - {}\n", v(&r.from)));
        s.push_str(&format!("  + {}\n", v(&r.to)));
    }
    s
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::config_of;
    use pinforge_base::digest::Sha256;
    use pinforge_build::toolchain::ResolvedToolchain;
    use pinforge_source::recipe::Recipe;
    use std::path::Path;
    use std::path::PathBuf;

    const RECIPE: &str = r#"default-variant = "a"
[pin]
kind = "crate"
crate = "x"
version = "1.0.0"
sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
[toolchain.gcc]
cc = "gcc"
cxx = "g++"
[toolchain.clang]
cc = "clang"
cxx = "clang++"
[base]
toolchain = "gcc"
targets = ["llama"]
patches = []
cmake = { BUILD_SHARED_LIBS = true, GGML_NATIVE = false }
[variants.a]
[variants.asan]
cmake = { LLAMA_SANITIZE_ADDRESS = true }
[variants.clang]
toolchain = "clang"
[variants.debug]
build-type = "Debug"
[variants.native]
cmake = { GGML_NATIVE = true }
[variants.typed]
cmake = { "GGML_NATIVE:BOOL" = false }
[variants.two]
toolchain = "clang"
cmake = { GGML_SANITIZE_THREAD = true }
[variants.more-targets]
targets = ["llama", "ggml"]
[variants.o2]
cmake = { CMAKE_CXX_FLAGS = "-O2" }
[variants.o2-asan]
cmake = { CMAKE_CXX_FLAGS = "-O2 -fsanitize=address" }
"#;

    fn tool(program: &str, version: &str) -> pinforge_build::toolchain::ToolRecord {
        pinforge_build::toolchain::ToolRecord {
            path: PathBuf::from(format!("/usr/bin/{program}")),
            real_path: PathBuf::from(format!("/usr/bin/{program}")),
            version: version.into(),
            version_line: version.into(),
            sha256: Sha256::of_bytes(format!("{program} {version}").as_bytes()),
        }
    }

    /// Configurations resolved against fixed tools (gcc 14.2.0 / clang 19.1.7), so the test
    /// does not depend on the machine's compilers.
    fn configs() -> BTreeMap<String, Config> {
        let r = Recipe::parse(RECIPE, Path::new("r.toml"), Some(Path::new("/ws/recipes")))
            .expect("recipe");
        r.variants
            .values()
            .map(|v| {
                let (cc, cxx, ver) = if v.toolchain.name == "clang" {
                    ("clang", "clang++", "19.1.7")
                } else {
                    ("gcc", "g++", "14.2.0")
                };
                let tools = ResolvedToolchain {
                    name: v.toolchain.name.clone(),
                    tools: [
                        (Role::Cc, tool(cc, ver)),
                        (Role::Cxx, tool(cxx, ver)),
                        (Role::Cmake, tool("cmake", "4.4.5")),
                        (Role::Ninja, tool("ninja", "1.13.1")),
                    ]
                    .into_iter()
                    .collect(),
                    cuda_root: None,
                    cuda_architectures: None,
                };
                (v.name.to_string(), config_of(&r, v, Vec::new(), &tools))
            })
            .collect()
    }

    fn axes(a: &str, b: &str) -> Vec<Axis> {
        let c = configs();
        axes_of(&axis_rows(&c[a], &c[b]))
    }

    // issue #10: every axis is told apart, and the same build in two names differs in none.
    #[test]
    fn each_axis_is_detected_on_its_own() {
        assert_eq!(axes("a", "asan"), vec![Axis::Sanitizer]);
        assert_eq!(axes("a", "clang"), vec![Axis::Toolchain]);
        assert_eq!(axes("a", "debug"), vec![Axis::BuildType]);
        assert_eq!(axes("a", "native"), vec![Axis::Cmake]);
        assert_eq!(axes("a", "more-targets"), vec![Axis::Targets]);
        assert_eq!(axes("a", "a"), Vec::<Axis>::new());
        assert_eq!(axes("a", "two"), vec![Axis::Toolchain, Axis::Sanitizer]);
        // `X:BOOL` and `X` are one variable: the type suffix shows as a changed value.
        let c = configs();
        // One flags variable with -fsanitize= on one side only is one sanitizer row.
        let rows = axis_rows(&c["o2"], &c["o2-asan"]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].axis, Axis::Sanitizer);
        assert_eq!(rows[0].key, "CMAKE_CXX_FLAGS");
        assert_eq!(axes_of(&axis_rows(&c["a"], &c["o2"])), vec![Axis::Cmake]);
        let rows = axis_rows(&c["a"], &c["typed"]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].key, "GGML_NATIVE");
        assert_eq!(rows[0].to.as_deref(), Some("OFF (:BOOL)"));
    }

    // issue #10: the toolchain rows carry each tool's exact version, not only the name.
    #[test]
    fn a_compiler_flip_shows_both_exact_versions() {
        let c = configs();
        let rows = axis_rows(&c["a"], &c["clang"]);
        let cc = rows.iter().find(|r| r.key == "cc").expect("cc row");
        assert!(
            cc.from
                .as_deref()
                .is_some_and(|v| v.starts_with("gcc 14.2.0 (")),
            "{cc:?}"
        );
        assert!(
            cc.to
                .as_deref()
                .is_some_and(|v| v.starts_with("clang 19.1.7 (")),
            "{cc:?}"
        );
        assert!(rows.iter().any(|r| r.key == "name"));
        // cmake and ninja are the same on both sides: no row.
        assert!(
            !rows.iter().any(|r| r.key == "cmake" || r.key == "ninja"),
            "{rows:?}"
        );
        let text = render_rows(&rows);
        assert!(text.contains("toolchain cc:\n  - gcc 14.2.0"), "{text}");
    }

    // issue #10: a patch list differs by file and by digest, in order.
    #[test]
    fn patches_differ_by_order_and_digest() {
        let c = configs();
        let p = |f: &str, d: &[u8]| PatchRef {
            file: f.into(),
            sha256: Sha256::of_bytes(d),
        };
        let mut a = c["a"].clone();
        let mut b = c["a"].clone();
        a.patches = vec![p("0001-x.patch", b"1"), p("0002-y.patch", b"2")];
        b.patches = vec![p("0002-y.patch", b"2"), p("0001-x.patch", b"1")];
        assert_eq!(axes_of(&axis_rows(&a, &b)), vec![Axis::Patches]);
        b.patches = vec![p("0001-x.patch", b"1"), p("0002-y.patch", b"2 edited")];
        assert_eq!(axes_of(&axis_rows(&a, &b)), vec![Axis::Patches]);
        b.patches = a.patches.clone();
        assert!(axis_rows(&a, &b).is_empty());
        b.patches.clear();
        let rows = axis_rows(&a, &b);
        assert_eq!(rows[0].to.as_deref(), Some("(none)"));
    }
}
