#!/usr/bin/env bash
# A/B of a full `claw memory index` WITH the local model: two binaries, each
# indexing a fresh workspace over the same notes, their runs interleaved (A, B, A,
# B, ...) so both see the same machine load. Prints one line per run: wall
# seconds, CPU seconds (user + system), peak RSS, chunks embedded and passages
# per second (embeddings_computed / the report's elapsed_ms, the whole run).
#
#   scripts/bench-model-index-ab.sh BIN_A BIN_B [SET] [PRECISION] [ROUNDS]
#
# SET: `garden` (every note of notes-garden, default) or `twir` (every 8th file of
# notes-twir). PRECISION: `fp32` (default) or `int8` (`embedding.precision`), or
# `default` for no setting (each binary's own default).
# Needs CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A=${1:?binary A}
B=${2:?binary B}
SET=${3:-garden}
PRECISION=${4:-fp32}
ROUNDS=${5:-1}
: "${CLAW_EMBED_MODEL_DIR:?set CLAW_EMBED_MODEL_DIR}" "${ORT_DYLIB_PATH:?set ORT_DYLIB_PATH}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

mkdir -p "$WORK/all" "$WORK/notes"
case $SET in
  garden)
    tar xzf "$ROOT/../shared/data/notes-garden.tar.gz" -C "$WORK/all"
    cp -r "$WORK/all/." "$WORK/notes/" ;;
  twir)
    tar xzf "$ROOT/../shared/data/notes-twir.tar.gz" -C "$WORK/all"
    find "$WORK/all" -type f -name '*.md' | sort | awk 'NR % 8 == 1' |
      while IFS= read -r f; do cp "$f" "$WORK/notes/"; done ;;
  *) echo "error: SET is garden or twir" >&2; exit 2 ;;
esac
if [ "$PRECISION" = default ]; then
  echo '{}' > "$WORK/config.json"
else
  printf '{"embedding":{"precision":"%s"}}\n' "$PRECISION" > "$WORK/config.json"
fi

for round in $(seq "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    run=$WORK/run-$side
    rm -rf "$run"; mkdir -p "$run/home" "$run/ws"
    (
      export HOME=$run/home CLAW_WORKSPACE=$run/ws CLAW_CONFIG=$WORK/config.json
      "$bin" memory add "$WORK/notes" --name notes > /dev/null
      /usr/bin/time -f '%e %U %S %M' -o "$run/time" "$bin" memory index --json > "$run/report.json" 2> /dev/null
    )
    read -r wall user sys rss < "$run/time"
    python3 - "$side" "$round" "$SET" "$PRECISION" "$wall" "$user" "$sys" "$rss" "$run/report.json" <<'EOF'
import json, sys
side, rnd, set_, prec, wall, user, sys_, rss, report = sys.argv[1:]
r = json.load(open(report))
done, ms = r["embeddings_computed"], max(r["elapsed_ms"], 1)
print(f"{side} round {rnd} {set_} {prec}: {float(wall):.1f} s wall, "
      f"{float(user) + float(sys_):.1f} s CPU, {int(rss) // 1024} MiB peak, "
      f"{done} embedded, {done * 1000 / ms:.1f} passages/s, model {r.get('model')}")
EOF
  done
done
