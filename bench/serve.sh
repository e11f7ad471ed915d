#!/usr/bin/env bash
# validate's served row loop vs a plain HTTP client loop (issue #20): one llama-server (each
# binary given: one per arm) on the tiny model, started here on a free loopback port; first
# `pinforge validate --endpoint` sends ROWS rows, then `curl` in a shell loop sends the same
# request bodies (taken from the run's serve-rows.jsonl prompts) to the same server, same run.
# Prints rows/s of both and the harness's overhead per row.
#   bench/serve.sh LLAMA_SERVER [LLAMA_SERVER...]   (ROWS=100 by default; PINFORGE=BINARY to skip
#   the release build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rows=${ROWS:-100}
[ $# -ge 1 ] || { echo "usage: bench/serve.sh LLAMA_SERVER [LLAMA_SERVER...]" >&2; exit 2; }
# PINFORGE=path uses that binary (say which in the figures) instead of building a release one.
pf=${PINFORGE:-}
if [ -z "$pf" ]; then (cd "$repo" && cargo build --release --quiet); pf="$repo/target/release/pinforge"; fi
tmp=$(mktemp -d); pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$pf" model tiny --arch qwen2vl -o "$tmp/tiny.gguf" >/dev/null
now() { date +%s.%N; }
for bin in "$@"; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ASAN_OPTIONS=detect_leaks=0 "$bin" --host 127.0.0.1 --port "$port" -m "$tmp/tiny.gguf" -c 256 -np 1 \
    >"$tmp/server.log" 2>&1 & pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  ws="$tmp/ws-$port"; mkdir -p "$ws"
  a=$(now)
  "$pf" --workspace "$ws" validate --endpoint "http://127.0.0.1:$port" --rows "$rows" --budget 12 --json \
    >"$tmp/out.json" || true
  b=$(now)
  run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_dir"])' "$tmp/out.json")
  model=$(curl -s "http://127.0.0.1:$port/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  python3 - "$run/prompts.jsonl" "$model" "$tmp/bodies" "$run/grammar.gbnf" <<'PY'
import json, sys, os
os.makedirs(sys.argv[3], exist_ok=True)
# The run's grammar (the served default schema's when none was given), sent as pinforge sends
# it, so that both loops sample under the same constraint.
grammar = open(sys.argv[4]).read() if os.path.exists(sys.argv[4]) else None
for i, l in enumerate(open(sys.argv[1])):
    p = json.loads(l)["prompt"]
    body = {"model": sys.argv[2], "messages": [{"role": "user", "content": p}],
            "max_tokens": 12, "temperature": 0, "stream": False}
    if grammar is not None:
        body["grammar"] = grammar
    open(os.path.join(sys.argv[3], "%06d.json" % i), "w").write(json.dumps(body))
PY
  c=$(now)
  for f in "$tmp"/bodies/*.json; do
    curl -s -H 'Content-Type: application/json' --data-binary @"$f" \
      "http://127.0.0.1:$port/v1/chat/completions" >/dev/null
  done
  d=$(now)
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v n="$rows" -v bin="$bin" 'BEGIN {
    p = b - a; q = d - c;
    printf "%s: pinforge %.1f rows/s (%.2fs incl. start-up and evidence), curl loop %.1f rows/s (%.2fs); overhead %.1f ms/row\n",
      bin, n / p, p, n / q, q, (p - q) * 1000 / n }'
done
