""" "Why is input row N not in my export?" — the job view's look-up, behind one seam.

The page calls :func:`why_row` only.  Until per-row lineage exists
(``lineage/`` in the job directory, the ``dj-airflow why`` command), the
answer comes from what every job writes today:

* ``failed/op_<i>_<op>/partition_<p>.jsonl``: the row an op could not
  process, with the error (every failed row is there, none is sampled);
* the tracer, when ``open_tracer`` is on: per-partition candidates under
  ``trace/parts/`` (written as each partition runs, so a failed job has
  them), and the merged ``trace/sample_trace-<op>.jsonl`` /
  ``trace/duplicate-<op>.jsonl``.  The tracer keeps only the first
  ``trace_num`` entries per op, so a row it did not keep is "not traced",
  never "kept".

Per-row lineage (``lineage/``, ``engine/observe/lineage_query.row_lookup``) answers first: every
filtered, duplicate or changed row, and a kept row's export row.  A failed row is left to
``failed/``, which holds the sample itself; a job without lineage (older, or ``DJ_LINEAGE=0``) gets
the trace look-up.  :func:`set_row_lookup` installs another ``(job_dir, input_row) -> dict | None``
in the shape :func:`trace_lookup` returns (``None``: no record, the trace look-up answers).
"""

from __future__ import annotations

import json
from typing import Callable

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.layout import TRACE_DIR
from airflow_provider_dj.engine.observe.lineage_query import RowNotFoundError
from airflow_provider_dj.engine.observe.lineage_query import row_lookup as lineage_lookup
from airflow_provider_dj.engine.observe.tracer import candidate_path, trace_file_name
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.ops.columns import (
    FAILED_ERROR_COLUMN,
    FAILED_ERROR_TYPE_COLUMN,
    INPUT_ROW_COLUMN,
    STATS_COLUMN,
)
from airflow_provider_dj.plugins.job_data import _failed_files

INPUT_ROW = INPUT_ROW_COLUMN
#: Fates a look-up may name.  ``not_found``: no record says the row was removed (it was kept, or the
#: tracer did not keep it: only the first ``trace_num`` removals per op are traced).
FATES = ("failed", "filtered", "duplicate", "changed", "not_found")

RowLookup = Callable[[str, int], "dict | None"]


class RowOutOfRangeError(DJError, LookupError):
    """The job's input has no such row (the job view answers 404 naming it)."""


def _sample(row: dict) -> dict:
    return {k: v for k, v in row.items() if not str(k).startswith("__dj__") or k == STATS_COLUMN}


def _reason(row: dict) -> str:
    kind, err = row.get(FAILED_ERROR_TYPE_COLUMN), str(row.get(FAILED_ERROR_COLUMN))
    return err if not kind or err.startswith(str(kind)) else f"{kind}: {err}"


def _partition_of(job_dir: str, input_row: int) -> dict:
    for p in JobContext(job_dir).partitioning_info["partitions"]:
        if p["start_row"] <= input_row < p["end_row"]:
            return p
    raise RowOutOfRangeError(f"input row {input_row} is not in this job's input")


def trace_lookup(job_dir: str, input_row: int) -> dict:
    """The row's fate from ``failed/`` and the tracer's files; see the module docstring."""
    part = _partition_of(job_dir, input_row)
    pid = part["partition_id"]
    base = {
        "input_row": input_row,
        "partition_id": pid,
        "partition_label": f"p{pid} rows {part['start_row']}-{part['end_row'] - 1}",
    }
    for op_index, op_name, path in _failed_files(job_dir, pid):
        for line in storage.read_bytes(path).splitlines():
            if line.strip():
                row = json.loads(line)
                if row.get(INPUT_ROW) == input_row:
                    return dict(
                        base,
                        fate="failed",
                        op_index=op_index,
                        op_name=op_name,
                        reason=_reason(row),
                        sample=_sample(row),
                        source=path[len(job_dir) :].lstrip("/") if path.startswith(job_dir) else path,
                    )
    plan = JobContext(job_dir).plan
    changed: dict | None = None
    for op in plan.ops:
        if op.is_global:
            hit = _duplicate_hit(job_dir, plan, op, input_row)
            if hit:
                return dict(base, **hit)
            continue
        try:
            doc = json.loads(storage.read_bytes(candidate_path(job_dir, op.index, op.name, pid)))
        except (FileNotFoundError, ValueError):
            continue
        for entry in doc.get("entries", []):
            if entry.get(INPUT_ROW) != input_row:
                continue
            if doc.get("kind") == "filter":
                return dict(
                    base,
                    fate="filtered",
                    op_index=op.index,
                    op_name=op.name,
                    reason=f"{op.name} removed it; its stats: {json.dumps(entry.get(STATS_COLUMN), default=str)}",
                    sample=_sample(entry),
                    source=f"{TRACE_DIR}/parts (op {op.index})",
                )
            if changed is None:
                changed = dict(
                    base,
                    fate="changed",
                    op_index=op.index,
                    op_name=op.name,
                    reason=f"{op.name} changed its text (the row was kept)",
                    sample={"original_text": entry.get("original_text"), "processed_text": entry.get("processed_text")},
                    source=f"{TRACE_DIR}/parts (op {op.index})",
                )
    if changed is not None:
        return changed
    return dict(
        base,
        fate="not_found",
        reason=(
            "no record says this row was removed: it was kept, or removed beyond the tracer's first trace_num "
            "entries per op (turn open_tracer on, or raise trace_num, to see more)"
        ),
    )


def _duplicate_hit(job_dir: str, plan, op, input_row: int) -> dict | None:
    path = storage.join(job_dir, TRACE_DIR, trace_file_name(plan, op.index))
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    for line in data.splitlines():
        if not line.strip():
            continue
        pair = json.loads(line)
        dup2 = pair.get("dup2") or {}
        if dup2.get(INPUT_ROW) == input_row:
            dup1 = pair.get("dup1") or {}
            kept = dup1.get(INPUT_ROW)
            return {
                "fate": "duplicate",
                "op_index": op.index,
                "op_name": op.name,
                "reason": f"{op.name} removed it as a duplicate of input row {kept}",
                "duplicate_of": kept,
                "sample": _sample(dup2),
                "source": f"{TRACE_DIR}/{trace_file_name(plan, op.index)}",
            }
    return None


def _lineage_first(job_dir: str, input_row: int) -> dict | None:
    try:
        found = lineage_lookup(job_dir, input_row)
    except RowNotFoundError:
        return None  # out of range: the trace look-up raises the job view's RowOutOfRangeError
    return None if found is None or found["fate"] == "failed" else found  # failed/ has the sample itself


_lookup: RowLookup | None = _lineage_first


def set_row_lookup(fn: RowLookup | None) -> None:
    """Install another look-up before the trace look-up (None restores the lineage look-up)."""
    global _lookup
    _lookup = fn if fn is not None else _lineage_first


def why_row(job_dir: str, input_row: int) -> dict:
    """The fate of one input row: lineage first when installed, else failed samples and the tracer."""
    if isinstance(input_row, bool) or not isinstance(input_row, int) or input_row < 0:
        raise RowOutOfRangeError(f"input row must be an integer >= 0, got {input_row!r}")
    if _lookup is not None:
        found = _lookup(job_dir, input_row)
        if found is not None:
            return found
    return trace_lookup(job_dir, input_row)
