"""Delta nights from the command line against Data-Juicer's own export (issue 22 item 3).

The conformance pipeline's input (tests/conformance/fixtures/pipeline: 300 rows, five ops ending in
``document_deduplicator``) is split into two days' folders, rows 0-149 and 150-299.  One templated
recipe reads tonight's folder (``crawl/{{ ds }}/*.jsonl``) with ``dedup_history`` on its deduplicator,
and ``dj-airflow run --logical-date`` runs night 1 and then night 2.  Night 1's export followed by
night 2's must equal, row for row, Data-Juicer 1.6.1's export of both days in one run (its committed
``expected.jsonl``, made by ``dj-process`` over the whole input) and our own single run over both
days.  Real CLI, engine and files; Data-Juicer is not imported here.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.cli.main import main
from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "fixtures", "pipeline")
NIGHTS = ("2026-11-29", "2026-11-30")
SPLIT = 150  # night 1: input rows 0-149; night 2: rows 150-299

RECIPE = """\
project_name: delta_nights_cli
dataset_path: "{root}/crawl/{data}"
export_path: "{root}/clean/{export}"
work_dir: {root}/work
text_keys: text
partition: {{mode: manual, num_of_partitions: 2}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5, max_num: 200}}
  - text_length_filter: {{min_len: 20, max_len: 2000}}
  - document_deduplicator: {{lowercase: true}}
"""


@pytest.fixture
def days(tmp_path):
    with open(os.path.join(FIX, "input.jsonl"), encoding="utf-8") as fh:
        lines = fh.readlines()
    assert len(lines) == 300
    for day, part in zip(NIGHTS, (lines[:SPLIT], lines[SPLIT:])):
        folder = tmp_path / "crawl" / day
        folder.mkdir(parents=True)
        (folder / "part.jsonl").write_text("".join(part), encoding="utf-8")
    return tmp_path


def _recipe(root, name: str, data: str, export: str, history: bool) -> str:
    text = RECIPE.format(root=root, data=data, export=export)
    if history:
        text += f"dedup_history:\n  path: {root}/history\n  ops: [document_deduplicator]\n"
    path = root / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def test_two_delta_nights_from_the_cli_equal_one_run_and_data_juicers_export(days, capsys):
    nightly = _recipe(days, "nightly", "{{ ds }}/*.jsonl", "{{ ds }}.jsonl", history=True)
    for n, day in enumerate(NIGHTS, start=1):
        rc = main(["run", nightly, "--logical-date", day, "--job-id", f"night{n}", "--executor", "local"])
        assert rc == 0, capsys.readouterr().out[-3000:]
    night1, night2 = (read_jsonl(days / "clean" / f"{day}.jsonl") for day in NIGHTS)

    expected = read_jsonl(os.path.join(FIX, "expected.jsonl"))  # dj-process over all 300 rows at once
    assert len(expected) == 192
    assert night1 + night2 == expected
    assert all(r["id"] < SPLIT for r in night1) and all(r["id"] >= SPLIT for r in night2)

    # Night 2 really met night 1: some of its rows were dropped as duplicates of night-1 exports.
    with open(days / "work" / "night2" / "job_summary.json", encoding="utf-8") as fh:
        split = json.load(fh)["dedup_history"]["ops"][0]
    assert split["history_duplicates"] > 0, split

    scratch = _recipe(days, "scratch", "*/*.jsonl", "both.jsonl", history=False)
    assert main(["run", scratch, "--job-id", "both", "--executor", "local"]) == 0
    assert read_jsonl(days / "clean" / "both.jsonl") == expected
