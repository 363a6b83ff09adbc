#!/usr/bin/env bash
# Regenerate the words filters' conformance fixtures (see README.md):
# make_assets.py (project venv) writes the word lists and models, then
# generate.py runs the reference Data-Juicer 1.6.1 on them.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"
PROJECT_PY="${PROJECT_PY:-$ROOT/.venv/bin/python}"
# Data-Juicer's alphanumeric_filter needs transformers, which its base install lacks and whose
# pinned version (4.57.1) conflicts with the huggingface_hub its datasets 5.x needs.  The
# project's own transformers/tokenizers versions are put beside it in a separate folder, so the
# Data-Juicer venv itself is not changed.
TF_OVERLAY="${TF_OVERLAY:-$HERE/.dj_tf_overlay}"

if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
    echo "creating Data-Juicer venv in $DJ_VENV" >&2
    python3 -m venv "$DJ_VENV"
    "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
fi
if ! PYTHONPATH="$TF_OVERLAY" "$DJ_VENV/bin/python" -c "import transformers, tokenizers" 2>/dev/null; then
    versions="$("$PROJECT_PY" -c 'import transformers, tokenizers, safetensors as s; print(f"transformers=={transformers.__version__} tokenizers=={tokenizers.__version__} safetensors=={s.__version__}")')"
    echo "installing $versions into $TF_OVERLAY" >&2
    # shellcheck disable=SC2086
    "$DJ_VENV/bin/pip" install --no-deps --target "$TF_OVERLAY" $versions
fi

export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"

cd "$HERE"
"$PROJECT_PY" "$HERE/make_assets.py"
PYTHONPATH="$TF_OVERLAY" "$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
