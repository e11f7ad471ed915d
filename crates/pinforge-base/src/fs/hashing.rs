//! Hashing many files at the speed of the disk: one worker per core, each file read once,
//! largest files first. Every verify (a build's manifest, an installed entry) hashes through
//! here, so `verify` costs what `xargs -P$(nproc) sha256sum` over the same files costs.
//!
//! SHA-256 itself is the `sha2` crate's: on x86-64 it detects SHA-NI (and on aarch64 the
//! SHA2 extensions) at run time through `cpufeatures` and falls back to portable code, so no
//! feature flag is needed (the `asm` feature would only replace the portable fallback, and
//! needs a C toolchain at build time). `bench/verify.sh` measures the result against
//! `sha256sum`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How many workers to hash with: every core the process may use.
pub(crate) fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `f` applied to every item, on all cores, the results in the items' order. Items are
/// handed out largest first (by `weight`, e.g. the file size), so one large file does not
/// start last and leave the other cores idle at the end. `f` runs once per item.
pub fn par_map<T, R, W, F>(items: &[T], weight: W, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    W: Fn(&T) -> u64,
    F: Fn(&T) -> R + Sync,
{
    let mut order: Vec<usize> = (0..items.len()).collect();
    // Stable: equal weights keep their order, so a run is reproducible.
    order.sort_by_key(|&i| std::cmp::Reverse(weight(&items[i])));
    let n = workers().min(items.len());
    if n <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                let r = f(&items[i]);
                // A worker that panicked poisons only its own slot; the scope re-raises the
                // panic anyway, so the value behind a poisoned lock is never read.
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .ok()
                .flatten()
                .expect("invariant: every item is mapped once before the scope ends")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Sha256;

    #[test]
    fn results_come_back_in_item_order_whatever_the_schedule() {
        let items: Vec<u64> = (0..200).collect();
        let out = par_map(&items, |&x| x % 7, |&x| x * 3);
        assert_eq!(out, items.iter().map(|x| x * 3).collect::<Vec<_>>());
        let none: Vec<u64> = Vec::new();
        assert!(par_map(&none, |_| 0, |&x| x).is_empty());
    }

    #[test]
    fn parallel_digests_equal_the_sequential_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut paths = Vec::new();
        for i in 0..9u32 {
            let p = dir.path().join(format!("f{i}"));
            let body: Vec<u8> = (0..(i as usize * 100_003))
                .map(|b| (b % 251) as u8)
                .collect();
            std::fs::write(&p, &body).expect("write");
            paths.push((p, body));
        }
        let got = par_map(
            &paths,
            |(_, b)| b.len() as u64,
            |(p, _)| Sha256::of_file(p).expect("hash"),
        );
        for ((_, body), (d, size)) in paths.iter().zip(got) {
            assert_eq!(d, Sha256::of_bytes(body));
            assert_eq!(size, body.len() as u64);
        }
    }
}
