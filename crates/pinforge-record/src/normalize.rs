//! Reproducibility normalization: the one known source of noise in otherwise reproducible
//! artifacts, masked by a named, versioned rule, so that two builds can be compared for what
//! matters without hiding a real difference or reporting the noise as one.
//!
//! Rule [`NVCC_TMPXFT`]: nvcc compiles the host side of every `.cu` file through temporary
//! files named `tmpxft_<pid>_<counter>-<n>_<name>` (two groups of 8 lower-case hex digits), and
//! the host compiler writes that file name into the object's symbol table as an `STT_FILE`
//! symbol, which the linker keeps in `.symtab`/`.strtab`. The pid differs on every compile, so
//! two builds of the same CUDA library differ in those digits, and in the GNU build-id that the
//! linker computes over the whole file. The rule, applied to one ELF file:
//!
//! 1. in every `SHT_STRTAB` section the loader never reads (no `SHF_ALLOC`: `.strtab`,
//!    `.shstrtab`; never `.dynstr`, code, data or `.rodata`), every `tmpxft_` followed by 8 hex
//!    digits, `_` and 8 hex digits has those 16 digits set to `0`;
//! 2. when step 1 masked at least one name, the descriptor of the `NT_GNU_BUILD_ID` note (at
//!    most 64 bytes) is set to zeros (a hash over the file: it differs exactly when step 1's
//!    names do);
//! 3. the normalized digest is the SHA-256 of the result.
//!
//! Nothing changes length and nothing else is touched: two files with equal normalized
//! digests are byte-identical outside those digits. A file the rule does not apply to (not
//! ELF64 little-endian, no such name, or a section table whose masked ranges overlap other
//! sections' bytes) has no normalized digest, and compares by its bytes.

use pinforge_base::digest::Sha256;

/// The rule's id, as manifests and flip records state it.
pub const NVCC_TMPXFT: &str = "nvcc-tmpxft/v1";

/// The rule in words, written into every manifest that uses it.
pub const NVCC_TMPXFT_TEXT: &str =
    "in SHT_STRTAB sections without SHF_ALLOC, the 16 hex digits of each \
     `tmpxft_XXXXXXXX_XXXXXXXX` name (nvcc's pid-named temporary host files, kept as STT_FILE \
     symbols) are set to 0, and when any was, the NT_GNU_BUILD_ID descriptor (at most 64 \
     bytes) is zeroed; a file whose masked ranges overlap other sections is not normalized; the \
     normalized digest is the SHA-256 of the result; nothing else is changed";

/// What the rule made of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// The rule applied ([`NVCC_TMPXFT`]).
    pub rule: &'static str,
    /// SHA-256 of the normalized bytes.
    pub sha256: Sha256,
    /// How many `tmpxft_` names were masked.
    pub masked_names: usize,
    /// Whether a build-id descriptor was zeroed.
    pub build_id_masked: bool,
}

const PREFIX: &[u8] = b"tmpxft_";

/// Apply the rule to a file's bytes: `None` when it does not apply (see the module docs).
pub fn normalize(bytes: &[u8]) -> Option<Normalized> {
    // Most artifacts hold no nvcc name at all: look before parsing anything.
    memchr::memmem::find(bytes, PREFIX)?;
    let layout = pinforge_base::elf::layout(bytes)?;
    let mut out: Option<Vec<u8>> = None;
    let mut masked = 0usize;
    for table in &layout.string_tables {
        let text = &bytes[table.clone()];
        for at in memchr::memmem::find_iter(text, PREFIX) {
            let start = table.start + at + PREFIX.len();
            let Some(digits) = bytes
                .get(start..start + 17)
                .filter(|_| start + 17 <= table.end)
            else {
                continue;
            };
            if !is_name_digits(digits) {
                continue;
            }
            let buf = out.get_or_insert_with(|| bytes.to_vec());
            for b in buf[start..start + 17].iter_mut().filter(|b| **b != b'_') {
                *b = b'0';
            }
            masked += 1;
        }
    }
    let mut buf = out?;
    let build_id_masked = layout.build_id.is_some_and(|r| {
        buf[r].fill(0);
        true
    });
    Some(Normalized {
        rule: NVCC_TMPXFT,
        sha256: Sha256::of_bytes(&buf),
        masked_names: masked,
        build_id_masked,
    })
}

/// Whether the file holds nvcc's names for internal-linkage device entities,
/// `_INTERNAL_<8 hex>_<len>_<file>_...`: the 8 hex digits are computed from the real path of
/// the source file (measured: the same file at another real path gives another hash; nvcc's
/// `-frandom-seed` does not change it), and they are inside the compressed fatbinary too, where
/// no rule can mask them. Such an artifact differs between two source trees even when nothing
/// else does, so the manifest marks it as embedding the build's paths.
pub fn has_path_hashed_names(bytes: &[u8]) -> bool {
    const MARK: &[u8] = b"_INTERNAL_";
    memchr::memmem::find_iter(bytes, MARK).any(|at| {
        let rest = &bytes[at + MARK.len()..];
        rest.len() > 8
            && rest[..8]
                .iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
            && rest[8] == b'_'
    })
}

/// `XXXXXXXX_XXXXXXXX`, lower-case hex, as nvcc prints `%08x_%08x`.
fn is_name_digits(s: &[u8]) -> bool {
    s.len() == 17
        && s.iter().enumerate().all(|(i, &c)| {
            if i == 8 {
                c == b'_'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 LE image: header, one .strtab, one build-id note, one data section
    /// (PROGBITS) whose bytes the rule must never touch, and the section table at the end.
    fn elf(strtab: &[u8], data: &[u8], build_id: &[u8]) -> Vec<u8> {
        const SHT_STRTAB: u32 = 3;
        const SHT_NOTE: u32 = 7;
        const NT_GNU_BUILD_ID: u32 = 3;
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        let mut secs: Vec<(u32, usize, usize)> = vec![(0, 0, 0)];
        let mut push = |b: &mut Vec<u8>, kind: u32, bytes: &[u8]| {
            let off = b.len();
            b.extend_from_slice(bytes);
            secs.push((kind, off, bytes.len()));
        };
        push(&mut b, SHT_STRTAB, strtab);
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&(build_id.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_GNU_BUILD_ID.to_le_bytes());
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(build_id);
        push(&mut b, SHT_NOTE, &note);
        push(&mut b, 1, data);
        while b.len() % 8 != 0 {
            b.push(0);
        }
        let shoff = b.len();
        for (kind, off, size) in &secs {
            let mut h = vec![0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(*off as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(*size as u64).to_le_bytes());
            b.extend_from_slice(&h);
        }
        b[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        b[0x3c..0x3e].copy_from_slice(&(secs.len() as u16).to_le_bytes());
        // The section names are in the string table (section 1).
        b[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        b
    }

    const NAME_A: &[u8] = b"\0tmpxft_00001a2b_00000000-6_mmq.cudafe1.cpp\0f\0";
    const NAME_B: &[u8] = b"\0tmpxft_0000ffee_00000000-6_mmq.cudafe1.cpp\0f\0";

    #[test]
    fn pid_names_and_build_id_are_masked_and_nothing_else() {
        let a = elf(NAME_A, b"code", &[1; 20]);
        let b = elf(NAME_B, b"code", &[2; 20]);
        assert_ne!(a, b);
        let (na, nb) = (
            normalize(&a).expect("applies"),
            normalize(&b).expect("applies"),
        );
        assert_eq!(na.sha256, nb.sha256);
        assert_eq!((na.masked_names, na.build_id_masked), (1, true));
        assert_eq!(na.rule, NVCC_TMPXFT);
    }

    #[test]
    fn a_real_difference_survives_the_rule() {
        // Same pid noise, different code: still different.
        let a = elf(NAME_A, b"code", &[1; 20]);
        let b = elf(NAME_B, b"CODE", &[2; 20]);
        assert_ne!(
            normalize(&a).map(|n| n.sha256),
            normalize(&b).map(|n| n.sha256)
        );
        // A different source name behind the same pid digits is a real difference too.
        let c = elf(
            b"\0tmpxft_00001a2b_00000000-6_mmf.cudafe1.cpp\0f\0",
            b"code",
            &[1; 20],
        );
        assert_ne!(
            normalize(&a).map(|n| n.sha256),
            normalize(&c).map(|n| n.sha256)
        );
    }

    #[test]
    fn names_outside_string_tables_are_left_alone() {
        // The same text in a data section is content, not a symbol name: the rule does not
        // apply (no name in a string table), so the file compares by its bytes.
        let a = elf(b"\0f\0", b"tmpxft_00001a2b_00000000-6_x", &[1; 20]);
        assert_eq!(normalize(&a), None);
    }

    #[test]
    fn near_misses_and_non_elf_do_not_apply() {
        for name in [
            &b"\0tmpxft_00001A2B_00000000-6_x\0"[..], // upper case: not nvcc's format
            b"\0tmpxft_00001a2b-00000000-6_x\0",
            b"\0tmpxft_0001a2b\0",
        ] {
            assert_eq!(normalize(&elf(name, b"", &[1; 20])), None, "{name:?}");
        }
        assert_eq!(
            normalize(b"not an elf file at all, but long enough to have a header...."),
            None
        );
        let mut truncated = elf(NAME_A, b"code", &[1; 20]);
        truncated.truncate(100);
        assert_eq!(normalize(&truncated), None);
    }

    /// What nvcc does, with the real host compiler and linker: the host code is compiled from
    /// a temporary file named after the pid, so the library keeps that name as an STT_FILE
    /// symbol (and a build-id over it). Two such links differ in bytes and agree under the
    /// rule; a changed function body still differs.
    #[test]
    fn real_gcc_libraries_from_pid_named_sources_are_equal_under_the_rule() {
        let t = tempfile::tempdir().expect("tmp");
        let build = |pid: u32, body: &str| -> Vec<u8> {
            let dir = t.path().join(format!("b{pid}-{}", body.len()));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let src = dir.join(format!("tmpxft_{pid:08x}_00000000-6_k.cudafe1.cpp"));
            std::fs::write(
                &src,
                format!(
                    "static int k(int x) {{ return {body}; }}\nint pf(int x) {{ return k(x); }}\n"
                ),
            )
            .expect("write");
            let out = dir.join("libk.so");
            let ok = std::process::Command::new("c++")
                .args(["-shared", "-fPIC", "-O1", "-Wl,--build-id", "-o"])
                .arg(&out)
                .arg(&src)
                .current_dir(&dir)
                .status()
                .expect("c++")
                .success();
            assert!(ok, "c++ failed");
            std::fs::read(out).expect("read")
        };
        let a = build(0x1a2b, "x + 1");
        let b = build(0xffee, "x + 1");
        assert_ne!(a, b, "the pid-named source must show in the library");
        let (na, nb) = (
            normalize(&a).expect("applies"),
            normalize(&b).expect("applies"),
        );
        assert_eq!(na.sha256, nb.sha256);
        assert!(na.masked_names >= 1 && na.build_id_masked, "{na:?}");
        let c = build(0x1a2b, "x + 2");
        assert_ne!(normalize(&c).expect("applies").sha256, na.sha256);
    }

    #[test]
    fn nvcc_path_hashed_internal_names_are_recognized() {
        assert!(has_path_hashed_names(
            b"x\0_ZN41_INTERNAL_ed0a0e6f_10_argsort_cu_02de20964cuda3std3__45__cpo5beginE\0"
        ));
        assert!(!has_path_hashed_names(b"_INTERNAL_ED0A0E6F_10_x"));
        assert!(!has_path_hashed_names(b"_INTERNAL_ed0a0e6"));
        assert!(!has_path_hashed_names(b"no such name"));
    }

    #[test]
    fn a_crafted_section_table_is_not_followed_outside_the_file() {
        let mut b = elf(NAME_A, b"code", &[1; 20]);
        // Point the section table far outside the file.
        b[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(normalize(&b), None);
        let mut c = elf(NAME_A, b"code", &[1; 20]);
        c[0x3a..0x3c].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(normalize(&c), None);
        // A data section laid over the string table: masking would change its bytes too, so
        // the file is not normalized at all.
        let mut d = elf(NAME_A, b"code", &[1; 20]);
        let shoff = u64::from_le_bytes(d[0x28..0x30].try_into().expect("8")) as usize;
        let data_header = shoff + 3 * 64;
        d[data_header + 0x18..data_header + 0x20].copy_from_slice(&64u64.to_le_bytes());
        assert_eq!(normalize(&d), None);
        // A string table the loader reads (SHF_ALLOC, like .dynstr) is never masked.
        let mut e = elf(NAME_A, b"code", &[1; 20]);
        let strtab_header = shoff + 64;
        e[strtab_header + 8..strtab_header + 16].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(normalize(&e), None);
    }
}
