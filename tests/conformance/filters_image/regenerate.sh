#!/usr/bin/env bash
# Regenerate the image filters' conformance fixtures with the reference Data-Juicer 1.6.1
# (see README.md): corpus.py builds the image corpus with the provider's venv (where the shipped
# images are installed), then generate.py runs Data-Juicer over it in its own venv.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source=/dev/null
source "$HERE/../dj_venv.sh"  # DJ_VENV and dj_venv_ready
PY="${PY:-$ROOT/.venv/bin/python}"

dj_venv_ready


CORPUS="$(mktemp -d)"
trap 'rm -rf "$CORPUS"' EXIT
"$PY" "$HERE/corpus.py" "$CORPUS"
cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$CORPUS"
