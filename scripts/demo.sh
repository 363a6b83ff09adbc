#!/usr/bin/env bash
# The main job: run the demo recipe (dags/recipes/demo.yaml) through its generated
# Airflow DAG on the embedded defaults: in-process Airflow (SQLite metadata DB under
# ~/.dj-airflow/airflow), local Ray, a local work dir (demo_output/), shipped sample data.
# --airflow: the DAG itself in dag.test(); without it `dj-airflow run` runs the same steps on the
# engine's local executor, seconds faster, with the same job directory and export.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
LOG="$ROOT/demo_output/dj-airflow-run.log"
mkdir -p "$ROOT/demo_output"
echo "[demo] running dags/recipes/demo.yaml (full Airflow log: $LOG)"
set +e
"$ROOT/.venv/bin/dj-airflow" run --airflow dags/recipes/demo.yaml "$@" 2>&1 | tee "$LOG" \
  | grep --line-buffered -E '^Resume token|^DAG run|^  |^Resume with|segment [0-9]+: [0-9]+/[0-9]+ partitions|Exported [0-9]+ rows'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then echo "[demo] failed (exit $rc); last lines of $LOG:" >&2; tail -20 "$LOG" >&2; fi
exit "$rc"
