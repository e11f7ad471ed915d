//! A variant resolved axis by axis (`Config`): its pin, patches, toolchain as found on this
//! machine, build type, sanitizer switches, other CMake entries and targets. Flip compares two
//! of these; ablate resolves the patch lists through the same functions.

use pinforge_base::digest::Sha256;
use pinforge_base::error::Result;
use pinforge_base::workspace::Workspace;
use pinforge_build::build;
use pinforge_build::toolchain::{self, ResolvedToolchain, Role};
use pinforge_source::recipe::{cmake_key_name, PatchSelection, Pin, Recipe, Variant};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Whether a CMake setting turns a sanitizer on: a sanitizer switch, or a compiler or linker
/// flags variable that carries `-fsanitize=` (the way a CUDA variant must, see
/// recipes/mrope-cuda.toml: nvcc refuses the switches' flags).
pub(crate) fn is_sanitizer_setting(key: &str, value: &str) -> bool {
    let name = pinforge_source::recipe::cmake_key_name(key);
    is_sanitizer_key(key)
        || (name.starts_with("CMAKE_") && name.ends_with("_FLAGS") && value.contains("-fsanitize="))
}

/// Whether a CMake cache key is a sanitizer switch: those form their own axis, because
/// turning a sanitizer on is a different experiment from changing a feature option.
pub(crate) fn is_sanitizer_key(key: &str) -> bool {
    let name = cmake_key_name(key);
    name.starts_with("LLAMA_SANITIZE_") || name.starts_with("GGML_SANITIZE_")
}

/// One patch of a resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PatchRef {
    /// File name in the bundle.
    pub file: String,
    /// SHA-256 of the file.
    pub sha256: Sha256,
}

/// One tool as resolved on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ToolConfig {
    /// What the recipe names (`gcc`, `clang++`, `cmake`).
    pub program: String,
    /// The exact version the tool reports.
    pub version: String,
    /// The binary it resolves to.
    pub path: PathBuf,
    /// SHA-256 of that binary.
    pub sha256: Sha256,
}

/// A toolchain as resolved on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ToolchainConfig {
    /// Name in the recipe.
    pub name: String,
    /// Tools by role (`cc`, `cxx`, `cmake`, `ninja`, `nvcc`).
    pub tools: BTreeMap<Role, ToolConfig>,
    /// CUDA toolkit root, for CUDA toolchains.
    pub cuda_root: Option<String>,
    /// CUDA architectures, for CUDA toolchains.
    pub cuda_architectures: Option<String>,
}

impl ToolchainConfig {
    /// From a recipe toolchain and its resolution.
    pub(crate) fn new(
        tc: &pinforge_source::recipe::Toolchain,
        resolved: &ResolvedToolchain,
    ) -> ToolchainConfig {
        let program = |role: Role| -> String {
            match role {
                Role::Cc => tc.cc.clone(),
                Role::Cxx => tc.cxx.clone(),
                Role::Nvcc => tc.nvcc.clone().unwrap_or_else(|| "nvcc".into()),
                other => other.as_str().to_string(),
            }
        };
        ToolchainConfig {
            name: resolved.name.clone(),
            tools: resolved
                .tools
                .iter()
                .map(|(role, t)| {
                    (
                        *role,
                        ToolConfig {
                            program: program(*role),
                            version: t.version.clone(),
                            path: t.real_path.clone(),
                            sha256: t.sha256,
                        },
                    )
                })
                .collect(),
            cuda_root: resolved.cuda_root.clone(),
            cuda_architectures: resolved.cuda_architectures.clone(),
        }
    }
}

/// A variant fully resolved: what its build will be made of, axis by axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Config {
    /// The variant's name (not an axis: two names may describe the same build).
    pub variant: String,
    /// The upstream pin.
    pub pin: Pin,
    /// The ordered patch list.
    pub patches: Vec<PatchRef>,
    /// The resolved toolchain.
    pub toolchain: ToolchainConfig,
    /// `CMAKE_BUILD_TYPE`.
    pub build_type: String,
    /// Sanitizer switches.
    pub sanitizer: BTreeMap<String, String>,
    /// Every other CMake cache entry.
    pub cmake: BTreeMap<String, String>,
    /// Build targets.
    pub targets: Vec<String>,
}

/// The patch files a variant applies, in order, with their digests (what `build` selects).
pub(crate) fn resolve_patches(recipe: &Recipe, variant: &Variant) -> Result<Vec<PatchRef>> {
    if matches!(&variant.patches, PatchSelection::List(l) if l.is_empty()) {
        return Ok(Vec::new());
    }
    let bundle = build::bundle_for(recipe)?;
    let selection = match &variant.patches {
        PatchSelection::Series => None,
        PatchSelection::List(l) => Some(l.as_slice()),
    };
    Ok(bundle
        .select(selection)?
        .into_iter()
        .map(|p| PatchRef {
            file: p.id.to_string(),
            sha256: p.sha256,
        })
        .collect())
}

/// Resolve a variant's configuration: its patches against the bundle and its toolchain on this
/// machine (so that a compiler change shows as `gcc 12.2.0` against `clang 19.1.7`, not as two
/// names). A missing tool or patch is an input error, before anything is built.
pub(crate) fn resolve(ws: &Workspace, recipe: &Recipe, variant: &Variant) -> Result<Config> {
    let tools = toolchain::resolve(&variant.toolchain, &ws.tool_dirs())?;
    let patches = resolve_patches(recipe, variant)?;
    Ok(config_of(recipe, variant, patches, &tools))
}

/// A configuration from parts already resolved.
pub(crate) fn config_of(
    recipe: &Recipe,
    variant: &Variant,
    patches: Vec<PatchRef>,
    tools: &ResolvedToolchain,
) -> Config {
    let (sanitizer, cmake): (BTreeMap<_, _>, BTreeMap<_, _>) = variant
        .cmake
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, v)| is_sanitizer_setting(k, v));
    Config {
        variant: variant.name.to_string(),
        pin: recipe.pin.clone(),
        patches,
        toolchain: ToolchainConfig::new(&variant.toolchain, tools),
        build_type: variant.build_type.clone(),
        sanitizer,
        cmake,
        targets: variant.targets.clone(),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizer_keys_are_their_own_axis() {
        assert!(is_sanitizer_key("LLAMA_SANITIZE_ADDRESS"));
        assert!(is_sanitizer_setting(
            "CMAKE_CXX_FLAGS",
            "-fsanitize=address -fno-omit-frame-pointer"
        ));
        assert!(is_sanitizer_setting(
            "CMAKE_SHARED_LINKER_FLAGS:STRING",
            "-fsanitize=address"
        ));
        assert!(!is_sanitizer_setting("CMAKE_CXX_FLAGS", "-O2"));
        assert!(!is_sanitizer_setting("OTHER", "-fsanitize=address"));
        assert!(is_sanitizer_key("GGML_SANITIZE_UNDEFINED:BOOL"));
        assert!(!is_sanitizer_key("LLAMA_SANITIZE"));
        assert!(!is_sanitizer_key("GGML_NATIVE"));
    }
}
