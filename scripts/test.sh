#!/usr/bin/env bash
# The test suite: unit, conformance and integration tests (real Airflow via dag.test(),
# real local Ray).  Installs what it needs into .venv first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
set +e
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose" >&2; exit 1; fi
exit $rc
