#!/usr/bin/env bash
# Run the date-sensitive tests with the wall clock shifted (Debian's faketime), so a
# test that depends on today's date fails the day it is written, not a month later.
# Usage: scripts/shifted-clock.sh [SHIFT...]   (default: +400d -30d)
#
# The test executables are built first with the real clock, then run directly under
# faketime (rustc itself can hang under libfaketime, so cargo never runs shifted).
# Monotonic time stays real (DONT_FAKE_MONOTONIC) so timeouts behave; only the
# calendar moves — for the test and for every process it spawns (the claw binary).
set -euo pipefail
cd "$(dirname "$0")/.."
ts() { echo "[$(date +%T)] $*" >&2; }
SHIFTS=("$@")
[ ${#SHIFTS[@]} -gt 0 ] || SHIFTS=("+400d" "-30d")

if ! command -v faketime >/dev/null; then
  ts "install faketime (Debian)"
  { apt-get update -qq && apt-get install -y -qq faketime; } >&2
fi

# Modules of the integration-test binaries whose outcome could depend on the calendar:
# decay, dated notes, daily notes, transcript and session timestamps, retry-after dates.
DATED_MODULES=(search_cli:: search_engine:: search_sync:: index_cli:: agent_cli:: agent_memory::
  transcript_secrets:: transcript_incremental:: provider_streaming:: provider_failover:: embed_openai::
  ranking_ secrets_)

mapfile -t EXES < <(cargo test --locked --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"][0]
        print(kind + "\t" + m["target"]["name"] + "\t" + m["executable"])
')
[ ${#EXES[@]} -gt 0 ] || { echo "error: no test executables found" >&2; exit 2; }

for shift in "${SHIFTS[@]}"; do
  for row in "${EXES[@]}"; do
    IFS=$'\t' read -r kind name exe <<<"$row"
    if [ "$kind" = "test" ]; then filters=("${DATED_MODULES[@]}"); else filters=(); fi
    ts "clock $shift: $kind $name"
    # Integration tests look for the claw binary beside their own executable.
    DONT_FAKE_MONOTONIC=1 faketime -f "$shift" "$exe" -q "${filters[@]}"
  done
done
