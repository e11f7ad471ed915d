#!/usr/bin/env bash
# Push and pull+install times through a real docker-registry on loopback, for a synthesized
# artifact of SIZE_MB (default 600: a CUDA-runtime-sized build) or a given MANIFEST (e.g. the
# CPU build), against plain curl of the same blobs (upload and download).
# Usage: bench/ship.sh [MANIFEST]   (env: SIZE_MB, PINFORGE=path to the binary)
set -euo pipefail
PF=${PINFORGE:-$PWD/target/debug/pinforge}
T=$(mktemp -d); trap 'kill $REG 2>/dev/null; wait $REG 2>/dev/null; rm -rf "$T"' EXIT
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s/data\nhttp:\n  addr: 127.0.0.1:%s\n' "$T" "$PORT" > "$T/cfg.yml"
docker-registry serve "$T/cfg.yml" >/dev/null 2>&1 & REG=$!
until curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null; do sleep 0.1; done
M=${1:-}
if [ -z "$M" ]; then
  mkdir -p "$T/b/out/lib"; head -c $(( ${SIZE_MB:-600} << 20 )) /dev/urandom > "$T/b/out/lib/libbig.so"
  python3 - "$T/b" <<'PY'
import hashlib,json,os,sys
d=sys.argv[1]; f=os.path.join(d,"out/lib/libbig.so"); h=hashlib.sha256()
with open(f,"rb") as r:
    for c in iter(lambda: r.read(1<<20), b""): h.update(c)
m={"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1",
"subject":[{"name":"lib/libbig.so","digest":{"sha256":h.hexdigest()},"annotations":{"size":os.path.getsize(f)}}],
"predicate":{"buildDefinition":{"buildType":"https://pinforge.invalid/cmake-variant/v1","externalParameters":{"recipe":"bench","variant":"big","build_type":"Release","targets":[],"cmake_args":[],"patches":[]},
"internalParameters":{"artifact_root":"out","inputs":{},"input_digest":"0"*64},"resolvedDependencies":[]},
"runDetails":{"builder":{"id":"bench"},"metadata":{"invocationId":"x","startedOn":"","finishedOn":""},"byproducts":[]}}}
json.dump(m,open(os.path.join(d,"manifest.json"),"w"))
PY
  M="$T/b/manifest.json"
fi
now() { date +%s.%N; }
t0=$(now); D=$("$PF" push "$M" "127.0.0.1:$PORT/bench/a:v1" --json | python3 -c 'import json,sys;print(json.load(sys.stdin)["digest"])'); t1=$(now)
mkdir -p "$T/ws"
"$PF" --workspace "$T/ws" install "oci://127.0.0.1:$PORT/bench/a@sha256:$D" --layer live --root "$T/root" -q >/dev/null; t2=$(now)
# Plain curl of the same blobs: the layer up (to another repository) and down.
L=$(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://127.0.0.1:$PORT/v2/bench/a/manifests/sha256:$D" | python3 -c 'import json,sys;print(json.load(sys.stdin)["layers"][0]["digest"])')
curl -s -o "$T/layer.tar" "http://127.0.0.1:$PORT/v2/bench/a/blobs/$L"; t3=$(now)
LOC=$(curl -s -D - -o /dev/null -X POST "http://127.0.0.1:$PORT/v2/bench/b/blobs/uploads/" | awk -F': ' 'tolower($1)=="location"{print $2}' | tr -d '\r')
t4=$(now); curl -sf -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' --data-binary @"$T/layer.tar" "$LOC&digest=$L"; t5=$(now)
python3 - "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$(stat -c %s "$T/layer.tar")" <<'PY'
import sys
t0,t1,t2,t3,t4,t5,n=map(float,sys.argv[1:])
push,pi,down,up=t1-t0,t2-t1,t3-t2,t5-t4
print(f"layer {int(n)} bytes")
print(f"pinforge push          {push:7.2f} s   curl upload   {up:7.2f} s   ratio {push/up:5.1f}x")
print(f"pinforge pull+install  {pi:7.2f} s   curl download {down:7.2f} s   ratio {pi/down:5.1f}x")
PY
