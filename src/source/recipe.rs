//! Recipes: the TOML schema (unknown keys are errors), the pin, toolchains, and variants
//! expressed as a base plus a delta, resolved into complete build descriptions. Every error
//! points at `file:line:column`.

use crate::base::digest::Sha256;
use crate::base::error::{Error, Result};
use crate::base::fsx;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A variant's name (`patched`, `unpatched-asan`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VariantName(String);

use crate::base::names::is_identifier;

/// The variable name of a CMake cache key as a recipe writes it: `CMAKE_BUILD_TYPE:STRING`
/// names `CMAKE_BUILD_TYPE` (the `:TYPE` suffix of `-DVAR:TYPE=value`).
pub fn cmake_key_name(key: &str) -> &str {
    key.split_once(':').map(|(n, _)| n).unwrap_or(key)
}

/// The cache types `-DVAR:TYPE=value` accepts.
const CMAKE_TYPES: &[&str] = &[
    "BOOL",
    "STRING",
    "PATH",
    "FILEPATH",
    "INTERNAL",
    "UNINITIALIZED",
];

impl VariantName {
    /// Validate: letters, digits, `-`, `_`, `.`, starting with a letter or digit; used in
    /// directory names.
    pub fn new(s: &str) -> std::result::Result<VariantName, String> {
        if is_identifier(s) {
            Ok(VariantName(s.to_string()))
        } else {
            Err(format!(
                "`{s}` is not a variant name (letters, digits, `-`, `_`, `.`; it names a directory)"
            ))
        }
    }
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for VariantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Raw schema, as written.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRecipe {
    name: Option<Spanned<String>>,
    description: Option<String>,
    default_variant: Spanned<String>,
    patches_dir: Option<String>,
    pin: Spanned<RawPin>,
    #[serde(default)]
    toolchain: BTreeMap<Spanned<String>, Spanned<RawToolchain>>,
    base: RawVariant,
    #[serde(default)]
    variants: BTreeMap<Spanned<String>, Spanned<RawVariant>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawPin {
    kind: Spanned<String>,
    // crate
    #[serde(rename = "crate")]
    krate: Option<String>,
    version: Option<String>,
    // git
    url: Option<String>,
    tag: Option<String>,
    commit: Option<Spanned<String>>,
    // tarball / dir
    path: Option<String>,
    // crate, tarball
    sha256: Option<Spanned<String>>,
    // dir
    tree_sha256: Option<Spanned<String>>,
    // all
    subdir: Option<String>,
    build_number: Option<u64>,
    build_commit: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawToolchain {
    description: Option<String>,
    cc: String,
    cxx: String,
    cc_version: Option<Spanned<String>>,
    cxx_version: Option<Spanned<String>>,
    cmake_version: Option<Spanned<String>>,
    ninja_version: Option<Spanned<String>>,
    ccache_version: Option<Spanned<String>>,
    nvcc: Option<String>,
    nvcc_version: Option<Spanned<String>>,
    cuda_root: Option<String>,
    cuda_architectures: Option<String>,
    cuda_toolkit: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawVariant {
    inherits: Option<Spanned<String>>,
    description: Option<String>,
    patches: Option<Spanned<toml::Value>>,
    toolchain: Option<Spanned<String>>,
    build_type: Option<Spanned<String>>,
    targets: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    cmake: BTreeMap<String, Spanned<toml::Value>>,
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
    /// What it is for.
    pub description: Option<String>,
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
pub const EMBEDDED_DEFAULT: &str = include_str!("../../recipes/mrope-cpu.toml");
/// Its path as shown in messages and manifests.
pub const EMBEDDED_DEFAULT_PATH: &str = "embedded:recipes/mrope-cpu.toml";

/// CMake variables pinforge sets itself; a recipe setting them would silently lose.
const RESERVED_CMAKE: &[(&str, &str)] = &[
    ("CMAKE_BUILD_TYPE", "set `build-type` instead"),
    (
        "CMAKE_INSTALL_PREFIX",
        "pinforge installs into a fixed prefix and stages it",
    ),
    (
        "CMAKE_INSTALL_LIBDIR",
        "pinforge stages a standard prefix with lib/",
    ),
    (
        "CMAKE_INSTALL_RPATH",
        "pinforge keeps installed run paths $ORIGIN-relative",
    ),
    (
        "CMAKE_BUILD_RPATH_USE_ORIGIN",
        "pinforge keeps run paths $ORIGIN-relative",
    ),
    (
        "CMAKE_TOOLCHAIN_FILE",
        "set the toolchain's compilers instead",
    ),
    (
        "CMAKE_CUDA_ARCHITECTURES",
        "set the toolchain's `cuda-architectures` instead",
    ),
    (
        "CUDAToolkit_ROOT",
        "set the toolchain's `cuda-root` instead",
    ),
    ("GIT_EXE", "pinforge answers git queries from the pin"),
    ("CMAKE_C_COMPILER", "set the toolchain's `cc` instead"),
    ("CMAKE_CXX_COMPILER", "set the toolchain's `cxx` instead"),
    ("CMAKE_CUDA_COMPILER", "set the toolchain's `nvcc` instead"),
    ("CMAKE_MAKE_PROGRAM", "pinforge drives Ninja itself"),
    ("CMAKE_GENERATOR", "pinforge always uses Ninja"),
    ("LLAMA_BUILD_NUMBER", "set the pin's `build-number` instead"),
    ("LLAMA_BUILD_COMMIT", "set the pin's `build-commit` instead"),
];

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

        let name = match &raw.name {
            Some(n) => {
                VariantName::new(n.get_ref()).map_err(|m| {
                    Error::input(at(Some(n.span())), m.replace("variant", "recipe"))
                })?;
                n.get_ref().clone()
            }
            None => {
                let stem = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if !is_identifier(&stem) {
                    return Err(Error::input(
                        format!("{}:1:1", path.display()),
                        format!(
                            "the file name gives the recipe name `{stem}`, which is not a name (letters, digits, `-`, `_`, `.`, starting with a letter or digit; it names the folder build/NAME)"
                        ),
                    )
                    .with_hint("set `name = \"...\"` in the recipe, or rename the file"));
                }
                stem
            }
        };

        let pin = resolve_pin(&raw.pin, base_dir, &at)?;

        let mut toolchains = BTreeMap::new();
        for (tname, tc) in &raw.toolchain {
            if !is_identifier(tname.get_ref()) {
                return Err(Error::input(
                    at(Some(tname.span())),
                    format!(
                        "`{}` is not a toolchain name (letters, digits, `-`, `_`, `.`, starting with a letter or digit)",
                        tname.get_ref()
                    ),
                ));
            }
            toolchains.insert(
                tname.get_ref().clone(),
                resolve_toolchain(tname.get_ref(), tc, base_dir, &at)?,
            );
        }

        check_variant(&raw.base, "base", &toolchains, &at)?;
        let mut raw_variants: BTreeMap<String, (&RawVariant, Range<usize>)> = BTreeMap::new();
        for (vname, v) in &raw.variants {
            VariantName::new(vname.get_ref())
                .map_err(|m| Error::input(at(Some(vname.span())), m))?;
            if vname.get_ref() == "base" {
                return Err(Error::input(
                    at(Some(vname.span())),
                    "`base` is the name of the base table, not a variant",
                ));
            }
            check_variant(v.get_ref(), vname.get_ref(), &toolchains, &at)?;
            raw_variants.insert(vname.get_ref().clone(), (v.get_ref(), v.span()));
        }
        if raw_variants.is_empty() {
            return Err(
                Error::input(at(None), "recipe has no `[variants.NAME]` table").with_hint(
                    "add at least `[variants.default]` (it may be empty: it inherits `[base]`)",
                ),
            );
        }

        let mut variants = BTreeMap::new();
        for vname in raw_variants.keys() {
            let v = resolve_variant(vname, &raw.base, &raw_variants, &toolchains, &at)?;
            variants.insert(v.name.clone(), v);
        }

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
            description: raw.description.clone(),
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
    pub fn lock_path(&self) -> Option<PathBuf> {
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

type At<'a> = dyn Fn(Option<Range<usize>>) -> String + 'a;

fn parse_sha(s: &Spanned<String>, at: &At) -> Result<Sha256> {
    s.get_ref()
        .parse()
        .map_err(|e: crate::base::digest::ParseDigestError| Error::input(at(Some(s.span())), e))
}

fn resolve_pin(raw: &Spanned<RawPin>, base_dir: Option<&Path>, at: &At) -> Result<Pin> {
    let span = raw.span();
    let p = raw.get_ref();
    let need = |v: &Option<String>, key: &str, kind: &str| -> Result<String> {
        v.clone().ok_or_else(|| {
            Error::input(
                at(Some(span.clone())),
                format!("a `{kind}` pin needs `{key}`"),
            )
        })
    };
    let forbid = |present: bool, key: &str, kind: &str| -> Result<()> {
        if present {
            Err(Error::input(
                at(Some(span.clone())),
                format!("`{key}` does not apply to a `{kind}` pin"),
            ))
        } else {
            Ok(())
        }
    };
    let rel = |s: String| -> PathBuf {
        let p = PathBuf::from(&s);
        match base_dir {
            Some(b) if p.is_relative() => b.join(p),
            _ => p,
        }
    };
    let kind = p.kind.get_ref().as_str();
    let source = match kind {
        "crate" => {
            forbid(
                p.url.is_some() || p.tag.is_some() || p.commit.is_some(),
                "url/tag/commit",
                kind,
            )?;
            forbid(
                p.path.is_some() || p.tree_sha256.is_some(),
                "path/tree-sha256",
                kind,
            )?;
            let sha = p.sha256.as_ref().ok_or_else(|| {
                Error::input(at(Some(span.clone())), "a `crate` pin needs `sha256` (of the .crate file)")
                    .with_hint("the registry index lists it as `cksum`; pinforge refuses to build unverified sources")
            })?;
            PinSource::Crate {
                name: need(&p.krate, "crate", kind)?,
                version: need(&p.version, "version", kind)?,
                sha256: parse_sha(sha, at)?,
            }
        }
        "git" => {
            forbid(
                p.krate.is_some() || p.version.is_some(),
                "crate/version",
                kind,
            )?;
            forbid(
                p.path.is_some() || p.sha256.is_some() || p.tree_sha256.is_some(),
                "path/sha256",
                kind,
            )?;
            let commit = p.commit.as_ref().ok_or_else(|| {
                Error::input(at(Some(span.clone())), "a `git` pin needs `commit`")
                    .with_hint("pin the commit id; a tag alone can move")
            })?;
            let c = commit.get_ref();
            if !(7..=40).contains(&c.len()) || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::input(
                    at(Some(commit.span())),
                    format!("commit `{c}` is not a commit id (7 to 40 hex digits)"),
                ));
            }
            if c.len() < 40 && p.tag.is_none() {
                return Err(Error::input(
                    at(Some(commit.span())),
                    "an abbreviated commit needs a `tag` to resolve it",
                )
                .with_hint("give the full 40-digit commit id, or the tag it belongs to"));
            }
            PinSource::Git {
                url: need(&p.url, "url", kind)?,
                tag: p.tag.clone(),
                commit: c.to_ascii_lowercase(),
            }
        }
        "tarball" => {
            forbid(
                p.krate.is_some() || p.url.is_some() || p.commit.is_some(),
                "crate/url/commit",
                kind,
            )?;
            let sha = p.sha256.as_ref().ok_or_else(|| {
                Error::input(at(Some(span.clone())), "a `tarball` pin needs `sha256`")
            })?;
            PinSource::Tarball {
                path: rel(need(&p.path, "path", kind)?),
                sha256: parse_sha(sha, at)?,
            }
        }
        "dir" => {
            forbid(
                p.krate.is_some() || p.url.is_some() || p.sha256.is_some(),
                "crate/url/sha256",
                kind,
            )?;
            let sha = p.tree_sha256.as_ref().ok_or_else(|| {
                Error::input(at(Some(span.clone())), "a `dir` pin needs `tree-sha256`")
                    .with_hint("`pinforge vendor digest DIR` prints it")
            })?;
            PinSource::Dir {
                path: rel(need(&p.path, "path", kind)?),
                tree_sha256: parse_sha(sha, at)?,
            }
        }
        other => {
            return Err(Error::input(
                at(Some(p.kind.span())),
                format!("unknown pin kind `{other}`; expected crate, git, tarball or dir"),
            ))
        }
    };
    if let Some(sub) = &p.subdir {
        let ok = !sub.is_empty()
            && Path::new(sub)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !ok {
            return Err(Error::input(
                at(Some(span)),
                format!("subdir `{sub}` must be a relative path inside the source"),
            ));
        }
    }
    Ok(Pin {
        source,
        subdir: p.subdir.clone(),
        build_number: p.build_number,
        build_commit: p.build_commit.clone(),
    })
}

fn parse_req(s: &Spanned<String>, at: &At) -> Result<semver::VersionReq> {
    semver::VersionReq::parse(s.get_ref()).map_err(|e| {
        Error::input(
            at(Some(s.span())),
            format!("`{}` is not a version requirement: {e}", s.get_ref()),
        )
        .with_hint("write e.g. \">=3.21\" or \"=12.8\"")
    })
}

fn resolve_toolchain(
    name: &str,
    tc: &Spanned<RawToolchain>,
    base_dir: Option<&Path>,
    at: &At,
) -> Result<Toolchain> {
    let t = tc.get_ref();
    let cuda_toolkit = match &t.cuda_toolkit {
        None => None,
        Some(k) => {
            let n = k.get_ref();
            if !crate::base::names::is_plain_name(n) {
                return Err(Error::input(
                    at(Some(k.span())),
                    format!("cuda-toolkit `{n}` is not a plain name"),
                )
                .with_hint("name a lock in toolkits/ beside the recipe, e.g. \"cuda-13.1.1\""));
            }
            if t.nvcc.is_some() || t.cuda_root.is_some() || t.nvcc_version.is_some() {
                return Err(Error::input(
                    at(Some(k.span())),
                    format!(
                        "toolchain `{name}` sets cuda-toolkit and also nvcc, nvcc-version or \
                         cuda-root"
                    ),
                )
                .with_hint(
                    "a provisioned toolkit brings its own nvcc and root: remove those keys",
                ));
            }
            let Some(dir) = base_dir else {
                return Err(Error::input(
                    at(Some(k.span())),
                    "an embedded recipe cannot name a toolkit lock",
                ));
            };
            Some(dir.join("toolkits").join(format!("{n}.toml")))
        }
    };
    let mut requirements = BTreeMap::new();
    for (tool, req) in [
        ("cc", &t.cc_version),
        ("cxx", &t.cxx_version),
        ("cmake", &t.cmake_version),
        ("ninja", &t.ninja_version),
        ("ccache", &t.ccache_version),
        ("nvcc", &t.nvcc_version),
    ] {
        if let Some(r) = req {
            requirements.insert(tool.to_string(), parse_req(r, at)?);
        }
    }
    if t.nvcc.is_none()
        && cuda_toolkit.is_none()
        && (t.nvcc_version.is_some() || t.cuda_root.is_some())
    {
        return Err(Error::input(
            at(Some(tc.span())),
            format!("toolchain `{name}` sets CUDA options but no `nvcc`"),
        ));
    }
    Ok(Toolchain {
        name: name.to_string(),
        description: t.description.clone(),
        cc: t.cc.clone(),
        cxx: t.cxx.clone(),
        requirements,
        nvcc: t.nvcc.clone(),
        cuda_root: t.cuda_root.clone(),
        cuda_architectures: t.cuda_architectures.clone(),
        cuda_toolkit,
    })
}

fn check_variant(
    v: &RawVariant,
    name: &str,
    toolchains: &BTreeMap<String, Toolchain>,
    at: &At,
) -> Result<()> {
    if let Some(t) = &v.toolchain {
        if !toolchains.contains_key(t.get_ref()) {
            return Err(Error::input(
                at(Some(t.span())),
                format!("{name}: toolchain `{}` is not defined", t.get_ref()),
            )
            .with_hint(format!(
                "defined toolchains: {}",
                toolchains.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, value) in &v.cmake {
        let var = cmake_key_name(key);
        let typed_ok = match key.split_once(':') {
            None => true,
            Some((_, ty)) => CMAKE_TYPES.contains(&ty),
        };
        let var_ok = !var.is_empty()
            && var
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
        if !typed_ok || !var_ok {
            return Err(Error::input(
                at(Some(value.span())),
                format!("{name}: `{key}` is not a CMake cache key"),
            )
            .with_hint(format!(
                "write VAR or VAR:TYPE, VAR of letters, digits, `_`, `.`, `+`, `-`, TYPE one of {}",
                CMAKE_TYPES.join(", ")
            )));
        }
        if let Some(other) = seen.insert(var, key) {
            return Err(Error::input(
                at(Some(value.span())),
                format!("{name}: `{key}` and `{other}` set the same CMake variable `{var}`"),
            ));
        }
        if let Some((_, why)) = RESERVED_CMAKE.iter().find(|(k, _)| *k == var) {
            return Err(Error::input(
                at(Some(value.span())),
                format!("{name}: cmake option `{key}` is set by pinforge"),
            )
            .with_hint(*why));
        }
        cmake_value(key, value, at)?;
    }
    if let Some(p) = &v.patches {
        patch_selection(p, at)?;
    }
    if let Some(t) = &v.targets {
        if t.get_ref().is_empty() {
            return Err(
                Error::input(at(Some(t.span())), format!("{name}: `targets` is empty"))
                    .with_hint("name at least one CMake target, e.g. [\"llama\"]"),
            );
        }
    }
    if let Some(bt) = &v.build_type {
        const TYPES: [&str; 4] = ["Release", "Debug", "RelWithDebInfo", "MinSizeRel"];
        if !TYPES.contains(&bt.get_ref().as_str()) {
            return Err(Error::input(
                at(Some(bt.span())),
                format!(
                    "build-type `{}` is not one of {}",
                    bt.get_ref(),
                    TYPES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn cmake_value(key: &str, v: &Spanned<toml::Value>, at: &At) -> Result<String> {
    match v.get_ref() {
        toml::Value::Boolean(b) => Ok(if *b { "ON" } else { "OFF" }.into()),
        // A NUL cannot be passed in an argument, and CMake's cache cannot hold a line break:
        // either would change what the value means on its way to CMake.
        toml::Value::String(s) if s.contains(['\0', '\n', '\r']) => Err(Error::input(
            at(Some(v.span())),
            format!("cmake option `{key}`: the value holds a NUL or a line break"),
        )),
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        _ => Err(Error::input(
            at(Some(v.span())),
            format!("cmake option `{key}` must be a string, boolean or integer"),
        )),
    }
}

fn patch_selection(v: &Spanned<toml::Value>, at: &At) -> Result<PatchSelection> {
    match v.get_ref() {
        toml::Value::String(s) if s == "series" => Ok(PatchSelection::Series),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| match i {
                toml::Value::String(s) => Ok(s.clone()),
                _ => Err(Error::input(
                    at(Some(v.span())),
                    "`patches` entries must be file names",
                )),
            })
            .collect::<Result<Vec<_>>>()
            .map(PatchSelection::List),
        _ => Err(Error::input(
            at(Some(v.span())),
            "`patches` must be \"series\" or a list of patch file names",
        )),
    }
}

fn resolve_variant(
    name: &str,
    base: &RawVariant,
    all: &BTreeMap<String, (&RawVariant, Range<usize>)>,
    toolchains: &BTreeMap<String, Toolchain>,
    at: &At,
) -> Result<Variant> {
    // Walk the inheritance chain up to `base`, refusing cycles and unknown parents.
    let mut chain: Vec<&RawVariant> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut cur = name.to_string();
    loop {
        if names.contains(&cur) {
            let span = all.get(name).map(|(_, s)| s.clone());
            return Err(Error::input(
                at(span),
                format!(
                    "variant `{name}`: inheritance cycle {} -> {cur}",
                    names.join(" -> ")
                ),
            ));
        }
        let (v, _) = all
            .get(&cur)
            .ok_or_else(|| Error::Internal(format!("variant {cur}")))?;
        names.push(cur.clone());
        chain.push(v);
        match &v.inherits {
            None => break,
            Some(p) if p.get_ref() == "base" => break,
            Some(p) => {
                if !all.contains_key(p.get_ref()) {
                    return Err(Error::input(
                        at(Some(p.span())),
                        format!("variant `{cur}` inherits unknown variant `{}`", p.get_ref()),
                    ));
                }
                cur = p.get_ref().clone();
            }
        }
    }
    chain.push(base);
    names.push("base".into());

    // Apply from base outwards: later (nearer) layers override.
    let mut patches = PatchSelection::Series;
    let mut toolchain_name: Option<String> = None;
    let mut build_type = "Release".to_string();
    let mut targets: Option<Vec<String>> = None;
    let mut cmake = BTreeMap::new();
    let mut description = None;
    for layer in chain.iter().rev() {
        if let Some(p) = &layer.patches {
            patches = patch_selection(p, at)?;
        }
        if let Some(t) = &layer.toolchain {
            toolchain_name = Some(t.get_ref().clone());
        }
        if let Some(bt) = &layer.build_type {
            build_type = bt.get_ref().clone();
        }
        if let Some(t) = &layer.targets {
            targets = Some(t.get_ref().clone());
        }
        for (k, v) in &layer.cmake {
            // A nearer layer overrides the variable, whatever `:TYPE` either layer wrote.
            cmake.retain(|old: &String, _| cmake_key_name(old) != cmake_key_name(k));
            cmake.insert(k.clone(), cmake_value(k, v, at)?);
        }
        if layer.description.is_some() {
            description = layer.description.clone();
        }
    }
    let toolchain_name = toolchain_name.ok_or_else(|| {
        Error::input(at(None), format!("variant `{name}` has no toolchain"))
            .with_hint("set `toolchain = \"NAME\"` in [base] or in the variant")
    })?;
    let toolchain = toolchains
        .get(&toolchain_name)
        .cloned()
        .ok_or_else(|| Error::Internal(format!("toolchain {toolchain_name}")))?;
    let targets = targets.ok_or_else(|| {
        Error::input(at(None), format!("variant `{name}` has no targets"))
            .with_hint("set `targets = [\"llama\"]` in [base]")
    })?;
    Ok(Variant {
        name: VariantName::new(name).map_err(|m| Error::input(at(None), m))?,
        description,
        inherits: names[1..].to_vec(),
        patches,
        toolchain,
        build_type,
        targets,
        cmake,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Recipe> {
        Recipe::parse(text, Path::new("r.toml"), Some(Path::new("/ws/recipes")))
    }

    const MINI: &str = r#"
default-variant = "a"
[pin]
kind = "crate"
crate = "x"
version = "1.0.0"
sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
[base]
toolchain = "cpu"
targets = ["llama"]
cmake = { GGML_NATIVE = false, X = "1" }
[variants.a]
[variants.b]
inherits = "a"
patches = []
cmake = { X = "2", SAN = true }
"#;

    #[test]
    fn embedded_default_parses_with_all_four_variants() {
        let r = Recipe::embedded_default().expect("embedded recipe");
        let names: Vec<_> = r.variants.keys().map(|v| v.to_string()).collect();
        for v in ["patched", "unpatched", "patched-asan", "unpatched-asan"] {
            assert!(names.contains(&v.to_string()), "{v} in {names:?}");
        }
        assert_eq!(r.default_variant.as_str(), "patched");
        let asan = r.variant("unpatched-asan").expect("variant");
        assert_eq!(asan.patches, PatchSelection::List(vec![]));
        assert_eq!(
            asan.cmake.get("LLAMA_SANITIZE_ADDRESS").map(String::as_str),
            Some("ON")
        );
        assert_eq!(
            asan.cmake.get("GGML_NATIVE").map(String::as_str),
            Some("OFF")
        );
    }

    // issue #10 host-compiler axis: the clang variant differs from unpatched-asan in its
    // toolchain only, and that toolchain pins Debian's clang exactly.
    #[test]
    fn the_clang_variant_flips_only_the_host_compiler() {
        let r = Recipe::embedded_default().expect("embedded recipe");
        let gcc = r.variant("unpatched-asan").expect("gcc");
        let clang = r.variant("unpatched-asan-clang").expect("clang");
        assert_eq!(clang.toolchain.cc, "clang");
        assert_eq!(clang.toolchain.cxx, "clang++");
        assert_eq!(
            clang
                .toolchain
                .requirements
                .get("cc")
                .map(ToString::to_string),
            Some("=14.0.6".to_string())
        );
        assert_eq!(clang.cmake, gcc.cmake);
        assert_eq!(clang.patches, gcc.patches);
        assert_eq!(clang.build_type, gcc.build_type);
        assert_eq!(gcc.toolchain.cc, "gcc");
        assert!(r.variant("patched-asan-clang").is_ok());
    }

    #[test]
    fn a_provisioned_toolkit_is_named_plainly_and_brings_its_own_nvcc() {
        let with = |extra: &str| {
            MINI.replace(
                "[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\n",
                &format!("[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\n{extra}\n"),
            )
        };
        let r = parse(&with("cuda-toolkit = \"cuda-13.1.1\"")).expect("parses");
        assert_eq!(
            r.variant("a").expect("a").toolchain.cuda_toolkit.as_deref(),
            Some(Path::new("/ws/recipes/toolkits/cuda-13.1.1.toml"))
        );
        for (extra, what) in [
            ("cuda-toolkit = \"../../etc/x\"", "not a plain name"),
            ("cuda-toolkit = \"a/b\"", "not a plain name"),
            (
                "cuda-toolkit = \"cuda-13.1.1\"\nnvcc = \"nvcc\"",
                "also nvcc",
            ),
        ] {
            let e = parse(&with(extra)).expect_err(extra);
            assert_eq!(e.exit_code(), 2, "{extra}: {e}");
            assert!(e.to_string().contains(what), "{extra}: {e}");
            assert!(e.to_string().contains("r.toml:"), "{extra}: {e}");
        }
        let e = Recipe::parse(
            &with("cuda-toolkit = \"cuda-13.1.1\""),
            Path::new("e.toml"),
            None,
        )
        .expect_err("embedded");
        assert!(e.to_string().contains("embedded"), "{e}");
    }

    #[test]
    fn shipped_toolkit_locks_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/toolkits");
        for (name, nvcc) in [("cuda-13.1.1", "13.1.115"), ("cuda-13.0.2", "13.0.88")] {
            let l =
                crate::artifact::cudakit::load_lock(&dir.join(format!("{name}.toml"))).expect(name);
            assert_eq!((l.name.as_str(), l.nvcc_version.as_str()), (name, nvcc));
            assert_eq!(l.wheels.len(), 6, "{name}");
        }
    }

    #[test]
    fn shipped_recipes_parse_and_resolve_every_variant() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes");
        let r = Recipe::load(&dir.join("b7992-cuda.toml")).expect("b7992-cuda.toml");
        assert!(matches!(
            &r.pin.source,
            PinSource::Git { tag: Some(t), commit, .. } if t == "b7992" && commit == "612db6188"
        ));
        let cuda12 = r.variant("cuda12-unpatched").expect("variant");
        assert_eq!(
            cuda12.toolchain.nvcc.as_deref(),
            Some("/usr/local/cuda-12.8/bin/nvcc")
        );
        assert_eq!(cuda12.patches, PatchSelection::List(vec![]));
        assert_eq!(cuda12.cmake["GGML_CUDA"], "ON");
        let c13 = r.variant("cuda13-patched").expect("variant");
        assert_eq!(
            c13.toolchain.cuda_toolkit.as_deref(),
            Some(dir.join("toolkits/cuda-13.1.1.toml").as_path())
        );
        assert!(c13.toolchain.nvcc.is_none());
        assert_eq!(
            r.variant("cuda130-unpatched")
                .expect("variant")
                .toolchain
                .cuda_toolkit,
            Some(dir.join("toolkits/cuda-13.0.2.toml"))
        );
        assert_eq!(
            r.variant("cuda13-patched").expect("variant").toolchain.name,
            "cuda131"
        );
        let c = Recipe::load(&dir.join("mrope-cuda.toml")).expect("mrope-cuda.toml");
        assert_eq!(
            c.variant("cuda-patched-sm120")
                .expect("variant")
                .toolchain
                .cuda_architectures
                .as_deref(),
            Some("120-real")
        );
        // The embedded copy is the repository's file.
        let disk = Recipe::load(&dir.join("mrope-cpu.toml")).expect("mrope-cpu.toml");
        assert_eq!(
            disk.sha256,
            Recipe::embedded_default().expect("embedded").sha256
        );
    }

    #[test]
    fn variants_are_base_plus_delta() {
        let r = parse(MINI).expect("parse");
        let a = r.variant("a").expect("a");
        let b = r.variant("b").expect("b");
        assert_eq!(a.patches, PatchSelection::Series);
        assert_eq!(a.cmake["X"], "1");
        assert_eq!(b.cmake["X"], "2");
        assert_eq!(b.cmake["GGML_NATIVE"], "OFF");
        assert_eq!(b.cmake["SAN"], "ON");
        assert_eq!(b.inherits, vec!["a", "base"]);
        assert_eq!(r.patches_dir, Some(PathBuf::from("/ws/recipes/../patches")));
    }

    #[test]
    fn unknown_key_is_an_error_with_line_and_column() {
        let text = MINI.replace("[variants.a]", "[variants.a]\ncmake-optons = 1");
        let e = parse(&text).expect_err("unknown key");
        let s = e.to_string();
        assert!(s.starts_with("r.toml:16:1:"), "{s}");
        assert!(s.contains("unknown field `cmake-optons`"), "{s}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn malformed_toml_points_at_the_position() {
        let e = parse("default-variant = \"a\"\n[pin\n").expect_err("malformed");
        assert!(e.to_string().starts_with("r.toml:2:"), "{e}");
    }

    #[test]
    fn semantic_errors_name_their_position() {
        let cases = [
            (
                MINI.replace("inherits = \"a\"", "inherits = \"zz\""),
                "r.toml:17:12:",
            ),
            (
                MINI.replace("toolchain = \"cpu\"", "toolchain = \"gpu\""),
                "r.toml:12:13:",
            ),
            (
                MINI.replace("default-variant = \"a\"", "default-variant = \"c\""),
                "r.toml:2:19:",
            ),
            (
                MINI.replace("X = \"1\"", "CMAKE_BUILD_TYPE = \"Debug\""),
                "r.toml:14:51:",
            ),
            (
                MINI.replace("sha256 = \"e3", "sha256 = \"zz"),
                "r.toml:7:10:",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text).expect_err(want);
            assert!(e.to_string().starts_with(want), "want {want}, got {e}");
        }
    }

    #[test]
    fn inheritance_cycles_are_refused() {
        let text = MINI.replace("[variants.a]", "[variants.a]\ninherits = \"b\"");
        let e = parse(&text).expect_err("cycle");
        assert!(e.to_string().contains("cycle"), "{e}");
    }

    #[test]
    fn git_pin_needs_tag_for_abbreviated_commit() {
        let text = MINI.replace(
            "kind = \"crate\"\ncrate = \"x\"\nversion = \"1.0.0\"\nsha256 = \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"",
            "kind = \"git\"\nurl = \"https://example.invalid/r\"\ncommit = \"612db6188\"",
        );
        let e = parse(&text).expect_err("abbrev without tag");
        assert!(e.to_string().contains("needs a `tag`"), "{e}");
    }

    // issue #7 class 7: a typed key is the same variable for the reserved-key check.
    #[test]
    fn typed_cmake_keys_are_checked_by_their_variable_name() {
        for (key, want) in [
            ("\"CMAKE_BUILD_TYPE:STRING\"", "is set by pinforge"),
            ("\"CMAKE_C_COMPILER:FILEPATH\"", "is set by pinforge"),
            ("\"CMAKE_INSTALL_PREFIX:PATH\"", "is set by pinforge"),
            ("\"X:NOTATYPE\"", "is not a CMake cache key"),
            ("\"X Y\"", "is not a CMake cache key"),
            ("\"X=Y\"", "is not a CMake cache key"),
        ] {
            let text = MINI.replace("X = \"1\"", &format!("{key} = \"Debug\""));
            let e = parse(&text).expect_err(key);
            assert!(e.to_string().starts_with("r.toml:14:"), "{key}: {e}");
            assert!(e.to_string().contains(want), "{key}: {e}");
        }
        assert_eq!(cmake_key_name("A:BOOL"), "A");
        assert_eq!(cmake_key_name("A"), "A");
    }

    // issue #7 class 7: two spellings of one variable in one table are ambiguous; across
    // layers the nearer one wins whatever its type suffix.
    #[test]
    fn one_variable_is_set_once_per_table_and_overridden_across_layers() {
        let text = MINI.replace("X = \"1\"", "X = \"1\", \"X:STRING\" = \"2\"");
        let e = parse(&text).expect_err("twice");
        assert!(
            e.to_string().contains("set the same CMake variable `X`"),
            "{e}"
        );
        let text = MINI.replace("cmake = { X = \"2\"", "cmake = { \"X:STRING\" = \"2\"");
        let r = parse(&text).expect("parse");
        let b = r.variant("b").expect("b");
        assert_eq!(b.cmake.get("X:STRING").map(String::as_str), Some("2"));
        assert!(!b.cmake.contains_key("X"), "{:?}", b.cmake);
    }

    // issue #7 class 7: names that become paths are identifiers.
    #[test]
    fn names_that_become_paths_are_identifiers() {
        for bad in ["..", ".", "", ".hidden", "a/b", "-x", "a b"] {
            assert!(!is_identifier(bad), "{bad:?}");
        }
        for good in ["patched", "Cuda12.8", "a_b-c.d", "0"] {
            assert!(is_identifier(good), "{good:?}");
        }
        let e = Recipe::parse(
            MINI,
            Path::new("/ws/recipes/...toml"),
            Some(Path::new("/ws")),
        )
        .expect_err("stem ..");
        assert!(e.to_string().starts_with("/ws/recipes/...toml:1:1:"), "{e}");
        let text = MINI.replace("[toolchain.cpu]", "[toolchain.\"../cpu\"]");
        let e = parse(&text).expect_err("toolchain");
        assert!(e.to_string().starts_with("r.toml:8:"), "{e}");
        let text = format!("name = \"..\"\n{MINI}");
        assert!(parse(&text).is_err());
        // A named recipe may live in any file name.
        let text = format!("name = \"ok\"\n{MINI}");
        let r = Recipe::parse(
            &text,
            Path::new("/ws/recipes/...toml"),
            Some(Path::new("/ws")),
        )
        .expect("named");
        assert_eq!(r.name, "ok");
    }

    #[test]
    fn values_with_nul_or_line_breaks_are_refused() {
        for v in ["\"a\\u0000b\"", "\"a\\nb\"", "\"a\\rb\""] {
            let text = MINI.replace("X = \"1\"", &format!("X = {v}"));
            let e = parse(&text).expect_err(v);
            assert!(e.to_string().contains("NUL or a line break"), "{v}: {e}");
        }
    }

    #[test]
    fn non_utf8_recipes_name_the_position() {
        let e = Recipe::parse_bytes(b"name = \"x\"\n\xff", Path::new("r.toml"), None)
            .expect_err("latin-1");
        assert!(e.to_string().starts_with("r.toml:2:1:"), "{e}");
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 10_000, .. ProptestConfig::default() })]

            // issue #7: arbitrary bytes never panic the recipe parser.
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = Recipe::parse_bytes(&bytes, Path::new("p.toml"), Some(Path::new("/ws")));
            }

            // Mutations of a valid recipe reach the semantic checks, not only the TOML parser.
            #[test]
            fn mutated_recipes_never_panic(
                at in 0usize..MINI.len(),
                cut in 0usize..16,
                insert in "[\\PC\n\"=\\[\\]{},.:]{0,12}",
            ) {
                let mut text = MINI.to_string();
                let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
                let end = (at..=(at + cut).min(text.len()))
                    .rev()
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(at);
                text.replace_range(at..end, &insert);
                let _ = Recipe::parse_bytes(text.as_bytes(), Path::new("p.toml"), Some(Path::new("/ws")));
            }
        }
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
