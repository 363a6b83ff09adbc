"""Fixed start-up: an empty-input ``dj-airflow run``, against ``python -c "import airflow"`` in the same run.

Each command runs ``--repeat`` times (default 5), interleaved so that a change in the machine's load
hits every command alike, in a fresh ``HOME`` with no Airflow variables (a first-time user's shell),
and the table gives min / median / max wall seconds and the median's ratio to the baseline:

* ``import airflow``: the baseline, what any command that uses Airflow pays first;
* ``dj-airflow run`` (the engine's local executor, the default) on an empty input and on one row;
* ``dj-airflow run --airflow`` (the generated DAG in ``dag.test()``) on the same inputs;
* ``python -m airflow_provider_dj.engine.runner`` (the engine's own driver) on the empty input.

``--phases`` adds where ``--airflow``'s start-up goes, timed in one fresh interpreter step by step.
Usage::

    .venv/bin/python -m bench startup --repeat 5 [--phases] [--out bench_results/startup.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench.report import md_table, write_json

VENV_BIN = os.path.dirname(sys.executable)
RECIPE = """\
project_name: startup_bench
dataset_path: {data}
export_path: {out}/export.jsonl
work_dir: {out}/jobs
text_keys: text
executor_type: ray_partitioned
partition:
  mode: manual
  num_of_partitions: 1
process:
  - whitespace_normalization_mapper:
  - words_num_filter:
      min_num: 1
"""

#: ``--airflow``'s start-up, one step at a time in a fresh interpreter (the steps the CLI takes).
PHASES_CODE = r"""
import json, os, sys, time
t = time.perf_counter(); marks = []
def mark(name):
    global t
    now = time.perf_counter(); marks.append((name, now - t)); t = now
from airflow_provider_dj.cli.airflow_env import prepare_run
env = prepare_run(sys.argv[1], "startup_bench", private=True)
mark("private Airflow home: DAG stub, DB copy")
import airflow
mark("import airflow (configuration, settings, ORM)")
from airflow_provider_dj.dag_builder.factory import build_dag
mark("import the DAG builder and operators")
dag = build_dag(sys.argv[1], dag_id="startup_bench")
mark("build the DAG")
from airflow_provider_dj.cli.in_process_api import build_for_own_client_only
build_for_own_client_only()
mark("the in-process execution API (FastAPI app)")
dag.test()
mark("dag.test(): parse the stub, create the run, run the tasks")
env.cleanup()
print(json.dumps(marks))
"""


def _commands(empty: str, one: str) -> dict[str, list[str]]:
    dj = os.path.join(VENV_BIN, "dj-airflow")
    return {
        "import airflow": [sys.executable, "-c", "import airflow"],
        "dj-airflow run, empty": [dj, "run", empty],
        "dj-airflow run, 1 row": [dj, "run", one],
        "dj-airflow run --airflow, empty": [dj, "run", "--airflow", empty],
        "dj-airflow run --airflow, 1 row": [dj, "run", "--airflow", one],
        "engine driver, empty": [sys.executable, "-m", "airflow_provider_dj.engine.runner", empty],
    }


def _clean_env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DJ_", "RAY_"))}
    env["HOME"] = home
    return env


def _timed(cmd: list[str], env: dict, out_dir: str) -> float:
    shutil.rmtree(out_dir, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return wall


def _write_inputs(tmp: str) -> tuple[str, str, str]:
    out = os.path.join(tmp, "out")
    recipes = []
    for name, text in (("empty", ""), ("one", '{"text": "one short line of text"}\n')):
        data = os.path.join(tmp, f"{name}.jsonl")
        with open(data, "w") as fh:
            fh.write(text)
        recipe = os.path.join(tmp, f"{name}.yaml")
        with open(recipe, "w") as fh:
            fh.write(RECIPE.format(data=data, out=out))
        recipes.append(recipe)
    return recipes[0], recipes[1], out


def _phases(recipe: str, env: dict) -> list[tuple[str, float]]:
    import json

    proc = subprocess.run([sys.executable, "-c", PHASES_CODE, recipe], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"phase timing failed:\n{proc.stderr[-3000:]}")
    return [tuple(m) for m in json.loads(proc.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--phases", action="store_true", help="also time --airflow's start-up step by step")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="dj-startup-bench-")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = _clean_env(home)
    empty, one, out = _write_inputs(tmp)
    commands = _commands(empty, one)
    _timed(commands["dj-airflow run --airflow, empty"], env, out)  # the first run's one-time template DB
    walls: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            walls[name].append(_timed(cmd, env, out))
    base = statistics.median(walls["import airflow"])
    rows = []
    for name, w in walls.items():
        med = statistics.median(w)
        rows.append([name, f"{min(w):.2f}", f"{med:.2f}", f"{max(w):.2f}", f"{med / base:.2f}"])
    print(f"wall seconds over {args.repeat} runs each, interleaved; ratio: median over import airflow's median\n")
    print(md_table(["command", "min", "median", "max", "ratio"], rows))
    result: dict = {"repeat": args.repeat, "walls": walls}
    if args.phases:
        marks = _phases(empty, env)
        result["phases"] = marks
        print("\n--airflow on the empty input, step by step (one fresh interpreter):\n")
        print(md_table(["step", "seconds"], [[n, f"{s:.2f}"] for n, s in marks]))
    if args.out:
        write_json(args.out, result)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
