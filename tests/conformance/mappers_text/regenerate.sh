#!/usr/bin/env bash
# Regenerate the text mappers' conformance fixtures with the reference
# Data-Juicer 1.6.1 (see README.md).  DJ loads ftfy and selectolax lazily and
# does not pin them, so the versions used for the fixtures are pinned here.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready

dj_venv_ready
if ! "$DJ_VENV/bin/python" -c "import ftfy, selectolax" 2>/dev/null; then
    "$DJ_VENV/bin/pip" install "ftfy==6.3.1" "selectolax==1.0.2"
fi


cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
