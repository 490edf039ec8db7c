#!/usr/bin/env bash
# Cost of the freshness check of `claw memory search` on the notes garden:
# milliseconds per keyword-only search call (the whole process, default flags),
# without a watcher (stat walk of every source) and with an idle
# `claw memory watch` whose heartbeat vouches for the index (no walk), plus
# `--no-sync` as the floor. Prints a Markdown table of median milliseconds per
# call, with the load average at the start and the end (the machine may be shared).
# A call is timed from its spawn to its exit (`scripts/time-calls.py`); before
# 2026-12-02 this script timed it between two `date` processes, which added the
# second one's start-up (~2-3 ms here) to every figure.
#
#   scripts/bench-search-sync.sh [CLAW_BIN] [CALLS]
#
# Default binary: target/release/claw (`cargo build --release -p claw`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${1:-$ROOT/target/release/claw}
CALLS=${2:-40}
GARDEN=$ROOT/../shared/data/notes-garden.tar.gz
WORK=$(mktemp -d)
WATCH_PID=
cleanup() {
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

export HOME=$WORK/home CLAW_WORKSPACE=$WORK/ws CLAW_EMBED_PROVIDER=none
mkdir -p "$WORK/garden" "$CLAW_WORKSPACE"
tar xzf "$GARDEN" -C "$WORK/garden"
"$BIN" memory add "$WORK/garden" --name garden >/dev/null
"$BIN" memory index >/dev/null

QUERIES=("webhook retries" "digital garden" "agora protocol" "meditation practice" "rust async")

# Median ms per call over CALLS calls (the queries in turn), after one warm-up
# round, each call timed from its spawn to its exit by scripts/time-calls.py
# (no timing process of its own inside the span; the machine may be shared:
# the median resists the odd slow call, the mean does not).
run() {
  local q cmds=()
  for q in "${QUERIES[@]}"; do cmds+=(-- call "$BIN" memory search "$q" "$@"); done
  python3 "$ROOT/scripts/time-calls.py" $(((CALLS + ${#QUERIES[@]} - 1) / ${#QUERIES[@]})) 1 "${cmds[@]}" |
    awk -F'\t' '{ print $2 " | " $5 }'
}
sync_of() { "$BIN" memory search "${QUERIES[0]}" --json "$@" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["sync"]))'; }
# Median `checked_ms` (the freshness check alone, as the search reports it) over 11 calls.
checked_median() {
  local i
  for i in $(seq 1 11); do
    "$BIN" memory search "${QUERIES[i % ${#QUERIES[@]}]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sync"].get("checked_ms", 0))'
  done | sort -n | sed -n 6p
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
files=$(find "$WORK/garden" -type f -name '*.md' | wc -l)
no_watch=$(run)
no_watch_sync=$(sync_of)
no_watch_checked=$(checked_median)
no_sync=$(run --no-sync)
spawn=$(python3 "$ROOT/scripts/time-calls.py" "$CALLS" 1 -- true /bin/true | awk -F'\t' '{ print $2 " | " $5 }')

"$BIN" memory watch --json >"$WORK/watch.log" 2>&1 &
WATCH_PID=$!
# Wait until the watcher's start-up rescan is applied and its heartbeat says idle.
for _ in $(seq 1 600); do
  s=$(sync_of)
  case "$s" in *'"watcher"'*) break ;; esac
  sleep 0.1
done
watched_sync=$(sync_of)
watched=$(run)

echo "Garden: $files notes, keyword-only index; $CALLS calls per row (median); binary: $BIN"
echo "Load average: start $LOAD_START, end $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
echo
echo "| \`claw memory search QUERY\` | median ms per call | CPU ms per call | sync reported |"
echo "|---|---:|---:|---|"
echo "| no watcher (stat walk) | $no_watch | \`$no_watch_sync\` |"
echo "| idle watcher vouches (no walk) | $watched | \`$watched_sync\` |"
echo "| \`--no-sync\` (floor) | $no_sync | skipped |"
echo "| (\`/bin/true\`: spawning a process that does nothing) | $spawn | |"
echo
echo "Freshness check alone without a watcher (median \`checked_ms\` of 11 calls): $no_watch_checked ms"
