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
# shellcheck source=/dev/null
source "$HERE/dj_venv.sh"  # DJ_VENV and dj_venv_ready

dj_venv_ready

cd "$HERE/../.."
"$DJ_VENV/bin/python" "$HERE/generate_expected.py" "$@"
