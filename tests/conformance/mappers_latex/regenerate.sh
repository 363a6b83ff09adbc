#!/usr/bin/env bash
# Regenerate the LaTeX and word mappers' conformance fixtures with the
# reference Data-Juicer 1.6.1 (see README.md).  Pass --retrain to train a new
# fixture SentencePiece model (then commit models/en.sp.model too).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready

dj_venv_ready
if ! "$DJ_VENV/bin/python" -c "import sentencepiece" 2>/dev/null; then
    "$DJ_VENV/bin/pip" install "sentencepiece==0.2.3"
fi

# A models cache of its own, so a model in the user's Data-Juicer cache never stands in for the fixture's.
export DATA_JUICER_MODELS_CACHE="${DATA_JUICER_MODELS_CACHE:-$(mktemp -d)}"

cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
