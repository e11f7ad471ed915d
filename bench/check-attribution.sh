#!/usr/bin/env bash
# Benchmark of `pinforge patch check-attribution` (issue #26 §3) against the git commands a
# maintainer would otherwise run for the same claims, same history, same run: per patch
# `git cat-file -e`, `git merge-base --is-ancestor`, `git log -1 --format` (author and message),
# `git tag --contains --sort=creatordate | head -1`, and for a Pending patch `git log --grep`.
# The history is synthetic: N commits (default 3000) made with `git fast-import`, a tag every
# 10 commits, each subject with a `(#PR)` squash suffix; the bundle has 10 backports and 5
# pending patches.
#
#   bench/check-attribution.sh                 3000 commits, dev profile
#   COMMITS=10000 PROFILE=--release bench/check-attribution.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
COMMITS="${COMMITS:-3000}"
# shellcheck disable=SC2086
cargo build ${PROFILE:-} --quiet
case "${PROFILE:-}" in --release) pf="$repo/target/release/pinforge" ;; *) pf="$repo/target/debug/pinforge" ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

up="$work/up"
git init -q -b main "$up"
{
  for i in $(seq 1 "$COMMITS"); do
    t=$((1700000000 + i * 60))
    echo "commit refs/heads/main"
    echo "mark :$i"
    echo "author Dev$((i % 7)) <dev$((i % 7))@example.org> $t +0000"
    echo "committer Maint <maint@example.org> $t +0000"
    msg="change $i (#$((10000 + i)))"
    echo "data ${#msg}"
    echo "$msg"
    [ "$i" -gt 1 ] && echo "from :$((i - 1))"
    echo "M 644 inline f$((i % 50)).c"
    content="int v$i;"
    echo "data ${#content}"
    echo "$content"
    if [ $((i % 10)) -eq 0 ]; then
      echo "reset refs/tags/b$i"
      echo "from :$i"
    fi
  done
} | git -C "$up" fast-import --quiet
tip=$(git -C "$up" rev-parse main)

ws="$work/ws"
mkdir -p "$ws/patches"
: > "$ws/patches/series"
picks=()
for k in $(seq 1 10); do
  i=$((k * COMMITS / 11))
  c=$(git -C "$up" rev-list --reverse main | sed -n "${i}p")
  picks+=("$c:$((10000 + i)):b$(( (i / 10 + 1) * 10 ))")
  name=$(printf '%04d-backport-%d.patch' "$k" "$i")
  printf 'From: Dev%d <dev%d@example.org>\nSubject: change %d\nDescription: change %d\nUpstream-Status: Backport\nUpstream-PR: https://github.com/o/r/pull/%d\nUpstream-Commit: %s\nUpstream-Author: dev%d\nOrigin: https://github.com/o/r/pull/%d\nApplied-Upstream: b%d\nLast-Update: 2026-12-01\n\n---\ndiff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-a\n+b\n' \
    $((i % 7)) $((i % 7)) "$i" "$i" $((10000 + i)) "${c:0:9}" $((i % 7)) $((10000 + i)) $(( (i / 10 + 1) * 10 )) > "$ws/patches/$name"
  echo "$name" >> "$ws/patches/series"
done
pending=()
for k in $(seq 11 15); do
  pr=$((10000 + COMMITS - k * 100))
  pending+=("$pr")
  name=$(printf '%04d-pending-%d.patch' "$k" "$pr")
  printf 'From: Rep <rep@example.org>\nSubject: pending %d\nDescription: pending\nUpstream-Status: Pending\nUpstream-PR: https://github.com/o/r/pull/%d\nReported-by: rep\nOrigin: https://github.com/o/r/pull/%d\nLast-Update: 2026-12-01\n\n---\ndiff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-a\n+b\n' \
    "$pr" "$pr" "$pr" > "$ws/patches/$name"
  echo "$name" >> "$ws/patches/series"
done

t0=$(now)
set +e
"$pf" --workspace "$ws" patch check-attribution --upstream "git:$up@$tip" --json > "$work/pf.json"
rc=$?
set -e
t1=$(now)
[ "$rc" -le 1 ] || { echo "pinforge exited $rc" >&2; exit 1; }

t2=$(now)
for p in "${picks[@]}"; do
  c=${p%%:*}
  git -C "$up" cat-file -e "$c^{commit}"
  git -C "$up" merge-base --is-ancestor "$c" "$tip"
  git -C "$up" log -1 --format='%an <%ae>%n%B' "$c" > /dev/null
  git -C "$up" tag --contains "$c" --sort=creatordate | head -n1 > /dev/null
done
for pr in "${pending[@]}"; do
  git -C "$up" log -1 --format=%H --grep="(#$pr)" "$tip" > /dev/null
done
t3=$(now)

pf_s=$(elapsed "$t0" "$t1")
git_s=$(elapsed "$t2" "$t3")
claims=$(grep -c '"field"' "$work/pf.json" || true)
echo "check-attribution of 15 patches over $COMMITS commits and $((COMMITS / 10)) tags: pinforge ${pf_s} s (exit $rc, $claims finding(s)), plain git ${git_s} s, ratio $(awk -v a="$pf_s" -v b="$git_s" 'BEGIN { printf "%.2f", a / b }')"
