//! Wheels whose archive lies about its sizes (issue #19 class 9), crafted byte by byte, and the
//! plain refusals (escapes, links, other archives).

use super::*;
use proptest::prelude::*;
use std::io::Write;

fn unpack(wheel: &Path, prefix: &str, root: &Path) -> Result<usize> {
    let file = fsx::open_regular(wheel, "wheel", false)?;
    unpack_wheel(file, wheel, prefix, root)
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
    let n = unpack(z.path(), "nvidia/cu13", root.path()).expect("unpack");
    assert_eq!(n, 2);
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(root.path().join("bin/nvcc")).expect("nvcc");
    assert_eq!(m.permissions().mode() & 0o777, 0o755);
    assert!(!root
        .path()
        .join("nvidia_cuda_nvcc-13.1.115.dist-info")
        .exists());
    // The same entry from a second wheel is refused rather than overwritten.
    let e = unpack(z.path(), "nvidia/cu13", root.path()).expect_err("twice");
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
    let e = unpack(link.path(), "nvidia/cu13", r.path()).expect_err("link");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    for (name, mode) in [("nvidia/cu13/../../escape", 0o644), ("/abs/file", 0o644)] {
        let z = zip_with(&[(name, b"x", mode)]);
        let r = tempfile::tempdir().expect("tempdir");
        let e = unpack(z.path(), "nvidia/cu13", r.path()).expect_err(name);
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
    assert!(unpack(not_zip.path(), "nvidia/cu13", r.path())
        .expect_err("zip")
        .to_string()
        .contains("not a wheel"));
}

/// CRC-32 (IEEE), bit by bit: the crafted archives must pass the reader's checksum, so that
/// what is refused is the size, not the CRC.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A one-entry ZIP64 archive (stored, Unix mode 0644) holding `data` under `name` whose central
/// directory and local header declare `uncompressed` and `compressed` sizes of their own.
pub(crate) fn zip64_lying(name: &str, data: &[u8], uncompressed: u64, compressed: u64) -> Vec<u8> {
    let crc = crc32(data);
    let mut extra = Vec::new();
    extra.extend_from_slice(&1u16.to_le_bytes());
    extra.extend_from_slice(&16u16.to_le_bytes());
    extra.extend_from_slice(&uncompressed.to_le_bytes());
    extra.extend_from_slice(&compressed.to_le_bytes());
    let common = |out: &mut Vec<u8>| {
        out.extend_from_slice(&45u16.to_le_bytes()); // version needed: ZIP64
        out.extend_from_slice(&0u16.to_le_bytes()); // flags
        out.extend_from_slice(&0u16.to_le_bytes()); // stored
        out.extend_from_slice(&0u32.to_le_bytes()); // time and date
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&u32::MAX.to_le_bytes()); // sizes in the ZIP64 field
        out.extend_from_slice(&u32::MAX.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&(extra.len() as u16).to_le_bytes());
    };
    let mut out = Vec::new();
    out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    common(&mut out);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&extra);
    out.extend_from_slice(data);
    let cd_start = out.len() as u32;
    out.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    out.extend_from_slice(&0x031eu16.to_le_bytes()); // made by Unix, so the mode is read
    common(&mut out);
    out.extend_from_slice(&0u16.to_le_bytes()); // comment length
    out.extend_from_slice(&0u16.to_le_bytes()); // disk
    out.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
    out.extend_from_slice(&((0o100644u32) << 16).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // local header offset
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&extra);
    let cd_len = out.len() as u32 - cd_start;
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]); // disks
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&cd_len.to_le_bytes());
    out.extend_from_slice(&cd_start.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn lying(uncompressed: u64, compressed: u64) -> (tempfile::TempDir, Result<usize>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wheel = dir.path().join("w.whl");
    let bytes = zip64_lying(
        "nvidia/cu13/lib/ten",
        b"0123456789",
        uncompressed,
        compressed,
    );
    std::fs::write(&wheel, bytes).expect("write");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let r = unpack(&wheel, "nvidia/cu13", &root);
    (dir, r)
}

#[test]
fn an_honest_crafted_zip64_entry_unpacks() {
    // The crafted archive is a valid one when it tells the truth: the refusals below are about
    // the sizes alone.
    let (dir, r) = lying(10, 10);
    assert_eq!(r.expect("honest"), 1);
    assert_eq!(
        std::fs::read(dir.path().join("root/lib/ten")).expect("read"),
        b"0123456789"
    );
}

#[test]
fn declared_sizes_are_claims_never_buffer_sizes() {
    // Issue #19 class 9: 1 TiB declared for 10 bytes aborted the process (allocation failure),
    // 2^64-1 panicked (capacity overflow). Both are refused before anything is written.
    for declared in [
        1u64 << 40,
        u64::MAX,
        u64::MAX - 1,
        10 * MAX_EXPANSION * 1024,
    ] {
        let (dir, r) = lying(declared, 10);
        let e = r.expect_err("refused");
        assert_eq!(e.exit_code(), 2, "{declared}: {e}");
        let s = e.to_string();
        assert!(
            s.contains("w.whl") && s.contains("nvidia/cu13/lib/ten"),
            "{s}"
        );
        assert!(s.contains(&declared.to_string()), "{s}");
        assert!(!dir.path().join("root/lib").exists(), "{declared}: written");
    }
}

#[test]
fn an_entry_holding_more_or_less_than_it_declares_is_refused() {
    // Declared smaller than what the entry yields: the read stops one byte past the claim.
    let (_d, r) = lying(5, 10);
    let s = r.expect_err("more").to_string();
    assert!(s.contains("declares 5 bytes but holds more"), "{s}");
    // Declared larger (within the bound): fewer bytes come out than the claim.
    let (_d, r) = lying(20, 10);
    let e = r.expect_err("less");
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains("nvidia/cu13/lib/ten"), "{e}");
    // A compressed size running past the end of the archive.
    let (_d, r) = lying(10, 1 << 40);
    let e = r.expect_err("past the end");
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains("nvidia/cu13/lib/ten"), "{e}");
}

#[test]
fn a_truncated_or_holed_wheel_is_refused_at_every_cut() {
    let full = zip64_lying("nvidia/cu13/lib/ten", b"0123456789", 10, 10);
    let cuts = (0..full.len()).map(|cut| full[..cut].to_vec());
    let holes = (0..full.len()).map(|i| [&full[..i], &full[i + 1..]].concat());
    for (cut, bytes) in cuts.chain(holes).enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wheel = dir.path().join("w.whl");
        std::fs::write(&wheel, &bytes).expect("write");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        let e = unpack(&wheel, "nvidia/cu13", &root).expect_err("truncated");
        assert_eq!(e.exit_code(), 2, "cut at {cut}: {e}");
        assert!(e.to_string().contains("w.whl"), "{e}");
    }
}

#[test]
fn an_entry_name_with_a_control_character_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wheel = dir.path().join("w.whl");
    std::fs::write(&wheel, zip64_lying("nvidia/cu13/a\nb", b"x", 1, 1)).expect("write");
    let e = unpack(&wheel, "nvidia/cu13", dir.path()).expect_err("control");
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains("\\n"), "{e}");
}

/// Bytes written under `root`, in all.
fn tree_bytes(root: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(root).expect("ls").flatten() {
        let m = e.metadata().expect("stat");
        n += if m.is_dir() {
            tree_bytes(&e.path())
        } else {
            m.len()
        };
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// The class, not the examples: any bytes of a ZIP64 wheel overwritten with any
    /// values (sizes, offsets, counts, names) never panic or abort, and either unpack no more
    /// than the bound or are refused with exit 2 naming the wheel.
    #[test]
    fn a_wheel_with_any_bytes_overwritten_never_panics_and_never_writes_past_the_bound(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
    ) {
        let mut bytes = zip64_lying("nvidia/cu13/lib/ten", b"0123456789", 10, 10);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let wheel = dir.path().join("w.whl");
        std::fs::write(&wheel, &bytes).expect("write");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        match unpack(&wheel, "nvidia/cu13", &root) {
            Ok(_) => prop_assert!(tree_bytes(&root) <= bytes.len() as u64 * MAX_EXPANSION),
            Err(e) => {
                prop_assert_eq!(e.exit_code(), 2, "{}", e);
                prop_assert!(e.to_string().contains("w.whl"), "{}", e);
            }
        }
    }
}
