//! Recipes: the resolved model (pin, toolchains, variants expressed as a base plus a delta and
//! resolved into complete build descriptions), loading and parsing. The raw TOML schema lives in
//! `raw` (unknown keys are errors), resolution in `resolve`, the CMake rules in `cmake`. Every
//! error points at `file:line:column`.

mod cmake;
mod raw;
mod resolve;

pub use cmake::cmake_key_name;

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use pinforge_base::names::is_identifier;
use raw::RawRecipe;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A variant's name (`patched`, `unpatched-asan`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VariantName(String);

impl VariantName {
    /// Validate: letters, digits, `-`, `_`, `.`, starting with a letter or digit; used in
    /// directory names.
    pub fn new(s: &str) -> std::result::Result<VariantName, BadVariantName> {
        if is_identifier(s) {
            Ok(VariantName(s.to_string()))
        } else {
            Err(BadVariantName(s.to_string()))
        }
    }
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A string [`VariantName::new`] refused; the recipe loader adds the file and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a variant name (letters, digits, `-`, `_`, `.`; it names a directory)")]
pub struct BadVariantName(pub String);

impl fmt::Display for VariantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Resolved model.

/// Where the upstream source comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PinSource {
    /// A crate from the package registry, fetched with cargo.
    Crate {
        /// Crate name.
        name: String,
        /// Exact version.
        version: String,
        /// SHA-256 of the `.crate` file.
        sha256: Sha256,
    },
    /// One commit of a git repository.
    Git {
        /// Repository URL (or local path).
        url: String,
        /// Optional tag that must resolve to the commit.
        tag: Option<String>,
        /// Full or abbreviated commit id as written.
        commit: String,
    },
    /// A local `.tar.gz` / `.tar` file.
    Tarball {
        /// Path (relative paths are relative to the recipe).
        path: PathBuf,
        /// SHA-256 of the file.
        sha256: Sha256,
    },
    /// A package of the npm registry whose tarball carries the upstream tree as a git bundle
    /// (`node-llama-cpp` ships llama.cpp as `package/llama/gitRelease.bundle`): fetched with
    /// `npm pack` (or read from a local copy), both the tarball and the bundle verified by digest.
    Npm {
        /// Package name.
        package: String,
        /// Exact version.
        version: String,
        /// SHA-256 of the tarball `npm pack` writes.
        sha256: Sha256,
        /// A local copy of the tarball to use instead of `npm pack` (relative to the recipe).
        path: Option<PathBuf>,
        /// The bundle's path inside the tarball, as the archive names it.
        bundle: String,
        /// SHA-256 of the bundle.
        bundle_sha256: Sha256,
    },
    /// A local directory, verified by its tree digest.
    Dir {
        /// Path (relative paths are relative to the recipe).
        path: PathBuf,
        /// Tree digest (see `digest::tree_digest`).
        tree_sha256: Sha256,
    },
}

/// The pinned upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Pin {
    /// The source.
    pub source: PinSource,
    /// Folder inside the source that is the upstream tree (`llama.cpp` in the sys crate).
    pub subdir: Option<String>,
    /// Build number passed to llama.cpp's build info (else derived from a `bNNNN` tag).
    pub build_number: Option<u64>,
    /// Commit string passed to llama.cpp's build info (else derived from the pin).
    pub build_commit: Option<String>,
}

/// A toolchain: compilers and the versions they must have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Toolchain {
    /// Name in the recipe.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// C compiler (name searched in PATH, or a path).
    pub cc: String,
    /// C++ compiler.
    pub cxx: String,
    /// Version requirements by tool (`cc`, `cxx`, `cmake`, `ninja`, `ccache`, `nvcc`).
    pub requirements: BTreeMap<String, semver::VersionReq>,
    /// CUDA compiler, for CUDA variants.
    pub nvcc: Option<String>,
    /// CUDA toolkit root (`CUDAToolkit_ROOT`).
    pub cuda_root: Option<String>,
    /// `CMAKE_CUDA_ARCHITECTURES`.
    pub cuda_architectures: Option<String>,
    /// A toolkit pinforge provisions from a lock of pinned wheels (`cuda-toolkit = NAME` reads
    /// `toolkits/NAME.toml` beside the recipe); nvcc and the toolkit root come from it.
    pub cuda_toolkit: Option<PathBuf>,
}

/// Which patches a variant applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PatchSelection {
    /// The whole `series`, in order.
    Series,
    /// These files, in this order (empty: unpatched).
    List(Vec<String>),
}

/// A fully resolved variant.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    /// Name.
    pub name: VariantName,
    /// What it is for.
    pub description: Option<String>,
    /// Inheritance chain, nearest first, ending in `base`.
    pub inherits: Vec<String>,
    /// Patches.
    pub patches: PatchSelection,
    /// Toolchain.
    pub toolchain: Toolchain,
    /// `CMAKE_BUILD_TYPE`.
    pub build_type: String,
    /// Build targets.
    pub targets: Vec<String>,
    /// CMake cache entries, sorted.
    pub cmake: BTreeMap<String, String>,
}

/// A loaded, validated recipe.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// Recipe name (file stem unless `name` says otherwise).
    pub name: String,
    /// Where it was read from (`embedded:recipes/mrope-cpu.toml` for the built-in one).
    pub path: PathBuf,
    /// Whether it is the copy compiled into the binary.
    pub embedded: bool,
    /// SHA-256 of the recipe bytes.
    pub sha256: Sha256,
    /// The pin.
    pub pin: Pin,
    /// The patch bundle folder (None: the embedded bundle).
    pub patches_dir: Option<PathBuf>,
    /// Default variant.
    pub default_variant: VariantName,
    /// Variants by name.
    pub variants: BTreeMap<VariantName, Variant>,
}

/// The built-in default recipe.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../../recipes/mrope-cpu.toml");
/// Its path as shown in messages and manifests.
pub(crate) const EMBEDDED_DEFAULT_PATH: &str = "embedded:recipes/mrope-cpu.toml";

impl Recipe {
    /// Load a recipe file.
    pub fn load(path: &Path) -> Result<Recipe> {
        let bytes = fsx::read(path).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::input(path.display(), "recipe not found")
                    .with_hint("give the path of a recipe TOML file, e.g. recipes/mrope-cpu.toml")
            }
            other => other,
        })?;
        let base = fsx::parent_of(path);
        Recipe::parse_bytes(&bytes, path, Some(&base))
    }

    /// Parse recipe bytes (UTF-8 TOML); `path` names them in errors.
    pub fn parse_bytes(bytes: &[u8], path: &Path, base_dir: Option<&Path>) -> Result<Recipe> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let (line, col) = line_col(
                &String::from_utf8_lossy(&bytes[..e.valid_up_to()]),
                usize::MAX,
            );
            Error::input(
                format!("{}:{line}:{col}", path.display()),
                "recipe is not UTF-8 text",
            )
        })?;
        Recipe::parse(text, path, base_dir)
    }

    /// The recipe at `path`, or the embedded default when none is named (what every command
    /// taking an optional RECIPE means).
    pub fn load_or_default(path: Option<&Path>) -> Result<Recipe> {
        match path {
            Some(p) => Recipe::load(p),
            None => Recipe::embedded_default(),
        }
    }

    /// The recipe compiled into the binary.
    pub fn embedded_default() -> Result<Recipe> {
        Recipe::parse(EMBEDDED_DEFAULT, Path::new(EMBEDDED_DEFAULT_PATH), None)
    }

    /// Parse recipe text. `base_dir` resolves relative paths; None means embedded.
    pub fn parse(text: &str, path: &Path, base_dir: Option<&Path>) -> Result<Recipe> {
        let at = |span: Option<Range<usize>>| location(path, text, span);
        let raw: RawRecipe = toml::from_str(text).map_err(|e| {
            let msg = e.message().to_string();
            let hint = if msg.starts_with("unknown field") {
                "remove the key or fix its spelling; unknown keys are errors so that typos never pass silently"
            } else {
                "fix the TOML at that position"
            };
            Error::input(at(e.span()), msg).with_hint(hint)
        })?;

        let name = resolve::recipe_name(&raw, path, &at)?;
        let pin = resolve::resolve_pin(&raw.pin, base_dir, &at)?;
        let toolchains = resolve::resolve_toolchains(&raw, base_dir, &at)?;
        let variants = resolve::resolve_variants(&raw, &toolchains, &at)?;

        let default_variant = VariantName::new(raw.default_variant.get_ref())
            .map_err(|m| Error::input(at(Some(raw.default_variant.span())), m))?;
        if !variants.contains_key(&default_variant) {
            return Err(Error::input(
                at(Some(raw.default_variant.span())),
                format!("default-variant `{default_variant}` is not defined"),
            )
            .with_hint(format!(
                "defined variants: {}",
                variants
                    .keys()
                    .map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }

        let patches_dir = match (base_dir, &raw.patches_dir) {
            (None, _) => None,
            (Some(b), Some(d)) => Some(b.join(d)),
            (Some(b), None) => Some(b.join("../patches")),
        };

        Ok(Recipe {
            name,
            path: path.to_path_buf(),
            embedded: base_dir.is_none(),
            sha256: Sha256::of_bytes(text.as_bytes()),
            pin,
            patches_dir,
            default_variant,
            variants,
        })
    }

    /// A variant by name, with the list of names when it does not exist.
    pub fn variant(&self, name: &str) -> Result<&Variant> {
        VariantName::new(name)
            .ok()
            .and_then(|n| self.variants.get(&n))
            .ok_or_else(|| {
                Error::input(
                    format!("{}: variant `{name}`", self.path.display()),
                    "no such variant",
                )
                .with_hint(format!(
                    "defined variants: {}",
                    self.variants
                        .keys()
                        .map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }

    /// The lock file that records the resolved pin (git pins), next to the recipe.
    pub(crate) fn lock_path(&self) -> Option<PathBuf> {
        if self.embedded {
            return None;
        }
        Some(self.path.with_extension("lock"))
    }
}

/// `file:line:column` for a byte span.
fn location(path: &Path, text: &str, span: Option<Range<usize>>) -> String {
    match span {
        Some(r) => {
            let (line, col) = line_col(text, r.start);
            format!("{}:{line}:{col}", path.display())
        }
        None => path.display().to_string(),
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

/// Words a byte span of the recipe text as `file:line:column` (see [`location`]).
type At<'a> = dyn Fn(Option<Range<usize>>) -> String + 'a;

#[cfg(test)]
mod tests;
