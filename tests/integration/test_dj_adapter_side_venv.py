"""The Data-Juicer adapter against Data-Juicer itself, in Data-Juicer's own environment.

Data-Juicer (py-data-juicer 1.6.1) must not be installed in the main test
environment (it installs packages at run time and pins dill), so these
checks run ``dj_side_venv_checks.py`` with the side environment's Python
(``$DJ_SIDE_PYTHON``, default /work/djvenv/bin/python) and this repository on
PYTHONPATH, and compare what comes back.  Nothing is mocked: real
Data-Juicer ops, the real engine (in-process, no Airflow/Ray), and
Data-Juicer's own executor (``dj-process``) as the reference.  Skipped, with
the reason, where no such environment exists (CI: installing Data-Juicer
there would cost minutes and gigabytes per run).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SIDE_PYTHON = os.environ.get("DJ_SIDE_PYTHON", "/work/djvenv/bin/python")

pytestmark = pytest.mark.integration


def _side_env_problem() -> str | None:
    if not os.path.exists(SIDE_PYTHON):
        return f"no Data-Juicer environment at {SIDE_PYTHON} (set DJ_SIDE_PYTHON)"
    probe = subprocess.run(
        [SIDE_PYTHON, "-c", "import data_juicer, orjson, xxhash, pyarrow"], capture_output=True, text=True
    )
    if probe.returncode:
        return f"{SIDE_PYTHON} cannot import data_juicer/orjson/xxhash: {probe.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def side(tmp_path_factory):
    problem = _side_env_problem()
    if problem:
        pytest.skip(problem)
    work = tmp_path_factory.mktemp("djside")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [SIDE_PYTHON, os.path.join(HERE, "dj_side_venv_checks.py"), str(work)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(work),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("@@RESULT@@", 1)[1])


def test_adapted_batched_mapper_equals_data_juicer_and_keeps_engine_columns(side):
    m = side["direct"]["mapper"]
    assert m["adapter"] == m["dj"]
    assert m["adapter"][:2] == ["DOC 0  ABOUT TOPIC 0  ", "Doc 1  about topic 1"]
    assert m["columns"] == ["id", "n", "text", "__dj__input_row__"]
    assert m["input_rows"] == list(range(40))


def test_adapted_per_sample_mapper_runs_process_single(side):
    assert side["direct"]["lambda_mapper"] == [
        "DOC 0 ● ABOUT TOPIC 0  !",
        "Doc 1 ◆ about topic 1!",
        "Doc 2 ● about topic 2!",
    ]


def test_adapted_filter_keep_flags_and_stats_equal_data_juicer(side):
    f = side["direct"]["filter"]
    expected = [n >= 30 or n < 3 for n in range(40)]
    assert f["adapter"] == f["dj"] == expected
    assert f["stats"] == expected  # the statistic landed in __dj__stats__


def test_adapted_exact_hash_dedup_over_two_partitions_equals_data_juicer(side):
    d = side["direct"]["dedup"]
    kept = [i for i, k in enumerate(d["adapter_mask"]) if k]
    assert kept == d["dj_kept_ids"] == list(range(22))


def test_row_count_changing_mapper_is_refused_clearly(side):
    err = side["direct"]["row_count_error"]
    assert err.startswith("RowCountChangedError: Data-Juicer op text_chunk_mapper turned 2 samples into")
    assert "split or merge samples cannot run in this engine" in err


def test_engine_export_equals_dj_process_for_1_and_3_partitions(side):
    ref = [{k: r[k] for k in ("id", "n", "text")} for r in side["dj_process"]]
    assert [r["id"] for r in ref] == list(range(2, 13))
    for parts in ("1", "3"):
        got = [{k: r[k] for k in ("id", "n", "text")} for r in side["engine"][parts]]
        assert got == ref, parts
