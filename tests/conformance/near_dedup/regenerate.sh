#!/usr/bin/env bash
# Regenerate tests/conformance/near_dedup fixtures with Data-Juicer 1.6.1
# (DJ_VENV, default /work/djvenv; DJ's SimHash op also needs simhash-pybind there).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
dj_venv_ready
"$DJ_VENV/bin/python" -c "import data_juicer, simhash" 2>/dev/null || "$DJ_VENV/bin/pip" install simhash-pybind
cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
