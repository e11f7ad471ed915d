//! CUDA runtime libraries shipped beside the engine. `libggml-cuda` needs `libcudart`,
//! `libcublas` and `libcublasLt` from the toolkit it was built with, and its run path is
//! `$ORIGIN` (see the configure arguments): without copies beside it, libllama fails to load on
//! any machine where that exact toolkit is not on the loader's path — every machine but the
//! builder's, and for a provisioned toolkit even the builder's. So every library the staged
//! libraries need (transitively) that the toolkit provides is copied into the staged `lib/`,
//! becomes an artifact with its digest, and is marked `shipped_from` the toolkit in the manifest,
//! as Ollama and the CUDA wheels themselves ship their runtime.
//!
//! The driver is never shipped: `libcuda.so.1` belongs to the machine's driver (the toolkit's
//! `lib/stubs/libcuda.so` exists for linking only and must never be found at run time), and so do
//! `libnvidia-*`. A variant built without the VMM pool does not need it at all, which is what
//! lets the engine load, and fall back to the CPU, on a machine without a driver.

use crate::cudakit::seal::{self, is_cuda_runtime, RuntimeRecord};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What [`ship`] did: the libraries shipped, and the runtime names needed that the toolkit
/// does not hold (the machine's loader must find those, or the engine will not load).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Shipping {
    /// Shipped libraries, by artifact path.
    pub shipped: Vec<Shipped>,
    /// Needed CUDA runtime names found neither in the stage nor in the toolkit.
    pub missing: Vec<String>,
}

/// One shipped library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shipped {
    /// Artifact path relative to the stage (`lib/libcudart.so.13`).
    pub path: String,
    /// The toolkit file it was shipped from.
    pub from: PathBuf,
    /// `None`: hard-linked (the toolkit's sealed file, unchanged since assembly); else why it
    /// was copied instead.
    pub copied: Option<String>,
    /// When linked: the digest and size its assembly record holds for it (checked unchanged
    /// by [`seal::unchanged`]), so the stage need not read the file again to name it.
    pub known: Option<(Sha256, u64)>,
}

/// Where a toolkit root keeps its runtime libraries (a provisioned root and a system install).
fn search_dirs(root: &Path) -> Vec<PathBuf> {
    [
        "lib64",
        "lib",
        "targets/x86_64-linux/lib",
        "targets/sbsa-linux/lib",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect()
}

/// The driver's libraries, which the machine provides and no build may ship.
fn is_driver(soname: &str) -> bool {
    soname.starts_with("libcuda.so") || soname.starts_with("libnvidia-")
}

/// A `DT_NEEDED` value that can only be a plain file name (a crafted library could name
/// `../../etc/x`, which must not become a path).
fn is_plain_soname(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
}

/// Ship into `stage/lib` every library that the staged ELF files in `lib/` need, directly or
/// through each other, and that the toolkit at `root` provides: a hard link of the toolkit's
/// sealed file when `sealed` (its assembly record) says it is unchanged, else a copy (see
/// [`seal`]). Idempotent: a name already in `lib/` (a file or a link the install rules made) is
/// left alone.
pub(crate) fn ship(stage: &Path, root: &Path, sealed: Option<&RuntimeRecord>) -> Result<Shipping> {
    let lib = stage.join("lib");
    if !lib.is_dir() {
        return Ok(Shipping::default());
    }
    let real_root = std::fs::canonicalize(root).map_err(|e| Error::io("resolve", root, e))?;
    let dirs = search_dirs(root);
    let mut queue: Vec<PathBuf> = elf_files(&lib)?;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut shipped = Vec::new();
    let mut missing = Vec::new();
    while let Some(file) = queue.pop() {
        let f = pinforge_base::fsx::open_regular(&file, "staged library", true)?;
        let Some(needed) = pinforge_base::elf::needed_of_file(f) else {
            continue;
        };
        for name in needed {
            if is_driver(&name)
                || !is_cuda_runtime(&name)
                || !is_plain_soname(&name)
                || !seen.insert(name.clone())
            {
                continue;
            }
            if std::fs::symlink_metadata(lib.join(&name)).is_ok() {
                continue;
            }
            let Some(src) = dirs.iter().map(|d| d.join(&name)).find(|p| p.exists()) else {
                missing.push(name);
                continue;
            };
            let real = std::fs::canonicalize(&src).map_err(|e| Error::io("resolve", &src, e))?;
            // A link out of the toolkit would ship some other file under the runtime's name.
            if !real.starts_with(&real_root) {
                return Err(Error::check(
                    src.display(),
                    format!(
                        "`{name}` in the CUDA toolkit resolves outside it, to {}",
                        real.display()
                    ),
                )
                .with_hint("repair the toolkit (a provisioned one: delete its cache folder and build again)"));
            }
            if !std::fs::metadata(&real).is_ok_and(|m| m.is_file()) {
                return Err(Error::check(
                    src.display(),
                    format!("`{name}` in the CUDA toolkit is not a regular file"),
                ));
            }
            let dest = lib.join(&name);
            let placed = place(&real, &real_root, sealed, &dest)?;
            shipped.push(Shipped {
                path: format!("lib/{name}"),
                from: real,
                known: placed.as_ref().ok().copied(),
                copied: placed.err(),
            });
            queue.push(dest);
        }
    }
    shipped.sort_by(|a, b| a.path.cmp(&b.path));
    missing.sort();
    Ok(Shipping { shipped, missing })
}

/// The regular ELF files directly in `dir` (links are someone else's names for them).
fn elf_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io("read", dir, e))? {
        let e = e.map_err(|e| Error::io("read", dir, e))?;
        let ft = e
            .file_type()
            .map_err(|err| Error::io("stat", &e.path(), err))?;
        if ft.is_file() {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Put the toolkit file `real` at `to`: a hard link when its assembly record says it is the
/// sealed file, unchanged, else a copy. Returns the recorded digest and size when linked, else
/// why it was copied.
fn place(
    real: &Path,
    real_root: &Path,
    sealed: Option<&RuntimeRecord>,
    to: &Path,
) -> Result<std::result::Result<(Sha256, u64), String>> {
    let rel = real
        .strip_prefix(real_root)
        .ok()
        .and_then(|p| p.to_str())
        .unwrap_or_default();
    let verdict = match sealed.map(|r| r.get(rel)) {
        None => Err("the toolkit has no assembly record of its runtime files".to_string()),
        Some(None) => Err(format!("`{rel}` is not in the toolkit's assembly record")),
        Some(Some(rec)) => seal::unchanged(rec, real)?.map(|()| (rec.sha256, rec.size)),
    };
    let why = match verdict {
        Ok(known) => match link_atomic(real, to)? {
            None => return Ok(Ok(known)),
            Some(e) => format!("cannot hard-link ({e})"),
        },
        Err(why) => why,
    };
    copy_atomic(real, to)?;
    Ok(Err(why))
}

/// A temporary name beside `to`, to rename over it: a killed build leaves no half library
/// under the name the loader looks for.
fn temp_beside(to: &Path) -> Result<tempfile::TempPath> {
    let dir = pinforge_base::fsx::parent_of(to);
    Ok(tempfile::Builder::new()
        .prefix(".pinforge-ship-")
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create", &dir, e))?
        .into_temp_path())
}

/// Hard-link `from` at `to` (through a temporary name). `Ok(Some(e))`: the file system refused
/// the link (another file system, a link count limit), for the caller to copy instead.
fn link_atomic(from: &Path, to: &Path) -> Result<Option<std::io::Error>> {
    let tmp = temp_beside(to)?;
    std::fs::remove_file(&tmp).map_err(|e| Error::io("remove", &tmp, e))?;
    if let Err(e) = std::fs::hard_link(from, &tmp) {
        return match e.raw_os_error() {
            Some(libc::EXDEV | libc::EMLINK | libc::EPERM | libc::EOPNOTSUPP) => Ok(Some(e)),
            _ => Err(Error::io("link", &tmp, e)),
        };
    }
    // The name checked is the name linked: had `from` been replaced in between, the link is
    // some other file, and it is copied from the checked path's bytes instead.
    let (a, b) = (std::fs::metadata(from), std::fs::metadata(&tmp));
    if let (Ok(a), Ok(b)) = (&a, &b) {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if a.dev() == b.dev() && a.ino() == b.ino() && a.permissions().mode() & 0o222 == 0 {
            tmp.persist(to)
                .map_err(|e| Error::io("rename", to, e.error))?;
            return Ok(None);
        }
    }
    Ok(Some(std::io::Error::other(
        "the file changed while it was linked",
    )))
}

fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    let tmp = temp_beside(to)?;
    pinforge_base::fsx::copy_file(from, &tmp)?;
    tmp.persist(to)
        .map_err(|e| Error::io("rename", to, e.error))?;
    Ok(())
}

#[cfg(test)]
mod bench;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_and_crafted_names_are_never_shipped() {
        assert!(is_driver("libcuda.so.1"));
        assert!(is_driver("libnvidia-ml.so.1"));
        assert!(!is_driver("libcudart.so.13"));
        assert!(is_plain_soname("libcublasLt.so.13"));
        for bad in ["", "..", "../x.so", "a/b.so", "x\0y"] {
            assert!(!is_plain_soname(bad), "{bad:?}");
        }
    }

    #[test]
    fn needed_libraries_come_from_the_toolkit_transitively_and_nothing_else() {
        // A stage whose one library needs libc (the machine's) and `libcublas.so.99` (the
        // toolkit's), which itself needs `libcublasLt.so.99`: both toolkit libraries are shipped.
        // The libraries are built for real with the host compiler.
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("toolkit");
        let lib64 = root.join("lib64");
        std::fs::create_dir_all(&lib64).expect("mkdir");
        let stage = t.path().join("stage");
        std::fs::create_dir_all(stage.join("lib")).expect("mkdir");
        let src = t.path().join("x.c");
        std::fs::write(&src, "int pf(void) { return 1; }\n").expect("write");
        let cc = |out: &Path, extra: &[&str]| {
            // --no-as-needed: the stand-ins call nothing, yet must keep their DT_NEEDED.
            let ok = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-Wl,--no-as-needed", "-o"])
                .arg(out)
                .arg(&src)
                .args(extra)
                .status()
                .expect("cc")
                .success();
            assert!(ok);
        };
        cc(
            &lib64.join("libcublasLt.so.99"),
            &["-Wl,-soname,libcublasLt.so.99"],
        );
        let lb = format!("-L{}", lib64.display());
        cc(
            &lib64.join("libcublas.so.99.1"),
            &["-Wl,-soname,libcublas.so.99", &lb, "-l:libcublasLt.so.99"],
        );
        std::os::unix::fs::symlink("libcublas.so.99.1", lib64.join("libcublas.so.99")).expect("ln");
        // The stub of the driver sits in the toolkit too: never shipped.
        cc(&lib64.join("libcuda.so.1"), &["-Wl,-soname,libcuda.so.1"]);
        // A library of the machine's that happens to sit in the root (a system nvcc's `/usr`
        // or conda prefix): not the toolkit's runtime, never shipped.
        cc(&lib64.join("libfoo.so.1"), &["-Wl,-soname,libfoo.so.1"]);
        cc(
            &stage.join("lib/libengine.so"),
            &[
                &lb,
                "-l:libcublas.so.99",
                "-l:libcuda.so.1",
                "-l:libfoo.so.1",
            ],
        );
        let Shipping { shipped, missing } = ship(&stage, &root, None).expect("ship");
        assert_eq!(missing, Vec::<String>::new());
        let names: Vec<&str> = shipped.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(names, ["lib/libcublas.so.99", "lib/libcublasLt.so.99"]);
        assert_eq!(shipped[0].from, lib64.join("libcublas.so.99.1"));
        assert!(!stage.join("lib/libcuda.so.1").exists());
        // Shipped as regular files (the stage holds no link into the toolkit).
        let m = std::fs::symlink_metadata(stage.join("lib/libcublas.so.99")).expect("stat");
        assert!(m.file_type().is_file());
        assert!(!stage.join("lib/libfoo.so.1").exists());
        // Again: everything is already there, nothing is copied twice.
        assert_eq!(
            ship(&stage, &root, None).expect("ship"),
            Shipping::default()
        );

        // A runtime name that resolves outside the toolkit is refused, not shipped.
        let outside = t.path().join("elsewhere");
        std::fs::create_dir_all(&outside).expect("mkdir");
        cc(
            &outside.join("libcudart.so.99"),
            &["-Wl,-soname,libcudart.so.99"],
        );
        std::os::unix::fs::symlink(
            outside.join("libcudart.so.99"),
            lib64.join("libcudart.so.99"),
        )
        .expect("ln");
        let stage2 = t.path().join("stage2");
        std::fs::create_dir_all(stage2.join("lib")).expect("mkdir");
        cc(
            &stage2.join("lib/libengine.so"),
            &[&lb, "-l:libcudart.so.99"],
        );
        let e = ship(&stage2, &root, None).expect_err("outside the toolkit");
        assert!(e.to_string().contains("resolves outside"), "{e}");
        assert!(!stage2.join("lib/libcudart.so.99").exists());
    }

    /// `cc` a stand-in library with `soname` at `out`, needing `needs` (found through `-L dir`).
    /// Also the benchmark's (`bench.rs`) way of making real ELF stand-ins.
    pub(super) fn cc_lib(out: &Path, soname: &str, dir: &Path, needs: &[&str]) {
        let src = out.with_extension("c");
        std::fs::write(
            &src,
            format!("int pf_{}(void) {{ return 1; }}\n", soname.len()),
        )
        .expect("write");
        let mut cmd = std::process::Command::new("cc");
        cmd.args(["-shared", "-fPIC", "-Wl,--no-as-needed", "-o"])
            .arg(out)
            .arg(&src)
            .arg(format!("-Wl,-soname,{soname}"))
            .arg(format!("-L{}", dir.display()));
        for n in needs {
            cmd.arg(format!("-l:{n}"));
        }
        assert!(cmd.status().expect("cc").success());
        std::fs::remove_file(&src).expect("rm");
    }

    #[test]
    fn an_unchanged_sealed_runtime_file_is_linked_a_changed_one_copied_with_equal_digests() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("toolkit");
        let lib = root.join("lib");
        std::fs::create_dir_all(&lib).expect("mkdir");
        std::os::unix::fs::symlink("lib", root.join("lib64")).expect("ln");
        cc_lib(&lib.join("libcudart.so.99.1"), "libcudart.so.99", &lib, &[]);
        std::os::unix::fs::symlink("libcudart.so.99.1", lib.join("libcudart.so.99")).expect("ln");
        let record = seal::seal_runtime(&root).expect("seal");
        let real = lib.join("libcudart.so.99.1");
        let toolkit_meta = std::fs::metadata(&real).expect("stat");
        let stage_with = |name: &str, rec: Option<&RuntimeRecord>| {
            let stage = t.path().join(name);
            std::fs::create_dir_all(stage.join("lib")).expect("mkdir");
            cc_lib(
                &stage.join("lib/libengine.so"),
                "libengine.so",
                &lib,
                &["libcudart.so.99"],
            );
            let s = ship(&stage, &root, rec).expect("ship");
            assert_eq!(s.shipped.len(), 1, "{s:?}");
            let (artifacts, _) = crate::build::stage::collect(&stage).expect("collect");
            let a = artifacts
                .into_iter()
                .find(|a| a.path == "lib/libcudart.so.99")
                .expect("shipped artifact");
            // Linked: named by its record's digest, which is the digest of its bytes.
            let sh = &s.shipped[0];
            assert_eq!(sh.known.is_some(), sh.copied.is_none(), "{sh:?}");
            if let Some(known) = sh.known {
                assert_eq!(known, (a.sha256, a.size));
                let k = [(sh.path.clone(), sh.known)];
                let (fast, _, _) =
                    crate::build::stage::collect_examined(&stage, &k).expect("collect");
                assert!(
                    fast.iter().any(|f| f == &a),
                    "the known digest is the digest"
                );
            }
            let m = std::fs::symlink_metadata(stage.join(&a.path)).expect("stat");
            (s.shipped[0].copied.clone(), m, a.sha256)
        };
        // Unchanged since assembly: the stage holds the toolkit's own inode, still read-only.
        let (copied, m, linked_digest) = stage_with("linked", Some(&record));
        assert_eq!(copied, None);
        assert!(m.file_type().is_file());
        assert_eq!((m.dev(), m.ino()), (toolkit_meta.dev(), toolkit_meta.ino()));
        assert_eq!(m.nlink(), 2);
        assert_eq!(m.permissions().mode() & 0o222, 0, "sealed in the stage too");
        // Metadata moved but the bytes are the recorded ones (a restored cache): hashed, linked.
        let mut moved = record.clone();
        moved.files[0].ino += 1;
        let (copied, m, digest) = stage_with("moved", Some(&moved));
        assert_eq!(copied, None);
        assert_eq!(m.ino(), toolkit_meta.ino());
        assert_eq!(digest, linked_digest);
        // A record that does not match the file: copied (a new inode), and said why.
        let mut stale = record.clone();
        stale.files[0].ino += 1;
        stale.files[0].sha256 = pinforge_base::digest::Sha256::of_bytes(b"other bytes");
        let (copied, m, digest) = stage_with("stale", Some(&stale));
        let why = copied.expect("copied");
        assert!(why.contains("changed since assembly"), "{why}");
        assert_ne!(m.ino(), toolkit_meta.ino());
        assert_eq!(m.nlink(), 1);
        // No record at all (a system toolkit): copied, and said why.
        let (copied, m, digest_none) = stage_with("none", None);
        assert!(copied.expect("copied").contains("no assembly record"));
        assert_eq!(m.nlink(), 1);
        // The manifest's digest is the same whichever way the file was shipped.
        assert_eq!(digest, linked_digest);
        assert_eq!(digest_none, linked_digest);
        // The toolkit file itself was never touched: 4 stages, linked twice.
        let now = std::fs::metadata(&real).expect("stat");
        assert_eq!(now.nlink(), 3);
        assert_eq!(
            now.permissions().mode() & 0o777,
            0o555 & toolkit_meta.permissions().mode()
        );
    }
}
