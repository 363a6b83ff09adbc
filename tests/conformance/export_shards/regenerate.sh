#!/usr/bin/env bash
# Regenerate the sharded-export fixtures with the reference Data-Juicer 1.6.1
# (its default executor and exporter with export_shard_size; see generate.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DJ_VENV="${DJ_VENV:-/work/djvenv}"

if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
    echo "creating Data-Juicer venv in $DJ_VENV" >&2
    python3 -m venv "$DJ_VENV"
    "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
fi

export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"

cd "$HERE"
"$DJ_VENV/bin/python" "$HERE/generate.py" "$@"
