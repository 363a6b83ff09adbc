#!/usr/bin/env bash
# Regenerate tests/conformance/demo_images/expected/export.jsonl: the image-text demo recipe
# (dags/recipes/demo_images.yaml) run by Data-Juicer 1.6.1's own dj-process, offline, in its own
# venv (DJ_VENV, default bench/.djvenv; it needs imagededup for image_deduplicator).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DJ_VENV="${DJ_VENV:-$ROOT/bench/.djvenv}"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
dj_venv_ready
"$DJ_VENV/bin/python" -c "import data_juicer, imagededup" 2>/dev/null || {
    echo "$DJ_VENV lacks Data-Juicer 1.6.1 or imagededup (pip install py-data-juicer==1.6.1 imagededup)" >&2
    exit 1
}
"$DJ_VENV/bin/python" "$HERE/generate.py"
