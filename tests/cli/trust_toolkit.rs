//! Issue #19 classes 9 and 8 for the toolkit room: wheels whose ZIP directory lies about its
//! sizes (crafted byte by byte here, so that nothing but the size is wrong), and the lock of a
//! git pin read through the open that refuses special files.

use crate::cuda::fake_toolkit;
use crate::{code, pinforge_cmd, stderr, Tiny};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const RT_WHEEL: &str = "nvidia_cuda_runtime-13.1.80-py3-none-any.whl";
const ENTRY: &str = "nvidia/cu13/lib/libten.so";

/// CRC-32 (IEEE), so that the crafted archives pass the reader's checksum and what is refused
/// is the size alone.
fn crc32(data: &[u8]) -> u32 {
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

/// A ZIP64 wheel of stored entries `(name, data, declared uncompressed size)`, Unix mode 0644,
/// each entry's compressed size its real length.
fn zip64(entries: &[(&str, &[u8], u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data, declared) in entries {
        let mut extra = Vec::new();
        extra.extend_from_slice(&1u16.to_le_bytes());
        extra.extend_from_slice(&16u16.to_le_bytes());
        extra.extend_from_slice(&declared.to_le_bytes());
        extra.extend_from_slice(&(data.len() as u64).to_le_bytes());
        let fields = |o: &mut Vec<u8>| {
            o.extend_from_slice(&45u16.to_le_bytes()); // needs ZIP64
            o.extend_from_slice(&[0, 0, 0, 0]); // flags, stored
            o.extend_from_slice(&[0, 0, 0, 0]); // time, date
            o.extend_from_slice(&crc32(data).to_le_bytes());
            o.extend_from_slice(&u32::MAX.to_le_bytes());
            o.extend_from_slice(&u32::MAX.to_le_bytes());
            o.extend_from_slice(&(name.len() as u16).to_le_bytes());
            o.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        };
        let offset = out.len() as u32;
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        fields(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&0x031eu16.to_le_bytes()); // made by Unix
        fields(&mut central);
        central.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // comment, disk, internal
        central.extend_from_slice(&(0o100644u32 << 16).to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        central.extend_from_slice(&extra);
    }
    let start = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

/// The runtime wheel of the fake toolkit replaced by `bytes`, with the lock pinning them (or,
/// when `relock` is false, still pinning the honest wheel).
fn replace_runtime(ws: &Path, cache: &Path, bytes: &[u8], relock: bool) {
    let wheel = cache.join("toolkits/wheels").join(RT_WHEEL);
    let old = crate::sha2_like::digest_hex(&std::fs::read(&wheel).expect("wheel"));
    std::fs::write(&wheel, bytes).expect("craft");
    if relock {
        let lock = ws.join("recipes/toolkits/fake-13.1.1.toml");
        let text = std::fs::read_to_string(&lock).expect("lock");
        let new = crate::sha2_like::digest_hex(bytes);
        std::fs::write(&lock, text.replace(&old, &new)).expect("relock");
    }
}

fn toolkit(ws: &Path, cache: &Path, env: &[(&str, &Path)]) -> Output {
    let mut c = pinforge_cmd(ws);
    for (k, v) in env {
        c.env(k, v);
    }
    c.args([
        "toolkit",
        "recipes/toolkits/fake-13.1.1.toml",
        "--cache-dir",
    ])
    .arg(cache)
    .output()
    .expect("run pinforge")
}

/// What a failed provisioning left in the cache: anything but the wheel folder, and any
/// download folder inside it.
fn left_behind(cache: &Path) -> Vec<String> {
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let mut left: Vec<String> = names(&cache.join("toolkits"))
        .into_iter()
        .filter(|n| n != "wheels")
        .collect();
    left.extend(
        names(&cache.join("toolkits/wheels"))
            .into_iter()
            .filter(|n| !n.ends_with(".whl")),
    );
    left
}

#[test]
fn wheels_that_lie_about_their_sizes_exit_2_naming_the_entry_and_leave_nothing() {
    // Issue #19 class 9. The runtime wheel comes second, so the nvcc wheel is already unpacked
    // into the assembly folder when the lie is found: that folder must go too.
    let ten: &[u8] = b"0123456789";
    let header = (
        "nvidia/cu13/include/cuda.h",
        b"typedef int CUresult;\n" as &[u8],
    );
    let honest = zip64(&[
        (header.0, header.1, header.1.len() as u64),
        (ENTRY, ten, 10),
    ]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        // Aborted the process (memory allocation of 1 TiB failed, exit 134).
        (
            "1 TiB declared",
            zip64(&[(ENTRY, ten, 1 << 40)]),
            "declares 1099511627776 bytes",
        ),
        // Panicked (capacity overflow, exit 101).
        (
            "2^64-1 declared",
            zip64(&[(ENTRY, ten, u64::MAX)]),
            "declares 18446744073709551615 bytes",
        ),
        (
            "declared smaller than actual",
            zip64(&[(ENTRY, ten, 4)]),
            "declares 4 bytes but holds more",
        ),
        (
            "declared larger than actual",
            zip64(&[(ENTRY, ten, 64)]),
            ENTRY,
        ),
        (
            "truncated archive",
            honest[..honest.len() - 30].to_vec(),
            "not a wheel",
        ),
    ];
    for (what, bytes, says) in cases {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = d.path();
        let cache = fake_toolkit(ws);
        replace_runtime(ws, &cache, &bytes, true);
        let o = toolkit(ws, &cache, &[]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{what}: {err}");
        assert!(err.contains(RT_WHEEL), "{what}: the wheel is named: {err}");
        assert!(err.contains(says), "{what}: {err}");
        if what != "truncated archive" {
            assert!(err.contains(ENTRY), "{what}: the entry is named: {err}");
        }
        assert!(
            left_behind(&cache).is_empty(),
            "{what}: {:?}",
            left_behind(&cache)
        );
    }
    // The honest archive of the same crafting is unpacked and assembled: the refusals above
    // are about the sizes, not the crafting.
    let d = tempfile::tempdir().expect("tempdir");
    let cache = fake_toolkit(d.path());
    replace_runtime(d.path(), &cache, &honest, true);
    let o = toolkit(d.path(), &cache, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read(
            cache
                .join("toolkits")
                .read_dir()
                .expect("ls")
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("fake-"))
                .expect("assembled")
                .path()
                .join("root/lib/libten.so")
        )
        .expect("unpacked"),
        ten
    );
}

#[test]
fn a_lying_wheel_with_another_digest_is_a_check_failure_and_never_unpacked() {
    // The lock still pins the honest wheel; a "pip" serves the lying bytes again: exit 1 (the
    // digest), before the archive is ever opened.
    let d = tempfile::tempdir().expect("tempdir");
    let ws = d.path();
    let cache = fake_toolkit(ws);
    let bytes = zip64(&[(ENTRY, b"0123456789", 1 << 40)]);
    replace_runtime(ws, &cache, &bytes, false);
    let bin = ws.join("fakebin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let served = ws.join("served.whl");
    std::fs::write(&served, &bytes).expect("served");
    let pip = bin.join("pip");
    std::fs::write(
        &pip,
        format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -d ] && d=$2; shift; done\ncp {} \"$d/{RT_WHEEL}\"\n",
            served.display()
        ),
    )
    .expect("pip");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pip, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = toolkit(ws, &cache, &[("PINFORGE_TOOL_PATH", &bin)]);
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(
        err.contains("the lock says") && err.contains(RT_WHEEL),
        "{err}"
    );
    assert!(!err.contains("declares"), "{err}");
    assert!(left_behind(&cache).is_empty(), "{:?}", left_behind(&cache));
}

#[test]
fn temp_folders_of_a_killed_provisioner_are_swept_by_the_next() {
    // A provisioner killed mid-assembly (or mid-download) leaves its temp folder; only a
    // holder of the cache lock makes them, so the next holder removes them.
    let d = tempfile::tempdir().expect("tempdir");
    let ws = d.path();
    let cache = fake_toolkit(ws);
    let stale = cache.join("toolkits/.assemble-KILLED/root/bin");
    std::fs::create_dir_all(&stale).expect("mkdir");
    std::fs::write(stale.join("nvcc"), b"half").expect("write");
    std::fs::create_dir_all(cache.join("toolkits/wheels/.fetch-KILLED")).expect("mkdir");
    let o = toolkit(ws, &cache, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let left: Vec<String> = left_behind(&cache)
        .into_iter()
        .filter(|n| !n.starts_with("fake-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Run `cmd`, killing it if it has not ended within `limit`: a hang is the failure under test.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            child.kill().expect("kill");
            let _ = child.wait();
            panic!("hung for {limit:?} (issue #19 class 8: a FIFO read blocks)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn a_git_pin_whose_lock_is_a_fifo_is_refused_by_audit_build_and_rebase_without_hanging() {
    // Issue #19 class 8: the lock was read with std::fs::read_to_string and `audit` hung (build
    // and rebase read it on the same path).
    let t = Tiny::new();
    let lock = t.ws.join("recipes/tiny.lock");
    let made = Command::new("mkfifo").arg(&lock).status();
    if !made.is_ok_and(|s| s.success()) {
        crate::skip("mkfifo (coreutils) is needed to make a FIFO");
        return;
    }
    let onto = format!("git:{}@v2", t.upstream.display());
    for args in [
        vec!["audit", "recipes/tiny.toml", "--onto", onto.as_str()],
        vec!["build", "recipes/tiny.toml"],
        vec!["rebase", "recipes/tiny.toml", "--onto", onto.as_str()],
    ] {
        let o = run_bounded(pinforge_cmd(&t.ws).args(&args), Duration::from_secs(60));
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(
            err.contains("tiny.lock") && err.contains("FIFO"),
            "{args:?}: {err}"
        );
    }
    // Nothing replaced the FIFO with a lock file, and the rebase left the recipe as it was.
    let recipe = std::fs::read_to_string(t.ws.join("recipes/tiny.toml")).expect("recipe");
    assert!(recipe.contains("tag = \"v1\""), "{recipe}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&lock)
        .expect("stat")
        .file_type()
        .is_fifo());
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("ls").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn test_code_keeps_the_rules_the_allow_lifts() {
    // The test crates allow clippy's disallowed_methods so that tests may read their own files
    // with std::fs (issue #19 class 8); that also lifts clippy.toml's other entries, which
    // matter most in tests (a test changing its own environment races the others). They are
    // checked here by text instead, in the integration tests and in every unit-test part.
    let banned: Vec<String> = [
        ["set", "_var("],
        ["remove", "_var("],
        ["process::", "exit("],
    ]
    .iter()
    .map(|p| p.concat())
    .collect();
    let root = crate::repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        let in_tests = f.starts_with(root.join("tests"))
            || f.components().any(|c| c.as_os_str() == "tests")
            || f.file_name().is_some_and(|n| n == "tests.rs");
        // In a library file only the part from `#[cfg(test)]` on is test code; the rest is
        // clippy's to check.
        let test_part = if in_tests {
            text.as_str()
        } else {
            text.find("#[cfg(test)]").map_or("", |i| &text[i..])
        };
        for (n, line) in test_part.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if banned.iter().any(|b| code.contains(b.as_str())) {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "set the variable on the child's Command, and return from tests: {found:#?}"
    );
}
