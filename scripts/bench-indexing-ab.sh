#!/usr/bin/env bash
# A/B of the keyword-only indexing bench between two commits, in the same minutes:
# builds `cargo bench -p claw-memory --bench indexing` from a worktree of BASE and
# from this tree (one target dir, so the dependencies are built once), then runs
# the two bench binaries interleaved (A, B, A, B, ...) on the notes garden with the
# model variables unset, and prints the median of each column per binary.
# Used for targets stated against a figure taken on another machine ("no more than
# 20 % slower than today's"): the ratio B / A is the comparable figure.
#
#   scripts/bench-indexing-ab.sh BASE_REV [RUNS] [SETS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE=${1:?base commit}
RUNS=${2:-5}
SETS=${3:-garden}
TREE=$(mktemp -d "$ROOT/../claw-ab.XXXXXX")  # beside the repo: the bench finds ../shared from its sources
trap 'git -C "$ROOT" worktree remove --force "$TREE" >/dev/null 2>&1 || true' EXIT
git worktree add --detach -f "$TREE" "$BASE" >/dev/null 2>&1

# bench_bin DIR: build DIR's indexing bench into the shared target dir; print its path.
bench_bin() {
  (cd "$1" && CARGO_TARGET_DIR=$ROOT/target cargo bench -p claw-memory --bench indexing --no-run 2>&1) \
    | sed -n 's/.*Executable benches\/indexing.rs (\(.*\))/\1/p' | tail -1 \
    | sed "s|^target/|$ROOT/target/|"
}
A=$(bench_bin "$TREE")
B=$(bench_bin "$ROOT")
[ -x "$A" ] && [ -x "$B" ] || { echo "error: could not build the bench binaries" >&2; exit 2; }

OUT=$(mktemp)
for _ in $(seq "$RUNS"); do
  for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    (cd "$ROOT/crates/memory" && env -u CLAW_EMBED_MODEL_DIR -u ORT_DYLIB_PATH CLAW_BENCH_SETS="$SETS" "$bin" --bench) \
      | awk -v side="$side" -F'|' '/keyword-only full index/ { header = 1; next } header && $2 ~ /[a-z]/ && $3 ~ /[0-9]/ { print side "|" $0 } /^$/ { header = 0 }' >>"$OUT"
  done
done

echo "Keyword-only indexing, A = $(git rev-parse --short "$BASE"), B = $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+dirty'); $RUNS interleaved runs each (medians)"
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'). Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
python3 - "$OUT" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1], encoding="utf-8"):
    side, _, rest = line.partition("|")
    cells = [c.strip() for c in rest.strip().strip("|").split("|")]
    rows.setdefault((cells[0], side), []).append(cells)
cols = ["keyword-only full index", "no-op re-index", "one-file change (full pass)", "peak RSS"]
idx = [3, 4, 5, 7]
print("| set | binary | " + " | ".join(cols) + " |")
print("|---|---|" + "---:|" * len(cols))
for (name, side), runs in sorted(rows.items()):
    cells = []
    for i in idx:
        vals = [float(r[i].split()[0]) for r in runs]
        unit = runs[0][i].split()[1]
        cells.append(f"{statistics.median(vals):.3f} {unit}" if unit == "s" else f"{statistics.median(vals):.1f} {unit}")
    print(f"| {name} | {side} | " + " | ".join(cells) + " |")
for name in sorted({n for n, _ in rows}):
    a = statistics.median(float(r[3].split()[0]) for r in rows[(name, "A")])
    b = statistics.median(float(r[3].split()[0]) for r in rows[(name, "B")])
    print(f"\n{name}: full index B / A = {b / a:.3f}")
PY
rm -f "$OUT"
