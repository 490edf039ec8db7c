#!/usr/bin/env bash
# A/B of the freshness check of `claw memory search` without a watcher (the stat
# walk) on the notes garden: two binaries, each on a workspace it indexed itself
# (so they may differ in database schema) over ONE extracted garden, their calls
# interleaved (A, B, A, B, ...) so both see the same machine load. Prints the
# median milliseconds per whole `claw memory search QUERY` call (default flags,
# timed from spawn to exit by scripts/time-calls.py), the 10th and 90th
# percentiles, the median CPU time per call (user + system, which a loaded
# machine inflates far less than the wall clock) and the median `checked_ms`
# each reports.
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

export HOME=$WORK/home CLAW_EMBED_PROVIDER=none
source "$ROOT/scripts/ab-search.sh"
mkdir -p "$WORK/garden"
tar xzf "$GARDEN" -C "$WORK/garden"
ab_index "$A" "$B" "$WORK/garden" "$WORK"

QUERIES=("webhook retries" "digital garden" "agora protocol" "meditation practice" "rust async")

# Median `checked_ms` of 11 calls of BIN on workspace WS.
checked() {
  local i
  for i in $(seq 1 11); do
    CLAW_WORKSPACE=$2 "$1" memory search "${QUERIES[i % ${#QUERIES[@]}]}" --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["sync"].get("checked_ms", 0))'
  done | sort -n | sed -n 6p
}

ab_time "$A" "$B" "$WORK" "$CALLS" "${QUERIES[@]}"
checked_a=$(checked "$A" "$WORK/a")
checked_b=$(checked "$B" "$WORK/b")

files=$(find "$WORK/garden" -type f -name '*.md' | wc -l)
echo "Garden: $files notes, keyword-only index, no watcher; $CALLS interleaved calls per binary (medians)"
echo "Load average: start $AB_LOAD_START, end $AB_LOAD_END; $(nproc) CPUs"
echo
echo "| binary | ms per call (wall) | p10 | p90 | CPU ms per call | \`checked_ms\` |"
echo "|---|---:|---:|---:|---:|---:|"
echo "$AB_ROWS" | awk -F'\t' -v a="$A" -v b="$B" -v ca="$checked_a" -v cb="$checked_b" '
  { bin = ($1 == "A") ? a : b; c = ($1 == "A") ? ca : cb
    printf "| %s `%s` | %s | %s | %s | %s | %s |\n", $1, bin, $2, $3, $4, $5, c }'
