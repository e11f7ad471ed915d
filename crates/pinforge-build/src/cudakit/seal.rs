//! The assembled toolkit's runtime libraries, sealed and recorded file by file, so that a build
//! can ship them into its stage by hard link instead of copying ~557 MB (issue #22).
//!
//! At assembly every runtime library in `root/lib` (the names [`is_cuda_runtime`] accepts) loses
//! its write bits, and `runtime.json` beside `toolkit.json` records its digest, size, device,
//! inode and modification time. A build then checks each file it ships against that record:
//! same inode, size and mtime and still read-only is "unchanged" without reading a byte (the
//! tree digest already re-hashed the whole toolkit when it was provisioned for this build);
//! when the metadata moved (a restored backup, a copied cache), the file is hashed and is
//! unchanged only if its digest is the recorded one. ctime is not compared: making the hard
//! link itself changes it. Anything else is copied, and the build says why.
//!
//! A read-only file linked into a stage stays read-only there: nothing downstream may chmod a
//! staged file in place (install writes its own objects, and hard-links a staged file only when
//! its mode already is the sealed one, without chmod).

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The CUDA toolkit's redistributable runtime libraries: the only names ever shipped (and
/// sealed). A system nvcc's root can be `/usr` or a conda prefix, whose `lib/` also holds
/// libstdc++ and libc; those belong to the machine, not to the toolkit.
const RUNTIME_PREFIXES: &[&str] = &[
    "libcudart.so",
    "libcublas.so",
    "libcublasLt.so",
    "libcufft.so",
    "libcurand.so",
    "libcusparse.so",
    "libcusolver.so",
    "libnvrtc.so",
    "libnvrtc-builtins.so",
    "libnvJitLink.so",
    "libnvToolsExt.so",
    "libnvblas.so",
];

/// Whether `soname` is one of the toolkit's redistributable runtime libraries.
pub(crate) fn is_cuda_runtime(soname: &str) -> bool {
    RUNTIME_PREFIXES.iter().any(|p| soname.starts_with(p))
}

/// The file beside `toolkit.json` holding the sealed runtime files' records.
pub(crate) const RUNTIME_FILE: &str = "runtime.json";
/// Its schema id.
pub(crate) const RUNTIME_SCHEMA: &str = "pinforge.toolkit-runtime/v1";

/// One sealed runtime file as assembled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedFile {
    /// Path relative to the toolkit root (`lib/libcudart.so.13.1.80`).
    pub path: String,
    /// SHA-256 of its bytes.
    pub sha256: Sha256,
    /// Size in bytes.
    pub size: u64,
    /// Device and inode of the file at assembly.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
}

/// `runtime.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeRecord {
    /// [`RUNTIME_SCHEMA`].
    pub schema: String,
    /// The sealed files, by path.
    pub files: Vec<SealedFile>,
}

impl RuntimeRecord {
    /// The record of the file at `rel` (relative to the toolkit root).
    pub(crate) fn get(&self, rel: &str) -> Option<&SealedFile> {
        self.files.iter().find(|f| f.path == rel)
    }
}

fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec()
}

/// Seal the runtime libraries in `root/lib` read-only and record them. Links (the unversioned
/// names assembly made) are names of the same files and are not recorded.
pub(crate) fn seal_runtime(root: &Path) -> Result<RuntimeRecord> {
    let lib = root.join("lib");
    let mut files = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&lib)
        .at("read directory", &lib)?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| is_cuda_runtime(n))
        .collect();
    names.sort();
    for n in names {
        let p = lib.join(&n);
        let mode = std::fs::symlink_metadata(&p)
            .at("stat", &p)?
            .permissions()
            .mode();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o555))
            .at("chmod", &p)?;
        let (sha256, size) = Sha256::of_file(&p)?;
        let m = std::fs::symlink_metadata(&p).at("stat", &p)?;
        files.push(SealedFile {
            path: format!("lib/{n}"),
            sha256,
            size,
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: mtime_ns(&m),
        });
    }
    Ok(RuntimeRecord {
        schema: RUNTIME_SCHEMA.into(),
        files,
    })
}

/// Write the record into the toolkit's folder (inside the assembly's temp folder: it is
/// published with the toolkit by the same rename).
pub(crate) fn write(dir: &Path, record: &RuntimeRecord) -> Result<()> {
    let json = serde_json::to_vec_pretty(record)
        .map_err(|e| Error::Internal(format!("toolkit runtime record: {e}")))?;
    fsx::write_atomic(&dir.join(RUNTIME_FILE), &json)
}

/// The record of a toolkit folder; `None` for a toolkit assembled before records existed.
pub(crate) fn load(dir: &Path) -> Result<Option<RuntimeRecord>> {
    let path = dir.join(RUNTIME_FILE);
    let Some(bytes) = fsx::read_if_present(&path)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::check(path.display(), format!("unreadable: {e}")))
}

/// Whether the file at `path` is still the sealed file `rec` records: `Ok(())` when it may be
/// shipped by link, `Err(why)` when it must be copied. `Err` of the outer result is an I/O
/// failure.
pub(crate) fn unchanged(rec: &SealedFile, path: &Path) -> Result<std::result::Result<(), String>> {
    let m = std::fs::metadata(path).at("stat", path)?;
    if m.permissions().mode() & 0o222 != 0 {
        return Ok(Err("writable, no longer sealed".into()));
    }
    if m.len() == rec.size
        && m.dev() == rec.dev
        && m.ino() == rec.ino
        && mtime_ns(&m) == rec.mtime_ns
    {
        return Ok(Ok(()));
    }
    // Moved metadata alone is no change: the bytes decide.
    let (sha, size) = Sha256::of_file(path)?;
    if sha == rec.sha256 && size == rec.size {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "changed since assembly (SHA-256 {}, recorded {})",
        sha.short(12),
        rec.sha256.short(12)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_files_are_read_only_and_unchanged_until_their_bytes_change() {
        let d = tempfile::tempdir().expect("tmp");
        let lib = d.path().join("lib");
        std::fs::create_dir_all(&lib).expect("mkdir");
        std::fs::write(lib.join("libcudart.so.13.1.80"), b"cudart").expect("write");
        std::fs::write(lib.join("libstdc++.so.6"), b"machine").expect("write");
        std::os::unix::fs::symlink("libcudart.so.13.1.80", lib.join("libcudart.so.13"))
            .expect("ln");
        let r = seal_runtime(d.path()).expect("seal");
        let paths: Vec<&str> = r.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["lib/libcudart.so.13.1.80"]);
        let p = lib.join("libcudart.so.13.1.80");
        let mode = std::fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o444);
        let other = std::fs::metadata(lib.join("libstdc++.so.6")).expect("stat");
        assert_eq!(
            other.permissions().mode() & 0o777,
            0o644,
            "not the toolkit's"
        );
        write(d.path(), &r).expect("write");
        let r = load(d.path()).expect("load").expect("present");
        let rec = r.get("lib/libcudart.so.13.1.80").expect("rec");
        assert_eq!(unchanged(rec, &p).expect("check"), Ok(()));
        // A copy elsewhere (another inode) with the same bytes: hashed, still unchanged.
        let copy = d.path().join("copy");
        std::fs::write(&copy, b"cudart").expect("write");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        assert_eq!(unchanged(rec, &copy).expect("check"), Ok(()));
        // Made writable, or other bytes: not the sealed file.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let why = unchanged(rec, &p).expect("check").expect_err("writable");
        assert!(why.contains("writable"), "{why}");
        std::fs::write(&p, b"CUDART").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let why = unchanged(rec, &p).expect("check").expect_err("changed");
        assert!(why.contains("changed since assembly"), "{why}");
        assert!(load(&d.path().join("nowhere")).expect("load").is_none());
    }
}
