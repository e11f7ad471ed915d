//! Flips: two variants of one recipe that differ in exactly one axis (pin, patches, toolchain,
//! build type, sanitizer, other CMake arguments, targets), built and smoked side by side as a
//! falsification step. The hypothesis "this axis is the defect" is written to the record before
//! anything is built; the verdict is recorded in both directions (`supported` when the crash
//! signature disappears, `falsified` when it survives), and a trial that could not run is
//! `invalid`, never evidence either way. Also the pieces `ablate` shares: resolved
//! configurations, signature normalization, and claiming a record folder.
//!
//! Record ids are deterministic: `RECIPE--FROM--TO-NNNN` under `flips/`, where `NNNN` is the
//! first counter (from 0001) whose folder does not exist yet. The folder is claimed with one
//! `mkdir`, so two concurrent flips never share a record, and a rerun of the same flip gets
//! the next number instead of overwriting the earlier evidence.

use crate::artifact::build::{self, BuildOptions};
use crate::artifact::manifest;
use crate::artifact::toolchain::{self, ResolvedToolchain};
use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::base::workspace::Workspace;
use crate::deploy::smoke::{self, SmokeOptions, Verdict as SmokeVerdict};
use crate::source::recipe::{cmake_key_name, PatchSelection, Pin, Recipe, Variant};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The schema id of a flip record and of `flip --json`.
pub const SCHEMA: &str = "pinforge.flip/v1";

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
    pub fn name(self) -> &'static str {
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

/// Whether a CMake setting turns a sanitizer on: a sanitizer switch, or a compiler or linker
/// flags variable that carries `-fsanitize=` (the way a CUDA variant must, see
/// recipes/mrope-cuda.toml: nvcc refuses the switches' flags).
pub fn is_sanitizer_setting(key: &str, value: &str) -> bool {
    let name = crate::source::recipe::cmake_key_name(key);
    is_sanitizer_key(key)
        || (name.starts_with("CMAKE_") && name.ends_with("_FLAGS") && value.contains("-fsanitize="))
}

/// Whether a CMake cache key is a sanitizer switch: those form their own axis, because
/// turning a sanitizer on is a different experiment from changing a feature option.
pub fn is_sanitizer_key(key: &str) -> bool {
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
    pub tools: BTreeMap<String, ToolConfig>,
    /// CUDA toolkit root, for CUDA toolchains.
    pub cuda_root: Option<String>,
    /// CUDA architectures, for CUDA toolchains.
    pub cuda_architectures: Option<String>,
}

impl ToolchainConfig {
    /// From a recipe toolchain and its resolution.
    pub fn new(
        tc: &crate::source::recipe::Toolchain,
        resolved: &ResolvedToolchain,
    ) -> ToolchainConfig {
        let program = |role: &str| -> String {
            match role {
                "cc" => tc.cc.clone(),
                "cxx" => tc.cxx.clone(),
                "nvcc" => tc.nvcc.clone().unwrap_or_else(|| "nvcc".into()),
                other => other.to_string(),
            }
        };
        ToolchainConfig {
            name: resolved.name.clone(),
            tools: resolved
                .tools
                .iter()
                .map(|(role, t)| {
                    (
                        role.clone(),
                        ToolConfig {
                            program: program(role),
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
pub fn resolve_patches(recipe: &Recipe, variant: &Variant) -> Result<Vec<PatchRef>> {
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
pub fn resolve(ws: &Workspace, recipe: &Recipe, variant: &Variant) -> Result<Config> {
    let tools = toolchain::resolve(&variant.toolchain, &ws.tool_dirs())?;
    let patches = resolve_patches(recipe, variant)?;
    Ok(config_of(recipe, variant, patches, &tools))
}

/// A configuration from parts already resolved.
pub fn config_of(
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
pub fn axis_rows(a: &Config, b: &Config) -> Vec<AxisRow> {
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
    let (ta, tb) = (&a.toolchain, &b.toolchain);
    if ta != tb {
        if ta.name != tb.name {
            out.push(row(
                Axis::Toolchain,
                "name",
                ta.name.clone(),
                tb.name.clone(),
            ));
        }
        let roles: BTreeSet<&String> = ta.tools.keys().chain(tb.tools.keys()).collect();
        for role in roles {
            let (x, y) = (ta.tools.get(role), tb.tools.get(role));
            if x != y {
                out.push(AxisRow {
                    axis: Axis::Toolchain,
                    key: role.clone(),
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
    if a.build_type != b.build_type {
        out.push(row(
            Axis::BuildType,
            "CMAKE_BUILD_TYPE",
            a.build_type.clone(),
            b.build_type.clone(),
        ));
    }
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
    map_rows(
        Axis::Sanitizer,
        &split(&va, true),
        &split(&vb, true),
        &mut out,
    );
    map_rows(
        Axis::Cmake,
        &split(&va, false),
        &split(&vb, false),
        &mut out,
    );
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

/// The distinct axes of a diff, in order.
pub fn axes_of(rows: &[AxisRow]) -> Vec<Axis> {
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

/// The comparable part of a crash signature: its first line (the ASan kind and the top frame's
/// function, or the signal), without the allocation site and with any hex address blanked, so
/// that two runs of the same defect compare equal whatever their addresses.
pub fn normalize_signature(sig: &str) -> String {
    let first = sig.lines().next().unwrap_or("").trim();
    let first = first.split(" (allocated in").next().unwrap_or(first).trim();
    let mut out = String::with_capacity(first.len());
    let mut chars = first.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && chars.peek() == Some(&'x') {
            chars.next();
            while chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                chars.next();
            }
            out.push_str("0x?");
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a signature carries a stack frame to compare (a sanitizer kind and the top frame's
/// function). A signal, a hang or an exit without a result names no frame: two unrelated
/// failures of that kind read the same, so they can neither falsify a hypothesis nor show that
/// "the" failure disappeared.
pub fn has_frame(sig: &str) -> bool {
    let first = normalize_signature(sig);
    if ["killed by signal", "hang:", "exited with"]
        .iter()
        .any(|p| first.starts_with(p))
    {
        return false;
    }
    match first.rsplit_once(" in ") {
        Some((kind, func)) => !kind.trim().is_empty() && !matches!(func.trim(), "" | "?"),
        None => false,
    }
}

/// A flip's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FlipVerdict {
    /// The signature disappeared: the hypothesis that this axis is the defect is supported.
    Supported,
    /// The same signature on both sides: the hypothesis is falsified.
    Falsified,
    /// The comparison could not be made; not evidence either way.
    Invalid,
}

impl FlipVerdict {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            FlipVerdict::Supported => "supported",
            FlipVerdict::Falsified => "falsified",
            FlipVerdict::Invalid => "invalid",
        }
    }
}

/// What one side of a trial gave, as far as the verdict rule needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SideResult {
    /// The build (or the step before the smoke) failed, with the reason.
    BuildFailed(String),
    /// Not run, with the reason (the other side failed first).
    NotRun(String),
    /// Smoked: the verdict, the signature and the smoke's own detail.
    Smoked {
        /// ok | mismatch | crash | error.
        verdict: SmokeVerdict,
        /// The crash signature, if any.
        signature: Option<String>,
        /// The smoke's detail (why an error, where a mismatch).
        detail: Option<String>,
    },
}

fn smoke_word(v: &SmokeVerdict) -> &'static str {
    match v {
        SmokeVerdict::Ok => "ok",
        SmokeVerdict::Mismatch => "mismatch",
        SmokeVerdict::Crash => "crash",
        SmokeVerdict::Error => "error",
    }
}

/// The verdict rule. The `from` side must show a crash signature (there is nothing to test
/// otherwise); the `to` side showing the same normalized signature falsifies the hypothesis,
/// a clean (`ok`) `to` side supports it, and anything else — a failed build, a smoke that could
/// not run, a different crash, a diverged decode — makes the trial invalid, with the reason.
pub fn decide(from: &SideResult, to: &SideResult) -> (FlipVerdict, String) {
    let invalid = |why: String| (FlipVerdict::Invalid, why);
    // A failed build is the reason, whichever side: the other side then was not smoked.
    for (name, side) in [("from", from), ("to", to)] {
        if let SideResult::BuildFailed(e) = side {
            return invalid(format!("the {name} side did not build: {e}"));
        }
    }
    let from_sig = match from {
        SideResult::BuildFailed(e) => return invalid(format!("the from side did not build: {e}")),
        SideResult::NotRun(e) => return invalid(format!("the from side did not run: {e}")),
        SideResult::Smoked {
            verdict: SmokeVerdict::Error,
            detail,
            ..
        } => {
            return invalid(format!(
                "the from side's smoke could not run: {}",
                detail.as_deref().unwrap_or("(no detail)")
            ))
        }
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(s),
            ..
        } => s,
        SideResult::Smoked { verdict, .. } => {
            return invalid(format!(
                "the from side shows no crash signature to test (smoke {})",
                smoke_word(verdict)
            ))
        }
    };
    let want = normalize_signature(from_sig);
    if !has_frame(from_sig) {
        return invalid(format!(
            "the from side's signature `{want}` has no frame to compare (no sanitizer kind and \
             top function): another failure would read the same"
        ));
    }
    match to {
        SideResult::BuildFailed(e) => invalid(format!("the to side did not build: {e}")),
        SideResult::NotRun(e) => invalid(format!("the to side did not run: {e}")),
        SideResult::Smoked {
            verdict: SmokeVerdict::Ok,
            ..
        } => (
            FlipVerdict::Supported,
            format!("the signature `{want}` disappeared on the to side (smoke ok)"),
        ),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature,
            ..
        } if !signature.as_deref().is_some_and(has_frame) => invalid(format!(
            "the to side crashed with a signature that has no frame to compare (`{}`): it \
             cannot be told apart from `{want}` or from another failure",
            signature
                .as_deref()
                .map(normalize_signature)
                .unwrap_or_else(|| "none".into())
        )),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(s),
            ..
        } if normalize_signature(s) == want => (
            FlipVerdict::Falsified,
            format!("the signature `{want}` survived the flip"),
        ),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature,
            ..
        } => invalid(format!(
            "the to side crashed with another signature (`{}`, the from side `{want}`): the flip \
             changed the failure instead of keeping or removing it",
            signature
                .as_deref()
                .map(normalize_signature)
                .unwrap_or_else(|| "none".into())
        )),
        SideResult::Smoked {
            verdict: SmokeVerdict::Error,
            detail,
            ..
        } => invalid(format!(
            "the to side's smoke could not run: {}",
            detail.as_deref().unwrap_or("(no detail)")
        )),
        SideResult::Smoked {
            verdict: SmokeVerdict::Mismatch,
            detail,
            ..
        } => invalid(format!(
            "the to side's decode diverged after the restore (mismatch{}): the signature is gone \
             but the result is not clean",
            detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )),
    }
}

/// A value for each side.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Pair<T> {
    /// The `from` side.
    pub from: T,
    /// The `to` side.
    pub to: T,
}

/// One side's build, as recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BuildSide {
    /// Variant built.
    pub variant: String,
    /// Manifest path.
    pub manifest: Option<PathBuf>,
    /// SHA-256 of the manifest file as it was read for this record.
    pub manifest_sha256: Option<Sha256>,
    /// Input digest of the build.
    pub input_digest: Option<Sha256>,
    /// Whether the build was reused unchanged.
    pub cached: bool,
    /// Wall time of the build in seconds.
    pub seconds: f64,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// One side's smoke, as recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeSide {
    /// ok | mismatch | crash | error.
    pub verdict: String,
    /// The full signature.
    pub signature: Option<String>,
    /// The compared part of it.
    pub normalized_signature: Option<String>,
    /// The smoke's detail.
    pub detail: Option<String>,
    /// Wall time of the smoke in seconds.
    pub seconds: f64,
    /// Where the decode ran (`cpu`, `cuda:N (name)`), None where no smoke report came back.
    #[serde(default)]
    pub device: Option<String>,
    /// Why a CUDA build ran on the CPU: its CUDA kernels were then not exercised.
    #[serde(default)]
    pub device_reason: Option<String>,
}

/// One artifact on both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ArtifactRow {
    /// Path relative to the artifact root.
    pub path: String,
    /// SHA-256 on the from side (None: not there).
    pub from_sha256: Option<String>,
    /// SHA-256 on the to side.
    pub to_sha256: Option<String>,
    /// Present on both sides with the same digest.
    pub same: bool,
    /// Either manifest marks the file as embedding this machine's build paths: a difference
    /// may then be only the two trees' paths, not the code.
    pub embeds_machine_path: bool,
    /// The bytes differ, but only where this normalization rule (stated in both manifests,
    /// see [`crate::artifact::normalize`]) masks them: nvcc's pid noise, not a difference in the code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equal_under: Option<String>,
}

impl ArtifactRow {
    /// The row's word: same, equal under a rule, or different (and why it may be).
    pub fn word(&self) -> String {
        match (self.same, &self.equal_under, self.embeds_machine_path) {
            (true, _, _) => "same".into(),
            (false, Some(rule), _) => format!("equal under {rule}"),
            (false, None, false) => "different".into(),
            (false, None, true) => "different (embeds build paths)".into(),
        }
    }

    /// Whether the row is a real difference (not the same, not equal under a stated rule).
    pub fn differs(&self) -> bool {
        !self.same && self.equal_under.is_none()
    }
}

/// The smoke settings both sides ran with.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeSettings {
    /// Model file, or None for the generated tiny model of `arch`.
    pub model: Option<PathBuf>,
    /// Tiny model architecture.
    pub arch: String,
    /// Tokens generated.
    pub tokens: usize,
}

/// A flip record: written when the trial is registered (state `registered`, no results), and
/// completed in place (state `complete`) when both sides have run.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FlipRecord {
    /// [`SCHEMA`].
    pub schema: String,
    /// The record id (its folder name under `flips/`).
    pub id: String,
    /// `registered` or `complete`.
    pub state: String,
    /// Recipe name.
    pub recipe: String,
    /// SHA-256 of the recipe bytes.
    pub recipe_sha256: Sha256,
    /// The from variant.
    pub from: String,
    /// The to variant.
    pub to: String,
    /// The hypothesis, as registered.
    pub hypothesis: String,
    /// The prediction, as registered.
    pub prediction: Option<String>,
    /// The axis that differs (`+`-joined when several do).
    pub axis: String,
    /// Every axis that differs.
    pub axes: Vec<Axis>,
    /// The axis values on each side (`key=value; ...` per side).
    pub values: Pair<String>,
    /// False when `--allow-multi` let more than one axis differ: not a single-setting trial.
    pub single_setting: bool,
    /// The mechanical diff.
    pub diff: Vec<AxisRow>,
    /// Both resolved configurations.
    pub configurations: Pair<Config>,
    /// The smoke settings, the same for both sides.
    pub smoke_settings: SmokeSettings,
    /// pinforge's version.
    pub pinforge_version: String,
    /// When the trial was registered (before anything was built).
    pub registered_at: String,
    /// When the record was completed.
    pub completed_at: Option<String>,
    /// Both builds.
    pub builds: Pair<Option<BuildSide>>,
    /// Every artifact on either side.
    pub artifacts: Vec<ArtifactRow>,
    /// The smoke verdict words (`ok`, `crash`, ...), None where no smoke ran.
    pub smoke: Pair<Option<String>>,
    /// Both smokes in full.
    pub smokes: Pair<Option<SmokeSide>>,
    /// supported | falsified | invalid (None while registered).
    pub verdict: Option<FlipVerdict>,
    /// Why that verdict.
    pub reason: Option<String>,
    /// Where this record is.
    pub record: PathBuf,
    /// Where its readable summary is.
    pub summary: PathBuf,
}

/// What to flip.
pub struct FlipRequest<'a> {
    /// The recipe.
    pub recipe: &'a Recipe,
    /// From variant.
    pub from: &'a str,
    /// To variant.
    pub to: &'a str,
    /// The hypothesis under test.
    pub hypothesis: &'a str,
    /// What the hypothesis predicts.
    pub prediction: Option<&'a str>,
    /// Proceed when more than one axis differs.
    pub allow_multi: bool,
}

/// A flip resolved and checked, ready to register.
pub struct FlipPlan<'a> {
    recipe: &'a Recipe,
    from: &'a Variant,
    to: &'a Variant,
    /// Both configurations.
    pub configs: Pair<Config>,
    /// The mechanical diff.
    pub rows: Vec<AxisRow>,
    /// The axes that differ.
    pub axes: Vec<Axis>,
    hypothesis: String,
    prediction: Option<String>,
}

/// Free text that goes into a record and a Markdown summary: not empty, not huge, no control
/// characters but line breaks and tabs (an escape sequence in a hypothesis would repaint the
/// terminal of whoever reads the summary).
fn check_text(what: &str, s: &str) -> Result<String> {
    if s.trim().is_empty() {
        return Err(Error::input(what, "is empty").with_hint(
            "state what the flip tests, e.g. --hypothesis \"the CUDA backend is the defect\"",
        ));
    }
    if s.len() > 4096 {
        return Err(Error::input(
            what,
            format!("is {} bytes; at most 4096", s.len()),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
    {
        return Err(Error::input(
            what,
            format!("holds the control character U+{:04X}", c as u32),
        ));
    }
    Ok(s.to_string())
}

/// Resolve both variants, diff them, and refuse unless exactly one axis differs (or
/// `allow_multi`). Nothing is written.
pub fn plan<'a>(ws: &Workspace, req: &FlipRequest<'a>) -> Result<FlipPlan<'a>> {
    let hypothesis = check_text("--hypothesis", req.hypothesis)?;
    let prediction = req
        .prediction
        .map(|p| check_text("--prediction", p))
        .transpose()?;
    let from = req.recipe.variant(req.from)?;
    let to = req.recipe.variant(req.to)?;
    let configs = Pair {
        from: resolve(ws, req.recipe, from)?,
        to: resolve(ws, req.recipe, to)?,
    };
    let rows = axis_rows(&configs.from, &configs.to);
    let axes = axes_of(&rows);
    let subject = format!("flip {} -> {}", req.from, req.to);
    if axes.is_empty() {
        return Err(Error::input(
            subject,
            "the two variants resolve to the same configuration: no axis differs, so there is nothing to test",
        )
        .with_hint("pick two variants that differ in exactly one setting"));
    }
    if axes.len() > 1 && !req.allow_multi {
        let names: Vec<&str> = axes.iter().map(|a| a.name()).collect();
        return Err(Error::input(
            subject,
            format!(
                "the variants differ in {} axes ({}); a flip changes exactly one setting",
                axes.len(),
                names.join(", ")
            ),
        )
        .with_detail(render_rows(&rows))
        .with_hint(
            "pick variants that differ in one axis, or pass --allow-multi to run it anyway \
             (the record is then marked \"single_setting\": false)",
        ));
    }
    Ok(FlipPlan {
        recipe: req.recipe,
        from,
        to,
        configs,
        rows,
        axes,
        hypothesis,
        prediction,
    })
}

/// Claim a fresh record folder `ROOT/KIND/STEM-NNNN` with one `mkdir` (the first free
/// counter). `KIND` must be a real folder, never a link: a record written through a link
/// would land wherever it points.
pub fn claim_record_dir(root: &Path, kind: &str, stem: &str) -> Result<(String, PathBuf)> {
    let base = root.join(kind);
    match std::fs::symlink_metadata(&base) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::input(
                base.display(),
                "is not a folder (a link or a file stands where pinforge keeps its records)",
            )
            .with_hint(format!("move {} away", base.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(&base).at("create directory", &base)?
        }
        Err(e) => return Err(Error::io("inspect", &base, e)),
    }
    for n in 1..=9999u32 {
        let id = format!("{stem}-{n:04}");
        let dir = base.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("create directory", &dir, e)),
        }
    }
    Err(Error::input(
        base.display(),
        format!("9999 records named {stem}-NNNN already exist"),
    )
    .with_hint("archive old records"))
}

/// Write a record as canonical JSON (sorted keys), atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let v = serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))?;
    let mut s = serde_json::to_string_pretty(&v).map_err(|e| Error::Internal(e.to_string()))?;
    s.push('\n');
    fsx::write_atomic(path, s.as_bytes())
}

/// An error as one line for a record: message, then the hint.
pub fn error_text(e: &Error) -> String {
    match e.hint() {
        Some(h) => format!("{e} (hint: {h})"),
        None => e.to_string(),
    }
}

fn values_of(rows: &[AxisRow]) -> Pair<String> {
    let side = |f: &dyn Fn(&AxisRow) -> &Option<String>| -> String {
        rows.iter()
            .map(|r| {
                format!(
                    "{}={}",
                    r.key,
                    f(r).clone().unwrap_or_else(|| "(not set)".into())
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Pair {
        from: side(&|r| &r.from),
        to: side(&|r| &r.to),
    }
}

impl FlipPlan<'_> {
    /// Register the trial: claim its folder and write the pre-registration record (hypothesis,
    /// prediction, axis, both configurations, version, time) before anything is built.
    pub fn register(&self, ws: &Workspace, smoke: &SmokeOptions) -> Result<FlipRecord> {
        let stem = format!(
            "{}--{}--{}",
            self.recipe.name, self.configs.from.variant, self.configs.to.variant
        );
        let (id, dir) = claim_record_dir(ws.root(), "flips", &stem)?;
        let record = FlipRecord {
            schema: SCHEMA.into(),
            id,
            state: "registered".into(),
            recipe: self.recipe.name.clone(),
            recipe_sha256: self.recipe.sha256,
            from: self.configs.from.variant.clone(),
            to: self.configs.to.variant.clone(),
            hypothesis: self.hypothesis.clone(),
            prediction: self.prediction.clone(),
            axis: self
                .axes
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join("+"),
            axes: self.axes.clone(),
            values: values_of(&self.rows),
            single_setting: self.axes.len() == 1,
            diff: self.rows.clone(),
            configurations: self.configs.clone(),
            smoke_settings: SmokeSettings {
                model: smoke.model.clone(),
                arch: smoke.arch.name().to_string(),
                tokens: smoke.tokens,
            },
            pinforge_version: env!("CARGO_PKG_VERSION").into(),
            registered_at: manifest::now_rfc3339(),
            completed_at: None,
            builds: Pair {
                from: None,
                to: None,
            },
            artifacts: Vec::new(),
            smoke: Pair {
                from: None,
                to: None,
            },
            smokes: Pair {
                from: None,
                to: None,
            },
            verdict: None,
            reason: None,
            record: dir.join("record.json"),
            summary: dir.join("summary.md"),
        };
        write_json(&record.record, &record)?;
        crate::base::hooks::crash_named("flip:registered");
        Ok(record)
    }

    /// Build both sides, smoke both with the same settings, and complete the record (JSON and
    /// summary). Build and smoke failures become an `invalid` verdict with the reason; only a
    /// failure to write the record itself is an error.
    pub fn run(
        &self,
        ws: &Workspace,
        mut record: FlipRecord,
        smoke_opts: &SmokeOptions,
        build_opts: &BuildOptions,
    ) -> Result<FlipRecord> {
        let mut results: Vec<SideResult> = Vec::new();
        let mut builds: Vec<Option<BuildSide>> = Vec::new();
        let mut manifests: Vec<Option<manifest::Statement>> = Vec::new();
        let mut outcomes = Vec::new();
        for (side, v) in [("from", self.from), ("to", self.to)] {
            if let Some(SideResult::BuildFailed(_)) = results.first() {
                results.push(SideResult::NotRun("the from side did not build".into()));
                builds.push(None);
                manifests.push(None);
                outcomes.push(None);
                continue;
            }
            build_opts
                .reporter
                .stage("flip", &format!("{side} side: {}", v.name));
            let started = Instant::now();
            let built = build::build(ws, self.recipe, v, build_opts).and_then(|o| {
                let (digest, _) = Sha256::of_file(&o.manifest)?;
                let stmt = manifest::Statement::read(&o.manifest)?;
                Ok((o, digest, stmt))
            });
            match built {
                Ok((o, digest, stmt)) => {
                    builds.push(Some(BuildSide {
                        variant: v.name.to_string(),
                        manifest: Some(o.manifest.clone()),
                        manifest_sha256: Some(digest),
                        input_digest: Some(o.input_digest),
                        cached: o.cached,
                        seconds: o.seconds,
                        error: None,
                    }));
                    manifests.push(Some(stmt));
                    results.push(SideResult::NotRun("not smoked yet".into()));
                    outcomes.push(Some(o));
                }
                Err(e) => {
                    let why = error_text(&e);
                    builds.push(Some(BuildSide {
                        variant: v.name.to_string(),
                        manifest: None,
                        manifest_sha256: None,
                        input_digest: None,
                        cached: false,
                        seconds: started.elapsed().as_secs_f64(),
                        error: Some(match e.detail() {
                            Some(d) => format!("{why}\n{d}"),
                            None => why.clone(),
                        }),
                    }));
                    manifests.push(None);
                    results.push(SideResult::BuildFailed(why));
                    outcomes.push(None);
                }
            }
        }
        // Both built: the same model and settings for both smokes.
        let mut smokes: Vec<Option<SmokeSide>> = vec![None, None];
        if outcomes.iter().all(Option::is_some) {
            for (i, o) in outcomes.iter().flatten().enumerate() {
                build_opts.reporter.stage("smoke", &o.variant);
                let (result, side) = smoke_one(&o.manifest, smoke_opts);
                results[i] = result;
                smokes[i] = Some(side);
            }
        }
        if let (Some(a), Some(b)) = (&manifests[0], &manifests[1]) {
            record.artifacts = crate::artifact::diff::diff(a, b)
                .artifacts
                .into_iter()
                .map(|r| ArtifactRow {
                    embeds_machine_path: build_paths_explain(a, b, &r.name),
                    same: r.change == crate::artifact::diff::Change::Same,
                    equal_under: r.rule,
                    path: r.name,
                    from_sha256: r.a,
                    to_sha256: r.b,
                })
                .collect();
        }
        let (verdict, mut reason) = decide(&results[0], &results[1]);
        // A CUDA build smoked on the CPU never ran its CUDA kernels: the verdict stands for
        // the host code only, and the record says so.
        let cpu_only: Vec<String> = smokes
            .iter()
            .zip(["from", "to"])
            .filter_map(|(s, side)| {
                let why = s.as_ref()?.device_reason.as_deref()?;
                Some(format!("{side}: {why}"))
            })
            .collect();
        if !cpu_only.is_empty() {
            reason.push_str(&format!(
                " (the CUDA kernels were not exercised: {})",
                cpu_only.join("; ")
            ));
        }
        let mut smokes = smokes.into_iter();
        let mut builds = builds.into_iter();
        record.smokes = Pair {
            from: smokes.next().flatten(),
            to: smokes.next().flatten(),
        };
        record.smoke = Pair {
            from: record.smokes.from.as_ref().map(|s| s.verdict.clone()),
            to: record.smokes.to.as_ref().map(|s| s.verdict.clone()),
        };
        record.builds = Pair {
            from: builds.next().flatten(),
            to: builds.next().flatten(),
        };
        record.verdict = Some(verdict);
        record.reason = Some(reason);
        record.state = "complete".into();
        record.completed_at = Some(manifest::now_rfc3339());
        fsx::write_atomic(&record.summary, summary_markdown(&record).as_bytes())?;
        write_json(&record.record, &record)?;
        Ok(record)
    }
}

/// Smoke one manifest; a smoke that cannot even start is a smoke `error` with the reason.
pub fn smoke_one(manifest: &Path, opts: &SmokeOptions) -> (SideResult, SmokeSide) {
    let started = Instant::now();
    let report = smoke::target_from_manifest(manifest).and_then(|t| smoke::run(&t, opts));
    let seconds = started.elapsed().as_secs_f64();
    match report {
        Ok(r) => (
            SideResult::Smoked {
                verdict: r.verdict.clone(),
                signature: r.signature.clone(),
                detail: r.detail.clone(),
            },
            SmokeSide {
                verdict: smoke_word(&r.verdict).into(),
                normalized_signature: r.signature.as_deref().map(normalize_signature),
                signature: r.signature,
                detail: r.detail,
                seconds,
                device: Some(r.device),
                device_reason: r.device_reason,
            },
        ),
        Err(e) => {
            let why = error_text(&e);
            (
                SideResult::Smoked {
                    verdict: SmokeVerdict::Error,
                    signature: None,
                    detail: Some(why.clone()),
                },
                SmokeSide {
                    verdict: "error".into(),
                    signature: None,
                    normalized_signature: None,
                    detail: Some(why),
                    seconds,
                    device: None,
                    device_reason: None,
                },
            )
        }
    }
}

/// Text for a Markdown table cell: no line breaks, no pipes.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The readable summary of a completed record.
pub fn summary_markdown(r: &FlipRecord) -> String {
    let mut s = String::new();
    let opt = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
    s.push_str(&format!("# Flip {}\n\n", r.id));
    s.push_str(&format!(
        "Recipe `{}`, `{}` → `{}`; pinforge {}; registered {}, completed {}.\n\n",
        r.recipe,
        r.from,
        r.to,
        r.pinforge_version,
        r.registered_at,
        opt(&r.completed_at)
    ));
    s.push_str(&format!("- **Hypothesis:** {}\n", cell(&r.hypothesis)));
    s.push_str(&format!(
        "- **Prediction:** {}\n",
        cell(r.prediction.as_deref().unwrap_or("-"))
    ));
    s.push_str(&format!(
        "- **Axis:** {}{}\n",
        r.axis,
        if r.single_setting {
            ""
        } else {
            " (more than one axis: not a single-setting trial)"
        }
    ));
    s.push_str(&format!(
        "- **Verdict:** {} — {}\n\n",
        r.verdict.map(|v| v.as_str()).unwrap_or("-"),
        cell(r.reason.as_deref().unwrap_or("-"))
    ));
    s.push_str("## What differs\n\n| axis | setting | from | to |\n|---|---|---|---|\n");
    for row in &r.diff {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            row.axis.name(),
            cell(&row.key),
            cell(&opt(&row.from)),
            cell(&opt(&row.to))
        ));
    }
    s.push_str("\n## Builds and smokes\n\n| side | variant | build | manifest sha256 | smoke | device | signature |\n|---|---|---|---|---|---|---|\n");
    for (side, b, sm) in [
        ("from", &r.builds.from, &r.smokes.from),
        ("to", &r.builds.to, &r.smokes.to),
    ] {
        let build = match b {
            None => "not run".to_string(),
            Some(b) if b.error.is_some() => format!("failed after {:.1}s", b.seconds),
            Some(b) => format!(
                "{} in {:.1}s",
                if b.cached { "cached" } else { "built" },
                b.seconds
            ),
        };
        s.push_str(&format!(
            "| {side} | {} | {build} | {} | {} | {} | {} |\n",
            b.as_ref().map(|b| b.variant.as_str()).unwrap_or("-"),
            b.as_ref()
                .and_then(|b| b.manifest_sha256)
                .map(|d| d.to_hex())
                .unwrap_or_else(|| "-".into()),
            sm.as_ref().map(|x| x.verdict.as_str()).unwrap_or("-"),
            cell(&match sm.as_ref() {
                Some(SmokeSide {
                    device: Some(d),
                    device_reason: Some(why),
                    ..
                }) => format!("{d} ({why})"),
                Some(SmokeSide {
                    device: Some(d), ..
                }) => d.clone(),
                _ => "-".into(),
            }),
            cell(
                sm.as_ref()
                    .and_then(|x| x.normalized_signature.as_deref())
                    .unwrap_or("-")
            )
        ));
    }
    if !r.artifacts.is_empty() {
        s.push_str(
            "\n## Artifacts\n\n| path | from sha256 | to sha256 | same |\n|---|---|---|---|\n",
        );
        for a in &r.artifacts {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                cell(&a.path),
                opt(&a.from_sha256),
                opt(&a.to_sha256),
                a.word()
            ));
        }
    }
    for (side, b) in [("from", &r.builds.from), ("to", &r.builds.to)] {
        if let Some(e) = b.as_ref().and_then(|b| b.error.as_deref()) {
            s.push_str(&format!(
                "\n## Why the {side} build failed\n\n```text\n{e}\n```\n"
            ));
        }
    }
    s
}

/// Whether a difference in artifact `name` between two builds may come from their build
/// paths: either side names a machine path, or nvcc's path-hashed names were hashed from two
/// different folders (another uid's fixed folder, or a real folder). Two builds that hashed the
/// same fixed folder hash alike: a difference there is real, and is not explained away.
fn build_paths_explain(a: &manifest::Statement, b: &manifest::Statement, name: &str) -> bool {
    let ann = |st: &manifest::Statement, key: &str| {
        st.subject
            .iter()
            .find(|x| x.name == name)
            .and_then(|x| x.annotations.get(key).cloned())
    };
    let marked = |st: &manifest::Statement, other: &manifest::Statement| {
        ann(st, "embeds_machine_path") == Some(serde_json::Value::Bool(true))
            || (ann(st, "nvcc_path_hashed_names").is_some()
                && ann(st, "hashed_source_path") != ann(other, "hashed_source_path"))
    };
    marked(a, b) || marked(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_paths_explain_a_difference_only_when_the_hashed_folders_differ() {
        use serde_json::Value;
        let lib = |ann: &[(&str, Value)]| {
            let mut r = crate::artifact::manifest::Resource {
                name: "lib/libggml-cuda.so".into(),
                uri: None,
                digest: std::collections::BTreeMap::new(),
                annotations: std::collections::BTreeMap::new(),
            };
            for (k, v) in ann {
                r.annotations.insert(k.to_string(), v.clone());
            }
            crate::artifact::diff::tests::statement("v", &[], vec![r])
        };
        let hashed = |p: &str| {
            lib(&[
                ("nvcc_path_hashed_names", Value::from(true)),
                ("hashed_source_path", Value::from(p)),
            ])
        };
        let name = "lib/libggml-cuda.so";
        let same_a = hashed("/tmp/pinforge-0/src");
        let same_b = hashed("/tmp/pinforge-0/src");
        assert!(
            !build_paths_explain(&same_a, &same_b, name),
            "a real difference"
        );
        let other_uid = hashed("/tmp/pinforge-1000/src");
        assert!(build_paths_explain(&same_a, &other_uid, name));
        // A real folder (no hashed path recorded) against a fixed one: explained.
        let real = lib(&[
            ("nvcc_path_hashed_names", Value::from(true)),
            ("embeds_machine_path", Value::from(true)),
        ]);
        assert!(build_paths_explain(&same_a, &real, name));
        assert!(build_paths_explain(&real, &same_a, name));
        // Nothing marked on either side: nothing to explain with.
        let plain = lib(&[]);
        assert!(!build_paths_explain(&plain, &plain, name));
    }
    use std::path::Path;

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

    fn tool(program: &str, version: &str) -> crate::artifact::toolchain::ToolRecord {
        crate::artifact::toolchain::ToolRecord {
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
                        ("cc", tool(cc, ver)),
                        ("cxx", tool(cxx, ver)),
                        ("cmake", tool("cmake", "4.4.5")),
                        ("ninja", tool("ninja", "1.13.1")),
                    ]
                    .into_iter()
                    .map(|(k, t)| (k.to_string(), t))
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

    const SIG: &str = "heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)\nframes: llama_kv_cache::apply_ubatch <- x\nSUMMARY: AddressSanitizer: heap-buffer-overflow /pinforge/src/src/llama-kv-cache.cpp:1030 in llama_kv_cache::apply_ubatch";

    #[test]
    fn signatures_compare_by_kind_and_top_frame() {
        assert_eq!(
            normalize_signature(SIG),
            "heap-buffer-overflow in llama_kv_cache::apply_ubatch"
        );
        assert_eq!(
            normalize_signature("SEGV on unknown address 0x000000001234 in f"),
            "SEGV on unknown address 0x? in f"
        );
        assert_eq!(
            normalize_signature("killed by signal 11 (SIGSEGV)"),
            "killed by signal 11 (SIGSEGV)"
        );
        assert!(has_frame(SIG));
        assert!(has_frame("SEGV on unknown address 0x000000001234 in f"));
        assert!(!has_frame("killed by signal 11 (SIGSEGV)"));
        assert!(!has_frame("hang: no result within 60s"));
        assert!(!has_frame("exited with 3 without a result"));
        assert!(!has_frame("heap-buffer-overflow in ?"));
    }

    fn crash(sig: &str) -> SideResult {
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(sig.into()),
            detail: None,
        }
    }
    fn smoked(v: SmokeVerdict) -> SideResult {
        SideResult::Smoked {
            verdict: v,
            signature: None,
            detail: Some("why".into()),
        }
    }

    // issue #10: the verdict rule in both directions, and every way a trial is invalid.
    #[test]
    fn the_verdict_rule() {
        use FlipVerdict::*;
        let other_frames = SIG.replace("frames: llama_kv_cache::apply_ubatch <- x", "frames: y");
        let cases: Vec<(SideResult, SideResult, FlipVerdict, &str)> = vec![
            (
                crash(SIG),
                smoked(SmokeVerdict::Ok),
                Supported,
                "disappeared",
            ),
            (crash(SIG), crash(&other_frames), Falsified, "survived"),
            (
                crash(SIG),
                crash("heap-buffer-overflow in llama_kv_cache::state_read_meta"),
                Invalid,
                "another signature",
            ),
            (
                crash(SIG),
                smoked(SmokeVerdict::Mismatch),
                Invalid,
                "diverged",
            ),
            (
                crash(SIG),
                smoked(SmokeVerdict::Error),
                Invalid,
                "could not run",
            ),
            (
                crash(SIG),
                SideResult::BuildFailed("cmake".into()),
                Invalid,
                "to side did not build",
            ),
            (
                SideResult::NotRun("not smoked".into()),
                SideResult::BuildFailed("cmake".into()),
                Invalid,
                "to side did not build: cmake",
            ),
            (
                smoked(SmokeVerdict::Ok),
                smoked(SmokeVerdict::Ok),
                Invalid,
                "no crash signature",
            ),
            (
                smoked(SmokeVerdict::Mismatch),
                crash(SIG),
                Invalid,
                "no crash signature",
            ),
            (
                smoked(SmokeVerdict::Error),
                smoked(SmokeVerdict::Ok),
                Invalid,
                "from side's smoke could not run",
            ),
            (
                SideResult::BuildFailed("configure".into()),
                SideResult::NotRun("x".into()),
                Invalid,
                "from side did not build",
            ),
        ];
        // A frameless signature (signal, hang, exit without a result) on either side: two
        // unrelated failures would compare equal, so the trial is invalid, never falsified.
        let frameless = [
            "killed by signal 11 (SIGSEGV)",
            "hang: no result within 60s",
            "exited with 1 without a result",
            "heap-buffer-overflow in ?",
        ];
        let mut cases = cases;
        for f in frameless {
            cases.push((crash(f), crash(f), Invalid, "no frame to compare"));
            cases.push((crash(f), smoked(SmokeVerdict::Ok), Invalid, "no frame"));
            cases.push((crash(SIG), crash(f), Invalid, "no frame to compare"));
        }
        cases.push((
            crash(SIG),
            SideResult::Smoked {
                verdict: SmokeVerdict::Crash,
                signature: None,
                detail: None,
            },
            Invalid,
            "no frame to compare",
        ));
        for (from, to, want, why) in cases {
            let (v, reason) = decide(&from, &to);
            assert_eq!(v, want, "{from:?} -> {to:?}: {reason}");
            assert!(reason.contains(why), "{reason} should say {why}");
        }
    }

    #[test]
    fn hypotheses_with_control_characters_or_nothing_are_refused() {
        assert!(check_text("--hypothesis", "").is_err());
        assert!(check_text("--hypothesis", "  \n").is_err());
        assert!(check_text("--hypothesis", "a\u{1b}[2Jb").is_err());
        assert!(check_text("--hypothesis", &"x".repeat(5000)).is_err());
        assert!(check_text("--hypothesis", "libllama\tis\nthe defect").is_ok());
    }

    #[test]
    fn record_folders_are_claimed_once_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, pa) = claim_record_dir(dir.path(), "flips", "r--x--y").expect("first");
        let (b, _) = claim_record_dir(dir.path(), "flips", "r--x--y").expect("second");
        assert_eq!(a, "r--x--y-0001");
        assert_eq!(b, "r--x--y-0002");
        assert!(pa.is_dir());
        let other = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(other.path(), dir.path().join("ablations")).expect("link");
        let e = claim_record_dir(dir.path(), "ablations", "s").expect_err("link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert_eq!(std::fs::read_dir(other.path()).expect("ls").count(), 0);
    }

    #[test]
    fn summary_cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
