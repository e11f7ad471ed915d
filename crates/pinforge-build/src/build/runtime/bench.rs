//! The stage cost of shipping the CUDA runtime by link against by copy (issue #22), on a
//! synthetic CUDA-shaped toolkit: real ELF stand-ins (built with `cc`) padded to SIZE MB in all
//! (`PINFORGE_BENCH_RUNTIME_MB`, default 600, split as cublasLt 80 %, cublas 17 %, cudart 3 %,
//! about the real 13.1 runtime's shares). Ignored: run by `bench/stage.sh`, which prints the
//! figures this test measures. Each repetition ships into a fresh stage (a second build's stage:
//! the toolkit is already assembled and in the page cache) and then collects the stage as the
//! build does (the digest of every file).

use super::tests::cc_lib as cc;
use super::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

/// Append `mb` MB of non-repeating bytes (trailing data past an ELF's sections is never read
/// by the loader nor by `needed_of_file`).
fn pad(file: &Path, mb: u64) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .expect("open");
    let mut block = vec![0u8; 1 << 20];
    for i in 0..mb {
        for (j, b) in block.iter_mut().enumerate() {
            *b = (j as u64).wrapping_mul(2_654_435_761).wrapping_add(i) as u8;
        }
        f.write_all(&block).expect("pad");
    }
}

#[test]
#[ignore = "benchmark: bench/stage.sh runs it"]
fn bench_stage_runtime_link_vs_copy() {
    let total: u64 = std::env::var("PINFORGE_BENCH_RUNTIME_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let reps: usize = std::env::var("PINFORGE_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path().join("toolkit");
    let lib = root.join("lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    cc(
        &lib.join("libcudart.so.13.1.80"),
        "libcudart.so.13",
        &lib,
        &[],
    );
    std::os::unix::fs::symlink("libcudart.so.13.1.80", lib.join("libcudart.so.13")).expect("ln");
    cc(
        &lib.join("libcublasLt.so.13.2.0"),
        "libcublasLt.so.13",
        &lib,
        &[],
    );
    std::os::unix::fs::symlink("libcublasLt.so.13.2.0", lib.join("libcublasLt.so.13")).expect("ln");
    cc(
        &lib.join("libcublas.so.13.2.0"),
        "libcublas.so.13",
        &lib,
        &["libcublasLt.so.13"],
    );
    std::os::unix::fs::symlink("libcublas.so.13.2.0", lib.join("libcublas.so.13")).expect("ln");
    pad(&lib.join("libcublasLt.so.13.2.0"), total * 80 / 100);
    pad(&lib.join("libcublas.so.13.2.0"), total * 17 / 100);
    pad(&lib.join("libcudart.so.13.1.80"), total * 3 / 100);
    let record = seal::seal_runtime(&root).expect("seal");
    let mut figures: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for rep in 0..reps {
        for (how, rec) in [("link", Some(&record)), ("copy", None)] {
            let stage = t.path().join(format!("stage-{how}-{rep}"));
            std::fs::create_dir_all(stage.join("lib")).expect("mkdir");
            cc(
                &stage.join("lib/libggml-cuda.so"),
                "libggml-cuda.so",
                &lib,
                &["libcudart.so.13", "libcublas.so.13"],
            );
            let started = Instant::now();
            let s = ship(&stage, &root, rec).expect("ship");
            let shipped = started.elapsed().as_secs_f64();
            assert_eq!(s.shipped.len(), 3, "{s:?}");
            assert!(s
                .shipped
                .iter()
                .all(|x| x.copied.is_none() == (how == "link")));
            let paths: Vec<_> = s
                .shipped
                .iter()
                .map(|x| (x.path.clone(), x.known))
                .collect();
            let started = Instant::now();
            let (artifacts, _, _) =
                crate::build::stage::collect_examined(&stage, &paths).expect("collect");
            let collected = started.elapsed().as_secs_f64();
            assert_eq!(artifacts.len(), 4);
            figures.entry(how).or_default().push((shipped, collected));
            std::fs::remove_dir_all(&stage).expect("rm");
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut med = BTreeMap::new();
    for (how, runs) in &figures {
        let mut ship_s: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let mut stage_s: Vec<f64> = runs.iter().map(|r| r.0 + r.1).collect();
        let (a, b) = (median(&mut ship_s), median(&mut stage_s));
        println!("stage-bench {how}: ship {a:.3} s, ship+collect {b:.3} s (median of {reps})");
        med.insert(*how, (a, b));
    }
    let (l, c) = (med["link"], med["copy"]);
    println!(
        "stage-bench runtime {total} MB: ship link/copy = {:.5}, ship+collect link/copy = {:.5}",
        l.0 / c.0,
        l.1 / c.1
    );
}
