#!/usr/bin/env bash
# Benchmarks: pinforge against the plain commands a user would otherwise run, same machine,
# same run, same tree (llama.cpp from llama-cpp-sys-2 0.1.135, the shipped bundle, the
# default recipe's CMake options). Not a test: it prints wall times and ratios.
#
#   bench/run.sh            cold build, no-op rebuild, verify, patch application
#   bench/run.sh noop       the two no-op rebuilds side by side (after the cold builds)
#   JOBS=2 bench/run.sh     Ninja parallelism for both sides (default: Ninja's own default)
#   BENCH_DIR=DIR ...       keep the work folder in DIR (a rerun skips the cold builds)
#
# Needs: tools/bootstrap.sh done, `cargo build --release` done (the script does both).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
# CMake and Ninja: bootstrap only when they are not there yet.
[ -x .tools/bin/cmake ] && [ -x .tools/bin/ninja ] || tools/bootstrap.sh
cargo build --release --quiet
pf="$repo/target/release/pinforge"
export PATH="$repo/.tools/bin:$PATH"
export PINFORGE_TOOL_PATH="$repo/.tools/bin"
unset SOURCE_DATE_EPOCH
jobs_flag=()
[ -n "${JOBS:-}" ] && jobs_flag=(-j "$JOBS")

if [ -n "${BENCH_DIR:-}" ]; then
  work="$BENCH_DIR"; mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
calc() { awk "BEGIN { printf \"%.4f\", $1 }"; }

# The verified crate (cargo's cache after the first pinforge run).
crate=$(ls ~/.cargo/registry/cache/*/llama-cpp-sys-2-0.1.135.crate 2>/dev/null | head -n1 || true)
if [ -z "$crate" ]; then
  mkdir -p "$work/warm" && "$pf" --workspace "$work/warm" build --variant unpatched >/dev/null 2>&1 || true
  crate=$(ls ~/.cargo/registry/cache/*/llama-cpp-sys-2-0.1.135.crate | head -n1)
fi

cmake_opts=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF
  -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT=llama-cpp-sys-2-0.1.135)

# --- 4. patch application ----------------------------------------------------------------
# A pristine repository made with plain tar + git; each run clones it (untimed), then times
# only the application of the three patches.
patch_bench() {
  local pristine="$work/pristine"
  if [ ! -d "$pristine/.git" ]; then
    mkdir -p "$work/x" && tar xzf "$crate" -C "$work/x"
    mv "$work/x/llama-cpp-sys-2-0.1.135/llama.cpp" "$pristine"
    (cd "$pristine" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm base)
  fi
  local reps=10 total_ga=0 total_gm=0 total_pf=0 t0 t1
  for i in $(seq $reps); do
    rm -rf "$work/c" && git clone -q "$pristine" "$work/c"
    t0=$(now); (cd "$work/c" && for p in $(grep -v '^#' "$repo/patches/series"); do git apply "$repo/patches/$p"; done); t1=$(now)
    total_ga=$(calc "$total_ga + $(elapsed "$t0" "$t1")")
    rm -rf "$work/c" && git clone -q "$pristine" "$work/c"
    t0=$(now); (cd "$work/c" && git -c user.name=b -c user.email=b@b am -q "$repo"/patches/0*.patch); t1=$(now)
    total_gm=$(calc "$total_gm + $(elapsed "$t0" "$t1")")
    rm -rf "$work/c" && git clone -q "$pristine" "$work/c"
    t0=$(now); "$pf" patch apply "$work/c" --dir "$repo/patches" >/dev/null; t1=$(now)
    total_pf=$(calc "$total_pf + $(elapsed "$t0" "$t1")")
  done
  git_apply=$(calc "$total_ga / $reps"); git_am=$(calc "$total_gm / $reps"); pf_apply=$(calc "$total_pf / $reps")
  printf '%-44s %10.3f %10.3f %8s\n' "apply 3 patches: git apply (no commits)" "$git_apply" "$pf_apply" "$(ratio "$pf_apply" "$git_apply")"
  printf '%-44s %10.3f %10.3f %8s\n' "apply 3 patches as commits: git am" "$git_am" "$pf_apply" "$(ratio "$pf_apply" "$git_am")"
  echo "(patch rows: mean of $reps runs each, on a fresh clone each time, clone not timed)"
}

if [ "${1:-all}" = patches ]; then
  printf '\n%-44s %10s %10s %8s\n' "measure (seconds)" "plain" "pinforge" "ratio"
  patch_bench
  exit 0
fi

# --- 2. no-op rebuild --------------------------------------------------------------------
# Both sides in the same run, alternating, REPS times each (default 20): the plain side is
# `cmake --build` of the same targets in its own build folder; pinforge's is `build` of the
# default recipe (answered from its metadata stamp plus `ninja -n`). Mean and best of each.
noop_bench() {
  local reps=${REPS:-20} tp=0 tf=0 bp=999 bf=999 t0 t1 e
  # One untimed round each: the page cache holds both trees.
  cmake --build "$work/plain/build" --target llama >/dev/null
  "$pf" --workspace "$work/pf" build >/dev/null 2>&1
  for i in $(seq "$reps"); do
    t0=$(now); cmake --build "$work/plain/build" --target llama >/dev/null; t1=$(now)
    e=$(elapsed "$t0" "$t1"); tp=$(calc "$tp + $e"); bp=$(awk -v a="$bp" -v b="$e" 'BEGIN { print (b < a) ? b : a }')
    t0=$(now); "$pf" --workspace "$work/pf" build >/dev/null 2>&1; t1=$(now)
    e=$(elapsed "$t0" "$t1"); tf=$(calc "$tf + $e"); bf=$(awk -v a="$bf" -v b="$e" 'BEGIN { print (b < a) ? b : a }')
  done
  plain_noop=$(calc "$tp / $reps"); pf_noop=$(calc "$tf / $reps")
  "$pf" --workspace "$work/pf" build --json | grep -q '"cached":true' \
    || { echo "pinforge's no-op build did not report cached" >&2; exit 1; }
  printf '%-44s %10.4f %10.4f %8s\n' "no-op rebuild, mean (cmake --build vs build)" "$plain_noop" "$pf_noop" "$(ratio "$pf_noop" "$plain_noop")"
  printf '%-44s %10.4f %10.4f %8s\n' "no-op rebuild, best of $reps" "$bp" "$bf" "$(ratio "$bf" "$bp")"
}

# --- 1. cold build -----------------------------------------------------------------------
# plain: verify the crate digest, extract, apply the three patches, configure, build, hash.
plain_cold=0 pf_cold=0
if [ ! -f "$work/plain/build/build.ninja" ]; then
t0=$(now)
(
  rm -rf "$work/plain"
  cd "$work" && mkdir plain && cd plain
  echo "95cf8be1ff000b531ac0523c66a9ffce3cef6d09a5d95b21cad745bedb115468  $crate" | sha256sum -c --quiet
  tar xzf "$crate"
  src="$PWD/llama-cpp-sys-2-0.1.135/llama.cpp"
  for p in $(grep -v '^#' "$repo/patches/series"); do (cd "$src" && git apply "$repo/patches/$p"); done
  cmake -S "$src" -B build "${cmake_opts[@]}" >/dev/null
  cmake --build build --target llama ${JOBS:+-j "$JOBS"} >/dev/null
  sha256sum build/bin/*.so.* >/dev/null
)
t1=$(now)
plain_cold=$(elapsed "$t0" "$t1")
fi

if [ ! -f "$work/pf/build/mrope-cpu/patched/manifest.json" ]; then
mkdir -p "$work/pf"
t0=$(now)
"$pf" --workspace "$work/pf" build "${jobs_flag[@]}" >/dev/null 2>&1
t1=$(now)
pf_cold=$(elapsed "$t0" "$t1")
fi

if [ "${1:-all}" = noop ]; then
  printf '\n%-44s %10s %10s %8s\n' "measure (seconds)" "plain" "pinforge" "ratio"
  noop_bench
  exit 0
fi

# --- 3. verify vs sha256sum --------------------------------------------------------------
manifest="$work/pf/build/mrope-cpu/patched/manifest.json"
t0=$(now); sha256sum "$work/plain/build/bin/"*.so.* >/dev/null; t1=$(now)
plain_verify=$(elapsed "$t0" "$t1")
t0=$(now); "$pf" verify "$manifest" >/dev/null; t1=$(now)
pf_verify=$(elapsed "$t0" "$t1")


printf '\n%-44s %10s %10s %8s\n' "measure (seconds)" "plain" "pinforge" "ratio"
if [ "$plain_cold" != 0 ] && [ "$pf_cold" != 0 ]; then
  printf '%-44s %10.2f %10.2f %8s\n' "cold build (extract+patch+configure+build)" "$plain_cold" "$pf_cold" "$(ratio "$pf_cold" "$plain_cold")"
fi
noop_bench
printf '%-44s %10.3f %10.3f %8s\n' "verify outputs (sha256sum vs verify)" "$plain_verify" "$pf_verify" "$(ratio "$pf_verify" "$plain_verify")"
patch_bench
