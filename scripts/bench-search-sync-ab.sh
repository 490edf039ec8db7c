#!/usr/bin/env bash
# A/B of the freshness check of `claw memory search` without a watcher (the stat
# walk) on the notes garden: two binaries on ONE indexed workspace, their calls
# interleaved (A, B, A, B, ...) so both see the same machine load. Prints the
# median milliseconds per whole `claw memory search QUERY` call (default flags),
# the median `checked_ms` each reports, and the median CPU time per call
# (perf's task-clock of a `--json` call: user + system, which a loaded machine
# inflates far less than the wall clock). Both binaries must read the same database schema.
#
#   scripts/bench-search-sync-ab.sh BIN_A BIN_B [CALLS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A=${1:?binary A}
B=${2:?binary B}
CALLS=${3:-40}
GARDEN=$ROOT/../shared/data/notes-garden.tar.gz
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

export HOME=$WORK/home CLAW_WORKSPACE=$WORK/ws CLAW_EMBED_PROVIDER=none
mkdir -p "$WORK/garden" "$CLAW_WORKSPACE"
tar xzf "$GARDEN" -C "$WORK/garden"
"$A" memory add "$WORK/garden" --name garden >/dev/null
"$A" memory index >/dev/null

QUERIES=("webhook retries" "digital garden" "agora protocol" "meditation practice" "rust async")

# Wall nanoseconds of one call of BIN with QUERY.
one() {
  local start end
  start=$(date +%s%N)
  "$1" memory search "$2" >/dev/null
  end=$(date +%s%N)
  echo $((end - start))
}
median() { sort -n | awk '{ t[NR] = $1 } END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2; printf "%.1f", m / 1e6 }'; }
# "checked_ns cpu_ns" of one --json call: the check as the search reports it,
# and the process's CPU time (perf task-clock; 0 without perf).
checked() {
  local out=$WORK/perf.txt checked cpu=0
  if command -v perf >/dev/null; then
    checked=$(perf stat -x, -e task-clock -o "$out" -- "$1" memory search "$2" --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["sync"].get("checked_ms", 0) * 1000000)')
    cpu=$(awk -F, '/task-clock/ { printf "%d", $1 * 1000000 }' "$out")
  else
    checked=$("$1" memory search "$2" --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["sync"].get("checked_ms", 0) * 1000000)')
  fi
  echo "$checked $cpu"
}

for i in 1 2 3; do one "$A" "${QUERIES[0]}" >/dev/null; one "$B" "${QUERIES[0]}" >/dev/null; done
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$WORK/a" && : >"$WORK/b" && : >"$WORK/ca" && : >"$WORK/cb"
for ((i = 0; i < CALLS; i++)); do
  q=${QUERIES[i % ${#QUERIES[@]}]}
  one "$A" "$q" >>"$WORK/a"
  one "$B" "$q" >>"$WORK/b"
  checked "$A" "$q" >>"$WORK/ca"
  checked "$B" "$q" >>"$WORK/cb"
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

files=$(find "$WORK/garden" -type f -name '*.md' | wc -l)
echo "Garden: $files notes, keyword-only index, no watcher; $CALLS interleaved calls per binary (medians)"
echo "Load average: start $LOAD_START, end $LOAD_END; $(nproc) CPUs"
echo
echo "| binary | ms per call (wall) | CPU ms per call | \`checked_ms\` |"
echo "|---|---:|---:|---:|"
echo "| A \`$A\` | $(median <"$WORK/a") | $(cut -d' ' -f2 "$WORK/ca" | median) | $(cut -d' ' -f1 "$WORK/ca" | median) |"
echo "| B \`$B\` | $(median <"$WORK/b") | $(cut -d' ' -f2 "$WORK/cb" | median) | $(cut -d' ' -f1 "$WORK/cb" | median) |"
