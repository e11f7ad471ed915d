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

use crate::base::error::{Error, Result};
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
    /// The toolkit file it was copied from.
    pub from: PathBuf,
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

/// The CUDA toolkit's redistributable runtime libraries: the only names ever shipped. A
/// system nvcc's root can be `/usr` or a conda prefix, whose `lib/` also holds libstdc++ and
/// libc; those belong to the machine, not to the toolkit.
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

fn is_cuda_runtime(soname: &str) -> bool {
    RUNTIME_PREFIXES.iter().any(|p| soname.starts_with(p))
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

/// Copy into `stage/lib` every library that the staged ELF files in `lib/` need, directly or
/// through each other, and that the toolkit at `root` provides. Idempotent: a name already in
/// `lib/` (a file or a link the install rules made) is left alone.
pub(crate) fn ship(stage: &Path, root: &Path) -> Result<Shipping> {
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
        let f = crate::base::fsx::open_regular(&file, "staged library", true)?;
        let Some(needed) = crate::base::elf::needed_of_file(f) else {
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
            copy_atomic(&real, &dest)?;
            shipped.push(Shipped {
                path: format!("lib/{name}"),
                from: real,
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

/// Copy through a temporary name and rename: a killed build leaves no half library under the
/// name the loader looks for.
fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    let dir = crate::base::fsx::parent_of(to);
    let tmp = tempfile::Builder::new()
        .prefix(".pinforge-ship-")
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create", &dir, e))?;
    crate::base::fsx::copy_file(from, tmp.path())?;
    tmp.persist(to)
        .map_err(|e| Error::io("rename", to, e.error))?;
    Ok(())
}

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
        let Shipping { shipped, missing } = ship(&stage, &root).expect("ship");
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
        assert_eq!(ship(&stage, &root).expect("ship"), Shipping::default());

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
        let e = ship(&stage2, &root).expect_err("outside the toolkit");
        assert!(e.to_string().contains("resolves outside"), "{e}");
        assert!(!stage2.join("lib/libcudart.so.99").exists());
    }
}
