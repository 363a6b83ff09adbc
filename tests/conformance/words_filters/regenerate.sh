#!/usr/bin/env bash
# Regenerate the words filters' conformance fixtures (see README.md):
# make_assets.py (project venv) writes the word lists and models, then
# generate.py runs the reference Data-Juicer 1.6.1 on them.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
PROJECT_PY="${PROJECT_PY:-$ROOT/.venv/bin/python}"
# Data-Juicer's alphanumeric_filter needs transformers, which its base install lacks and whose
# pinned version (4.57.1) conflicts with the huggingface_hub its datasets 5.x needs.  The
# project's own transformers/tokenizers versions are put beside it in a separate folder, so the
# Data-Juicer venv itself is not changed.
TF_OVERLAY="${TF_OVERLAY:-$HERE/.dj_tf_overlay}"

dj_venv_ready
if ! PYTHONPATH="$TF_OVERLAY" "$DJ_VENV/bin/python" -c "import transformers, tokenizers" 2>/dev/null; then
    versions="$("$PROJECT_PY" -c 'import transformers, tokenizers, safetensors as s; print(f"transformers=={transformers.__version__} tokenizers=={tokenizers.__version__} safetensors=={s.__version__}")')"
    echo "installing $versions into $TF_OVERLAY" >&2
    # shellcheck disable=SC2086
    "$DJ_VENV/bin/pip" install --no-deps --target "$TF_OVERLAY" $versions
fi


cd "$HERE"
"$PROJECT_PY" "$HERE/make_assets.py"
PYTHONPATH="$TF_OVERLAY" "$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
