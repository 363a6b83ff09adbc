#!/usr/bin/env bash
# Regenerate the LaTeX and word mappers' conformance fixtures with the
# reference Data-Juicer 1.6.1 (see README.md).  Pass --retrain to train a new
# fixture SentencePiece model (then commit models/en.sp.model too).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"

if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
    echo "creating Data-Juicer venv in $DJ_VENV" >&2
    python3 -m venv "$DJ_VENV"
    "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
fi
if ! "$DJ_VENV/bin/python" -c "import sentencepiece" 2>/dev/null; then
    "$DJ_VENV/bin/pip" install "sentencepiece==0.2.3"
fi

export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"
# A models cache of its own, so a model in the user's Data-Juicer cache never stands in for the fixture's.
export DATA_JUICER_MODELS_CACHE="${DATA_JUICER_MODELS_CACHE:-$(mktemp -d)}"

cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
