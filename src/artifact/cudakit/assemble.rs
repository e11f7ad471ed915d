//! Turning verified wheels into a toolkit tree: unpack each wheel's prefix with the same
//! refusals as archive pins, give the tree a toolkit install's layout, and make the link-time
//! stub `libcuda.so` from the toolkit's own `cuda.h` (see [`super`] for why).

use super::Note;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::base::process;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path};
use std::process::Command;

/// Unpack the entries of `wheel` under `prefix/` into `root`, refusing anything that is not a
/// plain relative file or folder. Entries outside the prefix (`*.dist-info`, `__init__.py`)
/// are skipped. Returns the number of files written.
pub(crate) fn unpack_wheel(wheel: &Path, prefix: &str, root: &Path) -> Result<usize> {
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
pub(crate) fn assemble(root: &Path, note: Note) -> Result<usize> {
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
pub(crate) fn driver_symbols(header: &Path) -> Result<BTreeSet<String>> {
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
pub(crate) fn declared_cu_functions(text: &str) -> BTreeSet<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
}
