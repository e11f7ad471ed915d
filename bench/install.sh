#!/usr/bin/env bash
# Install/rollback speed: a small (~5 MB) and a large (~1 GB) artifact set. Reports wall times
# of `pinforge install` and `pinforge rollback`, the commit step alone (from the receipts), and
# the plain alternative an operator would script: copy the tree, sha256sum -c, ln -sfn.
#   bench/install.sh [SIZE_MB_LARGE]   (default 1024)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cargo build --release --quiet
pf="$repo/target/release/pinforge"
large_mb=${1:-1024}
work=$(mktemp -d -p "${BENCH_DIR:-$repo/target}")
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
el() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# A synthetic build: N files of S MiB and a manifest in pinforge's format.
mkbuild() { # dir files size_mb
  local dir=$1 n=$2 mb=$3
  mkdir -p "$dir/out/lib"
  local subjects=""
  for i in $(seq "$n"); do
    head -c "$((mb * 1024 * 1024))" /dev/urandom > "$dir/out/lib/libpart$i.so"
    # Already at the sealed mode: install hard-links only such files (it never chmods a
    # build's own file through a shared inode), so this measures the link path.
    chmod 0444 "$dir/out/lib/libpart$i.so"
    local sha size
    sha=$(sha256sum "$dir/out/lib/libpart$i.so" | cut -d' ' -f1)
    size=$(stat -c %s "$dir/out/lib/libpart$i.so")
    subjects+="${subjects:+,}{\"name\":\"lib/libpart$i.so\",\"digest\":{\"sha256\":\"$sha\"},\"annotations\":{\"size\":$size}}"
  done
  cat > "$dir/manifest.json" <<JSON
{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1",
 "subject":[$subjects],
 "predicate":{"buildDefinition":{"buildType":"https://pinforge.invalid/cmake-variant/v1",
  "externalParameters":{"recipe":"bench","variant":"$(basename "$dir")","build_type":"Release","targets":[],"cmake_args":[],"patches":[]},
  "internalParameters":{"artifact_root":"out","inputs":{},"input_digest":"0000000000000000000000000000000000000000000000000000000000000000"},
  "resolvedDependencies":[]},
  "runDetails":{"builder":{"id":"bench"},"metadata":{"invocationId":"x","startedOn":"","finishedOn":""},"byproducts":[]}}}
JSON
}

commit_us() { # last receipt's commit timing
  local r; r=$(ls "$1"/receipts/*.json | sort | tail -n1)
  python3 -c "import json,sys; print(json.load(open('$r'))['timings_us'].get('commit','-'))"
}

row() { printf '%-8s %-34s %10s\n' "$1" "$2" "$3"; }
for size in small large; do
  if [ $size = small ]; then n=4; mb=1; else n=4; mb=$((large_mb / 4)); fi
  mkbuild "$work/$size-a" $n $mb
  mkbuild "$work/$size-b" $n $mb
  root="$work/$size-root"
  "$pf" install "$work/$size-a/manifest.json" --layer control --root "$root" >/dev/null
  t0=$(now); "$pf" install "$work/$size-b/manifest.json" --layer live --root "$root" >/dev/null; t1=$(now)
  row $size "install (link, verify, commit)" "$(el "$t0" "$t1") s"
  row $size "  of which commit rename" "$(commit_us "$root") us"
  t0=$(now); "$pf" rollback --to control --root "$root" >/dev/null; t1=$(now)
  row $size "rollback --to control (+verify)" "$(el "$t0" "$t1") s"
  row $size "  of which commit rename" "$(commit_us "$root") us"
  # plain: copy, verify, switch a link
  t0=$(now)
  cp -r "$work/$size-b/out" "$work/$size-plain"
  (cd "$work/$size-plain" && sha256sum lib/*.so > /dev/null)
  ln -sfn "$work/$size-plain" "$work/$size-plain-current"
  t1=$(now)
  row $size "plain cp -r + sha256sum + ln -sfn" "$(el "$t0" "$t1") s"
  du -sh "$root/store" | awk -v s=$size '{ printf "%-8s %-34s %10s\n", s, "store size after both installs", $1 }'
done
