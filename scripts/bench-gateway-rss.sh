#!/usr/bin/env bash
# The warm model in a long-running gateway: (1) the gateway's VmRSS and VmHWM
# (from /proc) after its watcher indexed TWIR with the model, and (2) the
# garden indexed with the model by the gateway's watcher while a CPU hog (one
# busy loop per core) runs beside it. Each for two variants: `before` (ONNX Runtime's defaults: every
# core, arena on, spinning on; `CLAW_EMBED_ORT_DEFAULTS=1`, a benchmark-only
# switch) and `after` (claw's shipped settings: min(CPUs, 2) threads, arena and
# spinning off). Prints a Markdown table with the load average beside each row.
#
#   scripts/bench-gateway-rss.sh [CLAW_BIN]
#
# Env: TWIR_STEP / GARDEN_STEP (default 1 = every file; N = every Nth file, a
# sample, for a loaded machine), VARIANTS (default "before after"), SKIP_HOG=1.
# Needs CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH. Default binary:
# target/release/claw (`cargo build --release -p claw`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${1:-$ROOT/target/release/claw}
TWIR_STEP=${TWIR_STEP:-1}
GARDEN_STEP=${GARDEN_STEP:-1}
VARIANTS=${VARIANTS:-before after}
: "${CLAW_EMBED_MODEL_DIR:?set CLAW_EMBED_MODEL_DIR (the all-MiniLM-L6-v2 directory)}"
: "${ORT_DYLIB_PATH:?set ORT_DYLIB_PATH (libonnxruntime.so)}"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
unset CLAW_EMBED_PROVIDER CLAW_GATEWAY_TOKEN CLAW_EMBED_THREADS CLAW_CONFIG
export HOME=$WORK/home
mkdir -p "$HOME"

# Extract a set and keep every STEP-th Markdown file (sorted by path).
sample() {
  local tarball=$1 step=$2 dest=$3
  mkdir -p "$WORK/raw-$(basename "$dest")" "$dest"
  tar xzf "$tarball" -C "$WORK/raw-$(basename "$dest")"
  (cd "$WORK/raw-$(basename "$dest")" && find . -type f -name '*.md' | sort |
    awk -v s="$step" '(NR - 1) % s == 0' | while read -r f; do
      mkdir -p "$dest/$(dirname "$f")"
      cp "$f" "$dest/$f"
    done)
}
sample "$ROOT/../shared/data/notes-twir.tar.gz" "$TWIR_STEP" "$WORK/twir"
sample "$ROOT/../shared/data/notes-garden.tar.gz" "$GARDEN_STEP" "$WORK/garden"

load() { cut -d' ' -f1 /proc/loadavg; }
# The database of workspace $1 (in the state directory, not the workspace).
db() {
  CLAW_WORKSPACE=$1 "$BIN" memory status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["db_path"])'
}
# Chunks in database $1.
chunks() {
  python3 -c 'import sqlite3,sys; print(sqlite3.connect("file:"+sys.argv[1]+"?mode=ro", uri=True).execute("select count(*) from chunks").fetchone()[0])' "$1" 2>/dev/null || echo 0
}
# The watcher's last heartbeat row in database $1: "pending last_sync" (empty
# before it wrote one).
watcher_row() {
  python3 -c 'import sqlite3,sys
r = sqlite3.connect("file:"+sys.argv[1]+"?mode=ro", uri=True).execute("select pending, coalesce(last_sync, 0) from watcher order by heartbeat desc limit 1").fetchone()
print(*r) if r else print("")' "$1" 2>/dev/null || true
}

# A gateway whose watcher indexes SET (the start-up rescan of a registered,
# never-indexed source), optionally with a busy loop per core beside it; its
# VmRSS and VmHWM once the watcher is idle with nothing pending.
gateway_index() {
  local variant=$1 set=$2 hog=$3 ws=$WORK/ws-$2-$1 gw t0 t1 l0 last="" same=0 rows c hogs=() dbp
  mkdir -p "$ws"
  CLAW_WORKSPACE=$ws "$BIN" memory add "$WORK/$set" --name "$set" >/dev/null
  dbp=$(db "$ws")
  if [ "$hog" = hog ]; then
    for _ in $(seq 1 "$(nproc)"); do
      sh -c 'while :; do :; done' &
      hogs+=("$!")
      PIDS+=("$!")
    done
  fi
  l0=$(load)
  t0=$(date +%s%N)
  env CLAW_WORKSPACE="$ws" ${ORT_DEFAULTS:+CLAW_EMBED_ORT_DEFAULTS=1} \
    "$BIN" gateway --port 0 >"$WORK/gw-$set-$variant.log" 2>&1 &
  gw=$!
  PIDS+=("$gw")
  # Done: the log reports a sync, the watcher's row has nothing pending, and
  # the chunk count held still for 3 polls of 1 s (subtracted below).
  while kill -0 "$gw" 2>/dev/null; do
    sleep 1
    grep -q 're-indexed' "$WORK/gw-$set-$variant.log" || continue
    rows=$(watcher_row "$dbp")
    [ "${rows%% *}" = 0 ] || continue
    c=$(chunks "$dbp")
    if [ "$c" = "$last" ]; then same=$((same + 1)); else same=0; last=$c; fi
    [ "$same" -ge 3 ] && break
  done
  t1=$(date +%s%N)
  for h in "${hogs[@]}"; do kill "$h" 2>/dev/null || true; done
  for h in "${hogs[@]}"; do wait "$h" 2>/dev/null || true; done
  kill -0 "$gw" 2>/dev/null || {
    echo "the gateway exited; its log:" >&2
    cat "$WORK/gw-$set-$variant.log" >&2
    exit 1
  }
  local rss hwm n secs
  rss=$(awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$gw/status")
  hwm=$(awk '/VmHWM/ { print int($2 / 1024) }' "/proc/$gw/status")
  kill "$gw"
  wait "$gw" 2>/dev/null || true
  n=$(chunks "$dbp")
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e9 - 3 }')
  local files
  files=$(find "$WORK/$set" -type f | wc -l)
  echo "| $variant | $set ($files files)$([ "$hog" = hog ] && echo ', CPU hog beside it') | $n | $secs | $(awk -v n="$n" -v s="$secs" 'BEGIN { printf "%.1f", n / s }') | $rss MiB | $hwm MiB | $l0, $(load) |"
}

echo "Binary: $BIN; TWIR every ${TWIR_STEP}th file, garden every ${GARDEN_STEP}th file; $(nproc) CPUs"
echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| variant | the gateway's watcher indexes | chunks | index s | chunks/s | VmRSS after | VmHWM | load avg (start, end) |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for v in $VARIANTS; do
  case "$v" in
  before) ORT_DEFAULTS=1 ;;
  after) ORT_DEFAULTS= ;;
  *) echo "unknown variant $v (before, after)" >&2; exit 2 ;;
  esac
  gateway_index "$v" twir none
  gateway_index "$v" garden "${SKIP_HOG:+none}${SKIP_HOG:-hog}"
done
echo
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
