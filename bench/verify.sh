#!/usr/bin/env bash
# verify vs the plain command (issue #22): `pinforge verify MANIFEST` against
# `xargs -P$(nproc) sha256sum` over exactly the files verify hashes (its outputs, the upstream
# archive, the tool binaries and the patches the manifest names), same machine, same run.
# The file list is derived from the manifest, and its byte total is checked against verify's
# own `bytes_hashed`, so the two sides hash the same bytes.
#   bench/verify.sh WORKSPACE [RECIPE/VARIANT]   (default mrope-cpu/patched; the build must exist)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ws=$(cd "${1:?usage: bench/verify.sh WORKSPACE [RECIPE/VARIANT]}" && pwd)
rv=${2:-mrope-cpu/patched}
# PINFORGE=path uses that binary (say which in the figures) instead of building a release one.
pf=${PINFORGE:-}
if [ -z "$pf" ]; then (cd "$repo" && cargo build --release --quiet); pf="$repo/target/release/pinforge"; fi
export PATH="$repo/.tools/bin:$PATH" PINFORGE_TOOL_PATH="$repo/.tools/bin"
cd "$ws"
manifest="build/$rv/manifest.json"
list=$(mktemp); trap 'rm -f "$list"' EXIT
want=$(python3 - "$manifest" "$list" <<'PY'
import json, os, sys
mp, out = sys.argv[1], sys.argv[2]
m = json.load(open(mp)); base = os.path.dirname(mp)
bd = m["predicate"]["buildDefinition"]; ip = bd["internalParameters"]
root = os.path.normpath(os.path.join(base, ip["artifact_root"]))
files = [os.path.join(root, s["name"]) for s in m["subject"]]
for k, v in ip["inputs"].items():
    if k != "source-tree":  # a git tree: checked by object id, not hashed as a file
        files.append(os.path.realpath(v if os.path.isabs(v) else os.path.join(base, v)))
files += [d["uri"] for d in bd["resolvedDependencies"] if d["name"].startswith("patch:")]
files = [f for f in files if os.path.isfile(f)]
open(out, "w").write("\n".join(files) + "\n")
print(sum(os.path.getsize(f) for f in files))
PY
)
got=$("$pf" verify "$manifest" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_hashed"])')
[ "$want" = "$got" ] || { echo "file list ($want bytes) != verify's bytes_hashed ($got)" >&2; exit 1; }
now() { date +%s.%N; }
for i in 1 2 3 4 5; do
  a=$(now); "$pf" verify "$manifest" -q >/dev/null; b=$(now)
  xargs -d '\n' -P"$(nproc)" -n4 sha256sum < "$list" >/dev/null; c=$(now)
  awk -v a="$a" -v b="$b" -v c="$c" -v n="$got" \
    'BEGIN { printf "run %d: pinforge verify %.3f s, xargs -P sha256sum %.3f s, ratio %.2f (%d bytes)\n", '"$i"', b-a, c-b, (b-a)/(c-b), n }'
done
