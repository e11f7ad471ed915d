#!/usr/bin/env bash
# Benchmark of `pinforge audit` over a long git range (issue #9): a synthetic upstream of the
# 10-patch history bundle of tests/cli/audit.rs plus ~3000 commits (each with a PR number in its
# subject and an issue number in its body), built with libgit2; the audit onto its tip is timed
# next to `git cherry` and `git log --grep` (one per patch number) on the same range, same run.
#
#   bench/audit.sh                       3000 extra commits, dev profile
#   AUDIT_BENCH_COMMITS=10000 PROFILE=--release bench/audit.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tools/bootstrap.sh >/dev/null
export AUDIT_BENCH_COMMITS="${AUDIT_BENCH_COMMITS:-3000}"
# shellcheck disable=SC2086
cargo test ${PROFILE:-} --test cli audit::bench_audit_over_a_3000_commit_range_against_git_cherry_and_log_grep \
  -- --ignored --nocapture 2>&1 | grep -E "^audit of|test result"
