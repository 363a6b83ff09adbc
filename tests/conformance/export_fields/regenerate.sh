#!/usr/bin/env bash
# Regenerate the export-field fixtures with the reference Data-Juicer 1.6.1
# (its default executor and exporter; see generate.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready

dj_venv_ready


cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
