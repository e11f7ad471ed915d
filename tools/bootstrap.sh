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
if [ -x "$venv/bin/cmake" ] && [ -x "$venv/bin/ninja" ] \
   && "$venv/bin/cmake" --version | head -n1 | grep -qx "cmake version $CMAKE_VERSION" \
   && "$venv/bin/ninja" --version | grep -q "^$NINJA_VERSION"; then
  exit 0
fi
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "bootstrap: $py not found; hint: install python3 (pip provides cmake and ninja)" >&2; exit 2; }
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "cmake==$CMAKE_VERSION" "ninja==$NINJA_VERSION"
echo "bootstrap: cmake $CMAKE_VERSION and ninja $NINJA_VERSION in $venv/bin" >&2
