#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback for the e2e tests' metadata DB.
#
#   scripts/postgres_for_tests.sh          start (or find) the cluster; print its SQLAlchemy URL on stdout
#   scripts/postgres_for_tests.sh status   exit 0 if our cluster is running (prints the URL), 1 if not
#   scripts/postgres_for_tests.sh stop     stop our cluster (the data dir is kept)
#   scripts/postgres_for_tests.sh release  stop it unless a test server still uses it (a dj_e2e_* database exists)
#
# Why a private cluster: the tests must never touch a PostgreSQL the machine
# runs for something else, and must not need a fixed port.  The cluster lives
# in /tmp/dj-e2e-pg-<uid>-<checkout hash> (override: DJ_PG_DIR; one per checkout,
# so two checkouts on one machine never stop each other's), listens on
# 127.0.0.1 only, on a free port recorded next to it, with trust
# authentication for the role `airflow` (loopback only; test data only).
#
# PostgreSQL itself comes from Debian's packages.  When it is missing and we
# run as root (CI), it is installed (apt-get update once, then
# apt-get install -y postgresql); otherwise the script exits 3 saying so.
# PostgreSQL refuses to run as root, so as root the server runs as the
# `postgres` system user the package creates, in a data dir that user owns.
# Idempotent and safe to call concurrently (a lock file serializes callers).
# Messages go to stderr; stdout carries only the URL.
set -euo pipefail

ACTION="${1:-start}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DJ_PG_DIR:-/tmp/dj-e2e-pg-$(id -u)-$(printf %s "$ROOT" | sha256sum | cut -c1-8)}"
DATA="$DIR/data"
PORT_FILE="$DIR/port"
ROLE=airflow
DB=airflow

say() { echo "[postgres_for_tests] $*" >&2; }

find_bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
}

# Run a PostgreSQL tool as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

url() { echo "postgresql+psycopg2://$ROLE@127.0.0.1:$(cat "$PORT_FILE")/$DB"; }

running() {
  [ -f "$PORT_FILE" ] && [ -f "$DATA/postmaster.pid" ] && [ -n "${BINDIR:-}" ] \
    && as_owner "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1 \
    && "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$(cat "$PORT_FILE")"
}

free_port() {
  local py
  py="$(command -v python3 || command -v python)"
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

BINDIR="$(find_bindir)"

case "$ACTION" in
  status)
    if running; then url; exit 0; fi
    exit 1
    ;;
  release)
    # Each e2e server works in its own dj_e2e_* database and drops it when done.
    if running; then
      in_use="$("$BINDIR/psql" -h 127.0.0.1 -p "$(cat "$PORT_FILE")" -U "$ROLE" -d postgres -tAc \
        "SELECT count(*) FROM pg_database WHERE datname LIKE 'dj\_e2e\_%'" 2>/dev/null || echo 0)"
      if [ "${in_use:-0}" != "0" ]; then
        say "left running: $in_use test database(s) still in use"
        exit 0
      fi
      as_owner "$BINDIR/pg_ctl" -D "$DATA" -m fast -w stop >&2
      say "stopped the cluster in $DATA"
    fi
    exit 0
    ;;
  stop)
    if running; then
      as_owner "$BINDIR/pg_ctl" -D "$DATA" -m fast -w stop >&2
      say "stopped the cluster in $DATA"
    fi
    exit 0
    ;;
  start) ;;
  *) say "unknown action '$ACTION' (use start, status, stop or release)"; exit 2 ;;
esac

if [ -z "$BINDIR" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "PostgreSQL is not installed and this is not root: install it with 'apt-get install -y postgresql' (as root), or run this script as root"
    exit 3
  fi
  say "installing PostgreSQL from Debian's packages (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q postgresql >&2
  BINDIR="$(find_bindir)"
  [ -n "$BINDIR" ] || { say "apt-get installed postgresql but no initdb/pg_ctl under /usr/lib/postgresql/*/bin"; exit 3; }
fi

mkdir -p "$DIR"
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || { say "no 'postgres' system user (the Debian package creates it); cannot run PostgreSQL as root"; exit 3; }
  chown postgres: "$DIR"
fi
chmod 700 "$DIR"

# The lock's fd must not leak into the server (it would hold the lock for
# as long as PostgreSQL runs): pg_ctl is started with 9>&- below.
exec 9>"$DIR.lock"
flock 9

if running; then url; exit 0; fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  say "initializing a cluster in $DATA"
  rm -rf "$DATA"
  as_owner "$BINDIR/initdb" -D "$DATA" -U "$ROLE" -A trust -E UTF8 --no-sync >/dev/null
fi
PORT="$(free_port)"
echo "$PORT" > "$PORT_FILE"
chmod 644 "$PORT_FILE"
# A stale pid file from a killed server would block the start.
if [ -f "$DATA/postmaster.pid" ] && ! as_owner "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  rm -f "$DATA/postmaster.pid"
fi
as_owner "$BINDIR/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c max_connections=200" start >&2 9>&- \
  || { say "PostgreSQL did not start; its log:"; tail -n 30 "$DIR/server.log" >&2 || true; exit 4; }
if ! "$BINDIR/psql" -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
  "$BINDIR/createdb" -h 127.0.0.1 -p "$PORT" -U "$ROLE" "$DB"
fi
say "PostgreSQL $("$BINDIR/postgres" --version | sed 's/^[^0-9]*//') on 127.0.0.1:$PORT (data: $DATA)"
url
