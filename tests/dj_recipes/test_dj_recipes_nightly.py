"""A shipped Data-Juicer recipe run as a nightly job, as a user would (issue 14).

Data-Juicer's ``alpaca-cot-en-refine`` as shipped (document_deduplicator, filters, simhash,
``open_tracer: true``), with only the nightly keys added: ``dataset_path``/``export_path`` templated on
``{{ ds }}``, ``dedup_history`` on its exact deduplicator (its simhash one cannot check history),
``partition.align: file`` and ``intermediate_storage.reuse_across_jobs``.  Two nights through
``dj-airflow run --logical-date`` (real Airflow, real Ray, the harness's model files), then night 2 again
under a new job id.  What running it by hand found is pinned here:

* night 2's history duplicates each name night 1's job and the export row with the same deduplication
  key, and no row is exported on both nights;
* reuse is off while the tracer is on, and the run says so instead of printing zero counts;
* night 2 started again as a new job is refused before any work: it would have removed its rows as
  duplicates of its own export and overwritten that export (it did, before the refusal).
"""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys

import pytest

from tests.dj_recipes.cases import input_path
from tests.dj_recipes.harness import RUN_TIMEOUT_S, read_jsonl, recipe_path

pytestmark = pytest.mark.integration

NIGHTLY_KEYS = """
work_dir: {root}/work
partition: {{mode: manual, size: 70, align: file}}
intermediate_storage: {{reuse_across_jobs: true}}
dedup_history:
  path: {root}/history
  ops: [document_deduplicator]
"""
_NON_CHARACTER = re.compile(rf"\s+|\d+|[{re.escape(string.punctuation)}]")


def _key(text: str) -> str:
    """document_deduplicator's key with the recipe's lowercase + ignore_non_character (Data-Juicer's own rule)."""
    return _NON_CHARACTER.sub("", text.lower()).strip()


def _write(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def _nightly_copy(root: str) -> str:
    """The shipped recipe with its two placeholder paths templated; the nightly keys appended; nothing else."""
    with open(recipe_path("alpaca-cot-en-refine"), encoding="utf-8") as fh:
        text = fh.read()
    for key, value in (("dataset_path", f"{root}/in/{{{{ ds }}}}/"), ("export_path", f"{root}/out/{{{{ ds }}}}.jsonl")):
        text, n = re.subn(rf"^{key}:.*$", f"{key}: '{value}'", text, count=1, flags=re.M)
        assert n == 1
    path = os.path.join(root, "nightly.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text + NIGHTLY_KEYS.format(root=root))
    return path


def _run(recipe_env, recipe: str, date: str, job: str) -> subprocess.CompletedProcess:
    cmd = [os.path.join(os.path.dirname(sys.executable), "dj-airflow"), "run", recipe, "--logical-date", date]
    run_env = dict(os.environ, **recipe_env.variables(), DJ_TASK_RETRIES="0")
    run_env["DJ_AIRFLOW_HOME"] = run_env["AIRFLOW_HOME"] = recipe_env.airflow_home
    run_env["AIRFLOW__CORE__DAGS_FOLDER"] = os.path.join(recipe_env.airflow_home, "dags")
    run_env.pop("RAY_ADDRESS", None)
    cmd += ["--job-id", job, "--num-cpus", "2"]
    return subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=RUN_TIMEOUT_S)


def test_a_shipped_recipe_as_a_nightly_job(recipe_env, tmp_path):
    root = str(tmp_path)
    rows = read_jsonl(input_path("alpaca_en"))
    night1_rows = rows[:200]
    planted = [dict(r, row_id=1000 + r["row_id"]) for r in night1_rows[::20]]  # yesterday's rows again
    _write(f"{root}/in/2026-11-29/crawl.jsonl", night1_rows)
    _write(f"{root}/in/2026-11-30/crawl.jsonl", rows[200:] + planted)
    recipe = _nightly_copy(root)

    for date, job in (("2026-11-29", "night1"), ("2026-11-30", "night2")):
        done = _run(recipe_env, recipe, date, job)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "reuse:  off: open_tracer is true" in done.stdout, done.stdout[-2000:]
    e1 = read_jsonl(f"{root}/out/2026-11-29.jsonl")
    e2 = read_jsonl(f"{root}/out/2026-11-30.jsonl")
    assert len(e1) > 100 and len(e2) > 50
    with open(f"{root}/work/night2/job_summary.json") as fh:
        summary = json.load(fh)
    assert "open_tracer: false" in summary["reuse"]["off"] and summary["reuse"]["published_entries"] == 0
    split = summary["dedup_history"]["ops"][0]
    assert summary["dedup_history"]["commit"]["version"] == 2
    assert split["history_duplicates"] > 0 and split["in_night_duplicates"] > 0

    import pyarrow.parquet as pq

    night2_input = read_jsonl(f"{root}/in/2026-11-30/crawl.jsonl")
    dups = pq.read_table(f"{root}/work/night2/dedup_history/op_000_document_deduplicator.parquet").to_pylist()
    assert len(dups) == split["history_duplicates"]
    for d in dups:  # each names night 1's export row with the same key
        assert d["history_job_id"] == "night1" and d["history_export_path"] == f"{root}/out/2026-11-29.jsonl"
        assert _key(e1[d["history_export_row"]]["text"]) == _key(night2_input[d["__dj__input_row__"]]["text"])
    exported_keys = {_key(r["text"]) for r in e1}
    for p in planted:  # a planted copy of an exported row is a history duplicate, or an in-night one of it
        if _key(p["text"]) in exported_keys:
            assert p["row_id"] not in {r["row_id"] for r in e2}
    assert not exported_keys & {_key(r["text"]) for r in e2}  # nothing exported on both nights

    # Night 2 again as a new job, writing to night 2's export: refused before any work, nothing lost.
    before = open(f"{root}/out/2026-11-30.jsonl", "rb").read()
    again = _run(recipe_env, recipe, "2026-11-30", "night2_again")
    assert again.returncode != 0
    out = again.stdout + again.stderr
    assert "holds the export of job night2" in out and "its own export_path" in out, out[-3000:]
    assert open(f"{root}/out/2026-11-30.jsonl", "rb").read() == before
    with open(f"{root}/history/CURRENT") as fh:
        assert json.load(fh)["version"] == 2
    assert not os.path.exists(f"{root}/work/night2_again/checkpoints/partitioning_info.json")
