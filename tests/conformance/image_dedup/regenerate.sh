#!/usr/bin/env bash
# Regenerate tests/conformance/image_dedup/expected with Data-Juicer 1.6.1 and imagededup
# (DJ_VENV, default /work/djvenv; imagededup is installed there when missing, never in ours).
# The source images are the ones our venv's installed packages ship (tests/unit/engine/media_corpus.py).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
dj_venv_ready
OUR_PY="${OUR_PY:-$ROOT/.venv/bin/python}"
"$DJ_VENV/bin/python" -c "import data_juicer, imagededup" 2>/dev/null || "$DJ_VENV/bin/pip" install imagededup
mapfile -t SOURCES < <(cd "$ROOT" && "$OUR_PY" -c \
    'from tests.unit.engine.media_corpus import shipped_images; print("\n".join(map(str, shipped_images())))')
"$DJ_VENV/bin/python" "$HERE/generate.py" "${SOURCES[@]}"
