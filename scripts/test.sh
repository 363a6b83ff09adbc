#!/usr/bin/env bash
# The test suite: unit, conformance and integration tests (real Airflow via dag.test(),
# real local Ray) and e2e tests (airflow standalone over REST, with SQLite and PostgreSQL).
# Installs what it needs into .venv first.
#
#   bash scripts/test.sh            the whole suite (what CI runs)
#   bash scripts/test.sh --quick    the inner loop: lint, unit and conformance tests (no Airflow
#                                   server, no Ray cluster, no subprocess runs)
#   bash scripts/test.sh PATH ...   what pytest is given
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = "--quick" ]; then
  shift
  set -- tests/unit tests/conformance "$@"
fi
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
# PostgreSQL for the e2e tests' second metadata DB: a private cluster on
# loopback (installed from Debian's packages when missing and root, as in CI),
# stopped at exit when this run started it.  Only for runs that include tests/e2e.
if [ -z "${DJ_E2E_POSTGRES_URL:-}" ] && { [ $# -eq 0 ] || [[ "$*" == *e2e* ]]; }; then
  PG_WAS_RUNNING=0
  bash "$ROOT/scripts/postgres_for_tests.sh" status >/dev/null 2>&1 && PG_WAS_RUNNING=1
  if DJ_E2E_POSTGRES_URL="$(bash "$ROOT/scripts/postgres_for_tests.sh")"; then
    export DJ_E2E_POSTGRES_URL
    [ "$PG_WAS_RUNNING" -eq 1 ] || trap 'bash "$ROOT/scripts/postgres_for_tests.sh" release >/dev/null 2>&1 || true' EXIT
  else
    unset DJ_E2E_POSTGRES_URL
    echo "[test] no PostgreSQL: the e2e PostgreSQL variant skips here (and fails under CI)" >&2
  fi
fi
# Headless Chromium for the job view's browser test (installed from Debian's packages when missing
# and root, as in CI; the test skips without it, and fails under CI).  Only for runs that include tests/e2e.
if [ $# -eq 0 ] || [[ "$*" == *e2e* ]]; then
  bash "$ROOT/scripts/chromium_for_tests.sh" >/dev/null \
    || echo "[test] no chromium: the job view's browser test skips here (and fails under CI)" >&2
fi
# Lint, format and types first (ruff and mypy, configured in pyproject.toml): a style slip or a broken seam
# fails in seconds, not after the suite.  mypy's cache (.venv/.mypy_cache) keeps a run to a few seconds.
"$ROOT/.venv/bin/ruff" check --quiet . || { echo "[test] ruff check failed: run .venv/bin/ruff check --fix ." >&2; exit 1; }
"$ROOT/.venv/bin/ruff" format --check --quiet . || { echo "[test] not formatted: run .venv/bin/ruff format ." >&2; exit 1; }
MYPY_OUT="$("$ROOT/.venv/bin/mypy" 2>&1)" || { echo "$MYPY_OUT" >&2; echo "[test] mypy failed (settings: pyproject.toml [tool.mypy])" >&2; exit 1; }
set +e
# Test files run in parallel worker processes (pytest-xdist, whole files per worker: module fixtures
# such as the crash matrix's reference run and the e2e servers stay in one process).  Most tests wait on
# Airflow, Ray or subprocesses rather than burn CPU; 3 workers on 2 cores take about as long as 4 (clean clones:
# 25:14 vs 24:31) with a lower peak load, under which Ray's fixed 30 s start-up wait runs out less often.
# Files go out longest first (tests/conftest.py, tests/module_durations.json), so a minutes-long e2e module
# is not the tail.  DJ_TEST_WORKERS=0 runs everything in this process.  The 30 slowest tests are listed at the end, so a
# run that grows shows where.
WORKERS="${DJ_TEST_WORKERS:-3}"
XDIST=()
[ "$WORKERS" != "0" ] && XDIST=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider --durations=30 "${XDIST[@]}" "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose" >&2; exit 1; fi
exit $rc
