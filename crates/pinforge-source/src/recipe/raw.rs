//! The recipe's TOML schema as written (cargo's `cargo-util-schemas` split): every table denies
//! unknown keys, and values keep their spans so that resolution can point at `file:line:column`.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// The whole recipe file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRecipe {
    pub(super) name: Option<Spanned<String>>,
    // A recipe's description is for its readers: accepted (the schema documents it), not used.
    #[allow(
        dead_code,
        reason = "accepted for readers of the recipe; no command uses it"
    )]
    pub(super) description: Option<String>,
    pub(super) default_variant: Spanned<String>,
    pub(super) patches_dir: Option<String>,
    pub(super) pin: Spanned<RawPin>,
    #[serde(default)]
    pub(super) toolchain: BTreeMap<Spanned<String>, Spanned<RawToolchain>>,
    pub(super) base: RawVariant,
    #[serde(default)]
    pub(super) variants: BTreeMap<Spanned<String>, Spanned<RawVariant>>,
}

/// `[pin]`: the keys of every source kind, checked per kind in `resolve`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawPin {
    pub(super) kind: Spanned<String>,
    // crate
    #[serde(rename = "crate")]
    pub(super) krate: Option<String>,
    pub(super) version: Option<String>,
    // git
    pub(super) url: Option<String>,
    pub(super) tag: Option<String>,
    pub(super) commit: Option<Spanned<String>>,
    // npm
    pub(super) package: Option<String>,
    pub(super) bundle: Option<String>,
    pub(super) bundle_sha256: Option<Spanned<String>>,
    // tarball / dir / npm (a local copy of the package tarball)
    pub(super) path: Option<String>,
    // crate, tarball, npm
    pub(super) sha256: Option<Spanned<String>>,
    // dir
    pub(super) tree_sha256: Option<Spanned<String>>,
    // all
    pub(super) subdir: Option<String>,
    pub(super) build_number: Option<u64>,
    pub(super) build_commit: Option<String>,
}

/// `[toolchain.NAME]`: compilers, tool version requirements and CUDA settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawToolchain {
    pub(super) description: Option<String>,
    pub(super) cc: String,
    pub(super) cxx: String,
    pub(super) cc_version: Option<Spanned<String>>,
    pub(super) cxx_version: Option<Spanned<String>>,
    pub(super) cmake_version: Option<Spanned<String>>,
    pub(super) ninja_version: Option<Spanned<String>>,
    pub(super) ccache_version: Option<Spanned<String>>,
    pub(super) nvcc: Option<String>,
    pub(super) nvcc_version: Option<Spanned<String>>,
    pub(super) cuda_root: Option<String>,
    pub(super) cuda_architectures: Option<String>,
    pub(super) cuda_toolkit: Option<Spanned<String>>,
}

/// `[base]` and `[variants.NAME]`: a delta over the parent it inherits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawVariant {
    pub(super) inherits: Option<Spanned<String>>,
    pub(super) description: Option<String>,
    pub(super) patches: Option<Spanned<toml::Value>>,
    pub(super) toolchain: Option<Spanned<String>>,
    pub(super) build_type: Option<Spanned<String>>,
    pub(super) targets: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub(super) cmake: BTreeMap<String, Spanned<toml::Value>>,
}
