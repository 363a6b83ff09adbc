#!/usr/bin/env bash
# Regenerate the conformance fixtures from the reference Data-Juicer 1.6.1.
#
#   tests/conformance/regenerate.sh [--skip-pipeline | --only-pipeline]
#
# DJ lives in its own venv (default /work/djvenv, override with DJ_VENV) so
# that our package never imports it; the venv is created when missing.
# Inputs (fixtures/inputs, fixtures/variants.json, fixtures/pipeline/recipe.yaml)
# are hand-written; everything under fixtures/expected and the pipeline's
# input.jsonl / expected.jsonl is rewritten.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"

if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
    echo "creating Data-Juicer venv in $DJ_VENV" >&2
    python3 -m venv "$DJ_VENV"
    "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
fi

version="$("$DJ_VENV/bin/python" -c 'import data_juicer; print(data_juicer.__version__)')"
case "$version" in
    1.6.1*) ;;
    *) echo "expected data_juicer 1.6.1 in $DJ_VENV, found $version" >&2; exit 1 ;;
esac

# Keep DJ's run hermetic: no telemetry/network, cache under a temp dir.
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"

cd "$HERE/../.."
"$DJ_VENV/bin/python" "$HERE/generate_expected.py" "$@"
