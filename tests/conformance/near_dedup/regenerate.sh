#!/usr/bin/env bash
# Regenerate tests/conformance/near_dedup fixtures with Data-Juicer 1.6.1
# (DJ_VENV, default /work/djvenv; DJ's SimHash op also needs simhash-pybind there).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"
"$DJ_VENV/bin/python" -c "import data_juicer, simhash" 2>/dev/null || "$DJ_VENV/bin/pip" install simhash-pybind
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"
cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
