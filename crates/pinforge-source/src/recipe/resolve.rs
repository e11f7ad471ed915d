//! From the raw schema to the resolved model: the pin, toolchains, and variants (a base plus
//! deltas along an inheritance chain), each checked with its span.

use super::cmake::{check_cmake_table, cmake_key_name, cmake_value};
use super::raw::{RawPin, RawRecipe, RawToolchain, RawVariant};
use super::{At, PatchSelection, Pin, PinSource, Toolchain, Variant, VariantName};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::names::is_identifier;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The recipe's name: `name = "..."`, or else the file stem; either way a plain identifier
/// (it names the folder build/NAME).
pub(super) fn recipe_name(raw: &RawRecipe, path: &Path, at: &At) -> Result<String> {
    match &raw.name {
        Some(n) => {
            VariantName::new(n.get_ref()).map_err(|m| {
                Error::input(
                    at(Some(n.span())),
                    m.to_string().replace("variant", "recipe"),
                )
            })?;
            Ok(n.get_ref().clone())
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
            Ok(stem)
        }
    }
}

/// Every `[toolchain.NAME]` table, resolved, by name.
pub(super) fn resolve_toolchains(
    raw: &RawRecipe,
    base_dir: Option<&Path>,
    at: &At,
) -> Result<BTreeMap<String, Toolchain>> {
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
            resolve_toolchain(tname.get_ref(), tc, base_dir, at)?,
        );
    }
    Ok(toolchains)
}

/// `[base]` and every `[variants.NAME]` checked, then each variant resolved along its chain.
pub(super) fn resolve_variants(
    raw: &RawRecipe,
    toolchains: &BTreeMap<String, Toolchain>,
    at: &At,
) -> Result<BTreeMap<VariantName, Variant>> {
    check_variant(&raw.base, "base", toolchains, at)?;
    let mut raw_variants: BTreeMap<String, (&RawVariant, Range<usize>)> = BTreeMap::new();
    for (vname, v) in &raw.variants {
        VariantName::new(vname.get_ref()).map_err(|m| Error::input(at(Some(vname.span())), m))?;
        if vname.get_ref() == "base" {
            return Err(Error::input(
                at(Some(vname.span())),
                "`base` is the name of the base table, not a variant",
            ));
        }
        check_variant(v.get_ref(), vname.get_ref(), toolchains, at)?;
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
        let v = resolve_variant(vname, &raw.base, &raw_variants, toolchains, at)?;
        variants.insert(v.name.clone(), v);
    }
    Ok(variants)
}

fn parse_sha(s: &Spanned<String>, at: &At) -> Result<Sha256> {
    s.get_ref()
        .parse()
        .map_err(|e: pinforge_base::digest::ParseDigestError| Error::input(at(Some(s.span())), e))
}

/// Checks one `[pin]` table: its span for errors, and the folder relative paths start from.
struct PinCheck<'a, 'b> {
    p: &'a RawPin,
    span: Range<usize>,
    base_dir: Option<&'a Path>,
    at: &'a At<'b>,
}

impl PinCheck<'_, '_> {
    /// An error at the whole `[pin]` table.
    fn error(&self, message: impl Into<String>) -> Error {
        Error::input((self.at)(Some(self.span.clone())), message.into())
    }

    fn need(&self, v: &Option<String>, key: &str, kind: &str) -> Result<String> {
        v.clone()
            .ok_or_else(|| self.error(format!("a `{kind}` pin needs `{key}`")))
    }

    fn forbid(&self, present: bool, key: &str, kind: &str) -> Result<()> {
        if present {
            Err(self.error(format!("`{key}` does not apply to a `{kind}` pin")))
        } else {
            Ok(())
        }
    }

    /// A path as written, relative to the recipe's folder.
    fn rel(&self, s: String) -> PathBuf {
        let p = PathBuf::from(&s);
        match self.base_dir {
            Some(b) if p.is_relative() => b.join(p),
            _ => p,
        }
    }

    fn krate(&self) -> Result<PinSource> {
        let (p, kind) = (self.p, "crate");
        self.forbid(
            p.url.is_some() || p.tag.is_some() || p.commit.is_some(),
            "url/tag/commit",
            kind,
        )?;
        self.forbid(
            p.path.is_some() || p.tree_sha256.is_some(),
            "path/tree-sha256",
            kind,
        )?;
        let sha = p.sha256.as_ref().ok_or_else(|| {
            self.error("a `crate` pin needs `sha256` (of the .crate file)")
                .with_hint("the registry index lists it as `cksum`; pinforge refuses to build unverified sources")
        })?;
        Ok(PinSource::Crate {
            name: self.need(&p.krate, "crate", kind)?,
            version: self.need(&p.version, "version", kind)?,
            sha256: parse_sha(sha, self.at)?,
        })
    }

    fn git(&self) -> Result<PinSource> {
        let (p, kind, at) = (self.p, "git", self.at);
        self.forbid(
            p.krate.is_some() || p.version.is_some(),
            "crate/version",
            kind,
        )?;
        self.forbid(
            p.path.is_some() || p.sha256.is_some() || p.tree_sha256.is_some(),
            "path/sha256",
            kind,
        )?;
        let commit = p.commit.as_ref().ok_or_else(|| {
            self.error("a `git` pin needs `commit`")
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
        Ok(PinSource::Git {
            url: self.need(&p.url, "url", kind)?,
            tag: p.tag.clone(),
            commit: c.to_ascii_lowercase(),
        })
    }

    fn tarball(&self) -> Result<PinSource> {
        let (p, kind) = (self.p, "tarball");
        self.forbid(
            p.krate.is_some() || p.url.is_some() || p.commit.is_some(),
            "crate/url/commit",
            kind,
        )?;
        let sha = p
            .sha256
            .as_ref()
            .ok_or_else(|| self.error("a `tarball` pin needs `sha256`"))?;
        Ok(PinSource::Tarball {
            path: self.rel(self.need(&p.path, "path", kind)?),
            sha256: parse_sha(sha, self.at)?,
        })
    }

    fn npm(&self) -> Result<PinSource> {
        let (p, kind) = (self.p, "npm");
        self.forbid(
            p.krate.is_some() || p.url.is_some() || p.tag.is_some() || p.commit.is_some(),
            "crate/url/tag/commit",
            kind,
        )?;
        self.forbid(p.tree_sha256.is_some(), "tree-sha256", kind)?;
        let sha = p.sha256.as_ref().ok_or_else(|| {
            self.error("an `npm` pin needs `sha256` (of the tarball `npm pack` writes)")
                .with_hint(
                    "`sha256sum` of the tarball; pinforge refuses to build unverified sources",
                )
        })?;
        let bundle_sha = p.bundle_sha256.as_ref().ok_or_else(|| {
            self.error("an `npm` pin needs `bundle-sha256` (of the git bundle inside the tarball)")
        })?;
        let bundle = self.need(&p.bundle, "bundle", kind)?;
        // The member is matched against the archive's own (checked) entry names.
        let plain = !bundle.is_empty()
            && Path::new(&bundle)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            return Err(self.error(format!(
                "bundle `{bundle}` must be a relative path inside the tarball (no `..`, not absolute)"
            )));
        }
        Ok(PinSource::Npm {
            package: self.need(&p.package, "package", kind)?,
            version: self.need(&p.version, "version", kind)?,
            sha256: parse_sha(sha, self.at)?,
            path: p.path.clone().map(|s| self.rel(s)),
            bundle,
            bundle_sha256: parse_sha(bundle_sha, self.at)?,
        })
    }

    /// The keys only an `npm` pin has, refused on every other kind.
    fn no_npm_keys(&self, kind: &str) -> Result<()> {
        let p = self.p;
        self.forbid(
            p.package.is_some() || p.bundle.is_some() || p.bundle_sha256.is_some(),
            "package/bundle/bundle-sha256",
            kind,
        )
    }

    fn dir(&self) -> Result<PinSource> {
        let (p, kind) = (self.p, "dir");
        self.forbid(
            p.krate.is_some() || p.url.is_some() || p.sha256.is_some(),
            "crate/url/sha256",
            kind,
        )?;
        let sha = p.tree_sha256.as_ref().ok_or_else(|| {
            self.error("a `dir` pin needs `tree-sha256`")
                .with_hint("`pinforge vendor digest DIR` prints it")
        })?;
        Ok(PinSource::Dir {
            path: self.rel(self.need(&p.path, "path", kind)?),
            tree_sha256: parse_sha(sha, self.at)?,
        })
    }
}

/// The `[pin]` table: one source kind with exactly its keys, and a subdir inside the source.
pub(super) fn resolve_pin(raw: &Spanned<RawPin>, base_dir: Option<&Path>, at: &At) -> Result<Pin> {
    let p = raw.get_ref();
    let check = PinCheck {
        p,
        span: raw.span(),
        base_dir,
        at,
    };
    let kind = p.kind.get_ref().as_str();
    if kind != "npm" {
        check.no_npm_keys(kind)?;
    }
    let source = match kind {
        "crate" => check.krate()?,
        "git" => check.git()?,
        "tarball" => check.tarball()?,
        "dir" => check.dir()?,
        "npm" => check.npm()?,
        other => {
            return Err(Error::input(
                at(Some(p.kind.span())),
                format!("unknown pin kind `{other}`; expected crate, git, tarball, dir or npm"),
            ))
        }
    };
    if let Some(sub) = &p.subdir {
        let ok = !sub.is_empty()
            && Path::new(sub)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !ok {
            return Err(check.error(format!(
                "subdir `{sub}` must be a relative path inside the source"
            )));
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
            if !pinforge_base::names::is_plain_name(n) {
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
    check_cmake_table(&v.cmake, name, at)?;
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
