#!/usr/bin/env bash
# The GPU path of `pinforge smoke`, as one prepared script for a machine with an NVIDIA GPU
# (the device tool's machine: nvcc, CMake and Ninja in its image, no network). Builds the CUDA
# variant `cuda-path-patched` of recipes/mrope-cuda.toml with the machine's own nvcc for sm_90
# (the provisioned 13.1.1 toolkit is 0.8 GB, over what a device run can carry, and the machine
# cannot fetch its wheels), smokes it with the
# qwen2vl model and the qwen2 control (probe, all layers offloaded, memory used), and checks
# the preflight refusals against the real probe: compiled architectures that miss the device.
#
# Carry from the developer machine: target/release/pinforge and vendor/ (the verified crate
# and the pristine tree, so nothing is fetched). Results go to $OUT (or /tmp/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
pf=./target/release/pinforge
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
jobs=$(nproc)
{ nvidia-smi; nvcc --version; cmake --version | head -n1; ninja --version; gcc --version | head -n1; } > "$out/machine.txt" 2>&1
echo "== build cuda-path-patched (sm_90, -j$jobs)"
time "$pf" build recipes/mrope-cuda.toml --variant cuda-path-patched -j "$jobs" --json > "$out/build.json" 2> "$out/build.err"
echo "build exit $?"; tail -n 5 "$out/build.err"
m=build/mrope-cuda/cuda-path-patched/manifest.json
for arch in qwen2vl qwen2; do
  echo "== smoke $arch"
  # --require-gpu: on this machine a CPU fallback is a failure of the check, not a pass.
  "$pf" smoke "$m" --arch "$arch" --require-gpu --json > "$out/smoke-$arch.json" 2> "$out/smoke-$arch.err"
  echo "smoke $arch exit $?"
  python3 -c "import json; d=json.load(open('$out/smoke-$arch.json')); print({k: d[k] for k in ['verdict','device','device_reason','tokens_per_second','gpu_memory_used_bytes','detail']}); print([x['name'] for x in d['engine_devices']]); print(d['cuda'])"
done
echo "== preflight: the same build described as sm_120-only must be refused on this GPU"
python3 - "$m" "$out/manifest-sm120.json" <<'PY'
import json, sys, os
m = json.load(open(sys.argv[1]))
args = m["predicate"]["buildDefinition"]["externalParameters"]["cmake_args"]
m["predicate"]["buildDefinition"]["externalParameters"]["cmake_args"] = [
    "-DCMAKE_CUDA_ARCHITECTURES=120-real" if a.startswith("-DCMAKE_CUDA_ARCHITECTURES=") else a for a in args]
m["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"] = os.path.abspath(os.path.join(os.path.dirname(sys.argv[1]), "cmake"))
json.dump(m, open(sys.argv[2], "w"))
PY
"$pf" smoke "$out/manifest-sm120.json" --arch qwen2vl --json > "$out/smoke-sm120.json"
echo "smoke sm120 exit $? (2 = refused)"
python3 -c "import json; d=json.load(open('$out/smoke-sm120.json')); print(d['verdict'], d['detail'])"
