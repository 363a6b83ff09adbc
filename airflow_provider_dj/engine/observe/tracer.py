"""The tracer: a few examples of what each op did, deterministic under any partitioning.

Data-Juicer's tracer (``open_tracer``) writes, per op, the first samples the
op changed (mappers), removed (filters) or found duplicated (deduplicators).
Its collector is one shared object, so "the first N" means "the first N some
worker happened to report", and its partitioned executor does not trace at
all.  Here many tasks on many nodes process partitions in any order, so the
tracer works in two steps:

1. **Per partition** (``PartitionTracer.observe``, called by the segment
   runner right after an op ran): keep at most ``trace_num`` candidates per
   op, the first in the partition's input order, and write them atomically
   to ``trace/parts/op_<i>_<op>/partition_<p>.json`` *before* any checkpoint
   after that op is committed.  So a partition later resumed from that
   checkpoint (which skips the op) already has its candidates on disk.
   A partition stops at ``trace_num``: no partition ever needs more, since
   the merged file holds only ``trace_num`` entries.  Partitions cannot
   cheaply know whether earlier partitions already found enough, so each
   keeps its own first ``trace_num``; that bounded over-collection is what
   makes the result independent of which partition finished first.
2. **Merge** (``merge_traces``, at export or on demand): read the candidates
   in partition order — partitions are consecutive row ranges, so partition
   order is input order — and keep the first ``trace_num`` by input row
   (``__dj__input_row__``).  The result equals what a single process tracing
   the whole input in order would write, for 1 partition or 100.

Deduplicators are traced in the global phase (``write_duplicate_trace``),
the only place that knows what each removed row duplicates: it picks the first
``trace_num`` removed duplicates in input order (one per distinct key) and
reads the two rows of each pair lazily from the partitions' checkpoints.  A
step in key shards picks the same pairs from its mask tasks' first
``trace_num`` per partition and writes them through the same
``write_duplicate_pairs`` (docs/global_steps.md).

With ``open_tracer: false`` nothing here runs: ``tracer_for_partition``
returns None and the runner skips the call (no extra column pass).

File formats follow Data-Juicer 1.6.1 where it makes sense:
``sample_trace-<op>.jsonl`` with ``original_text``/``processed_text`` (plus
``trace_keys`` fields, first) for mappers, the removed sample with its
``__dj__stats__`` for filters, ``duplicate-<op>.jsonl`` with ``dup1`` (the
kept first occurrence) and ``dup2`` (the removed duplicate) for
deduplicators.  Every entry also carries ``__dj__input_row__`` so a person
can find the row in the input.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.integrity import file_problem, file_seal, json_seal_problem, seal_json
from airflow_provider_dj.engine.jobdir.layout import (
    TRACE_DIR,
    TRACE_PARTS_DIR,
    TRACE_REPORT,
    op_dir_name,
    partition_name,
)
from airflow_provider_dj.engine.storage.global_op_state import KEYS_COLUMN
from airflow_provider_dj.engine.storage.resume_point import read_input_rows
from airflow_provider_dj.ops.base import SignatureDeduplicator
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN

log = logging.getLogger(__name__)

PARTS_DIR = TRACE_PARTS_DIR
INPUT_ROW = INPUT_ROW_COLUMN  # every entry names its input row
REPORT_FILE = TRACE_REPORT


# -- settings ----------------------------------------------------------------
@dataclass(frozen=True)
class TraceSettings:
    trace_num: int
    trace_keys: tuple[str, ...]
    op_names: frozenset[str]  # empty = every op

    @classmethod
    def from_recipe(cls, recipe) -> "TraceSettings | None":
        t = recipe.tracer
        if not t.open_tracer:
            return None
        return cls(int(t.trace_num), tuple(t.trace_keys), frozenset(t.op_list_to_trace))

    def traces(self, op_name: str) -> bool:
        return not self.op_names or op_name in self.op_names

    def signature(self) -> dict:
        """What a candidate file must have been written under to be merged."""
        return {"trace_num": self.trace_num, "trace_keys": list(self.trace_keys)}


def _dumps(obj) -> bytes:
    def default(o):
        if isinstance(o, (bytes, bytearray)):
            return o.decode("utf-8", errors="replace")
        return str(o)

    return orjson.dumps(obj, default=default)


def trace_file_name(plan, op_index: int) -> str:
    """``sample_trace-<op>.jsonl`` / ``duplicate-<op>.jsonl`` as Data-Juicer names them.

    An op name used more than once in ``process`` gets ``-op<index>`` on its
    later occurrences, so two whitespace mappers never overwrite each other."""
    op = plan.ops[op_index]
    prefix = "duplicate" if op.is_global else "sample_trace"
    first = next(o.index for o in plan.ops if o.name == op.name)
    suffix = "" if first == op_index else f"-op{op_index}"
    return f"{prefix}-{op.name}{suffix}.jsonl"


def parts_dir(job_dir: str, op_index: int, op_name: str) -> str:
    return storage.join(job_dir, TRACE_DIR, PARTS_DIR, op_dir_name(op_index, op_name))


def candidate_path(job_dir: str, op_index: int, op_name: str, partition_id: int) -> str:
    return storage.join(parts_dir(job_dir, op_index, op_name), f"{partition_name(partition_id)}.json")


# -- step 1: per partition -----------------------------------------------------
def _changed_mask(before: pa.ChunkedArray, after: pa.ChunkedArray) -> pa.ChunkedArray:
    if before.type != after.type:
        after = after.cast(before.type)
    differ = pc.fill_null(pc.not_equal(before, after), False)
    return pc.or_(differ, pc.xor(pc.is_null(before), pc.is_null(after)))


def _first(table: pa.Table, mask, n: int) -> pa.Table:
    idx = pc.indices_nonzero(mask) if isinstance(mask, pa.Array) else pc.indices_nonzero(mask.combine_chunks())
    return table.take(idx.slice(0, n))


class PartitionTracer:
    """Trace candidates of one partition; one instance per ``run_segment`` call."""

    def __init__(self, job_dir: str, partition_id: int, partition_hash: str, settings: TraceSettings, plan) -> None:
        self.job_dir = job_dir
        self.partition_id = partition_id
        self.partition_hash = partition_hash
        self.settings = settings
        self.plan = plan

    def observe(self, op_index: int, op, before: pa.Table, outcome) -> int | None:
        """Record the op's first ``trace_num`` changed/removed rows; returns how many (None = not traced)."""
        if not self.settings.traces(op.name) or op.kind not in ("mapper", "filter"):
            return None
        after = outcome.table
        n = self.settings.trace_num
        if op.kind == "mapper":
            entries = self._mapper_entries(op, before, after, n)
        else:
            entries = self._filter_entries(op, before, after, outcome.failed_rows, n)
        doc = {
            "op_index": op_index,
            "op_name": op.name,
            "kind": op.kind,
            "partition_id": self.partition_id,
            "partition_hash": self.partition_hash,
            "pipeline_fingerprint": self.plan.ops[op_index].fingerprint,
            **self.settings.signature(),
            "entries": entries,
        }
        sealed = orjson.loads(_dumps(doc))  # the checksum covers the JSON as a reader will parse it back
        seal_json(sealed)
        storage.atomic_write_bytes(
            candidate_path(self.job_dir, op_index, op.name, self.partition_id),
            _dumps(sealed),
            what=f"the trace candidates of op {op_index} ({op.name}) partition {self.partition_id}",
        )
        return len(entries)

    def _mapper_entries(self, op, before: pa.Table, after: pa.Table, n: int) -> list[dict]:
        key = op.text_key
        if key not in before.column_names or key not in after.column_names:
            return []
        if after.num_rows != before.num_rows:
            # skip_op_error set some rows aside: compare the rows that came through.
            before = before.filter(
                pc.is_in(before.column(INPUT_ROW), value_set=after.column(INPUT_ROW).combine_chunks())
            )
        changed = _changed_mask(before.column(key), after.column(key))
        idx = pc.indices_nonzero(changed.combine_chunks() if isinstance(changed, pa.ChunkedArray) else changed)
        idx = idx.slice(0, n)
        if not len(idx):
            return []
        orig, proc = before.take(idx), after.take(idx)
        wanted = [k for k in self.settings.trace_keys if k in orig.column_names]
        extra = {k: orig.column(k).to_pylist() for k in wanted}
        o_text, p_text = orig.column(key).to_pylist(), proc.column(key).to_pylist()
        rows = orig.column(INPUT_ROW).to_pylist() if INPUT_ROW in orig.column_names else [None] * len(idx)
        out = []
        for j in range(len(idx)):
            entry = {k: extra[k][j] for k in wanted}
            for k in self.settings.trace_keys:
                entry.setdefault(k, None)
            entry.update({"original_text": o_text[j], "processed_text": p_text[j], INPUT_ROW: rows[j]})
            out.append(entry)
        return out

    def _filter_entries(self, op, before: pa.Table, after: pa.Table, failed: pa.Table | None, n: int) -> list[dict]:
        if INPUT_ROW not in before.column_names or after.num_rows == before.num_rows:
            return []
        gone = after.column(INPUT_ROW).combine_chunks()
        if failed is not None and failed.num_rows:
            gone = pa.concat_arrays([gone, failed.column(INPUT_ROW).combine_chunks()])
        removed_mask = pc.invert(pc.is_in(before.column(INPUT_ROW), value_set=gone))
        removed = _first(before, removed_mask, n)
        if not removed.num_rows:
            return []
        # The op's statistics of just these rows: per-row stats, so the same
        # values the op computed over the whole partition.
        return op.compute_stats(removed).to_pylist()


def tracer_for_partition(ctx, partition_id: int, partition_hash: str) -> PartitionTracer | None:
    """None when tracing is off: the runner then skips tracing entirely."""
    settings = TraceSettings.from_recipe(ctx.recipe)
    if settings is None:
        return None
    return PartitionTracer(ctx.job_dir, partition_id, partition_hash, settings, ctx.plan)


# -- step 2: merge ---------------------------------------------------------------
def _read_candidates(job_dir: str, op, pid: int, phash: str, settings: TraceSettings) -> list[dict] | None:
    path = candidate_path(job_dir, op.index, op.name, pid)
    try:
        doc = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        return None
    except ValueError:
        log.warning("ignoring unreadable trace candidates %s", path)
        return None
    problem = json_seal_problem(doc)
    if problem:  # changed after it was written: never merged (the op's trace is then reported incomplete)
        log.warning("ignoring damaged trace candidates %s: %s", path, problem)
        return None
    if (
        doc.get("partition_hash") != phash
        or doc.get("pipeline_fingerprint") != op.fingerprint
        or doc.get("trace_keys") != list(settings.trace_keys)
        or int(doc.get("trace_num", 0)) < settings.trace_num
    ):
        log.warning("ignoring stale trace candidates %s (other input, pipeline or trace settings)", path)
        return None
    return doc.get("entries", [])


def merge_traces(job_dir: str) -> dict:
    """Write ``trace/sample_trace-<op>.jsonl`` for every traced mapper and filter.

    Returns a report (also written to ``trace/trace_report.json``).  An op's
    trace is ``complete`` when every partition that could contribute to its
    first ``trace_num`` entries had candidates; partitions after that point
    do not matter.  Safe to call at any time and repeatedly (atomic writes).
    """
    from airflow_provider_dj.engine.storage.context import JobContext

    ctx = JobContext(job_dir)
    settings = TraceSettings.from_recipe(ctx.recipe)
    if settings is None:
        return {"enabled": False}
    plan = ctx.plan
    parts = ctx.partitioning_info["partitions"]
    report: dict = {"enabled": True, "trace_num": settings.trace_num, "ops": []}
    for op in plan.ops:
        if op.is_global or op.kind not in ("mapper", "filter") or not settings.traces(op.name):
            continue
        picked: list[dict] = []
        missing: list[int] = []
        for p in parts:  # partition order == input order
            if len(picked) >= settings.trace_num:
                break
            entries = _read_candidates(job_dir, op, p["partition_id"], p["content_hash"], settings)
            if entries is None:
                missing.append(p["partition_id"])
                continue
            picked.extend(entries)
        picked.sort(key=lambda e: (e.get(INPUT_ROW) is None, e.get(INPUT_ROW) or 0))
        picked = picked[: settings.trace_num]
        name = trace_file_name(plan, op.index)
        data = b"".join(_dumps(e) + b"\n" for e in picked)
        storage.atomic_write_bytes(storage.join(job_dir, TRACE_DIR, name), data, what=f"the trace file {name}")
        if missing:
            log.warning(
                "trace of op %d (%s): partitions %s have no trace candidates (traced only after a resume "
                "that loaded this op from a checkpoint?); the file may not be the first %d in input order",
                op.index,
                op.name,
                missing,
                settings.trace_num,
            )
        report["ops"].append(
            {
                "op_index": op.index,
                "op_name": op.name,
                "file": name,
                "entries": len(picked),
                "complete": not missing,
                "partitions_without_candidates": missing,
                **file_seal(data),
            }
        )
    for op in plan.ops:
        if op.is_global and settings.traces(op.name):
            name = trace_file_name(plan, op.index)
            try:
                seal = file_seal(storage.read_bytes(storage.join(job_dir, TRACE_DIR, name)))
            except FileNotFoundError:
                seal = None
            report["ops"].append(
                {"op_index": op.index, "op_name": op.name, "file": name, "written": seal is not None, **(seal or {})}
            )
    # Written after the trace files, with each one's size and xxh3: the report is their commit record.
    storage.atomic_write_bytes(
        storage.join(job_dir, TRACE_DIR, REPORT_FILE), json.dumps(report, indent=2).encode(), what="the trace report"
    )
    return report


def trace_file_problems(job_dir: str) -> list[str]:
    """Trace files that differ from what ``trace/trace_report.json`` recorded ([] when all match or no report).

    For readers (the completed-job re-check, people): a trace is a sample of what ops did, so a damaged one
    is reported with its path, not silently shown."""
    report_path = storage.join(job_dir, TRACE_DIR, REPORT_FILE)
    try:
        report = json.loads(storage.read_bytes(report_path))
    except FileNotFoundError:
        return []
    except ValueError as exc:
        return [f"{report_path}: not valid JSON ({exc})"]
    out = []
    for entry in report.get("ops", []) if isinstance(report, dict) else []:
        if "xxh3_128" not in entry:  # not written (a global op without pairs) or a report from before checksums
            continue
        path = storage.join(job_dir, TRACE_DIR, entry["file"])
        problem = file_problem(path, entry)
        if problem:
            out.append(f"{path}: {problem}")
    return out


# -- deduplicators (global phase) -------------------------------------------------
def _duplicate_pairs_exact(keys: pa.Array, mask: np.ndarray, n: int) -> list[tuple[int, int]]:
    """(kept first occurrence, removed duplicate) global row positions; the first
    ``n`` distinct duplicated keys by the position of their first removed row."""
    from airflow_provider_dj.ops.dedup.exact import first_occurrence_mask

    removed = np.flatnonzero(~mask)
    if not len(removed):
        return []
    removed_keys = keys.take(pa.array(removed))
    first_of_key = np.flatnonzero(first_occurrence_mask(removed_keys))[:n]
    dup_pos = removed[first_of_key]
    chosen = keys.take(pa.array(dup_pos))
    which = pc.fill_null(pc.index_in(keys, value_set=chosen), -1).to_numpy().astype(np.int64)
    hits = np.flatnonzero(which >= 0)
    js, first_hit = np.unique(which[hits], return_index=True)
    kept_of = dict(zip(js.tolist(), hits[first_hit].tolist()))
    return [(kept_of[j], int(dup_pos[j])) for j in range(len(dup_pos))]


def _duplicate_pairs_by_representative(rep: np.ndarray, mask: np.ndarray, n: int) -> list[tuple[int, int]]:
    removed = np.flatnonzero(~mask)
    reps = rep[removed]
    _, first = np.unique(reps, return_index=True)
    take = removed[np.sort(first)][:n]
    return [(int(rep[r]), int(r)) for r in take]


def duplicate_trace_limit(recipe, op_name: str) -> int | None:
    """``trace_num`` when the tracer covers the op (its duplicate pairs are written), else None."""
    settings = TraceSettings.from_recipe(recipe)
    if settings is None or not settings.traces(op_name):
        return None
    return settings.trace_num


def first_pairs_by_representative(
    removed: npt.ArrayLike, reps: npt.ArrayLike, n: int, seen: set[int] | None = None
) -> list[tuple[int, int]]:
    """``(representative, removed row)`` of the first ``n`` removed rows (``removed``, ascending, each
    with its representative in ``reps``) whose representative no earlier one has (nor ``seen``, which is
    updated).  One partition's first ``n`` locally are enough to continue the walk over all partitions:
    fewer than ``n`` of them can have a representative an earlier partition's pairs already hold."""
    seen = set() if seen is None else seen
    out: list[tuple[int, int]] = []
    for r, rep in zip(np.asarray(removed).tolist(), np.asarray(reps).tolist()):
        if len(out) >= n:
            break
        if rep in seen:
            continue
        seen.add(rep)
        out.append((rep, r))
    return out


def write_duplicate_trace(
    ctx, op_index: int, op_impl, keys: list[pa.Table], mask: np.ndarray, *, history=None
) -> int | None:
    """``trace/duplicate-<op>.jsonl`` from the global phase; returns the pair count (None = not traced).

    Exact deduplicators pair each removed row with the first row holding the
    same key.  Near-duplicate ops pair it with the kept row of its cluster
    when its ``duplicate_representatives(keys)`` gives a row array
    (MinHash, SimHash and the Data-Juicer adapter's do); when it gives None,
    ``dup1`` is null.

    ``mask`` is the op's in-night keep mask.  With ``history`` (the rows removed as duplicates of earlier
    exports, engine/history/lookup.py), the first ``trace_num`` of them follow the in-night pairs:
    ``dup1`` names the history row (``history_job_id``, ``history_export_row``, ``history_export_path``),
    ``dup2`` is the removed row, and ``history_duplicate`` is true.
    """
    n = duplicate_trace_limit(ctx.recipe, ctx.plan.ops[op_index].name)
    if n is None:
        return None
    if isinstance(op_impl, SignatureDeduplicator):
        rep = op_impl.duplicate_representatives(keys)
        if rep is not None:
            pairs = _duplicate_pairs_by_representative(np.asarray(rep), mask, n)
        else:
            removed = np.flatnonzero(~mask)[:n]
            pairs = [(-1, int(r)) for r in removed]
    else:
        col = (
            pa.chunked_array([k.column(KEYS_COLUMN).combine_chunks() for k in keys]).combine_chunks()
            if keys
            else pa.array([], pa.binary(16))
        )
        pairs = _duplicate_pairs_exact(col, mask, n)
    return write_duplicate_pairs(ctx, op_index, pairs, [k.num_rows for k in keys], history=history)


def write_duplicate_pairs(
    ctx, op_index: int, pairs: list[tuple[int, int]], row_counts: list[int], *, history=None
) -> int | None:
    """Write ``trace/duplicate-<op>.jsonl`` from the chosen ``(kept, removed)`` pairs (global positions
    among the op's input rows; -1: none named), then ``history``; ``row_counts``: each partition's input
    rows of the op.  The single-process and the sharded step (engine/execution/global_shards.py) both
    write through it, so their files are the same bytes.  Returns the entry count (None: not traced)."""
    plan = ctx.plan
    n = duplicate_trace_limit(ctx.recipe, plan.ops[op_index].name)
    if n is None:
        return None
    hist = [] if history is None else list(range(min(n, len(history))))
    wanted = {g for pair in pairs for g in pair if g >= 0} | {int(history.positions[i]) for i in hist}
    rows = _fetch_rows(ctx, op_index, row_counts, sorted(wanted))
    entries: list[dict[str, Any]] = [{"dup1": rows.get(a), "dup2": rows.get(b)} for a, b in pairs]
    for i in hist:
        entries.append(
            {
                "dup1": {
                    "history_job_id": history.job_ids[i],
                    "history_export_row": int(history.export_rows[i]),
                    "history_export_path": history.export_paths[i],
                    **({"band": int(history.bands[i])} if history.bands[i] >= 0 else {}),
                },
                "dup2": rows.get(int(history.positions[i])),
                "history_duplicate": True,
            }
        )
    data = b"".join(_dumps(e) + b"\n" for e in entries)
    storage.atomic_write_bytes(storage.join(ctx.job_dir, TRACE_DIR, trace_file_name(plan, op_index)), data)
    return len(entries)


def _fetch_rows(ctx, op_index: int, row_counts: list[int], positions: list[int]) -> dict[int, dict]:
    """Global row positions -> row dicts, read from the state the deduplicator saw
    (the checkpoint after op ``op_index - 1``, always kept; the input for op 0).
    Only partitions holding a wanted row are read."""
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore

    if not positions:
        return {}
    plan = ctx.plan
    parts = ctx.partitioning_info["partitions"]
    offsets = np.cumsum([0] + [int(c) for c in row_counts])
    store = CheckpointStore(ctx.job_dir, ctx.storage_format)
    out: dict[int, dict] = {}
    for pi, p in enumerate(parts):
        lo, hi = int(offsets[pi]), int(offsets[pi + 1])
        local = [g - lo for g in positions if lo <= g < hi]
        if not local:
            continue
        if op_index == 0:
            table = read_input_rows(ctx, p["partition_id"])
        else:
            prev = plan.ops[op_index - 1]
            cp = store.load_valid(prev.index, prev.name, p["partition_id"], p["content_hash"], prev.fingerprint)
            if cp is None:
                log.warning("trace of %s: rows of partition %d unavailable", plan.ops[op_index].name, p["partition_id"])
                continue
            table = cp.table
        for j, row in zip(local, table.take(pa.array(local)).to_pylist()):
            out[lo + j] = row
    return out
