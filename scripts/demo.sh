#!/usr/bin/env bash
# The main job (README): build claw, install its local embedding model, index the
# committed notes folder and search it. Uses a throwaway workspace unless CLAW_WORKSPACE is set.
set -euo pipefail
cd "$(dirname "$0")/.."
ts() { echo "[$(date +%T)] $*" >&2; }
ts "build (release)"
cargo build --release --locked --quiet
CLAW=./target/release/claw
export CLAW_WORKSPACE=${CLAW_WORKSPACE:-$(mktemp -d)/workspace}
if [ -z "${CLAW_EMBED_MODEL_DIR:-}" ] && [ ! -f "$HOME/.claw/models/all-MiniLM-L6-v2/model.onnx" ]; then
  ts "install the local embedding model into ~/.claw/models"
  $CLAW memory install-model
fi
ts "index fixtures/notes into $CLAW_WORKSPACE"
$CLAW memory add fixtures/notes --name notes >/dev/null 2>&1 || true
$CLAW memory index
$CLAW memory status
for q in "why did the payment webhook keep retrying" "INFRA-4127" "how long does the UPS last"; do
  ts "search: $q"
  $CLAW memory search "$q" --limit 3 || true
done
