//! The little of ELF that pinforge reads, through the `object` crate rather than by hand: the
//! byte ranges of the string tables and of the GNU build-id (the reproducibility rule in
//! [`pinforge_record::normalize`]), a shared library's `DT_NEEDED` entries (which CUDA runtime
//! libraries must travel with the engine) and an executable's run path (a staged `bin/` program
//! must find the staged `lib/`). Only ELF64 little-endian (x86-64, AArch64) is read;
//! anything else, or a file whose tables point outside it, is "not an ELF file we read" (None),
//! never a panic: these bytes come from a build, and a build can be hostile.

use object::elf::{
    FileHeader64, DT_NEEDED, DT_RPATH, DT_RUNPATH, NT_GNU_BUILD_ID, SHF_ALLOC, SHT_NOTE, SHT_STRTAB,
};
use object::read::elf::{Dyn, FileHeader, SectionHeader};
use object::LittleEndian;
use std::ops::Range;

/// Where the parts the normalization rule may touch are, as byte ranges of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Every `SHT_STRTAB` section the loader never reads (`.strtab`, `.shstrtab`).
    pub string_tables: Vec<Range<usize>>,
    /// The descriptor of the `NT_GNU_BUILD_ID` note, if there is one.
    pub build_id: Option<Range<usize>>,
}

fn header(bytes: &[u8]) -> Option<(&FileHeader64<LittleEndian>, LittleEndian)> {
    let h = FileHeader64::<LittleEndian>::parse(bytes).ok()?;
    let endian = h.endian().ok()?;
    Some((h, endian))
}

/// The file offset of `part`, a slice that `object` handed out of `whole`.
fn offset_in(whole: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some(start..end)
}

/// The non-loaded string tables and the build-id of an ELF64 little-endian file.
///
/// Only string tables without `SHF_ALLOC` are listed (`.strtab`, `.shstrtab`: never `.dynstr`,
/// which the loader reads), the build-id only when its descriptor is a plausible hash (at most
/// 64 bytes), and the whole layout is `None` when any of those ranges overlaps another
/// section's bytes: a crafted section table must not make the rule mask code or data.
pub fn layout(bytes: &[u8]) -> Option<Layout> {
    let (h, endian) = header(bytes)?;
    let sections = h.sections(endian, bytes).ok()?;
    let mut out = Layout {
        string_tables: vec![],
        build_id: None,
    };
    // Every section's bytes in the file, to check the masked ranges against.
    let mut occupied: Vec<Range<usize>> = Vec::new();
    let mut owners: Vec<Range<usize>> = Vec::new();
    for s in sections.iter() {
        let Some((off, size)) = s.file_range(endian) else {
            continue;
        };
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        if end > bytes.len() {
            return None;
        }
        if start < end {
            occupied.push(start..end);
        }
        let alloc = (s.sh_flags(endian) & SHF_ALLOC).0 != 0;
        if s.sh_type(endian) == SHT_STRTAB && !alloc {
            out.string_tables.push(start..end);
            owners.push(start..end);
        } else if s.sh_type(endian) == SHT_NOTE && out.build_id.is_none() {
            let Ok(Some(mut notes)) = s.notes(endian, bytes) else {
                continue;
            };
            while let Ok(Some(note)) = notes.next() {
                if note.n_type(endian) == NT_GNU_BUILD_ID
                    && note.name() == b"GNU"
                    && note.desc().len() <= 64
                {
                    out.build_id = Some(offset_in(bytes, note.desc())?);
                    owners.push(start..end);
                    break;
                }
            }
        }
    }
    // A section that owns a masked range must be the only one with bytes there.
    for owner in &owners {
        let overlapping = occupied
            .iter()
            .filter(|o| o.start < owner.end && owner.start < o.end)
            .count();
        if overlapping != 1 {
            return None;
        }
    }
    Some(out)
}

/// The `DT_NEEDED` entries of a shared library or executable, in order.
pub fn needed(bytes: &[u8]) -> Option<Vec<String>> {
    needed_in(bytes)
}

/// [`needed`] of a file, reading only the headers and the dynamic section (through
/// `object`'s read cache): the CUDA runtime holds a 503 MB `libcublasLt`, of which a few
/// kilobytes answer this.
pub fn needed_of_file(file: std::fs::File) -> Option<Vec<String>> {
    let cache = object::read::ReadCache::new(file);
    needed_in(&cache)
}

/// The run path of an executable or library: its `DT_RUNPATH` (else `DT_RPATH`) split at `:`;
/// empty when it has neither. A staged executable must find its libraries through it.
pub fn run_path(bytes: &[u8]) -> Option<Vec<String>> {
    let h = FileHeader64::<LittleEndian>::parse(bytes).ok()?;
    let endian = h.endian().ok()?;
    let sections = h.sections(endian, bytes).ok()?;
    let Some((dynamic, link)) = sections.dynamic(endian, bytes).ok()? else {
        return Some(vec![]);
    };
    let strings = sections.strings(endian, bytes, link).ok()?;
    let (mut runpath, mut rpath) = (None, None);
    for d in dynamic {
        let tag = d.d_tag(endian);
        if tag == DT_RUNPATH || tag == DT_RPATH {
            let text = String::from_utf8_lossy(d.string(endian, strings).ok()?).into_owned();
            if tag == DT_RUNPATH {
                runpath = Some(text);
            } else {
                rpath = Some(text);
            }
        }
    }
    let text = runpath.or(rpath).unwrap_or_default();
    Some(
        text.split(':')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

fn needed_in<'data, R: object::ReadRef<'data>>(data: R) -> Option<Vec<String>> {
    let h = FileHeader64::<LittleEndian>::parse(data).ok()?;
    let endian = h.endian().ok()?;
    let sections = h.sections(endian, data).ok()?;
    let Some((dynamic, link)) = sections.dynamic(endian, data).ok()? else {
        return Some(vec![]);
    };
    let strings = sections.strings(endian, data, link).ok()?;
    let mut out = Vec::new();
    for d in dynamic {
        if d.d_tag(endian) == DT_NEEDED {
            let name = d.string(endian, strings).ok()?;
            out.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary itself is a real ELF64 little-endian file on the machines this runs on.
    fn me() -> Vec<u8> {
        std::fs::read(std::env::current_exe().expect("exe")).expect("read")
    }

    #[test]
    fn a_real_binary_has_string_tables_and_needs_libc() {
        let bytes = me();
        let l = layout(&bytes).expect("ELF64 LE");
        assert!(!l.string_tables.is_empty());
        let needed = needed(&bytes).expect("dynamic");
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
        // Read through the cache, a few pages of the file: the same answer.
        let f = std::fs::File::open(std::env::current_exe().expect("exe")).expect("open");
        assert_eq!(needed_of_file(f), Some(needed));
        let junk = tempfile::tempfile().expect("tmp");
        assert_eq!(needed_of_file(junk), None);
        // cargo links test binaries without a run path; what matters is that it is read, not
        // guessed (the staged llama-server's `$ORIGIN/../lib` is checked by tests/cli).
        assert!(run_path(&bytes).is_some());
        assert_eq!(run_path(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn garbage_and_truncations_are_none_not_a_panic() {
        assert_eq!(layout(b"#!/bin/sh\n"), None);
        assert_eq!(needed(b""), None);
        let bytes = me();
        for cut in [0, 4, 63, 64, 4096, bytes.len() / 2] {
            let part = &bytes[..cut.min(bytes.len())];
            let _ = layout(part);
            let _ = needed(part);
        }
        // A section table offset pointing past the end.
        let mut crafted = bytes[..4096.min(bytes.len())].to_vec();
        crafted[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(layout(&crafted), None);
    }
}
