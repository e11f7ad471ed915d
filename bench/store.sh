#!/usr/bin/env bash
# Store costs with the object store (issue #22), pinforge against the plain commands in one run:
#  1. two synthetic variants of SIZE MB (default 600) that differ in one 3 MB file: store bytes
#     and wall time of installing the second after the first, vs `cp -a` of both trees and
#     `rsync -a --checksum --link-dest` of the second against the first. New bytes written by
#     pinforge must be <= 1.1x the changed file.
#  1b. the second variant into the control layer, which shares no inode with live (#36):
#     reflinks where the file system has them, copies on ext4.
#  2. `gc` after GENS (default 50) generations, each a variant differing in its 3 MB file,
#     installed into the control layer (no rollback stack, so gc has GENS-1 entries to drop).
#  3. with WORKSPACE: the CPU builds, `unpatched` installed after `patched` (both must exist).
# Store bytes are `du -sb` of the root (each inode counted once), so shared objects count once.
#   bench/store.sh [WORKSPACE]
#   env: SIZE_MB=600 GENS=50 RECIPE=mrope-cpu BENCH_DIR=target PINFORGE_BIN=(release build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ws_arg=${1:-}
size_mb=${SIZE_MB:-600}
gens=${GENS:-50}
if [ -n "${PINFORGE_BIN:-}" ]; then
  pf=$PINFORGE_BIN # e.g. target/debug/pinforge (its dependencies, sha2 included, are built -O2)
else
  (cd "$repo" && cargo build --release --quiet)
  pf="$repo/target/release/pinforge"
fi
work=$(mktemp -d -p "${BENCH_DIR:-$repo/target}")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
now() { date +%s.%N; }
el() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
bytes() { du -sb "$@" | awk '{ s += $1 } END { print s }'; }

# The manifest of the files under DIR/out, in pinforge's format (as tests/cli/trust_install.rs).
manifest() { # dir name
  python3 - "$1" "$2" "$work/digests.json" <<'PY'
import hashlib, json, os, sys
d, name, cache_path = sys.argv[1], sys.argv[2], sys.argv[3]
cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
out = os.path.join(d, "out"); subjects = []
for root, _, files in os.walk(out):
    for f in sorted(files):
        p = os.path.join(root, f); st = os.stat(p); key = f"{st.st_dev}:{st.st_ino}"
        if st.st_nlink == 1 or key not in cache:  # base files: hard links shared by all variants
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for b in iter(lambda: fh.read(1 << 20), b""): h.update(b)
            cache[key] = h.hexdigest()
        digest = cache.pop(key) if st.st_nlink == 1 else cache[key]
        subjects.append({"name": os.path.relpath(p, out), "digest": {"sha256": digest},
                         "annotations": {"size": os.path.getsize(p)}})
m = {"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://slsa.dev/provenance/v1",
     "subject": sorted(subjects, key=lambda s: s["name"]),
     "predicate": {"buildDefinition": {"buildType": "https://pinforge.invalid/cmake-variant/v1",
        "externalParameters": {"recipe": "synthetic", "variant": name, "build_type": "Release",
            "targets": [], "cmake_args": [], "patches": []},
        "internalParameters": {"artifact_root": "out", "inputs": {}, "input_digest": "0" * 64},
        "resolvedDependencies": []},
       "runDetails": {"builder": {"id": "bench"}, "metadata": {"invocationId": "x",
            "startedOn": "", "finishedOn": ""},
        "byproducts": [{"name": "build.log", "digest": {"sha256": hashlib.sha256(b"").hexdigest()}}]}}}
json.dump(m, open(os.path.join(d, "manifest.json"), "w"), indent=1)
json.dump(cache, open(cache_path, "w"))
PY
}

# Variant N: the base files hard-linked (no disk), plus its own 3 MB libllama.so.
variant() { # n
  local d="$work/builds/v$1"
  mkdir -p "$d/out"
  cp -al "$work/base/." "$d/out/"
  head -c $((3 * 1024 * 1024)) /dev/urandom > "$d/out/lib/libllama.so"
  chmod 0755 "$d/out/lib/libllama.so"
  manifest "$d" "v$1"
}

echo "== 1. two ${size_mb} MB variants differing in one 3 MB file (load: $(cut -d' ' -f1-3 /proc/loadavg))"
mkdir -p "$work/base/lib"
per=$(( (size_mb - 3) / 19 ))
for i in $(seq 19); do
  head -c $((per * 1024 * 1024)) /dev/urandom > "$work/base/lib/libpart$i.so"
  chmod 0755 "$work/base/lib/libpart$i.so"
done
variant 1; variant 2
changed=$(stat -c %s "$work/builds/v2/out/lib/libllama.so")
root="$work/rollback"
"$pf" install "$work/builds/v1/manifest.json" --layer live --root "$root" --copy -q >/dev/null
s1=$(bytes "$root")
a=$(now)
"$pf" install "$work/builds/v2/manifest.json" --layer live --root "$root" --copy --json > "$work/i2.json"
b=$(now)
s2=$(bytes "$root")
written=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["store"]["bytes_written"])' "$work/i2.json")
pf_new=$((s2 - s1))
pf_t=$(el "$a" "$b")
mkdir -p "$work/cp"
cp -a "$work/builds/v1/out" "$work/cp/v1"
c1=$(bytes "$work/cp")
a=$(now); cp -a "$work/builds/v2/out" "$work/cp/v2"; sync -f "$work/cp"; b=$(now)
cp_new=$(( $(bytes "$work/cp") - c1 )); cp_t=$(el "$a" "$b")
rs_new=na; rs_t=na
if command -v rsync >/dev/null; then
  mkdir -p "$work/rs"
  rsync -a "$work/builds/v1/out/" "$work/rs/v1/"
  r1=$(bytes "$work/rs")
  a=$(now)
  rsync -a --checksum --link-dest="$work/rs/v1" "$work/builds/v2/out/" "$work/rs/v2/"
  sync -f "$work/rs"; b=$(now)
  rs_new=$(( $(bytes "$work/rs") - r1 )); rs_t=$(el "$a" "$b")
fi
echo "changed file: $changed bytes"
echo "pinforge install (hash, verify, commit): +$pf_new store bytes (objects written: $written), $pf_t s"
echo "  new bytes / changed file: $(ratio "$pf_new" "$changed") (goal <= 1.1); objects only: $(ratio "$written" "$changed")"
echo "cp -a:                        +$cp_new bytes, $cp_t s; pinforge/cp bytes $(ratio "$pf_new" "$cp_new"), time $(ratio "$pf_t" "$cp_t")"
if [ "$rs_new" != na ]; then
  echo "rsync --checksum --link-dest: +$rs_new bytes, $rs_t s; pinforge/rsync bytes $(ratio "$pf_new" "$rs_new"), time $(ratio "$pf_t" "$rs_t")"
fi
awk -v n="$pf_new" -v c="$changed" 'BEGIN { exit !(n <= 1.1 * c) }' \
  || { echo "FAIL: new store bytes $pf_new > 1.1 x $changed" >&2; exit 1; }

# 1b. The same second variant into the control layer: control shares no inode with live
# (issue #36), so its files are reflinks where the file system has them (FICLONE: XFS, Btrfs;
# run with BENCH_DIR on such a mount) and copies elsewhere (ext4). The figure is the price of
# an independent fallback layer.
echo "== 1b. the second variant into control, own files (load: $(cut -d' ' -f1-3 /proc/loadavg))"
s3=$(bytes "$root")
# du counts a reflink's apparent size; the file system's used blocks show what it shares
# (exact only when nothing else writes there during the install).
sync -f "$root"; f3=$(df -B1 --output=used "$root" | tail -n1)
a=$(now)
"$pf" install "$work/builds/v2/manifest.json" --layer control --root "$root" --copy --json > "$work/i3.json"
b=$(now)
sync -f "$root"; f4=$(df -B1 --output=used "$root" | tail -n1)
s4=$(bytes "$root")
total=$(bytes "$work/builds/v2/out")
python3 - "$work/i3.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["store"]
n, r = s.get("own_files", 0), s.get("own_reflinked", 0)
print(f"own files: {n}, reflinked {r}, copied {n - r}")
PY
own_new=$((s4 - s3))
echo "pinforge install --layer control: +$own_new store bytes (du), +$((f4 - f3)) used blocks (df), $(el "$a" "$b") s"
echo "  used blocks / changed file: $(ratio $((f4 - f3)) "$changed")"
echo "  new bytes / changed file: $(ratio "$own_new" "$changed"); / whole variant ($total bytes): $(ratio "$own_new" "$total")"

echo "== 2. gc after $gens generations (load: $(cut -d' ' -f1-3 /proc/loadavg))"
groot="$work/gcroot"
a=$(now)
for n in $(seq "$gens"); do
  variant "g$n"
  "$pf" install "$work/builds/vg$n/manifest.json" --layer control --root "$groot" --copy -q >/dev/null
  rm -rf "$work/builds/vg$n"
done
b=$(now)
before=$(bytes "$groot")
"$pf" gc --root "$groot" --dry-run --json > "$work/dry.json"
a2=$(now); "$pf" gc --root "$groot" --json > "$work/gc.json"; b2=$(now)
after=$(bytes "$groot")
"$pf" verify --installed control --root "$groot" -q >/dev/null
python3 - "$work/gc.json" "$work/dry.json" <<'PY'
import json, sys
g, d = (json.load(open(p)) for p in sys.argv[1:])
assert (g["removed_entries"], g["bytes_freed"]) == (d["removed_entries"], d["bytes_freed"]), "dry run != run"
print(f"gc: removed {len(g['removed_entries'])} entries, {g['removed_objects']} objects, "
      f"{g['removed_generations']} generations; reported {g['bytes_freed']} bytes freed")
PY
echo "installs: $(el "$a" "$b") s for $gens; store $before -> $after bytes (du); gc $(el "$a2" "$b2") s"

if [ -n "$ws_arg" ]; then
  ws=$(cd "$ws_arg" && pwd)
  recipe=${RECIPE:-mrope-cpu}
  echo "== 3. CPU builds: $recipe unpatched after patched (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  croot="$work/cpuroot"
  "$pf" install "$ws/build/$recipe/patched/manifest.json" --layer live --root "$croot" --copy -q >/dev/null
  s1=$(bytes "$croot")
  a=$(now)
  "$pf" install "$ws/build/$recipe/unpatched/manifest.json" --layer control --root "$croot" --copy --json > "$work/c2.json"
  b=$(now)
  s2=$(bytes "$croot")
  art() { python3 -c 'import json,sys,os; m=json.load(open(sys.argv[1])); print(os.path.join(os.path.dirname(sys.argv[1]), m["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"]))' "$1"; }
  mkdir -p "$work/cpucp"
  cp -a "$(art "$ws/build/$recipe/patched/manifest.json")" "$work/cpucp/p"
  c1=$(bytes "$work/cpucp")
  a3=$(now); cp -a "$(art "$ws/build/$recipe/unpatched/manifest.json")" "$work/cpucp/u"; sync -f "$work/cpucp"; b3=$(now)
  c2=$(bytes "$work/cpucp")
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["store"]; print("objects: %d written (%d bytes), %d reused" % (s["objects_written"], s["bytes_written"], s["objects_reused"]))' "$work/c2.json"
  echo "pinforge: +$((s2 - s1)) store bytes, $(el "$a" "$b") s; cp -a: +$((c2 - c1)) bytes, $(el "$a3" "$b3") s; bytes ratio $(ratio $((s2 - s1)) $((c2 - c1)))"
fi
