"""Why is a row not in the export: the one answer the CLI, the Python API and the job view give.

Three sources, asked in this order:

1. per-row lineage (``lineage/``, ``observe/lineage_query.py``): every filtered, duplicate and
   changed row, and a kept row's export row.  A failed row is left to ``failed/``, which holds the
   sample itself;
2. ``failed/op_<i>_<op>/partition_<p>.jsonl``: every row an op could not process, with the error;
3. the tracer, when ``open_tracer`` is on: the first ``trace_num`` changed, filtered and duplicate
   rows per op (per-partition candidates under ``trace/parts/``, the merged duplicate pairs), so a row
   the tracer did not keep is "not traced", never "kept".

A job without lineage (an older one, or recording off) is answered from 2 and 3.  Each answer is a
dict: ``input_row``, ``partition_id``, ``partition_label``, ``fate`` (one of :data:`FATES`),
``op_index``, ``op_name``, ``reason``, ``sample``, ``source`` (and ``export_row`` for a kept or changed
row that lineage followed into the export); where lineage has the row, ``path``
holds its whole path op by op (``RowPath.to_dict()``).
"""

from __future__ import annotations

import json

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.layout import TRACE_DIR, failed_file
from airflow_provider_dj.engine.observe.lineage_query import JobLineage, RowNotFoundError, row_lookup
from airflow_provider_dj.engine.observe.tracer import candidate_path, trace_file_name
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN, STATS_COLUMN

#: ``kept``: lineage followed the row through every op into the export (``export_row`` names its row
#: there; a ``changed`` row is kept too, and names it the same way).  ``not_found``: no record says
#: what became of the row (a job without lineage where the tracer did not keep it: only the first
#: ``trace_num`` removals per op are traced; or an op not committed yet).
FATES = ("failed", "filtered", "duplicate", "changed", "kept", "not_found")

__all__ = ["FATES", "RowNotFoundError", "RowOutOfRangeError", "explain", "failed_sample_files", "why_row"]


class RowOutOfRangeError(DJError, LookupError):
    """The job's input has no such row (the job view answers 404 naming it)."""


def explain(
    job_dir: str, *, input_row: int | None = None, export_row: int | None = None, where: str | None = None
) -> list[dict]:
    """The answers for the rows asked for: one input row, one export row, or every row with FIELD=VALUE.

    An export row or a field value is found through lineage; an input row is answered from any source.
    Raises ``RowNotFoundError`` (a subclass of ``LookupError``) naming what was not found."""
    if sum(x is not None for x in (input_row, export_row, where)) != 1:
        raise ValueError("ask for exactly one of input_row, export_row, where")
    if input_row is not None:
        rows = [input_row]
    elif export_row is not None:
        rows = [JobLineage(job_dir).input_row_of_export_row(export_row)]
    else:
        assert where is not None  # exactly one of the three was given (checked above)
        name, sep, value = where.partition("=")
        if not sep or not name:
            raise RowNotFoundError(f"--where {where!r}: write FIELD=VALUE, e.g. --where id=doc-17")
        rows = JobLineage(job_dir).input_rows_where(name, value)
        if not rows:
            raise RowNotFoundError(f"no input row has {name} = {value!r}")
    return [why_row(job_dir, r, with_path=True) for r in rows]


def why_row(job_dir: str, input_row: int, *, with_path: bool = False) -> dict:
    """The fate of one input row (see the module docstring); ``with_path`` adds lineage's whole path."""
    if isinstance(input_row, bool) or not isinstance(input_row, int) or input_row < 0:
        raise RowOutOfRangeError(f"input row must be an integer >= 0, got {input_row!r}")
    answer = _from_lineage(job_dir, input_row)
    if answer is None:
        answer = _from_failed_samples(job_dir, input_row) or _from_tracer(job_dir, input_row)
    if with_path:
        path = _lineage_path(job_dir, input_row)
        if path is not None:
            answer["path"] = path
    return answer


def failed_sample_files(job_dir: str, partition_id: int | None) -> list[tuple[int, str, str]]:
    """(op_index, op_name, path) of the failed-sample files, in op order, for one partition or all."""
    ctx = JobContext(job_dir)
    pids = (
        [partition_id] if partition_id is not None else [p["partition_id"] for p in ctx.partitioning_info["partitions"]]
    )
    out = []
    for op in ctx.plan.ops:
        for pid in pids:
            path = storage.join(job_dir, failed_file(op.index, op.name, pid))
            if storage.exists(path):
                out.append((op.index, op.name, path))
    return out


def _from_lineage(job_dir: str, input_row: int) -> dict | None:
    try:
        found = row_lookup(job_dir, input_row)
    except RowNotFoundError:
        return None  # out of range: the next sources raise RowOutOfRangeError naming it
    return None if found is None or found["fate"] == "failed" else found  # failed/ has the sample itself


def _lineage_path(job_dir: str, input_row: int) -> dict | None:
    jl = JobLineage(job_dir)
    try:
        pid = jl.partition_of(input_row)["partition_id"]
    except RowNotFoundError:
        return None
    if jl.of(pid).last_op is None:
        return None
    return jl.path(input_row).to_dict()


def _sample(row: dict) -> dict:
    return {k: v for k, v in row.items() if not str(k).startswith("__dj__") or k == STATS_COLUMN}


def _reason(row: dict) -> str:
    kind, err = row.get("__dj__error_type__"), str(row.get("__dj__error__"))
    return err if not kind or err.startswith(str(kind)) else f"{kind}: {err}"


def _base(job_dir: str, input_row: int) -> dict:
    for p in JobContext(job_dir).partitioning_info["partitions"]:
        if p["start_row"] <= input_row < p["end_row"]:
            pid = p["partition_id"]
            return {
                "input_row": input_row,
                "partition_id": pid,
                "partition_label": f"p{pid} rows {p['start_row']}-{p['end_row'] - 1}",
            }
    raise RowOutOfRangeError(f"input row {input_row} is not in this job's input")


def _from_failed_samples(job_dir: str, input_row: int) -> dict | None:
    base = _base(job_dir, input_row)
    for op_index, op_name, path in failed_sample_files(job_dir, base["partition_id"]):
        for line in storage.read_bytes(path).splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get(INPUT_ROW_COLUMN) == input_row:
                return dict(
                    base,
                    fate="failed",
                    op_index=op_index,
                    op_name=op_name,
                    reason=_reason(row),
                    sample=_sample(row),
                    source=path[len(job_dir) :].lstrip("/") if path.startswith(job_dir) else path,
                )
    return None


def _from_tracer(job_dir: str, input_row: int) -> dict:
    base = _base(job_dir, input_row)
    plan = JobContext(job_dir).plan
    changed: dict | None = None
    for op in plan.ops:
        if op.is_global:
            hit = _duplicate_hit(job_dir, plan, op, input_row)
            if hit:
                return dict(base, **hit)
            continue
        found = _traced_entry(job_dir, op, base["partition_id"], input_row)
        if found is None:
            continue
        kind, entry = found
        source = f"{TRACE_DIR}/parts (op {op.index})"
        if kind == "filter":
            stats = json.dumps(entry.get(STATS_COLUMN), default=str)
            return dict(
                base,
                fate="filtered",
                op_index=op.index,
                op_name=op.name,
                reason=f"{op.name} removed it; its stats: {stats}",
                sample=_sample(entry),
                source=source,
            )
        if changed is None:
            changed = dict(
                base,
                fate="changed",
                op_index=op.index,
                op_name=op.name,
                reason=f"{op.name} changed its text (the row was kept)",
                sample={"original_text": entry.get("original_text"), "processed_text": entry.get("processed_text")},
                source=source,
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


def _traced_entry(job_dir: str, op, partition_id: int, input_row: int) -> tuple[str, dict] | None:
    """(kind, entry) of the row in the op's per-partition tracer candidates, or None."""
    try:
        doc = json.loads(storage.read_bytes(candidate_path(job_dir, op.index, op.name, partition_id)))
    except (FileNotFoundError, ValueError):
        return None
    for entry in doc.get("entries", []):
        if entry.get(INPUT_ROW_COLUMN) == input_row:
            return doc.get("kind"), entry
    return None


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
        if dup2.get(INPUT_ROW_COLUMN) == input_row:
            kept = (pair.get("dup1") or {}).get(INPUT_ROW_COLUMN)
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
