"""jobdir/layout.py owns the job directory's names: each is declared once, and the modules use those."""

from __future__ import annotations

from airflow_provider_dj.engine.jobdir import layout, lock, stop_control
from airflow_provider_dj.engine.observe import tracer
from airflow_provider_dj.engine.output import parts
from airflow_provider_dj.ops.llm import call_record


def _names() -> dict[str, str]:
    return {k: v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)}


def test_every_path_of_the_layout_is_distinct():
    names = _names()
    assert len(names) >= 20
    clashes = {v: [k for k, w in names.items() if w == v] for v in names.values()}
    # one value, two names, is allowed only for the relative-part names inside different parents
    assert {v: ks for v, ks in clashes.items() if len(ks) > 1} == {}


def test_the_modules_use_the_layout_names():
    assert lock.LOCK_REL == layout.RUNNER_LOCK == "metadata/runner.lock"
    assert "/".join(stop_control.STOP_FILE) == layout.STOP_REQUEST
    assert parts.PARTS_DIR == layout.EXPORT_PARTS_DIR == "export_parts"
    assert (tracer.TRACE_DIR, tracer.PARTS_DIR, tracer.REPORT_FILE) == ("trace", "parts", "trace_report.json")


def test_the_llm_call_record_directory_is_the_one_the_layout_names():
    """ops/ may not import the engine, so the op keeps its own constant: this keeps the two equal."""
    assert call_record.RECORD_DIR == layout.LLM_CALLS_DIR
