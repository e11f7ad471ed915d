#!/usr/bin/env bash
# Provision the build tools pinforge drives (CMake, Ninja) without root: a Python virtual
# environment under .tools/ holding the PyPI wheels, which ship real cmake and ninja binaries.
# Versions are pinned so that every machine records the same toolchain in its manifests.
# Idempotent: a second run with the pinned versions present does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.tools"
CMAKE_VERSION=4.4.5
NINJA_VERSION=1.13.2
if [ -L "$venv/bin/cmake" ] && [ -x "$venv/bin/cmake" ] && [ -x "$venv/bin/ninja" ] \
   && "$venv/bin/cmake" --version | head -n1 | grep -qx "cmake version $CMAKE_VERSION" \
   && "$venv/bin/ninja" --version | grep -q "^$NINJA_VERSION"; then
  exit 0
fi
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "bootstrap: $py not found; hint: install python3 (pip provides cmake and ninja)" >&2; exit 2; }
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "cmake==$CMAKE_VERSION" "ninja==$NINJA_VERSION"
# pip's bin/cmake is a Python console script (its shebang holds this checkout's path) that finds
# the real binary at run time. Link the real binaries instead: pinforge records and hashes the
# CMake that actually runs, the same on every checkout, and probing it starts no Python.
real=$("$venv/bin/python3" -c 'import cmake, os; print(os.path.join(os.path.dirname(cmake.__file__), "data", "bin"))')
for t in cmake ctest cpack; do
  [ -x "$real/$t" ] && ln -sfn "$real/$t" "$venv/bin/$t"
done
echo "bootstrap: cmake $CMAKE_VERSION and ninja $NINJA_VERSION in $venv/bin" >&2
