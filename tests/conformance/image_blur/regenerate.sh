#!/usr/bin/env bash
# Regenerate image_blur_mapper's conformance fixtures with the reference Data-Juicer 1.6.1 (see
# README.md): the image filters' corpus.py builds the corpus with the provider's venv (where the
# shipped images are installed), then generate.py runs Data-Juicer's op over it in its own venv.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DJ_VENV="${DJ_VENV:-$ROOT/bench/.djvenv}"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
PY="${PY:-$ROOT/.venv/bin/python}"

dj_venv_ready


CORPUS="$(mktemp -d)"
trap 'rm -rf "$CORPUS"' EXIT
"$PY" "$ROOT/tests/conformance/filters_image/corpus.py" "$CORPUS"
cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$CORPUS"
