//! Unpacking one verified wheel's prefix into a toolkit tree (issue #19 class 9). A ZIP's sizes
//! are claims made by the archive, so they are checked, never trusted: no buffer is sized from
//! them, every entry is streamed to its file through a read bounded by what it declares, an entry
//! that holds more or less than it declares is refused, and the declared sizes of the whole wheel
//! are summed (without overflow) and bounded by the wheel's own size before anything is written.
//! The wheel is read from the descriptor whose bytes were hashed against the lock, so the bound
//! comes from the bytes the lock pins (see `super::provision`).

use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_base::text::{self, Shown};
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// The most a wheel may declare unpacked, per byte of the wheel itself: 100:1, the bound Apache
/// POI's `ZipSecureFile` puts on an inflate ratio. The CUDA wheels unpack about 3:1 (binaries)
/// to 8:1 (headers); deflate can reach about 1,000:1, which is how a small wheel fills a disk.
pub(crate) const MAX_EXPANSION: u64 = 100;

/// How a byte count is shown in a refusal: exact, with a binary-unit gloss for large ones.
fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    match UNITS.iter().find(|(u, _)| n >= *u) {
        Some((u, name)) => format!("{n} bytes ({:.1} {name})", n as f64 / *u as f64),
        None => format!("{n} bytes"),
    }
}

/// One entry to write, as checked in the first pass.
struct Planned {
    index: usize,
    raw: String,
    rel: PathBuf,
    dir: bool,
    exec: bool,
    declared: u64,
}

/// Unpack the entries of the wheel open as `file` (named `wheel` in errors) under `prefix/` into
/// `root`, refusing anything that is not a plain relative file or folder. Entries outside the
/// prefix (`*.dist-info`, `__init__.py`) are skipped. Every entry is checked, and the declared
/// sizes bounded, before the first file is written. Returns the number of files written. On an
/// error, what was written stays in `root`: the caller's temp folder is removed whole.
pub(crate) fn unpack_wheel(
    file: std::fs::File,
    wheel: &Path,
    prefix: &str,
    root: &Path,
) -> Result<usize> {
    let wheel_len = file.metadata().at("stat", wheel)?.len();
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::input(wheel.display(), format!("not a wheel (zip): {e}")))?;
    let plan = plan(&mut zip, wheel, Path::new(prefix), wheel_len)?;
    let mut written = 0;
    let mut buf = vec![0u8; 1 << 16];
    for p in &plan {
        let dest = root.join(&p.rel);
        if p.dir {
            fsx::create_dir_all(&dest)?;
            continue;
        }
        if dest.symlink_metadata().is_ok() {
            return Err(Error::input(
                wheel.display(),
                format!(
                    "entry `{}` is also in another wheel of the toolkit (or twice in this one)",
                    Shown(&p.raw)
                ),
            ));
        }
        fsx::create_dir_all(&fsx::parent_of(&dest))?;
        let mut entry = zip
            .by_index(p.index)
            .map_err(|e| entry_error(wheel, &p.raw, &e.to_string()))?;
        let mut out = create_new(&dest, if p.exec { 0o755 } else { 0o644 })?;
        // One byte past the declared size is read, so that an entry holding more is seen;
        // `saturating_add` keeps a declared 2^64-1 from wrapping to a bound of 0.
        let mut bounded = (&mut entry).take(p.declared.saturating_add(1));
        let got = copy(&mut bounded, &mut out, &dest, &mut buf)?
            .map_err(|e| entry_error(wheel, &p.raw, &e.to_string()))?;
        if got != p.declared {
            let held = if got > p.declared {
                "more than that".to_string()
            } else {
                bytes(got)
            };
            return Err(entry_error(
                wheel,
                &p.raw,
                &format!("declares {} but holds {held}", bytes(p.declared)),
            ));
        }
        // No fsync per file (a toolkit is ~2,000 files): the folder is published by one rename
        // after the tree digest is taken, and every later use re-checks that digest, so a file
        // lost in a crash is found, never used.
        written += 1;
    }
    Ok(written)
}

/// The first pass: every entry's name and kind checked, the prefix's entries listed, and their
/// declared sizes summed against the bound, all before anything is written.
fn plan(
    zip: &mut zip::ZipArchive<std::fs::File>,
    wheel: &Path,
    prefix: &Path,
    wheel_len: u64,
) -> Result<Vec<Planned>> {
    let budget = wheel_len.saturating_mul(MAX_EXPANSION);
    let mut total: u64 = 0;
    let mut plan = Vec::new();
    for index in 0..zip.len() {
        let entry = zip
            .by_index_raw(index)
            .map_err(|e| Error::input(wheel.display(), format!("entry {index}: {e}")))?;
        let raw = entry.name().to_string();
        text::refuse_control(&format!("{} entry", wheel.display()), &raw)?;
        let normal = Path::new(&raw)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !normal {
            return Err(Error::input(
                wheel.display(),
                format!("entry `{}` is not a plain relative path", Shown(&raw)),
            )
            .with_hint("a wheel whose entries escape its folder is never unpacked"));
        }
        let Ok(rel) = Path::new(&raw).strip_prefix(prefix) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let mode = entry.unix_mode().unwrap_or(0o644);
        let kind = mode & 0o170000;
        let dir = entry.is_dir();
        if !dir && (entry.is_symlink() || (kind != 0 && kind != 0o100000)) {
            return Err(Error::input(
                wheel.display(),
                format!(
                    "entry `{}` is not a regular file (mode {mode:o})",
                    Shown(&raw)
                ),
            )
            .with_hint("links and devices in a wheel are refused"));
        }
        let declared = if dir { 0 } else { entry.size() };
        total =
            match total.checked_add(declared) {
                Some(t) if t <= budget => t,
                _ => return Err(entry_error(
                    wheel,
                    &raw,
                    &format!(
                        "declares {} unpacked, which with the entries before it is more than \
                         {MAX_EXPANSION} times the wheel's {}; it was not unpacked",
                        bytes(declared),
                        bytes(wheel_len)
                    ),
                )
                .with_hint(
                    "a wheel's sizes are checked, not trusted: this one is damaged or hostile; \
                     check the lock's digest and where the wheel came from",
                )),
            };
        plan.push(Planned {
            index,
            rel: rel.to_path_buf(),
            dir,
            exec: mode & 0o111 != 0,
            declared,
            raw,
        });
    }
    Ok(plan)
}

/// An input error naming the wheel and the entry (escaped: the name is the archive's).
fn entry_error(wheel: &Path, raw: &str, why: &str) -> Error {
    Error::input(wheel.display(), format!("entry `{}`: {why}", Shown(raw)))
}

/// Copy `from` to `to` through `buf`, returning the bytes copied. A write error is an I/O
/// error on `dest` (the outer result); a read error is the archive's (the inner one), for the
/// caller to name the entry.
fn copy(
    from: &mut impl Read,
    to: &mut std::fs::File,
    dest: &Path,
    buf: &mut [u8],
) -> Result<std::result::Result<u64, std::io::Error>> {
    let mut n = 0u64;
    loop {
        let got = match from.read(buf) {
            Ok(0) => return Ok(Ok(n)),
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Ok(Err(e)),
        };
        to.write_all(&buf[..got]).at("write", dest)?;
        n += got as u64;
    }
}

/// Create a file that must not exist yet (two wheels never write the same path).
fn create_new(path: &Path, mode: u32) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .at("create", path)
}

#[cfg(test)]
mod tests;
