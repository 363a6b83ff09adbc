"""Two nights through `dj-airflow run` in one work dir: night 2 (night 1's files plus a new file with
exact and near duplicates of night-1 rows) reuses night 1, prints and records what it reused, and exports
the bytes of a from-scratch run (a third run in a fresh work dir); `dj-airflow gc` then keeps both."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.cli.main import main
from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file
from tests.helpers_compare import assert_same_bytes

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: nightly_reuse
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, size: 100, align: file}}
intermediate_storage: {{reuse_across_jobs: true}}
process:
  - clean_email_mapper:
  - words_num_filter: {{min_num: 5}}
  - document_deduplicator: {{lowercase: true}}
  - document_minhash_deduplicator: {{}}
  - text_length_filter: {{min_len: 40}}
"""


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def test_two_nights_through_the_cli(tmp_path, airflow_home, ray_cluster, capsys, monkeypatch):
    # Night 1 serializes its export on Ray workers (the path big exports take) and records each part's
    # range; night 2, whose final checkpoints are mostly reused, copies those bytes in the export task.
    monkeypatch.setenv("DJ_PARALLEL_EXPORT_MIN_ROWS", "0")
    data = tmp_path / "in"
    for i in range(2):
        write_corpus(str(data / f"day1_{i}.jsonl"), 150, seed=i)
    texts = [json.loads(line)["text"] for i in range(2) for line in open(data / f"day1_{i}.jsonl")]
    recipe = tmp_path / "nightly.yaml"
    recipe.write_text(RECIPE.format(data=data, export=tmp_path / "out.jsonl", work=tmp_path / "work"))
    assert main(["run", str(recipe), "--job-id", "night1"]) == 0
    capsys.readouterr()
    write_growth_file(str(data / "day2_0.jsonl"), texts, 20, seed=7)
    assert main(["run", str(recipe), "--job-id", "night2", "--set", f"export_path={tmp_path / 'out2.jsonl'}"]) == 0
    printed = capsys.readouterr().out
    assert "reuse:  reused from night1: 4 of 5 partitions, " in printed and "; 1 computed" in printed
    summary = json.load(open(tmp_path / "work" / "night2" / "job_summary.json"))
    assert summary["reuse"]["partitions_reused"] == 4 and summary["reuse"]["source_jobs"] == ["night1"]
    assert summary["reuse"]["export_parts_reused"] == 4
    _why_is_the_same_in_both_nights(tmp_path / "work", capsys)
    scratch = ["--set", f"work_dir={tmp_path / 'scratch'}", "--set", f"export_path={tmp_path / 'scratch.jsonl'}"]
    assert main(["run", str(recipe), "--job-id", "scratch", *scratch]) == 0
    assert_same_bytes(_read(tmp_path / "out2.jsonl"), _read(tmp_path / "scratch.jsonl"))
    capsys.readouterr()
    assert main(["gc", "--work-dir", str(tmp_path / "work"), "--keep-last-n-jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "kept job night1 (reused by night2)" in out and "deleted 0 jobs' checkpoints" in out
    assert os.path.isdir(tmp_path / "work" / "night1" / "checkpoints" / "checkpoint_op_004_text_length_filter")


def _why_is_the_same_in_both_nights(work, capsys):
    """`dj-airflow why` on rows of the reused partitions: night 2 answers what night 1 answers (fate, op,
    statistic, the row a duplicate repeats, export row), from the lineage it copied with the reuse."""
    from airflow_provider_dj.engine.observe.lineage_query import JobLineage

    jl = JobLineage(str(work / "night1"))
    picked: dict[tuple, int] = {}
    for row in range(jl.parts[-1]["end_row"]):
        path = jl.path(row, texts=False)
        last = next((s for s in path.steps if s.fate not in ("kept", "changed")), None)
        picked.setdefault((path.fate, last.op_name if last else None), row)
    assert {("kept", None), ("duplicate", "document_deduplicator"), ("filtered", "words_num_filter")} <= set(picked)

    def why(job: str, row: int) -> list[dict]:
        capsys.readouterr()
        assert main(["why", job, "--row", str(row), "--work-dir", str(work), "--json"]) == 0
        [path] = json.loads(capsys.readouterr().out)
        assert "not recorded" not in {s["fate"] for s in path["steps"]}
        return [path["fate"], path["export_row"]] + [
            (s["op_name"], s["fate"], s["stat"], s["reason"], s["duplicate_of"], s["band"]) for s in path["steps"]
        ]

    for row in picked.values():
        assert why("night2", row) == why("night1", row)
