//! The verified target: a build to smoke, read from a manifest or an installed layer, with
//! every file the shim compiles against or the decode loads re-hashed against the record.

use super::sanitizer::{asan_soname, clang_asan_runtime};
use crate::install::Root;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_record::manifest::Statement;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A build to smoke: where its libraries and headers are, and what it is. Built only by
/// [`target_from_manifest`] and [`target_from_installed`], which recompute every digest below
/// from the files themselves and refuse a file that differs from the record.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SmokeTarget {
    /// Human name: `recipe/variant`.
    pub name: String,
    /// Folder holding `lib/libllama.so*` and `include/llama.h` (the staged prefix, or an
    /// installed store entry).
    pub root: PathBuf,
    /// libllama file (relative to root).
    pub libllama: String,
    /// SHA-256 of libllama, recomputed (equal to the recorded one; keys the shim cache).
    pub libllama_sha256: Sha256,
    /// The headers the shim compiles against (`include/…`), with their recomputed SHA-256.
    pub headers: BTreeMap<String, Sha256>,
    /// The verified bytes of those headers: the shim is compiled against these copies, never
    /// against the build folder, so a header swapped after the check is not what is compiled.
    #[serde(skip)]
    pub(super) header_bytes: BTreeMap<String, Vec<u8>>,
    /// The ASan runtime the (verified) libllama needs, if it is instrumented.
    pub sanitizer: Option<String>,
    /// Whether the build has a CUDA backend (libggml-cuda).
    pub cuda: bool,
    /// nvcc version the build used, if any.
    pub cuda_toolkit: Option<String>,
    /// CMAKE_CUDA_ARCHITECTURES, if any.
    pub cuda_architectures: Option<String>,
}

/// Smoke a build described by a manifest: its artifact root is reached through real folders
/// only, and every file smoke compiles against or loads is checked against the manifest.
pub fn target_from_manifest(path: &Path) -> Result<SmokeTarget> {
    let st = Statement::read(path)?;
    let root = st.checked_artifact_root(path)?;
    let mut recorded = BTreeMap::new();
    for s in &st.subject {
        let sha = s.sha256().ok_or_else(|| {
            Error::input(
                path.display(),
                format!("subject `{}` has no sha256", s.name.escape_debug()),
            )
        })?;
        recorded.insert(s.name.clone(), sha);
    }
    let mut links = BTreeMap::new();
    for b in &st.predicate.run_details.byproducts {
        if let Some(t) = b
            .annotations
            .get(pinforge_record::manifest::annotation::LINK_TARGET)
        {
            let t = t.as_str().ok_or_else(|| {
                Error::input(
                    path.display(),
                    format!(
                        "link `{}`: link_target is not a string",
                        b.name.escape_debug()
                    ),
                )
            })?;
            links.insert(b.name.clone(), t.to_string());
        }
    }
    target_from(
        &st,
        root,
        &recorded,
        &links,
        &format!("the manifest {}", path.display()),
    )
}

/// The largest manifest read from a store entry (the install root bounds its records alike).
const MAX_ENTRY_MANIFEST: u64 = 16 << 20;

/// The largest header read (llama.h is about 70 KiB).
const MAX_HEADER: u64 = 16 << 20;

/// Smoke an installed layer (`None`: what `current` shows), through its store entry.
pub fn target_from_installed(
    root: &Root,
    layer: Option<crate::install::Layer>,
) -> Result<SmokeTarget> {
    // Never canonicalize a link chain someone else may have edited: the install root resolves
    // the layer from its own committed record and re-hashes the entry before we read it.
    let entry = root.layer_entry(layer)?;
    let key = entry
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(crate::install::EntryKey::parse)
        .ok_or_else(|| {
            Error::Internal(format!(
                "invariant: store entry {} is named by its digest",
                entry.display()
            ))
        })?;
    // The record is the entry's identity (its listing hashes to the entry's name, and
    // layer_entry re-hashed the files against it); manifest.json sits beside the content and
    // is not part of that identity, so it is believed only where it agrees with the record.
    let info = root.read_entry(&key)?;
    let mpath = entry.join("manifest.json");
    let bytes = read_regular(&mpath, "the entry's manifest", MAX_ENTRY_MANIFEST)?;
    let st = Statement::parse(&bytes, &mpath)?;
    let disagree = |what: String| {
        Error::check(
            mpath.display(),
            format!(
                "{what}; the entry's manifest disagrees with its record and was not used \
                 (manifest.json is not part of an entry's identity: reinstall the build)"
            ),
        )
    };
    let params = &st.predicate.build_definition.external_parameters;
    if params.recipe != info.recipe || params.variant != info.variant {
        return Err(disagree(format!(
            "it names {}/{}, the record {}/{}",
            params.recipe, params.variant, info.recipe, info.variant
        )));
    }
    for s in &st.subject {
        let rec = info.files.get(&s.name).map(|f| f.sha256);
        if rec.is_none() || rec != s.sha256() {
            return Err(disagree(format!(
                "it lists `{}`, which the record does not hold with that sha256",
                s.name.escape_debug()
            )));
        }
    }
    if st.subject.len() != info.files.len() {
        return Err(disagree(format!(
            "it lists {} files, the record {}",
            st.subject.len(),
            info.files.len()
        )));
    }
    let recorded = info
        .files
        .iter()
        .map(|(p, f)| (p.clone(), f.sha256))
        .collect();
    target_from(
        &st,
        entry.clone(),
        &recorded,
        &info.links,
        &format!("the record of store entry {}", entry.display()),
    )
}

/// Open `root/rel` for reading: every folder on the way a real folder (no link), the file
/// itself a regular file (a FIFO, device, socket or link is refused before it is opened).
fn open_inside(root: &Path, rel: &str, what: &str) -> Result<(PathBuf, std::fs::File)> {
    let comps: Vec<&str> = rel.split('/').collect();
    let mut p = root.to_path_buf();
    for c in &comps[..comps.len().saturating_sub(1)] {
        p.push(c);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::input(
                    p.display(),
                    format!(
                        "the way to {what} `{}` passes through something that is not a folder (a link?); it was not read",
                        rel.escape_debug()
                    ),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::input(p.display(), format!("{what} not found"))
                    .with_hint("the build folder changed since the build; rebuild the variant"))
            }
            Err(e) => return Err(Error::io("stat", &p, e)),
        }
    }
    if let Some(last) = comps.last() {
        p.push(last);
    }
    let f = fsx::open_regular(&p, what, false)?;
    Ok((p, f))
}

/// Read a regular file (never a FIFO or device, links followed not at all), at most `limit`
/// bytes.
fn read_regular(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>> {
    let f = fsx::open_regular(path, what, false)?;
    read_limited(f, path, what, limit)
}

fn read_limited(f: std::fs::File, path: &Path, what: &str, limit: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .at("read", path)?;
    if bytes.len() as u64 > limit {
        return Err(Error::input(
            path.display(),
            format!("{what} is larger than {limit} bytes; refused"),
        ));
    }
    Ok(bytes)
}

/// A file whose bytes differ from the record: a check failure, before anything is compiled
/// or loaded.
fn differs(path: &Path, what: &str, rel: &str, got: Sha256, want: Sha256, source: &str) -> Error {
    Error::check(
        path.display(),
        format!(
            "{what} `{}` has sha256 {got}, but {source} records {want}; nothing was compiled or \
             loaded (the files changed since they were recorded: rebuild or reinstall the \
             variant; `pinforge verify` lists every differing file)",
            rel.escape_debug()
        ),
    )
}

/// Whether a subject is a header the shim may include: the shim compiles with only these on
/// its include path.
fn is_header(name: &str) -> bool {
    name.starts_with("include/") && name.ends_with(".h")
}

/// Whether a subject is a shared library the decode loads (libllama and the ggml backends
/// beside it).
fn is_shared_library(name: &str) -> bool {
    name.strip_prefix("lib/")
        .is_some_and(|f| !f.contains('/') && f.contains(".so"))
}

fn target_from(
    st: &Statement,
    root: PathBuf,
    recorded: &BTreeMap<String, Sha256>,
    links: &BTreeMap<String, String>,
    source: &str,
) -> Result<SmokeTarget> {
    let params = &st.predicate.build_definition.external_parameters;
    let name = format!("{}/{}", params.recipe, params.variant);
    let lib = st
        .subject
        .iter()
        .find(|s| s.name.starts_with("lib/libllama.so"))
        .ok_or_else(|| {
            Error::input(&name, "the build has no libllama shared library (lib/libllama.so*)")
                .with_hint("smoke needs a BUILD_SHARED_LIBS build of the `llama` target, staged in lib/: rebuild the variant with this pinforge")
        })?;
    if !st.subject.iter().any(|s| s.name == "include/llama.h") {
        return Err(Error::input(&name, "the build has no include/llama.h")
            .with_hint("rebuild with this pinforge: builds now keep the public headers"));
    }
    let want = Recorded { recorded, source };
    let (lib_sha, sanitizer) = check_libllama(&root, &lib.name, &want, &name)?;
    check_libraries(st, &root, &lib.name, &want)?;
    check_links(&root, links, source)?;
    let (headers, header_bytes) = read_headers(st, &root, &want)?;

    let cuda = st.subject.iter().any(|s| s.name.contains("libggml-cuda"));
    let arg = |prefix: &str| {
        params
            .cmake_args
            .iter()
            .find_map(|a| a.strip_prefix(prefix).map(str::to_string))
    };
    let toolkit = st
        .predicate
        .build_definition
        .resolved_dependencies
        .iter()
        .find(|d| d.name == "tool:nvcc")
        .and_then(|d| d.annotations.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Ok(SmokeTarget {
        name,
        root,
        libllama: lib.name.clone(),
        libllama_sha256: lib_sha,
        headers,
        header_bytes,
        sanitizer,
        cuda,
        cuda_toolkit: toolkit,
        cuda_architectures: arg("-DCMAKE_CUDA_ARCHITECTURES="),
    })
}

/// The record a target is checked against, and how to name it in a refusal.
struct Recorded<'a> {
    recorded: &'a BTreeMap<String, Sha256>,
    source: &'a str,
}

impl Recorded<'_> {
    /// The recorded digest of a subject (every name asked for is one).
    fn want(&self, rel: &str) -> Result<Sha256> {
        self.recorded
            .get(rel)
            .copied()
            .ok_or_else(|| Error::Internal(format!("invariant: `{rel}` is a recorded subject")))
    }

    /// Refuse `got` unless it is the recorded digest of `rel`.
    fn check(&self, path: &Path, what: &str, rel: &str, got: Sha256) -> Result<()> {
        let want = self.want(rel)?;
        if got != want {
            return Err(differs(path, what, rel, got, want, self.source));
        }
        Ok(())
    }
}

/// libllama, read once: the digest and the sanitizer probe see the same bytes.
fn check_libllama(
    root: &Path,
    rel: &str,
    want: &Recorded<'_>,
    name: &str,
) -> Result<(Sha256, Option<String>)> {
    let (path, mut f) = open_inside(root, rel, "libllama")?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).at("read", &path)?;
    let lib_sha = Sha256::of_bytes(&bytes);
    want.check(&path, "libllama", rel, lib_sha)?;
    let sanitizer = match asan_soname(&bytes) {
        Some(so) => Some(so),
        None => clang_asan_runtime(&bytes, name)?,
    };
    Ok((lib_sha, sanitizer))
}

/// The other libraries the decode loads through libllama.
fn check_libraries(st: &Statement, root: &Path, libllama: &str, want: &Recorded<'_>) -> Result<()> {
    for s in st
        .subject
        .iter()
        .filter(|s| s.name != libllama && is_shared_library(&s.name))
    {
        let (path, f) = open_inside(root, &s.name, "shared library")?;
        let (got, _) = Sha256::of_reader(f, &path)?;
        want.check(&path, "shared library", &s.name, got)?;
    }
    Ok(())
}

/// The loader reaches libllama by its soname through the links in lib/ (libllama.so.0 ->
/// libllama.so.0.0.1): each must be what the record says, a name beside it, never a way out
/// of the build.
fn check_links(root: &Path, links: &BTreeMap<String, String>, source: &str) -> Result<()> {
    for (name, target) in links.iter().filter(|(n, _)| is_shared_library(n)) {
        let p = root.join(name);
        let found = std::fs::read_link(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::input(p.display(), "recorded link not found")
                .with_hint("the build folder changed since the build; rebuild the variant"),
            std::io::ErrorKind::InvalidInput => Error::check(
                p.display(),
                format!(
                    "`{}` is recorded as a link but is not one",
                    name.escape_debug()
                ),
            ),
            _ => Error::io("read link", &p, e),
        })?;
        if found.as_os_str().as_encoded_bytes() != target.as_bytes() {
            return Err(Error::check(
            p.display(),
            format!(
                "link `{}` points at `{}`, but {source} records `{}`; nothing was compiled or loaded",
                name.escape_debug(),
                found.display(),
                target.escape_debug()
            ),
        ));
        }
        if target.contains('/') || target == ".." || target == "." {
            return Err(Error::input(
                p.display(),
                format!(
                "link `{}` -> `{}` leaves lib/; smoke loads libraries only from beside libllama",
                name.escape_debug(),
                target.escape_debug()
            ),
            ));
        }
    }

    Ok(())
}

/// The verified bytes of each header, by subject name.
type HeaderBytes = BTreeMap<String, Vec<u8>>;

/// The headers the shim may include, read once: their digests and the bytes it compiles
/// against.
fn read_headers(
    st: &Statement,
    root: &Path,
    want: &Recorded<'_>,
) -> Result<(BTreeMap<String, Sha256>, HeaderBytes)> {
    let mut headers = BTreeMap::new();
    let mut header_bytes = BTreeMap::new();
    for s in st.subject.iter().filter(|s| is_header(&s.name)) {
        let (path, f) = open_inside(root, &s.name, "header")?;
        let bytes = read_limited(f, &path, "header", MAX_HEADER)?;
        let got = Sha256::of_bytes(&bytes);
        want.check(&path, "header", &s.name, got)?;
        headers.insert(s.name.clone(), got);
        header_bytes.insert(s.name.clone(), bytes);
    }
    Ok((headers, header_bytes))
}
