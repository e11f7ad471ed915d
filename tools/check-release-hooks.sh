#!/usr/bin/env bash
# Proves a normal build has no test hook (issue #8): `cargo build --release` without the
# `test-hooks` feature, then the binary's bytes must not contain any hook variable's name
# (src/hooks.rs keeps every name and every read of them in its feature-gated module).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin="${CARGO_TARGET_DIR:-target}/release/pinforge"
bad=0
for v in PINFORGE_CRASH_AT PINFORGE_FAIL_WRITE_AFTER PINFORGE_FS_PROBE PINFORGE_SMOKE_CRASH_TEST; do
  if grep -qa "$v" "$bin"; then echo "release binary contains the hook $v" >&2; bad=1; fi
done
[ "$bad" = 0 ] && echo "release binary $bin: no test hook"
exit "$bad"
