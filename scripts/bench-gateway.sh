#!/usr/bin/env bash
# `claw memory search` (hybrid, default flags) through a running gateway on the
# notes-garden index built with the model: milliseconds per whole CLI call
# (process start to printed results), with the pieces beside it so the time can
# be attributed: the process floor (`claw --version`), the HTTP round trip
# alone (curl to `/v1/memory/search`), the gateway's own time (its
# `Server-Timing` header: sync check, search incl. query embedding), and
# `--local` (the model loaded per call) for comparison. Prints a Markdown
# table of p50/p95 per row, with the load average at the start and the end.
#
#   scripts/bench-gateway.sh [CLAW_BIN] [CALLS]
#
# Default binary: target/release/claw (`cargo build --release -p claw`).
# Needs CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH (the model). The garden is
# indexed with the model first, with CLAW_CONFIG when set (for example
# `{"embedding":{"precision":"int8"}}`), else with `embedding.threads: 1`.
# The gateway's discovery file and token are found in the state directory
# beside the database (`claw memory status --json`: `db_path`).
# LOCAL_CALLS (default 5) `--local` calls.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${1:-$ROOT/target/release/claw}
CALLS=${2:-40}
LOCAL_CALLS=${LOCAL_CALLS:-5}
GARDEN=$ROOT/../shared/data/notes-garden.tar.gz
: "${CLAW_EMBED_MODEL_DIR:?set CLAW_EMBED_MODEL_DIR (the all-MiniLM-L6-v2 directory)}"
: "${ORT_DYLIB_PATH:?set ORT_DYLIB_PATH (libonnxruntime.so)}"
WORK=$(mktemp -d)
GW_PID=
cleanup() {
  if [ -n "$GW_PID" ]; then
    kill "$GW_PID" 2>/dev/null || true
    wait "$GW_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

export HOME=$WORK/home CLAW_WORKSPACE=$WORK/ws
unset CLAW_EMBED_PROVIDER CLAW_GATEWAY_TOKEN
mkdir -p "$HOME"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$WORK/garden" "$CLAW_WORKSPACE"
tar xzf "$GARDEN" -C "$WORK/garden"
if [ -z "${CLAW_CONFIG:-}" ]; then
  echo '{"embedding": {"threads": 1}}' >"$WORK/config.json"
  export CLAW_CONFIG=$WORK/config.json
fi
"$BIN" memory add "$WORK/garden" --name garden >/dev/null
t0=$(date +%s%N)
"$BIN" memory index >/dev/null
t1=$(date +%s%N)
index_note="indexed with the model here in $(((t1 - t0) / 1000000000)) s (config: $(tr -d '\n' <"$CLAW_CONFIG"))"
DB=$("$BIN" memory status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["db_path"])')
STATE=$(dirname "$DB")
chunks=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from chunks").fetchone()[0])' "$DB" 2>/dev/null || echo "?")

"$BIN" gateway --port 0 >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
# Ready once a search through it reports the watcher's vouch (its start-up
# rescan applied): `sync.watcher` is set only by an idle, live watcher.
ready=
for _ in $(seq 1 1200); do
  if [ -f "$STATE/gateway.json" ] &&
    "$BIN" memory search "digital garden" --json 2>/dev/null | grep -q '"watcher"'; then
    ready=1
    break
  fi
  kill -0 "$GW_PID" 2>/dev/null || break
  sleep 0.25
done
if [ -z "$ready" ]; then
  echo "the gateway did not become ready; its log:" >&2
  cat "$WORK/gateway.log" >&2
  exit 1
fi
PORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$STATE/gateway.json")
TOKEN=$(tr -d '[:space:]' <"$STATE/gateway.token")

QUERIES=("webhook retries" "digital garden" "agora protocol" "meditation practice" "rust async"
  "how do I take better notes" "spaced repetition" "what is a wiki")

# p50 and p95 (ms) of the nanosecond figures in $1, one a line.
pct() {
  sort -n "$1" | awk '{ t[NR] = $1 } END {
    m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
    i = int(NR * 0.95 + 0.999999); if (i > NR) i = NR; if (i < 1) i = 1
    printf "%.1f | %.1f", m / 1e6, t[i] / 1e6 }'
}

# Time N whole processes of "$@" (QUERY substituted for @Q), after 3 warm-ups:
# per call the wall time, the process's own CPU time (user + system, from
# wait4), and over the row the gateway's CPU time and run-queue wait per call
# (the sum of /proc/PID/task/*/schedstat): CPU time is what a quiet machine
# would take, the run-queue wait what the load added on the gateway's side.
cat >"$WORK/timecalls.py" <<'PY'
import os, sys, time, glob
n, out, gw, queries = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split("|")
argv = sys.argv[5:]
def sched():
    run = wait = 0
    for f in glob.glob(f"/proc/{gw}/task/*/schedstat"):
        try:
            a, b, _ = open(f).read().split()
            run, wait = run + int(a), wait + int(b)
        except (OSError, ValueError):
            pass
    return run, wait
rows, g0 = [], None
devnull = os.open(os.devnull, os.O_WRONLY)
for i in range(-3, n):
    if i == 0:
        g0 = sched()
    q = queries[(i + 3) % len(queries)]
    args = [q if a == "@Q" else a for a in argv]
    t = time.perf_counter_ns()
    pid = os.posix_spawn(args[0], args, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, _, ru = os.wait4(pid, 0)
    wall = time.perf_counter_ns() - t
    if i >= 0:
        rows.append((wall, int((ru.ru_utime + ru.ru_stime) * 1e9)))
g1 = sched()
with open(out, "w") as f:
    for w, c in rows:
        f.write(f"{w} {c}\n")
with open(out + ".gw", "w") as f:
    f.write(f"{(g1[0] - g0[0]) / n} {(g1[1] - g0[1]) / n}\n")
PY
time_calls() {
  local n=$1 out=$2
  shift 2
  local IFS='|'
  python3 "$WORK/timecalls.py" "$n" "$out" "$GW_PID" "${QUERIES[*]}" "$@"
}
# "p50 | p95" (ms) of column COL (1 wall, 2 CPU) of $1.
pctc() {
  awk -v c="$2" '{ print $c }' "$1" >"$1.col"
  pct "$1.col"
}
# The gateway's CPU and run-queue wait per call (ms) of a row.
gwc() { awk '{ printf "%.1f | %.1f", $1 / 1e6, $2 / 1e6 }' "$1.gw"; }

# One search through curl: the round-trip and the gateway's Server-Timing.
curl_calls() {
  local n=$1 i q body
  : >"$WORK/curl"
  : >"$WORK/server"
  : >"$WORK/server-search"
  for ((i = -3; i < n; i++)); do
    q=${QUERIES[(i + 3) % ${#QUERIES[@]}]}
    body=$(python3 -c 'import json,sys; print(json.dumps({"query": sys.argv[1]}))' "$q")
    curl -s -o /dev/null -D "$WORK/headers" -w '%{time_total}\n' \
      -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
      --data "$body" "http://127.0.0.1:$PORT/v1/memory/search" >"$WORK/t"
    [ "$i" -lt 0 ] && continue
    awk '{ printf "%d\n", $1 * 1e9 }' "$WORK/t" >>"$WORK/curl"
    # Server-Timing: total;dur=MS, search;dur=MS (absent in builds before it).
    tr -d '\r' <"$WORK/headers" | awk -F'[;,= ]+' 'tolower($1) == "server-timing:" {
      for (k = 2; k < NF; k++) {
        if ($k == "total" && $(k + 1) == "dur") printf "%d\n", $(k + 2) * 1e6 >> "'"$WORK/server"'"
        if ($k == "search" && $(k + 1) == "dur") printf "%d\n", $(k + 2) * 1e6 >> "'"$WORK/server-search"'"
      } }'
  done
}

sync_seen=$("$BIN" memory search "digital garden" --json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(json.dumps(v["sync"]), v["mode"], v["fallback"])')
time_calls "$CALLS" "$WORK/floor" "$BIN" --version
time_calls "$CALLS" "$WORK/cli" "$BIN" memory search @Q
time_calls "$CALLS" "$WORK/cli-json" "$BIN" memory search @Q --json
curl_calls "$CALLS"
time_calls "$LOCAL_CALLS" "$WORK/local" "$BIN" memory search @Q --local
rss=$(awk '/VmRSS|VmHWM/ { printf "%s %s MiB; ", $1, int($2 / 1024) }' "/proc/$GW_PID/status")

echo "Garden: $chunks chunks, $index_note; binary: $BIN"
echo "Load average: start $LOAD_START, end $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; gateway $rss"
echo "Sync reported through the gateway, mode, fallback: \`$sync_seen\`"
echo
echo "| what (hybrid, default flags) | calls | wall p50 ms | wall p95 ms | process CPU p50 ms | CPU p95 ms | gateway CPU ms per call | gateway run-queue wait ms per call |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
row() { echo "| $1 | $2 | $(pctc "$3" 1) | $(pctc "$3" 2) | $(gwc "$3") |"; }
row "\`claw --version\` (process floor)" "$CALLS" "$WORK/floor"
row "**\`claw memory search QUERY\` through the gateway**" "$CALLS" "$WORK/cli"
row "\`claw memory search QUERY --json\` through the gateway" "$CALLS" "$WORK/cli-json"
echo "| HTTP round trip alone (curl, \`POST /v1/memory/search\`) | $CALLS | $(pct "$WORK/curl") | | | | |"
if [ -s "$WORK/server" ]; then
  echo "| the gateway's own time (\`Server-Timing: total\`) | $CALLS | $(pct "$WORK/server") | | | | |"
  echo "| of which search incl. query embedding (\`search\`) | $CALLS | $(pct "$WORK/server-search") | | | | |"
fi
row "\`claw memory search QUERY --local\` (model loaded per call)" "$LOCAL_CALLS" "$WORK/local"
