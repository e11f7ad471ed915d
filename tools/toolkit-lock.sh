#!/usr/bin/env bash
# Write a CUDA toolkit lock (recipes/toolkits/NAME.toml) from the PyPI wheels of the compiler
# parts of a cuda-toolkit meta-package release: nvcc, crt, nvvm, cudart, cccl, cublas.
#   tools/toolkit-lock.sh 13.1.1 > recipes/toolkits/cuda-13.1.1.toml
# It downloads the meta-package, reads the exact versions it requires, downloads those wheels
# and prints each one's name, version, file and SHA-256. Review the result before committing it:
# pinforge trusts the lock, not the registry.
set -euo pipefail
release=${1:?usage: tools/toolkit-lock.sh CUDA_TOOLKIT_VERSION (e.g. 13.1.1)}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/meta" "cuda-toolkit==$release"
"$py" - "$release" "$tmp" <<'PY'
import hashlib, os, re, subprocess, sys, zipfile
release, tmp = sys.argv[1], sys.argv[2]
meta = next(os.path.join(tmp, "meta", f) for f in os.listdir(os.path.join(tmp, "meta")))
text = next(zipfile.ZipFile(meta).read(n).decode() for n in zipfile.ZipFile(meta).namelist() if n.endswith("METADATA"))
parts = {"nvcc": 0, "crt": 1, "nvvm": 2, "cudart": 3, "cccl": 4, "cublas": 5}
reqs = {}
for m in re.finditer(r"Requires-Dist: ([\w-]+)==([\w.]+?)(\.\*)?;.*extra == '(\w+)'", text):
    if m.group(4) in parts:
        reqs[m.group(4)] = f"{m.group(1)}=={m.group(2)}" + ("" if not m.group(3) else ".*")
wheels = os.path.join(tmp, "wheels")
subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                "--disable-pip-version-check", "-d", wheels] + [reqs[k] for k in sorted(reqs, key=parts.get)], check=True)
major = release.split(".")[0]
print(f"# The compiler parts of the cuda-toolkit=={release} meta-package (nvcc, crt, nvvm, cudart, cccl, cublas),")
print("# written by tools/toolkit-lock.sh. Every wheel by name, exact version, file name and SHA-256;")
print("# pinforge checks each digest itself before unpacking.")
print(f'name = "cuda-{release}"')
print(f'description = "CUDA {release} from PyPI wheels"')
files = sorted(os.listdir(wheels), key=lambda f: min(v for k, v in parts.items() if reqs[k].split("==")[0].replace("-", "_") == f.split("-")[0]))
nvcc = next(f for f in files if f.startswith("nvidia_cuda_nvcc-")).split("-")[1]
print(f'nvcc-version = "{nvcc}"')
print(f'prefix = "nvidia/cu{major}"')
for f in files:
    dist, ver = f.split("-")[:2]
    h = hashlib.sha256(open(os.path.join(wheels, f), "rb").read()).hexdigest()
    print(f'\n[[wheel]]\nname = "{dist.replace("_", "-")}"\nversion = "{ver}"\nfile = "{f}"\nsha256 = "{h}"')
PY
