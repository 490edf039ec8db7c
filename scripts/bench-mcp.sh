#!/usr/bin/env bash
# memory_search latency through MCP (warm), on the notes-garden index:
# the official Python MCP SDK drives `claw mcp` over stdio and times N
# `memory_search` calls after one warm-up call (the model is loaded, the page
# cache is warm). Each call syncs like the CLI (stat of every file, nothing
# changed). Prints p50/p95/max in ms.
#
#   scripts/bench-mcp.sh            # CLAW_BIN (default target/release/claw, else target/debug/claw)
#   N=300 CLAW_EMBED_PROVIDER=none scripts/bench-mcp.sh   # keyword-only index
# Env: CLAW_EMBED_MODEL_DIR, ORT_DYLIB_PATH (the local model, for a hybrid index).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/setup-mcp.sh
BIN=${CLAW_BIN:-}
if [ -z "$BIN" ]; then
  if [ -x target/release/claw ]; then BIN=$ROOT/target/release/claw; else BIN=$ROOT/target/debug/claw; fi
fi
N=${N:-200}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/garden" "$WORK/ws" "$WORK/home"
tar -xzf "$ROOT/../shared/data/notes-garden.tar.gz" -C "$WORK/garden"
export HOME=$WORK/home CLAW_WORKSPACE=$WORK/ws CLAW_NOW=2026-11-05T12:00:00Z
"$BIN" memory add "$WORK/garden" --name garden >/dev/null
start=$(date +%s.%N)
"$BIN" memory index --json > "$WORK/index.json"
end=$(date +%s.%N)
python3 - "$WORK/index.json" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"index: {r['files_scanned']} files, {r['chunks_added']} chunks, model {r['model'] or 'none (keyword-only)'}, {float(sys.argv[3]) - float(sys.argv[2]):.1f} s")
PY
"$CLAW_MCP_PYTHON" crates/claw/tests/it/mcp_python_client.py "$BIN" "weekly review" unused bench "$N" \
  | python3 -c '
import json, statistics, sys
r = json.load(sys.stdin)
t = sorted(r["latencies_ms"])
q = lambda t, p: t[min(len(t) - 1, int(round(p * (len(t) - 1))))]
print(f"memory_search through MCP (stdio, Python SDK client), {len(t)} warm calls: p50 {q(t, 0.5):.1f} ms, p95 {q(t, 0.95):.1f} ms, max {t[-1]:.1f} ms, mean {statistics.mean(t):.1f} ms")
c = sorted(x for x in r["sync_checked_ms"] if x is not None)
if c:
    print(f"  of which the inline freshness check (stat of every file, sync.checked_ms): p50 {q(c, 0.5):.0f} ms, p95 {q(c, 0.95):.0f} ms")
'
echo "binary: $BIN"
