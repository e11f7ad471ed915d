//! CUDA toolkits provisioned from pinned PyPI wheels (issue #12), treated exactly like pins:
//! a lock names every wheel by name, version, file name and SHA-256; the wheels are fetched
//! (with pip, which checks the hashes too), checked again here, unpacked with the same refusals
//! as archive pins (no `..`, no absolute paths, no links, no devices), assembled into a toolkit
//! root that CMake's `FindCUDAToolkit` accepts, and recorded by tree digest. A provisioned
//! toolkit is re-hashed before every use and refused when its tree no longer has the digest
//! recorded at assembly (beside it, as a Nix store path's hash is kept in the store's own
//! database: it catches damage and edits of the tree, not a rewrite of both).
//!
//! Why assemble: the `nvidia-*` wheels of CUDA 13 hold a complete compiler under
//! `nvidia/cu13/`, but not in the layout a toolkit install has: `lib64`, unversioned `.so`
//! names, `nvvm/lib64` and a link-time `libcuda.so` are missing. The stub `libcuda.so` is made
//! from the toolkit's own `cuda.h` (every `cu*` function, SONAME `libcuda.so.1`) and lives in
//! `lib/stubs/`, a folder never on a run-time search path, so it is only ever linked against.
//!
//! ```text
//! <cache>/toolkits/wheels/FILE.whl                   verified wheels (shared by toolkits)
//! <cache>/toolkits/NAME-LOCK12/root/                 the assembled toolkit (CUDAToolkit_ROOT)
//! <cache>/toolkits/NAME-LOCK12/toolkit.json          what was assembled, and its tree digest
//! ```

use crate::base::digest::{tree_digest, Sha256};
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::base::process;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// One wheel of a toolkit lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wheel {
    /// Distribution name (`nvidia-cuda-nvcc`).
    pub name: String,
    /// Exact version (`13.1.115`).
    pub version: String,
    /// The wheel's file name as the registry serves it.
    pub file: String,
    /// SHA-256 of the wheel file.
    pub sha256: Sha256,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLock {
    name: String,
    description: Option<String>,
    nvcc_version: String,
    prefix: String,
    wheel: Vec<Wheel>,
}

/// A toolkit lock file (`recipes/toolkits/NAME.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ToolkitLock {
    /// Toolkit name (`cuda-13.1.1`).
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// The exact version `nvcc --version` must report (`13.1.115`).
    pub nvcc_version: String,
    /// Folder inside the wheels that holds the toolkit (`nvidia/cu13`).
    pub prefix: String,
    /// The wheels, in lock order.
    pub wheels: Vec<Wheel>,
    /// Where the lock was read from.
    pub path: PathBuf,
    /// SHA-256 of the lock file's bytes: the toolkit's identity.
    pub sha256: Sha256,
}

/// What `toolkit.json` records about an assembled toolkit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolkitRecord {
    /// Schema id of this file.
    pub schema: String,
    /// Toolkit name.
    pub name: String,
    /// SHA-256 of the lock it was assembled from.
    pub lock_sha256: Sha256,
    /// The wheels, as locked.
    pub wheels: Vec<Wheel>,
    /// `nvcc --version`'s release line.
    pub nvcc_version_line: String,
    /// Tree digest of `root/` (see `digest::tree_digest`).
    pub tree_sha256: Sha256,
    /// Number of `cu*` functions the link-time `libcuda.so` stub exports.
    pub stub_symbols: usize,
}

const RECORD_SCHEMA: &str = "pinforge.toolkit/v1";

/// How a provisioned toolkit's root is written in CMake arguments (and so in the input digest):
/// the build substitutes `bin/nvcc`'s grandparent for it.
pub const ROOT_TEMPLATE: &str = "${TOOLKIT}";

/// A provisioned, verified toolkit.
#[derive(Debug, Clone)]
pub struct Toolkit {
    /// `CUDAToolkit_ROOT`.
    pub root: PathBuf,
    /// Its record.
    pub record: ToolkitRecord,
    /// Whether this call assembled it (false: reused after re-verification).
    pub assembled: bool,
}

impl Toolkit {
    /// The toolkit's `nvcc`.
    pub fn nvcc(&self) -> PathBuf {
        self.root.join("bin").join("nvcc")
    }
}

use crate::base::names::is_plain_name;

/// A wheel file name is one plain name ending in `.whl` whose first two `-` fields are the
/// distribution (with `_` for `-`) and the version: anything else could name a path or a
/// different package than the lock says.
fn check_wheel(w: &Wheel, lock: &Path) -> Result<()> {
    let plain = !w.file.is_empty()
        && !w.file.starts_with('.')
        && w.file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b));
    let mut fields = w.file.split('-');
    let (dist, ver) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
    if !plain || !w.file.ends_with(".whl") {
        return Err(Error::input(
            lock.display(),
            format!("wheel file `{}` is not a plain `.whl` file name", w.file),
        )
        .with_hint("copy the file name exactly as the registry serves it"));
    }
    if dist != w.name.replace('-', "_") || ver != w.version {
        return Err(Error::input(
            lock.display(),
            format!(
                "wheel file `{}` is not {} {} (it names {dist} {ver})",
                w.file, w.name, w.version
            ),
        )
        .with_hint("the name, version and file of a wheel entry must agree"));
    }
    Ok(())
}

/// Read and check a toolkit lock.
pub fn load_lock(path: &Path) -> Result<ToolkitLock> {
    let bytes = fsx::read(path)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| Error::input(path.display(), format!("not UTF-8: {e}")))?;
    let raw: RawLock = toml::from_str(text).map_err(|e| {
        let (line, col) = e
            .span()
            .map(|s| crate::source::recipe::line_col(text, s.start))
            .unwrap_or((0, 0));
        Error::input(
            format!("{}:{line}:{col}", path.display()),
            e.message().to_string(),
        )
        .with_hint("a toolkit lock has name, nvcc-version, prefix and [[wheel]] entries")
    })?;
    if raw.wheel.is_empty() {
        return Err(Error::input(path.display(), "lists no wheel"));
    }
    let prefix_ok = !raw.prefix.is_empty()
        && Path::new(&raw.prefix)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !prefix_ok {
        return Err(Error::input(
            path.display(),
            format!("prefix `{}` is not a relative folder", raw.prefix),
        ));
    }
    if !is_plain_name(&raw.name) {
        return Err(Error::input(
            path.display(),
            format!("toolkit name `{}` is not a plain name", raw.name),
        ));
    }
    let mut seen = BTreeSet::new();
    for w in &raw.wheel {
        check_wheel(w, path)?;
        if !seen.insert(w.name.clone()) {
            return Err(Error::input(
                path.display(),
                format!("wheel {} is listed twice", w.name),
            ));
        }
    }
    Ok(ToolkitLock {
        name: raw.name,
        description: raw.description,
        nvcc_version: raw.nvcc_version,
        prefix: raw.prefix,
        wheels: raw.wheel,
        path: path.to_path_buf(),
        sha256: Sha256::of_bytes(&bytes),
    })
}

/// The folder provisioned toolkits live in (under `toolkits/`): `PINFORGE_TOOLKIT_CACHE`, else
/// `$XDG_CACHE_HOME/pinforge`, else `~/.cache/pinforge` (where cargo, pip and sccache keep theirs).
pub fn default_cache_dir() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PINFORGE_TOOLKIT_CACHE").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p).join("pinforge"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("pinforge")),
        None => Err(Error::input(
            "cache folder",
            "neither PINFORGE_TOOLKIT_CACHE, XDG_CACHE_HOME nor HOME is set",
        )
        .with_hint("set PINFORGE_TOOLKIT_CACHE to a folder for downloaded toolkits")),
    }
}

/// Progress callback: a short stage word and a detail line.
pub type Note<'a> = &'a dyn Fn(&str, &str);

/// Provision `lock` under `cache` (fetch, verify, unpack, assemble, check nvcc), or reuse the
/// toolkit already there after re-verifying its tree digest. `tool_dirs` are searched for pip.
pub fn provision(
    lock: &ToolkitLock,
    cache: &Path,
    tool_dirs: &[PathBuf],
    note: Note,
) -> Result<Toolkit> {
    let base = cache.join("toolkits");
    fsx::create_dir_all(&base)?;
    // One provisioner at a time: two builds asking for the same toolkit wait for one fetch.
    let _lock = fsx::DirLock::acquire(&base)?;
    let dir = base.join(format!("{}-{}", lock.name, lock.sha256.short(12)));
    let record_path = dir.join("toolkit.json");
    if record_path.exists() {
        let record: ToolkitRecord = serde_json::from_slice(&fsx::read(&record_path)?)
            .map_err(|e| Error::check(record_path.display(), format!("unreadable: {e}")))?;
        let root = dir.join("root");
        let now = tree_digest(&root)?;
        // The digest is the one recorded at assembly, beside the tree (as a Nix store path's
        // hash sits in the store's own database): it catches damage and edits of the tree,
        // not someone who rewrites both; the wheels themselves are re-checked at assembly.
        if now != record.tree_sha256
            || record.lock_sha256 != lock.sha256
            || record.wheels != lock.wheels
        {
            return Err(Error::check(
                root.display(),
                format!(
                    "toolkit {} changed since it was assembled (tree {}, recorded {})",
                    lock.name,
                    now.short(12),
                    record.tree_sha256.short(12)
                ),
            )
            .with_hint(format!(
                "remove {} and build again to provision it afresh",
                dir.display()
            )));
        }
        return Ok(Toolkit {
            root,
            record,
            assembled: false,
        });
    }
    let wheels_dir = base.join("wheels");
    fsx::create_dir_all(&wheels_dir)?;
    fetch_wheels(lock, &wheels_dir, tool_dirs, note)?;

    // Assemble in a temp folder beside the destination; one rename publishes it whole.
    let tmp = tempfile::Builder::new()
        .prefix(".assemble-")
        .tempdir_in(&base)
        .at("create temp folder in", &base)?;
    let root = tmp.path().join("root");
    fsx::create_dir_all(&root)?;
    for w in &lock.wheels {
        note("unpack", &w.file);
        unpack_wheel(&wheels_dir.join(&w.file), &lock.prefix, &root)?;
    }
    let stub_symbols = assemble(&root, note)?;
    let nvcc = root.join("bin").join("nvcc");
    let line = nvcc_release_line(&nvcc)?;
    let version =
        crate::artifact::toolchain::parse_version(crate::artifact::toolchain::Role::Nvcc, &line)
            .unwrap_or_default();
    if version != lock.nvcc_version {
        return Err(Error::check(
            nvcc.display(),
            format!(
                "reports {version} (`{line}`), the lock {} says {}",
                lock.path.display(),
                lock.nvcc_version
            ),
        )
        .with_hint("fix the lock's nvcc-version or its wheels"));
    }
    let record = ToolkitRecord {
        schema: RECORD_SCHEMA.into(),
        name: lock.name.clone(),
        lock_sha256: lock.sha256,
        wheels: lock.wheels.clone(),
        nvcc_version_line: line,
        tree_sha256: tree_digest(&root)?,
        stub_symbols,
    };
    let json = serde_json::to_vec_pretty(&record)
        .map_err(|e| Error::Internal(format!("toolkit record: {e}")))?;
    fsx::write_atomic(&tmp.path().join("toolkit.json"), &json)?;
    let staged = tmp.keep();
    std::fs::rename(&staged, &dir).at("publish toolkit", &dir)?;
    fsx::sync_dir(&base)?;
    Ok(Toolkit {
        root: dir.join("root"),
        record,
        assembled: true,
    })
}

/// Make sure every wheel of `lock` is in `dir` with its locked digest: a file already there
/// is checked, a missing one is downloaded with pip (`--require-hashes`), and every file is
/// hashed here again before it is used.
fn fetch_wheels(lock: &ToolkitLock, dir: &Path, tool_dirs: &[PathBuf], note: Note) -> Result<()> {
    let mut missing = Vec::new();
    for w in &lock.wheels {
        let p = dir.join(&w.file);
        if p.exists()
            && Sha256::of_reader(fsx::open_regular(&p, "wheel", false)?, &p)?.0 == w.sha256
        {
            continue;
        }
        missing.push(w);
    }
    if !missing.is_empty() {
        let tmp = tempfile::Builder::new()
            .prefix(".fetch-")
            .tempdir_in(dir)
            .at("create temp folder in", dir)?;
        let reqs: String = missing
            .iter()
            .map(|w| format!("{}=={} --hash=sha256:{}\n", w.name, w.version, w.sha256))
            .collect();
        let req_path = tmp.path().join("requirements.txt");
        fsx::write_atomic(&req_path, reqs.as_bytes())?;
        let pip = pip_command(tool_dirs);
        let mut cmd = Command::new(&pip[0]);
        cmd.args(&pip[1..])
            .args([
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
            ])
            .args(["--disable-pip-version-check", "--quiet", "-d"])
            .arg(tmp.path())
            .arg("-r")
            .arg(&req_path);
        note(
            "fetch",
            &format!("{} wheel(s) of {} with pip", missing.len(), lock.name),
        );
        process::run(
            &mut cmd,
            "install pip (python3 -m pip), or run tools/bootstrap.sh, which provides one in .tools/",
        )?;
        for w in &missing {
            let got = tmp.path().join(&w.file);
            let (digest, _) = Sha256::of_reader(fsx::open_regular(&got, "wheel", false)?, &got)?;
            if digest != w.sha256 {
                return Err(Error::check(
                    got.display(),
                    format!("SHA-256 {digest}, the lock says {}", w.sha256),
                )
                .with_hint("the registry served different bytes; check the lock"));
            }
            std::fs::rename(&got, dir.join(&w.file)).at("store wheel", &got)?;
        }
    }
    Ok(())
}

/// pip from the tool folders (`.tools/bin/pip` of the bootstrap) or `python3 -m pip`.
fn pip_command(tool_dirs: &[PathBuf]) -> Vec<std::ffi::OsString> {
    for d in tool_dirs {
        let p = d.join("pip");
        if p.is_file() {
            return vec![p.into_os_string()];
        }
    }
    vec!["python3".into(), "-m".into(), "pip".into()]
}

/// Unpack the entries of `wheel` under `prefix/` into `root`, refusing anything that is not a
/// plain relative file or folder. Entries outside the prefix (`*.dist-info`, `__init__.py`)
/// are skipped. Returns the number of files written.
pub fn unpack_wheel(wheel: &Path, prefix: &str, root: &Path) -> Result<usize> {
    let file = fsx::open_regular(wheel, "wheel", false)?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::input(wheel.display(), format!("not a wheel (zip): {e}")))?;
    let prefix = Path::new(prefix);
    let mut written = 0;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| Error::input(wheel.display(), format!("entry {i}: {e}")))?;
        let raw = entry.name().to_string();
        let name = Path::new(&raw);
        let normal = name.components().all(|c| matches!(c, Component::Normal(_)));
        if !normal {
            return Err(Error::input(
                wheel.display(),
                format!("entry `{raw}` is not a plain relative path"),
            )
            .with_hint("a wheel whose entries escape its folder is never unpacked"));
        }
        let Ok(rel) = name.strip_prefix(prefix) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let mode = entry.unix_mode().unwrap_or(0o644);
        let kind = mode & 0o170000;
        let dest = root.join(rel);
        if entry.is_dir() {
            fsx::create_dir_all(&dest)?;
            continue;
        }
        if entry.is_symlink() || (kind != 0 && kind != 0o100000) {
            return Err(Error::input(
                wheel.display(),
                format!("entry `{raw}` is not a regular file (mode {mode:o})"),
            )
            .with_hint("links and devices in a wheel are refused"));
        }
        if dest.symlink_metadata().is_ok() {
            return Err(Error::input(
                wheel.display(),
                format!("entry `{raw}` is also in another wheel of the toolkit"),
            ));
        }
        fsx::create_dir_all(&fsx::parent_of(&dest))?;
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| Error::input(wheel.display(), format!("entry `{raw}`: {e}")))?;
        let exec = mode & 0o111 != 0;
        // No fsync per file (a toolkit is ~2,000 files): the folder is published by one rename
        // after the tree digest is taken, and every later use re-checks that digest, so a file
        // lost in a crash is found, never used.
        write_new(&dest, &bytes, if exec { 0o755 } else { 0o644 })?;
        written += 1;
    }
    Ok(written)
}

/// Give the unpacked tree a toolkit's layout: `lib64 -> lib`, unversioned `.so` links for
/// versioned libraries, `nvvm/lib64 -> lib`, and the link-time `lib/stubs/libcuda.so`.
/// Returns the number of functions the stub exports.
pub fn assemble(root: &Path, note: Note) -> Result<usize> {
    let lib = root.join("lib");
    fsx::create_dir_all(&lib)?;
    link_if_absent(Path::new("lib"), &root.join("lib64"))?;
    let nvvm = root.join("nvvm");
    if nvvm.join("lib").is_dir() {
        link_if_absent(Path::new("lib"), &nvvm.join("lib64"))?;
    }
    for dir in [lib.clone(), nvvm.join("lib")] {
        if dir.is_dir() {
            unversioned_links(&dir)?;
        }
    }
    let header = root.join("include").join("cuda.h");
    if !header.is_file() {
        return Err(Error::input(
            root.display(),
            "the toolkit has no include/cuda.h: the stub libcuda.so cannot be made",
        )
        .with_hint("the lock must include nvidia-cuda-runtime (cuda.h) and nvidia-cuda-crt"));
    }
    let symbols = driver_symbols(&header)?;
    note(
        "stub",
        &format!("libcuda.so with {} functions", symbols.len()),
    );
    write_stub(&symbols, &lib.join("stubs"))?;
    Ok(symbols.len())
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .at("create", path)?;
    f.write_all(bytes).at("write", path)
}

fn link_if_absent(target: &Path, link: &Path) -> Result<()> {
    if link.symlink_metadata().is_err() {
        std::os::unix::fs::symlink(target, link).at("create link", link)?;
    }
    Ok(())
}

/// `libfoo.so.13.1.80` (or `.so.13`) gets `libfoo.so.13` and `libfoo.so` links when absent.
fn unversioned_links(dir: &Path) -> Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .at("read directory", dir)?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    for n in &names {
        let Some(i) = n.find(".so.") else { continue };
        let base = &n[..i + 3];
        let major: String = n[i + 4..].chars().take_while(|c| *c != '.').collect();
        for link in [base.to_string(), format!("{base}.{major}")] {
            if link != *n {
                link_if_absent(Path::new(n), &dir.join(&link))?;
            }
        }
    }
    Ok(())
}

/// The driver API functions `cuda.h` declares, after the preprocessor has mapped names such as
/// `cuCtxCreate` to the versioned symbols (`cuCtxCreate_v4`) that code actually links against.
pub fn driver_symbols(header: &Path) -> Result<BTreeSet<String>> {
    let include = fsx::parent_of(header);
    let mut cmd = Command::new("cc");
    cmd.args(["-E", "-P", "-x", "c", "-I"])
        .arg(&include)
        .arg(header);
    let out = process::run(&mut cmd, "install a C compiler (cc)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(declared_cu_functions(&text))
}

/// Function names `cu…` declared as `CUresult … cuName(` in preprocessed C text.
pub fn declared_cu_functions(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // Declarations may span lines; a flat token stream is enough: `CUresult` then (after
    // attributes) an identifier followed by `(`.
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for piece in flat.split("CUresult ").skip(1) {
        let ident: String = piece
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let rest = piece.trim_start()[ident.len()..].trim_start();
        if ident.starts_with("cu") && rest.starts_with('(') {
            out.insert(ident);
        }
    }
    out
}

/// Compile `libcuda.so` (SONAME `libcuda.so.1`) whose every function returns
/// CUDA_ERROR_STUB_LIBRARY (34): linking works, running against it fails loudly.
fn write_stub(symbols: &BTreeSet<String>, dir: &Path) -> Result<()> {
    fsx::create_dir_all(dir)?;
    let mut src = String::from("/* generated by pinforge: link-time stub of the CUDA driver */\n");
    for s in symbols {
        src.push_str(&format!("int {s}(void) {{ return 34; }}\n"));
    }
    let c = dir.join("libcuda-stub.c");
    fsx::write_atomic(&c, src.as_bytes())?;
    let so = dir.join("libcuda.so");
    let mut cmd = Command::new("cc");
    cmd.args(["-shared", "-fPIC", "-O0", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&so)
        .arg(&c);
    process::run(&mut cmd, "install a C compiler (cc)")?;
    std::fs::remove_file(&c).at("remove", &c)?;
    Ok(())
}

fn nvcc_release_line(nvcc: &Path) -> Result<String> {
    let out = process::run(Command::new(nvcc).arg("--version"), "")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("release"))
        .unwrap_or("")
        .trim()
        .to_string())
}

/// A system CUDA toolkit (`cuda-root` without `cuda-toolkit`): its `bin/nvcc` must exist.
/// A missing one is an input error that says where pinforge looked and that the PyPI packages
/// cannot stand in for 12.x.
pub fn check_system_root(root: &str, toolchain: &str, nvcc: Option<&str>) -> Result<()> {
    let bin = Path::new(root).join("bin").join("nvcc");
    let named = nvcc.map(PathBuf::from);
    let found = bin.is_file() || named.as_ref().is_some_and(|p| p.is_file());
    if found {
        return Ok(());
    }
    Err(Error::input(
        format!("toolchain `{toolchain}`"),
        format!(
            "no CUDA toolkit at {root} (looked for {}{})",
            bin.display(),
            named
                .filter(|p| *p != bin)
                .map(|p| format!(" and {}", p.display()))
                .unwrap_or_default()
        ),
    )
    .with_hint(
        "install that CUDA version from NVIDIA (runfile or apt repository) at that path; the \
         PyPI nvidia-cuda-nvcc 12.x packages hold only ptxas, so pinforge cannot provision a \
         12.x compiler (13.x toolkits can be: use `cuda-toolkit = \"cuda-13.1.1\"`)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lock_text(file: &str) -> String {
        format!(
            "name = \"cuda-13.1.1\"\nnvcc-version = \"13.1.115\"\nprefix = \"nvidia/cu13\"\n\
             [[wheel]]\nname = \"nvidia-cuda-nvcc\"\nversion = \"13.1.115\"\nfile = \"{file}\"\n\
             sha256 = \"{}\"\n",
            "ab".repeat(32)
        )
    }

    #[test]
    fn a_lock_names_wheels_by_plain_file_names_that_agree_with_name_and_version() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("cuda.toml");
        std::fs::write(
            &p,
            lock_text("nvidia_cuda_nvcc-13.1.115-py3-none-manylinux_2_27_x86_64.whl"),
        )
        .expect("write");
        let l = load_lock(&p).expect("lock");
        assert_eq!(l.wheels.len(), 1);
        assert_eq!(l.nvcc_version, "13.1.115");
        for bad in [
            "../x-13.1.115.whl",
            "nvidia_cuda_nvcc-13.1.115-py3/../../x.whl",
            "nvidia_cuda_crt-13.1.115-py3-none-any.whl",
            "nvidia_cuda_nvcc-13.0.88-py3-none-any.whl",
            "nvidia_cuda_nvcc-13.1.115-py3-none-any.zip",
        ] {
            std::fs::write(&p, lock_text(bad)).expect("write");
            let e = load_lock(&p).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
            assert!(e.to_string().contains("cuda.toml"), "{e}");
        }
        std::fs::write(
            &p,
            "name = \"x\"\nnvcc-version = \"1\"\nprefix = \"/abs\"\nwheel = []\n",
        )
        .expect("write");
        assert_eq!(load_lock(&p).expect_err("empty").exit_code(), 2);
        std::fs::write(&p, b"\xff\xfe").expect("write");
        assert!(load_lock(&p)
            .expect_err("utf8")
            .to_string()
            .contains("UTF-8"));
    }

    #[test]
    fn cu_functions_are_read_after_the_preprocessor_renamed_them() {
        let text = "typedef int CUresult;\nCUresult cuInit(unsigned int Flags);\n\
                    extern CUresult\n  cuCtxCreate_v4 (int *p);\nint cuNotAResult(void);\n\
                    CUresult (*fnptr)(void);\n";
        let s = declared_cu_functions(text);
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec!["cuCtxCreate_v4".to_string(), "cuInit".to_string()]
        );
    }

    fn zip_with(entries: &[(&str, &[u8], u32)]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("tmp");
        let mut z = zip::ZipWriter::new(f.reopen().expect("reopen"));
        for (name, bytes, mode) in entries {
            let o = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
            z.start_file(*name, o).expect("start");
            z.write_all(bytes).expect("write");
        }
        z.finish().expect("finish");
        f
    }

    #[test]
    fn unpacking_takes_the_prefix_only_and_refuses_escapes_and_links() {
        let z = zip_with(&[
            ("nvidia/cu13/bin/nvcc", b"#!/bin/sh\n", 0o755),
            ("nvidia/cu13/include/cuda.h", b"/* h */\n", 0o644),
            ("nvidia_cuda_nvcc-13.1.115.dist-info/RECORD", b"x", 0o644),
        ]);
        let root = tempfile::tempdir().expect("tempdir");
        let n = unpack_wheel(z.path(), "nvidia/cu13", root.path()).expect("unpack");
        assert_eq!(n, 2);
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(root.path().join("bin/nvcc")).expect("nvcc");
        assert_eq!(m.permissions().mode() & 0o777, 0o755);
        assert!(!root
            .path()
            .join("nvidia_cuda_nvcc-13.1.115.dist-info")
            .exists());
        // The same entry from a second wheel is refused rather than overwritten.
        let e = unpack_wheel(z.path(), "nvidia/cu13", root.path()).expect_err("twice");
        assert!(e.to_string().contains("another wheel"), "{e}");

        let link = tempfile::NamedTempFile::new().expect("tmp");
        {
            let mut z = zip::ZipWriter::new(link.reopen().expect("reopen"));
            let o = zip::write::SimpleFileOptions::default();
            z.add_symlink("nvidia/cu13/lib/link", "/etc/passwd", o)
                .expect("symlink");
            z.finish().expect("finish");
        }
        let r = tempfile::tempdir().expect("tempdir");
        let e = unpack_wheel(link.path(), "nvidia/cu13", r.path()).expect_err("link");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        for (name, mode) in [("nvidia/cu13/../../escape", 0o644), ("/abs/file", 0o644)] {
            let z = zip_with(&[(name, b"x", mode)]);
            let r = tempfile::tempdir().expect("tempdir");
            let e = unpack_wheel(z.path(), "nvidia/cu13", r.path()).expect_err(name);
            assert_eq!(e.exit_code(), 2, "{name}: {e}");
            assert_eq!(
                std::fs::read_dir(r.path()).expect("dir").count(),
                0,
                "{name}"
            );
        }
        let not_zip = tempfile::NamedTempFile::new().expect("tmp");
        std::fs::write(not_zip.path(), b"not a zip").expect("write");
        let r = tempfile::tempdir().expect("tempdir");
        assert!(unpack_wheel(not_zip.path(), "nvidia/cu13", r.path())
            .expect_err("zip")
            .to_string()
            .contains("not a wheel"));
    }

    #[test]
    fn assembly_adds_the_toolkit_layout_and_a_stub_driver_with_the_right_soname() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        std::fs::create_dir_all(r.join("lib")).expect("mkdir");
        std::fs::create_dir_all(r.join("include")).expect("mkdir");
        std::fs::write(r.join("lib/libcudart.so.13.1.80"), b"elf").expect("write");
        std::fs::write(
            r.join("include/cuda.h"),
            "typedef int CUresult;\n#define cuCtxCreate cuCtxCreate_v4\n\
             CUresult cuInit(unsigned int f);\nCUresult cuCtxCreate(void **c);\n",
        )
        .expect("write");
        let n = assemble(r, &|_, _| {}).expect("assemble");
        assert_eq!(n, 2);
        assert_eq!(
            std::fs::read_link(r.join("lib64")).expect("lib64"),
            Path::new("lib")
        );
        assert_eq!(
            std::fs::read_link(r.join("lib/libcudart.so")).expect("link"),
            Path::new("libcudart.so.13.1.80")
        );
        assert!(r.join("lib/libcudart.so.13").exists());
        let so = r.join("lib/stubs/libcuda.so");
        let out = Command::new("readelf")
            .args(["-d", "--dyn-syms"])
            .arg(&so)
            .output()
            .expect("readelf");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("[libcuda.so.1]"), "{text}");
        assert!(text.contains("cuCtxCreate_v4"), "{text}");
        assert!(!text.contains(" cuCtxCreate\n"), "{text}");
    }

    #[test]
    fn a_missing_system_toolkit_says_where_it_looked_and_why_pypi_cannot_help() {
        let e = check_system_root("/nonexistent/cuda-12.8", "cuda128", None).expect_err("none");
        assert_eq!(e.exit_code(), 2);
        let s = format!("{e} {}", e.hint().unwrap_or(""));
        assert!(s.contains("/nonexistent/cuda-12.8/bin/nvcc"), "{s}");
        assert!(s.contains("only ptxas"), "{s}");
    }
}
