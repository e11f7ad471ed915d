#!/usr/bin/env bash
# A second CUDA-shaped build's stage cost with the CUDA runtime shipped by hard link of the
# toolkit's sealed files vs by copy (issue #22), on a synthetic toolkit of SIZE MB (default 600:
# real ELF stand-ins built with cc, padded; see src/artifact/build/runtime/bench.rs). Prints the
# median ship time and ship+collect (the stage's digests) time of each, and their ratios.
#   bench/stage.sh          env: SIZE_MB=600 REPS=3 BENCH_DIR=target
# Measured 2026-12-02, 2 shared cores at load ~8, ext4, toolkit in the page cache: copy ship
# 0.77-0.99 s and ship+collect 1.82-1.89 s; link ship 0.001 s and ship+collect 0.001 s (the
# linked files are named by their assembly record's digest, not re-hashed).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export TMPDIR=${BENCH_DIR:-$repo/target} # the stage and toolkit on the build's file system
PINFORGE_BENCH_RUNTIME_MB=${SIZE_MB:-600} PINFORGE_BENCH_REPS=${REPS:-3} \
  CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} \
  cargo test --quiet --lib -- --ignored --nocapture bench_stage_runtime_link_vs_copy 2>&1 |
  grep '^stage-bench'
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
