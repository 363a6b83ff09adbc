"""Per-row lineage: the exact fate of hand-made rows, and lineage after a crash and resume equal to a
clean run's.

Real engine, real files: jobs are prepared and run in-process (a whole job through
``run_prepared_job``; the crash test step by step), no Airflow, no Ray.  Every row of the input below has one known fate.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault
from airflow_provider_dj.engine.observe.lineage_query import JobLineage, RowNotFoundError, partition_lineage, why
from airflow_provider_dj.engine.runner.local import run_prepared_job
from tests.helpers_compare import assert_same_bytes

ROWS = [
    {"id": "a", "text": "mail me at bob@example.com about the plan"},  # 0: changed by op 0, kept
    {"id": "b", "text": "tiny"},  # 1: filtered by op 1 (1 word)
    {"id": "c", "text": "the same words appear here twice"},  # 2: kept
    {"id": "d", "text": None},  # 3: failed in op 0 (no text)
    {"id": "e", "text": "another\u2003fine sample with words"},  # 4: changed by op 3, kept
    {"id": "f", "text": "the same words appear here twice"},  # 5: duplicate of row 2 (op 2)
    {"id": "g", "text": "last row kept as is"},  # 6: kept
    {"id": "h", "text": "no"},  # 7: filtered by op 1
]
PROCESS = """process:
  - clean_email_mapper:
  - words_num_filter: {min_num: 3, max_num: 100}
  - document_deduplicator:
  - whitespace_normalization_mapper:
"""


def make_job(tmp_path, name, *, strategy="every_op"):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / name}.jsonl\nwork_dir: {tmp_path / 'work'}\n"
        f"partition: {{mode: manual, num_of_partitions: 2}}\ncheckpoint: {{strategy: {strategy}}}\n{PROCESS}"
    )
    return prepare_job(load_recipe(str(recipe)), job_id=name)


def run_all(job_dir, *, export=True):
    for p in range(2):
        run_segment(job_dir, 0, p)
    resolve_global_op(job_dir, 2)
    for p in range(2):
        run_segment(job_dir, 1, p)
    if export:
        export_job(job_dir)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lineage")
    job = make_job(tmp, "clean")
    run_prepared_job(job)
    return job.job_dir, tmp / "clean.jsonl"


def step(path, op_index):
    return path.steps[op_index]


def test_kept_rows_have_their_export_row(finished):
    job_dir, export = finished
    exported = [json.loads(line)["id"] for line in export.read_text().splitlines()]
    assert exported == ["a", "c", "e", "g"]
    for input_row, export_row in [(0, 0), (2, 1), (4, 2), (6, 3)]:
        [p] = why(job_dir, input_row=input_row)
        assert (p.fate, p.export_row) == ("kept", export_row)
        assert exported[export_row] == ROWS[input_row]["id"]
        [back] = why(job_dir, export_row=export_row)
        assert back.input_row == input_row


def test_the_one_why_names_a_kept_row_kept_with_its_export_row(finished):
    """`dj-airflow why`, the job view and client.explain answer through why_row: a row lineage followed
    into the export is `kept` (or `changed`, when an op rewrote it), never `not_found`."""
    from airflow_provider_dj.engine.observe.why import why_row

    job_dir, export = finished
    exported = [json.loads(line)["id"] for line in export.read_text().splitlines()]
    answer = why_row(job_dir, 6)  # no op changed it
    assert (answer["fate"], answer["export_row"]) == ("kept", 3)
    assert exported[answer["export_row"]] == ROWS[6]["id"]
    assert answer["reason"] == "kept: export row 3"
    changed = why_row(job_dir, 0)  # clean_email_mapper rewrote it, then it was kept
    assert (changed["fate"], changed["export_row"]) == ("changed", 0)
    assert why_row(job_dir, 1)["fate"] not in ("kept", "not_found")  # a removed row keeps its removal


def test_changed_by_which_op_with_text_before_and_after(finished):
    job_dir, _ = finished
    [p] = why(job_dir, input_row=0)
    assert [s.fate for s in p.steps] == ["changed", "kept", "kept", "kept"]
    assert step(p, 0).before == ROWS[0]["text"] and "bob@example.com" not in step(p, 0).after
    [p] = why(job_dir, input_row=4)
    assert [s.fate for s in p.steps] == ["kept", "kept", "kept", "changed"]
    assert step(p, 3).before == ROWS[4]["text"] and step(p, 3).after == "another fine sample with words"
    [p] = why(job_dir, input_row=6)
    assert [s.fate for s in p.steps] == ["kept"] * 4


def test_filtered_by_which_op_with_its_statistic(finished):
    job_dir, _ = finished
    for row in (1, 7):
        [p] = why(job_dir, input_row=row)
        assert p.fate == "filtered" and p.export_row is None
        s = step(p, 1)
        assert (s.fate, s.op_name, s.stat) == ("filtered", "words_num_filter", 1.0)
        assert "num_words 1 outside max_num=100, min_num=3" in s.reason
        assert [x.fate for x in p.steps[2:]] == ["not run", "not run"]


def test_duplicate_names_the_row_it_repeats(finished):
    job_dir, _ = finished
    [p] = why(job_dir, input_row=5)
    s = step(p, 2)
    assert (p.fate, s.fate, s.duplicate_of) == ("duplicate", "duplicate", 2)
    assert "duplicate of input row 2" in s.reason


def test_failed_with_the_reason(finished):
    job_dir, _ = finished
    [p] = why(job_dir, input_row=3)
    s = step(p, 0)
    assert (p.fate, s.fate, s.op_name) == ("failed", "failed", "clean_email_mapper")
    assert s.reason.startswith("MissingFieldError: field 'text' is missing or null")


def test_where_field_value_and_bad_questions(finished):
    job_dir, _ = finished
    assert [p.input_row for p in why(job_dir, where="text=the same words appear here twice")] == [2, 5]
    assert [p.input_row for p in why(job_dir, where="id=g")] == [6]
    with pytest.raises(RowNotFoundError, match="no input row has id = 'zz'"):
        why(job_dir, where="id=zz")
    with pytest.raises(RowNotFoundError, match="past the export's end \\(4 rows\\)"):
        why(job_dir, export_row=4)
    with pytest.raises(RowNotFoundError, match="input row 8 is not in this job's input"):
        why(job_dir, input_row=8)


def test_lineage_is_a_few_bytes_per_row_and_adds_no_column(finished):
    job_dir, export = finished
    # Only rows something happened to have an entry: 6 of 8 here (0, 1, 3, 4, 5, 7).
    rows = sorted(
        r
        for p in range(2)
        for r in partition_lineage(job_dir, JobLineage(job_dir).parts[p], JobLineage(job_dir).plan)
        .table.column("input_row")
        .to_pylist()
    )
    assert rows == [0, 1, 3, 4, 5, 7]
    assert all(set(json.loads(line)) == {"id", "text"} for line in export.read_text().splitlines())


def test_running_job_answers_up_to_its_last_commit(tmp_path):
    job = make_job(tmp_path, "half")
    run_segment(job.job_dir, 0, 0)  # partition 0 done with segment 0; nothing else ran
    [p] = why(job.job_dir, input_row=1)
    assert p.fate == "filtered"  # committed in segment 0
    [p] = why(job.job_dir, input_row=0)
    assert p.fate == "in_progress" and p.note == "partition 0 has committed up to op 1"
    assert [s.fate for s in p.steps] == ["changed", "kept", "not committed yet", "not committed yet"]
    [p] = why(job.job_dir, input_row=6)
    assert p.fate == "in_progress" and p.note == "partition 1 has committed no op yet"
    with pytest.raises(RowNotFoundError, match="partition 0 has not committed its final op"):
        why(job.job_dir, export_row=0)


def _all_lineage(job_dir):
    jl = JobLineage(job_dir)
    return [jl.of(p["partition_id"]).table for p in jl.parts]


@pytest.mark.parametrize("strategy", ["every_op", "disabled"])
def test_crash_then_resume_gives_the_clean_runs_lineage(tmp_path, finished, strategy):
    clean_dir, _ = finished
    job = make_job(tmp_path, f"crash_{strategy}", strategy=strategy)
    # Crash partition 1 after op 0 (every_op: its checkpoint committed, the resume starts after it)
    # and after the last op of segment 1 before the segment ends.
    faults = [
        {"point": "after_op", "partition_id": 1, "op_index": 0, "times": 1, "kind": "raise"},
        {"point": "op_start", "partition_id": 0, "op_index": 3, "times": 1, "kind": "raise"},
    ]
    (tmp_path / "work" / job.job_id / FAULT_FILE).write_text(json.dumps(faults))
    run_segment(job.job_dir, 0, 0)
    with pytest.raises(InjectedFault):
        run_segment(job.job_dir, 0, 1)
    run_segment(job.job_dir, 0, 1)
    resolve_global_op(job.job_dir, 2)
    with pytest.raises(InjectedFault):
        run_segment(job.job_dir, 1, 0)
    run_segment(job.job_dir, 1, 0)
    run_segment(job.job_dir, 1, 1)
    export_job(job.job_dir)
    for got, want in zip(_all_lineage(job.job_dir), _all_lineage(clean_dir)):
        key = ["op_index", "input_row"]
        assert got.sort_by([(k, "ascending") for k in key]).equals(want.sort_by([(k, "ascending") for k in key]))
    # Texts come from the checkpoints, which a disabled strategy does not keep: compare the fates.
    got, want = JobLineage(job.job_dir), JobLineage(clean_dir)
    assert [got.path(r, texts=False) for r in range(8)] == [want.path(r, texts=False) for r in range(8)]


def test_off_switch_records_nothing_and_the_export_is_the_same_bytes(tmp_path, monkeypatch, finished):
    from airflow_provider_dj import settings

    monkeypatch.setenv("DJ_LINEAGE", "0")
    settings.reset()
    try:
        job = make_job(tmp_path, "off")
        run_all(job.job_dir)
    finally:
        monkeypatch.delenv("DJ_LINEAGE")
        settings.reset()
    assert not (tmp_path / "work" / "off" / "lineage").exists()
    assert [t.num_rows for t in _all_lineage(job.job_dir)] == [0, 0]
    assert_same_bytes((tmp_path / "off.jsonl").read_bytes(), finished[1].read_bytes())
