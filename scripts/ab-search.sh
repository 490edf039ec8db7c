# Shared by the search A/B scripts (bench-search-sync-ab.sh, bench-cold-search-ab.sh);
# sourced, not run. Each binary indexes its own workspace ($WORK/a, $WORK/b) over one
# notes directory, then their `claw memory search` calls are interleaved (A, B, A, B,
# ...) by scripts/time-calls.py so both see the same machine load.

# ab_index A B NOTES WORK: register NOTES as source `garden` in $WORK/a (binary A)
# and $WORK/b (binary B), and index each with its own binary.
ab_index() {
  local a=$1 b=$2 notes=$3 work=$4 side bin
  for side in a b; do
    bin=$a
    [ "$side" = b ] && bin=$b
    mkdir -p "$work/$side"
    CLAW_WORKSPACE=$work/$side "$bin" memory add "$notes" --name garden >/dev/null
    CLAW_WORKSPACE=$work/$side "$bin" memory index >/dev/null
  done
}

# ab_time A B WORK CALLS QUERY...: CALLS interleaved `claw memory search QUERY` calls
# per binary (the queries in turn, one warm-up each). Sets AB_ROWS (time-calls.py's
# tab-separated rows, A then B) and AB_LOAD_START / AB_LOAD_END (/proc/loadavg).
ab_time() {
  local a=$1 b=$2 work=$3 calls=$4 q
  shift 4
  local cmds=()
  for q in "$@"; do
    cmds+=(-- A "CLAW_WORKSPACE=$work/a" "$a" memory search "$q")
    cmds+=(-- B "CLAW_WORKSPACE=$work/b" "$b" memory search "$q")
  done
  AB_LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  AB_ROWS=$(python3 "$(dirname "${BASH_SOURCE[0]}")/time-calls.py" $(((calls + $# - 1) / $#)) 1 "${cmds[@]}")
  AB_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
}
