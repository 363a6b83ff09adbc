"""What a recipe DAG's task reports to OpenLineage, read from the job directory as plain values.

Why plain values and no OpenLineage import: the facts are the job's own (``job_summary.json``,
``partitioning_info.json``, the effective recipe, the history pin), read through the engine's
readers, and the tests compare them field by field with the summary whether or not the OpenLineage
client is installed.  ``lineage.py`` turns them into OpenLineage objects.

The funnel is the summary's: the written ``job_summary.json`` of a completed job, or of a failed or
stopped one when the caller reports that failure (the failing task's callback wrote it after the task
started); otherwise the view the monitor builds from checkpoint markers and events (status
``running``).  A failed summary left by an earlier try is stale once a cleared task runs again, and
nothing rewrites it until the job ends, so only the task that failed may report it.  Dataset names follow OpenLineage's naming conventions for files and object stores:
namespace ``file`` and the absolute path for a local file, ``<scheme>://<bucket>`` and the key for
an object store URL.  An input given as a directory or a glob is one dataset, named by its
directory, so a catalogue sees the same dataset night after night while the files in it change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.history.pin import read_pin
from airflow_provider_dj.engine.input.schema import sample_schema
from airflow_provider_dj.engine.input.sources import InputError, InputFile
from airflow_provider_dj.engine.job.summary import build_job_summary, read_job_summary
from airflow_provider_dj.engine.storage.context import JobContext

#: Input files sampled for the input's schema, first files first (a file without rows has none).
SCHEMA_SAMPLE_FILES = 3
_FUNNEL_KEYS = (
    ("op_index", "opIndex"),
    ("op_name", "opName"),
    ("rows_in", "rowsIn"),
    ("rows_out", "rowsOut"),
    ("filtered", "filtered"),
    ("duplicates", "duplicates"),
    ("failed", "failed"),
)


@dataclass(frozen=True)
class SchemaField:
    """One field of a dataset: its name, a type word, and the fields of an object."""

    name: str
    type: str
    fields: tuple[SchemaField, ...] = ()


@dataclass(frozen=True)
class DatasetFacts:
    """One OpenLineage dataset: where it is, by the naming conventions, and its fields (if read)."""

    namespace: str
    name: str
    fields: tuple[SchemaField, ...] = ()


@dataclass(frozen=True)
class ExportFacts:
    """The export file; rows and bytes once it is written (the summary's ``export`` section)."""

    dataset: DatasetFacts
    written: bool
    rows: int | None = None
    bytes: int | None = None


@dataclass(frozen=True)
class JobFacts:
    """One job as a task reports it: identity, the funnel so far, its input and export datasets."""

    job_id: str
    resume_token: str
    recipe_path: str | None
    status: str
    partitions_count: int
    input_rows: int
    history_version: int | None
    failed_samples: int
    failed_samples_by_op: dict[str, int]
    funnel: tuple[dict, ...]
    text_key: str
    #: (op name, op kind) in recipe order: the transformation of the export's text key.
    ops: tuple[tuple[str, str], ...]
    inputs: tuple[DatasetFacts, ...]
    export: ExportFacts
    summary: dict = field(repr=False, compare=False, default_factory=dict)


def dataset_name(path: str) -> tuple[str, str]:
    """(namespace, name) of a file or object-store path, by OpenLineage's naming conventions."""
    if storage.is_url(path):
        scheme, rest = path.split("://", 1)
        if scheme == "file":
            return "file", os.path.abspath(rest)
        bucket, _, key = rest.partition("/")
        return f"{scheme}://{bucket}", key.rstrip("/") or "/"
    return "file", os.path.abspath(path)


def input_location(dataset_path: str, files: list[str]) -> str:
    """The one path the input is known by: the file itself, or the directory of a directory or glob."""
    if len(files) == 1 and files[0] == dataset_path:
        return dataset_path
    for i, ch in enumerate(dataset_path):
        if ch in "*?[":
            return dataset_path[: dataset_path.rfind("/", 0, i) + 1].rstrip("/") or "/"
    return dataset_path.rstrip("/")


def _type_word(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    return str(t)


def schema_fields(schema: pa.Schema | pa.StructType | None) -> tuple[SchemaField, ...]:
    """A schema's fields as :class:`SchemaField`, objects with their own fields."""
    if schema is None:
        return ()
    out = []
    for f in schema:
        inner = schema_fields(f.type) if pa.types.is_struct(f.type) else ()
        out.append(SchemaField(f.name, _type_word(f.type), inner))
    return tuple(out)


def _file_of(described: dict) -> InputFile:
    return InputFile(
        path=described["path"],
        format=described.get("format", "jsonl"),
        compression=described.get("compression"),
        size=int(described.get("size", 0)),
    )


def input_fields(input_files: list[dict]) -> tuple[SchemaField, ...]:
    """The input's fields as the input check reads them: the first files' Parquet footers or first rows."""
    for described in input_files[:SCHEMA_SAMPLE_FILES]:
        try:
            sampled = sample_schema(_file_of(described))
        except (OSError, InputError):
            continue
        if not sampled.empty:
            return schema_fields(sampled.schema)
    return ()


def export_fields(path: str) -> tuple[SchemaField, ...]:
    """The written export's fields: its Parquet footer or its first JSONL rows; () when unreadable."""
    fmt = "parquet" if path.lower().endswith(".parquet") else "jsonl"
    try:
        sampled = sample_schema(InputFile(path=path, format=fmt, compression=None, size=storage.size(path)))
    except (OSError, InputError):
        return ()
    return schema_fields(sampled.schema)


def current_summary(job_dir: str, final_since: float | None = None) -> dict:
    """The written summary of a completed job, or of a failed or stopped one written at or after
    ``final_since`` (None: never); otherwise the running view built from the job directory."""
    written = read_job_summary(job_dir)
    if written and written.get("status") == "completed":
        return written
    if written and written.get("status") in ("failed", "stopped") and final_since is not None:
        if float(written.get("end_time") or 0) >= final_since:
            return written
    return build_job_summary(job_dir, "running")


def funnel(summary: dict) -> tuple[dict, ...]:
    """The summary's per-op totals, in the run facet's field names."""
    out = []
    for op in summary.get("ops", []):
        step = {camel: op.get(key, 0) for key, camel in _FUNNEL_KEYS}
        if "partitions_done" in op:
            step["partitionsDone"] = op["partitions_done"]
        out.append(step)
    return tuple(out)


def history_version(job_dir: str) -> int | None:
    """The dedup_history version the job pinned; None for a job without dedup_history."""
    try:
        return int(read_pin(job_dir)["version"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def _export_facts(summary: dict, export_path: str, with_schema: bool) -> ExportFacts:
    section = summary.get("export") or {}
    written = bool(section.get("written")) and "rows" in section
    path = section.get("path") or export_path
    namespace, name = dataset_name(path)
    # A sharded export's path is its manifest; the rows' fields are read from its first shard.
    shards = section.get("shards")
    schema_path = path if shards is None else (storage.join(storage.dirname(path), shards[0]["file"]) if shards else "")
    fields = export_fields(schema_path) if written and with_schema and schema_path else ()
    return ExportFacts(
        DatasetFacts(namespace, name, fields),
        written,
        rows=int(section["rows"]) if written else None,
        bytes=int(section["bytes"]) if written and "bytes" in section else None,
    )


def read_job_facts(job_dir: str, *, with_schema: bool = True, final_since: float | None = None) -> JobFacts:
    """The facts of the job in ``job_dir``, which validate has planned (effective config and partitions).

    ``with_schema``: sample the input's (and a written export's) fields, about 1 MiB read per file.
    ``final_since``: a failing task's start (epoch seconds): a failed or stopped summary written since
    then is this failure's and is reported as it is (see ``current_summary``)."""
    ctx = JobContext(job_dir)
    recipe, info = ctx.recipe, ctx.partitioning_info
    summary = current_summary(job_dir, final_since)
    files = info.get("input_files", [])
    location = input_location(info.get("dataset_path") or recipe.dataset_path, [f["path"] for f in files])
    in_namespace, in_name = dataset_name(location)
    return JobFacts(
        job_id=ctx.job_id,
        resume_token=(summary.get("resume_airflow_conf") or {}).get("resume", ctx.job_id),
        recipe_path=recipe.source_file,
        status=summary.get("status", "running"),
        partitions_count=len(info["partitions"]),
        input_rows=int(info["total_rows"]),
        history_version=history_version(job_dir),
        failed_samples=int(summary.get("failed_samples", 0)),
        failed_samples_by_op=dict(summary.get("failed_samples_by_op") or {}),
        funnel=funnel(summary),
        text_key=recipe.text_key,
        ops=tuple((op.name, op.kind) for op in ctx.plan.ops),
        inputs=(DatasetFacts(in_namespace, in_name, input_fields(files) if with_schema else ()),),
        export=_export_facts(summary, recipe.export_path, with_schema),
        summary=summary,
    )
