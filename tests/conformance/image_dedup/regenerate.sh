#!/usr/bin/env bash
# Regenerate tests/conformance/image_dedup/expected with Data-Juicer 1.6.1 and imagededup
# (DJ_VENV, default /work/djvenv; imagededup is installed there when missing, never in ours).
# The source images are the ones our venv's installed packages ship (tests/unit/engine/media_corpus.py).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"
OUR_PY="${OUR_PY:-$ROOT/.venv/bin/python}"
"$DJ_VENV/bin/python" -c "import data_juicer, imagededup" 2>/dev/null || "$DJ_VENV/bin/pip" install imagededup
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"
mapfile -t SOURCES < <(cd "$ROOT" && "$OUR_PY" -c \
    'from tests.unit.engine.media_corpus import shipped_images; print("\n".join(map(str, shipped_images())))')
"$DJ_VENV/bin/python" "$HERE/generate.py" "${SOURCES[@]}"
