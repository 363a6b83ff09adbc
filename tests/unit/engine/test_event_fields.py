"""Every event a job writes is declared (engine/jobdir/events.py's ``EVENT_FIELDS``) and carries its declared
fields: checked on the job directories of real runs in this process, a global op, rows set aside under
skip_op_error, a crash and a resume, and a review gate."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.jobdir.events import COMMON_FIELDS, EVENT_FIELDS, TASK_FIELDS, read_events
from airflow_provider_dj.engine.jobdir.layout import FAULT_FILE
from airflow_provider_dj.ops import registry
from airflow_provider_dj.ops.base import ROW_ERROR_COLUMN, Mapper
from tests.unit.engine.recipe_helpers import small_recipe


class RaisingMapper(Mapper):
    """Fails every batch: without skip_op_error the op, its partition and the job fail."""

    name = "raising_mapper_for_event_tests"

    def process_table(self, table: pa.Table) -> pa.Table:
        raise ValueError("broken for the test")


class SetAsideMapper(Mapper):
    """Flags every row whose text length is a multiple of 11: a failed row, set aside with its reason."""

    name = "set_aside_mapper_for_event_tests"

    def process_table(self, table: pa.Table) -> pa.Table:
        bad = [t is not None and len(t) % 11 == 0 for t in table.column("text").to_pylist()]
        errors = pa.array(["InvalidAnswer: length" if b else None for b in bad], pa.string())
        return table.append_column(ROW_ERROR_COLUMN, errors)


PROCESS = (
    "  - whitespace_normalization_mapper\n"
    "  - set_aside_mapper_for_event_tests\n"
    "  - document_deduplicator\n"
    "  - lowercase_mapper\n"
)


@pytest.fixture
def set_aside_op(monkeypatch):
    registry.op_names()  # the built-in ops, loaded on first use
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register(SetAsideMapper)
    registry.register(RaisingMapper)


def _violations(job_dir: str) -> tuple[list[str], set[str]]:
    problems, seen = [], set()
    for ev in read_events(job_dir):
        kind = ev.get("event_type")
        seen.add(kind)
        spec = EVENT_FIELDS.get(kind)
        if spec is None:
            problems.append(f"undeclared event type {kind!r}: {ev}")
            continue
        missing = spec.required - ev.keys()
        extra = ev.keys() - COMMON_FIELDS - TASK_FIELDS - spec.required - spec.optional
        if missing or extra:
            problems.append(f"{kind}: missing {sorted(missing)}, undeclared {sorted(extra)}")
    return sorted(set(problems)), seen


def test_events_of_a_crashed_and_resumed_job_are_declared(tmp_path, set_aside_op):
    recipe = small_recipe(tmp_path, "events", PROCESS, rows=120)
    with open(recipe, "a", encoding="utf-8") as fh:
        fh.write("skip_op_error: true\ncheckpoint:\n  strategy: every_op\n")
    job_dir = tmp_path / "work" / "crashed"
    job_dir.mkdir(parents=True)
    (job_dir / FAULT_FILE).write_text(
        json.dumps([{"point": "after_op", "partition_id": 1, "op_index": 1, "times": 1, "kind": "raise"}])
    )
    with pytest.raises(Exception):  # noqa: B017 - the injected fault, however the runner wraps it
        run_job(recipe, job_id="crashed", workers=1)
    run_job(recipe, job_id="crashed", workers=1, resume="crashed")
    problems, seen = _violations(str(job_dir))
    assert problems == [], "\n".join(problems)
    expected = {
        "job_start",
        "job_failed",
        "job_complete",
        "partition_start",
        "partition_resume",
        "partition_complete",
        "op_start",
        "op_complete",
        "checkpoint_save",
        "checkpoint_load",
        "global_op_start",
        "global_op_complete",
        "validation_step",
        "export_start",
        "export_complete",
    }
    assert expected <= seen, sorted(expected - seen)
    set_aside = [e for e in read_events(str(job_dir), "op_complete") if e.get("failed")]
    assert set_aside, "no rows were set aside: the skip_op_error path was not exercised"


def test_events_of_a_reviewed_job_are_declared(tmp_path, set_aside_op):
    recipe = small_recipe(tmp_path, "reviewed", PROCESS, rows=80)
    with open(recipe, "a", encoding="utf-8") as fh:
        fh.write("review:\n  max_removed_fraction: 0.01\n")
    run_job(recipe, job_id="reviewed", workers=1, review=lambda review: True)
    problems, seen = _violations(str(tmp_path / "work" / "reviewed"))
    assert problems == [], "\n".join(problems)
    assert {"review_decided", "review_answered", "execution_planning", "plan_created"} <= seen


def test_events_of_a_failed_op_are_declared(tmp_path, set_aside_op):
    recipe = small_recipe(tmp_path, "failing", "  - lowercase_mapper\n  - raising_mapper_for_event_tests\n", rows=40)
    with open(recipe, "a", encoding="utf-8") as fh:
        fh.write("skip_op_error: false\n")
    with pytest.raises(Exception):  # noqa: B017 - the op's error, however the runner wraps it
        run_job(recipe, job_id="failing", workers=1)
    problems, seen = _violations(str(tmp_path / "work" / "failing"))
    assert problems == [], "\n".join(problems)
    assert {"op_failed", "partition_failed", "job_failed"} <= seen
