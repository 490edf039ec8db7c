#!/usr/bin/env bash
# Synapse (PyPI matrix-synapse) for the Matrix channel tests (issue 15).
# Source it (`. scripts/setup-synapse.sh`, scripts/test.sh does): installs matrix-synapse
# into a cached venv (~/.cache/claw-synapse/venv; PyPI only) and exports
#   CLAW_SYNAPSE_PYTHON   the venv's python (has `import synapse`)
# The tests start and stop their own homeservers through `claw_testkit::synapse`
# (config generated per test: 127.0.0.1 on a free port, SQLite, registration by
# shared secret, raised rc_* limits). Idempotent.
set -euo pipefail
SYNAPSE_CACHE=${CLAW_SYNAPSE_CACHE:-$HOME/.cache/claw-synapse}
SYNAPSE_VERSION=1.163.2
if [ ! -x "$SYNAPSE_CACHE/venv/bin/python" ] || ! "$SYNAPSE_CACHE/venv/bin/python" -c "import sys; from importlib.metadata import version; sys.exit(version('matrix-synapse') != '$SYNAPSE_VERSION')" 2>/dev/null; then
  echo "setup-synapse: PyPI matrix-synapse==$SYNAPSE_VERSION into $SYNAPSE_CACHE/venv (once, ~1 min; cached by version)" >&2
  mkdir -p "$SYNAPSE_CACHE"
  python3 -m venv "$SYNAPSE_CACHE/venv"
  "$SYNAPSE_CACHE/venv/bin/pip" install --quiet --disable-pip-version-check "matrix-synapse==$SYNAPSE_VERSION"
fi
export CLAW_SYNAPSE_PYTHON="$SYNAPSE_CACHE/venv/bin/python"
