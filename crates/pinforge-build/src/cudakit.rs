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

mod assemble;
pub(crate) mod seal;
mod unpack;

pub(crate) use assemble::assemble;
pub(crate) use unpack::unpack_wheel;

use pinforge_base::digest::{tree_digest, Sha256};
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::process;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
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

/// The id of the on-disk `toolkit.json` record: a document of its own shape, so not the id of
/// `toolkit --json` (which adds `root` and `assembled`). Readers do not dispatch on it, so a
/// cache written under the older shared id still reads.
pub(crate) const RECORD_SCHEMA: &str = "pinforge.toolkit-record/v1";

/// How a provisioned toolkit's root is written in CMake arguments (and so in the input digest):
/// the build substitutes `bin/nvcc`'s grandparent for it.
pub(crate) const ROOT_TEMPLATE: &str = "${TOOLKIT}";

/// A provisioned, verified toolkit.
#[derive(Debug, Clone)]
pub struct Toolkit {
    /// `CUDAToolkit_ROOT`.
    pub root: PathBuf,
    /// Its record.
    pub record: ToolkitRecord,
    /// Whether this call assembled it (false: reused after re-verification).
    pub assembled: bool,
    /// The sealed runtime files (see [`seal`]); `None` for a toolkit assembled before them.
    pub runtime: Option<seal::RuntimeRecord>,
}

impl Toolkit {
    /// The toolkit's `nvcc`.
    pub(crate) fn nvcc(&self) -> PathBuf {
        self.root.join("bin").join("nvcc")
    }
}

use pinforge_base::names::is_plain_name;

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
            .map(|s| pinforge_source::recipe::line_col(text, s.start))
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
pub(crate) type Note<'a> = &'a dyn Fn(&str, &str);

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
    sweep_stale(&base)?;
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
            runtime: seal::load(&dir)?,
        });
    }
    let wheels_dir = base.join("wheels");
    fsx::create_dir_all(&wheels_dir)?;
    let wheels = fetch_wheels(lock, &wheels_dir, tool_dirs, note)?;

    // Assemble in a temp folder beside the destination; one rename publishes it whole. The
    // folder is removed on every error (the guard's drop), and one left by a killed run is
    // swept by the next provisioner (`sweep_stale`).
    let tmp = tempfile::Builder::new()
        .prefix(ASSEMBLE_PREFIX)
        .tempdir_in(&base)
        .at("create temp folder in", &base)?;
    let root = tmp.path().join("root");
    fsx::create_dir_all(&root)?;
    for (w, file) in lock.wheels.iter().zip(wheels) {
        note("unpack", &w.file);
        unpack_wheel(file, &wheels_dir.join(&w.file), &lock.prefix, &root)?;
    }
    let stub_symbols = assemble(&root, note)?;
    let nvcc = root.join("bin").join("nvcc");
    let line = nvcc_release_line(&nvcc)?;
    let version =
        crate::toolchain::parse_version(crate::toolchain::Role::Nvcc, &line).unwrap_or_default();
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
    // Sealed before the tree digest (which records the execute bit only, so sealing does not
    // change it): a build ships these by link (see `seal`).
    let runtime = seal::seal_runtime(&root)?;
    seal::write(tmp.path(), &runtime)?;
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
    // Renamed from under the guard: if the rename fails the guard still removes the folder, and
    // once it succeeded the guard finds nothing left to remove.
    std::fs::rename(tmp.path(), &dir).at("publish toolkit", &dir)?;
    drop(tmp);
    fsx::sync_dir(&base)?;
    Ok(Toolkit {
        root: dir.join("root"),
        record,
        assembled: true,
        runtime: Some(runtime),
    })
}

/// Temp folders of an assembly (`toolkits/.assemble-*`) and of a download
/// (`toolkits/wheels/.fetch-*`).
const ASSEMBLE_PREFIX: &str = ".assemble-";
const FETCH_PREFIX: &str = ".fetch-";

/// Remove the temp folders a killed provisioner left. Only a provisioner holding the cache's
/// lock creates them, and the caller holds it now, so every one found is stale.
fn sweep_stale(base: &Path) -> Result<()> {
    for (dir, prefix) in [
        (base.to_path_buf(), ASSEMBLE_PREFIX),
        (base.join("wheels"), FETCH_PREFIX),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let stale = e
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(prefix))
                && e.file_type().is_ok_and(|t| t.is_dir());
            if stale {
                let p = e.path();
                std::fs::remove_dir_all(&p).at("remove stale temp folder", &p)?;
            }
        }
    }
    Ok(())
}

/// A wheel file opened for reading, its SHA-256, and the file positioned at its start again.
fn open_hashed(path: &Path) -> Result<(Sha256, std::fs::File)> {
    use std::io::{Seek, SeekFrom};
    let mut file = fsx::open_regular(path, "wheel", false)?;
    // The digest is taken through a second descriptor of the same open file; the wheel is then
    // unpacked from this one, so the bytes unpacked are the bytes hashed even if the path is
    // replaced in between.
    let dup = file.try_clone().at("read", path)?;
    let (digest, _) = Sha256::of_reader(dup, path)?;
    file.seek(SeekFrom::Start(0)).at("read", path)?;
    Ok((digest, file))
}

/// Make sure every wheel of `lock` is in `dir` with its locked digest: a file already there
/// is checked, a missing one is downloaded with pip (`--require-hashes`), and every file is
/// hashed here again before it is used. Returns the verified wheels open, in lock order.
fn fetch_wheels(
    lock: &ToolkitLock,
    dir: &Path,
    tool_dirs: &[PathBuf],
    note: Note,
) -> Result<Vec<std::fs::File>> {
    let mut files = Vec::with_capacity(lock.wheels.len());
    let mut missing = Vec::new();
    for (i, w) in lock.wheels.iter().enumerate() {
        let p = dir.join(&w.file);
        let have = match p.symlink_metadata() {
            Ok(_) => Some(open_hashed(&p)?).filter(|(d, _)| *d == w.sha256),
            Err(_) => None,
        };
        if have.is_none() {
            missing.push(i);
        }
        files.push(have.map(|(_, f)| f));
    }
    if !missing.is_empty() {
        let tmp = tempfile::Builder::new()
            .prefix(FETCH_PREFIX)
            .tempdir_in(dir)
            .at("create temp folder in", dir)?;
        let reqs: String = missing
            .iter()
            .map(|&i| &lock.wheels[i])
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
        for &i in &missing {
            let w = &lock.wheels[i];
            let got = tmp.path().join(&w.file);
            let (digest, file) = open_hashed(&got)?;
            if digest != w.sha256 {
                return Err(Error::check(
                    got.display(),
                    format!("SHA-256 {digest}, the lock says {}", w.sha256),
                )
                .with_hint("the registry served different bytes; check the lock"));
            }
            // The open descriptor follows the file through the rename.
            std::fs::rename(&got, dir.join(&w.file)).at("store wheel", &got)?;
            files[i] = Some(file);
        }
    }
    files
        .into_iter()
        .zip(&lock.wheels)
        .map(|(f, w)| {
            f.ok_or_else(|| {
                Error::Internal(format!("wheel {} was neither found nor fetched", w.file))
            })
        })
        .collect()
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
pub(crate) fn check_system_root(root: &str, toolchain: &str, nvcc: Option<&str>) -> Result<()> {
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

    #[test]
    fn shipped_toolkit_locks_parse() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("recipes/toolkits");
        for (name, nvcc) in [("cuda-13.1.1", "13.1.115"), ("cuda-13.0.2", "13.0.88")] {
            let l = load_lock(&dir.join(format!("{name}.toml"))).expect(name);
            assert_eq!((l.name.as_str(), l.nvcc_version.as_str()), (name, nvcc));
            assert_eq!(l.wheels.len(), 6, "{name}");
        }
    }

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
    fn a_missing_system_toolkit_says_where_it_looked_and_why_pypi_cannot_help() {
        let e = check_system_root("/nonexistent/cuda-12.8", "cuda128", None).expect_err("none");
        assert_eq!(e.exit_code(), 2);
        let s = format!("{e} {}", e.hint().unwrap_or(""));
        assert!(s.contains("/nonexistent/cuda-12.8/bin/nvcc"), "{s}");
        assert!(s.contains("only ptxas"), "{s}");
    }
}
