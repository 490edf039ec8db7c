#!/usr/bin/env bash
# MCP test peers (issue 14), cached under ~/.cache/claw-mcp; idempotent.
#  - the official Python MCP SDK (PyPI `mcp`) in a venv: the client that drives `claw mcp`;
#  - npm `@modelcontextprotocol/server-everything` and `@modelcontextprotocol/server-filesystem`:
#    the servers claw's MCP client is tested against.
# Source it (scripts/test.sh does) to export:
#   CLAW_MCP_PYTHON        the venv's python (has `import mcp`)
#   CLAW_MCP_NODE_MODULES  node_modules holding the two servers
# Run it directly to install only.
set -euo pipefail
MCP_CACHE=${CLAW_MCP_CACHE:-$HOME/.cache/claw-mcp}
MCP_PY_VERSION=2.3.0
MCP_NPM_VERSION=2026.8.31
mkdir -p "$MCP_CACHE"
if [ ! -x "$MCP_CACHE/venv/bin/python" ] || ! "$MCP_CACHE/venv/bin/python" -c "import mcp, sys; from importlib.metadata import version; sys.exit(version('mcp') != '$MCP_PY_VERSION')" 2>/dev/null; then
  echo "setup-mcp: PyPI mcp==$MCP_PY_VERSION into $MCP_CACHE/venv (once; cached by version)" >&2
  python3 -m venv "$MCP_CACHE/venv"
  "$MCP_CACHE/venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION"
fi
NPM_DIR="$MCP_CACHE/npm-$MCP_NPM_VERSION"
if [ ! -f "$NPM_DIR/node_modules/@modelcontextprotocol/server-everything/package.json" ] \
  || [ ! -f "$NPM_DIR/node_modules/@modelcontextprotocol/server-filesystem/package.json" ]; then
  echo "setup-mcp: npm MCP servers $MCP_NPM_VERSION into $NPM_DIR (once; cached by version)" >&2
  mkdir -p "$NPM_DIR"
  (cd "$NPM_DIR" && [ -f package.json ] || echo '{"private": true}' > "$NPM_DIR/package.json")
  # Errors stay visible (a failed install once ended CI with no word); a registry
  # hiccup gets two more tries. Installed from inside the directory, not with
  # `--prefix`: `--prefix` also moves npm's global config to $NPM_DIR/etc/npmrc, so a
  # machine whose registry CA is set there (`cafile` in /usr/etc/npmrc) failed with
  # SELF_SIGNED_CERT_IN_CHAIN.
  for try in 1 2 3; do
    if (cd "$NPM_DIR" && npm install --loglevel=error --no-audit --no-fund \
      "@modelcontextprotocol/server-everything@$MCP_NPM_VERSION" \
      "@modelcontextprotocol/server-filesystem@$MCP_NPM_VERSION") >&2; then
      break
    fi
    [ "$try" = 3 ] && { echo "setup-mcp: npm install failed 3 times" >&2; exit 1; }
    echo "setup-mcp: npm install failed (try $try of 3); retrying in 5 s" >&2
    sleep 5
  done
fi
export CLAW_MCP_PYTHON="$MCP_CACHE/venv/bin/python"
export CLAW_MCP_NODE_MODULES="$NPM_DIR/node_modules"
