#!/usr/bin/env bash
# Regenerate image_blur_mapper's conformance fixtures with the reference Data-Juicer 1.6.1 (see
# README.md): the image filters' corpus.py builds the corpus with the provider's venv (where the
# shipped images are installed), then generate.py runs Data-Juicer's op over it in its own venv.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DJ_VENV="${DJ_VENV:-$ROOT/bench/.djvenv}"
PY="${PY:-$ROOT/.venv/bin/python}"

if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
    echo "creating Data-Juicer venv in $DJ_VENV" >&2
    python3 -m venv "$DJ_VENV"
    "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
fi

export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"

CORPUS="$(mktemp -d)"
trap 'rm -rf "$CORPUS"' EXIT
"$PY" "$ROOT/tests/conformance/filters_image/corpus.py" "$CORPUS"
cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$CORPUS"
