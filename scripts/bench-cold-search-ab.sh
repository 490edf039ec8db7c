#!/usr/bin/env bash
# A/B of a cold hybrid `claw memory search` without a gateway or watcher: each call
# is a new process that starts, opens the index, checks freshness, loads the local
# model, embeds the query and searches. Two binaries, each on a workspace it indexed
# itself (with the model) over ONE sample of the notes garden (every STEP-th note:
# the model's load does not depend on the corpus), their calls interleaved (A, B,
# A, B, ...) by scripts/time-calls.py so both see the same machine load. Prints the
# median, 10th and 90th percentile wall milliseconds per call and the median CPU
# milliseconds (user + system).
#
#   scripts/bench-cold-search-ab.sh BIN_A BIN_B [CALLS] [STEP]
#
# Needs CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH; CLAW_CONFIG (e.g. an int8
# precision) applies to both.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A=${1:?binary A}
B=${2:?binary B}
CALLS=${3:-30}
STEP=${4:-20}
: "${CLAW_EMBED_MODEL_DIR:?set CLAW_EMBED_MODEL_DIR}" "${ORT_DYLIB_PATH:?set ORT_DYLIB_PATH}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

export HOME=$WORK/home
source "$ROOT/scripts/ab-search.sh"
mkdir -p "$WORK/all" "$WORK/garden"
tar xzf "$ROOT/../shared/data/notes-garden.tar.gz" -C "$WORK/all"
find "$WORK/all" -type f -name '*.md' | sort | awk -v s="$STEP" 'NR % s == 1' |
  while IFS= read -r f; do
    rel=${f#"$WORK/all/"}
    mkdir -p "$WORK/garden/$(dirname "$rel")"
    cp "$f" "$WORK/garden/$rel"
  done
ab_index "$A" "$B" "$WORK/garden" "$WORK"

QUERIES=("how I take notes" "what to read next" "ideas for the garden" "meeting with friends" "learning a language")

ab_time "$A" "$B" "$WORK" "$CALLS" "${QUERIES[@]}"

files=$(find "$WORK/garden" -type f -name '*.md' | wc -l)
echo "Garden sample: $files notes (every ${STEP}th), indexed with the model, no gateway, no watcher; $CALLS interleaved cold hybrid calls per binary (medians)"
echo "Load average: start $AB_LOAD_START, end $AB_LOAD_END; $(nproc) CPUs"
echo
echo "| binary | ms per call (wall) | p10 | p90 | CPU ms per call |"
echo "|---|---:|---:|---:|---:|"
echo "$AB_ROWS" | awk -F'\t' -v a="$A" -v b="$B" '
  { bin = ($1 == "A") ? a : b
    printf "| %s `%s` | %s | %s | %s | %s |\n", $1, bin, $2, $3, $4, $5 }'
