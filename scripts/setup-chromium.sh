#!/usr/bin/env bash
# Headless Chromium for the WebChat browser test (crates/gateway/tests/it/webchat_browser.rs).
# Sourced by scripts/test.sh (`. scripts/setup-chromium.sh`); can also be run on its own.
# Idempotent: installs Debian's `chromium` package only when no `chromium` is on PATH
# (apt keeps its downloads in its own cache), then exports CLAW_CHROMIUM, the binary the
# test drives over the DevTools protocol. Under CI=true the test fails when it is missing.
claw_setup_chromium() {
  local bin
  bin=$(command -v chromium || true)
  if [ -z "$bin" ]; then
    echo "[setup-chromium] installing Debian's chromium (apt-get)" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >&2 || return 1
    $sudo apt-get install -y -qq --no-install-recommends chromium >&2 || return 1
    bin=$(command -v chromium) || return 1
  fi
  export CLAW_CHROMIUM="$bin"
  echo "[setup-chromium] CLAW_CHROMIUM=$CLAW_CHROMIUM ($("$bin" --version 2>/dev/null | head -n1))" >&2
}
if ! claw_setup_chromium; then
  echo "[setup-chromium] could not install chromium: the WebChat browser test will fail under CI=true" >&2
  # Sourced: leave the caller's shell running; run directly: fail.
  (return 0 2>/dev/null) || exit 1
fi
