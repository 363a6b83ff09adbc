"""Per-row lineage, read back: one input row's path through the recipe, op by op (``dj-airflow why``).

The recorder (``observe/lineage.py``) commits, per partition, a chain of chunk files that ends at the
partition's latest commit; this module walks that chain, so it answers for running, failed, stopped
and finished jobs alike (a partition still running answers up to its last committed checkpoint).

What is derived here, not stored: a kept row's export row (rows keep input order, so it is the
number of kept rows before it, across partitions in order); the row an exact duplicate repeats (the
first row with the same key in the global step's committed keys, which line up with the rows that
reached the op); a history duplicate's earlier job and export row (``dedup_history/``); a mapper's
text before and after (the checkpoints around it, where they are still on disk).
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.history.lookup import read_history_duplicates
from airflow_provider_dj.engine.input.partitioning import read_partition
from airflow_provider_dj.engine.jobdir.layout import lineage_file
from airflow_provider_dj.engine.observe.lineage import (
    CHANGED,
    DUPLICATE,
    FAILED,
    FATE_NAMES,
    FILTERED,
    FULL_SCHEMA,
    full_schema,
)
from airflow_provider_dj.engine.storage.context import JobContext, read_checkpoint
from airflow_provider_dj.engine.storage.global_op_state import KEYS_COLUMN, keys_store
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN, STATS_COLUMN

REMOVED = (FILTERED, DUPLICATE, FAILED)


class RowNotFoundError(DJError, LookupError):
    """No input row matches what was asked (out of range, past the export's end, no such value)."""


@dataclass
class PartitionLineage:
    """One partition's committed lineage: its notes, and the op up to which they are complete."""

    partition: dict
    table: pa.Table  # input_row, fate, op_index, stat, reason, and the match columns (lineage.FULL_SCHEMA)
    last_op: int | None  # the latest op its chain covers (None: nothing committed yet)
    starts_at: int  # the op the chain starts after (-1: the input; higher: reused from an earlier job)
    stat_keys: dict = field(default_factory=dict)  # op index (str) -> the statistic a filter's stat is

    def removed_rows(self) -> np.ndarray:
        fate = self.table.column("fate").to_numpy()
        return np.unique(self.table.column("input_row").to_numpy()[np.isin(fate, REMOVED)])


@dataclass
class Step:
    op_index: int
    op_name: str
    kind: str
    fate: str  # kept, changed, filtered, duplicate, failed; "not run" after the row's removal or the last commit
    stat: float | None = None
    stat_key: str | None = None
    reason: str | None = None
    duplicate_of: int | None = None
    duplicate_of_partition: int | None = None
    band: int | None = None  # MinHash: the LSH band the duplicate matched through
    history: dict | None = None
    before: str | None = None
    after: str | None = None


@dataclass
class RowPath:
    input_row: int
    partition_id: int
    partition_label: str
    fate: str  # kept, filtered, duplicate, failed, in_progress
    export_row: int | None
    steps: list[Step] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def partition_lineage(job_dir: str, partition: dict, plan) -> PartitionLineage:
    """Walk partition ``partition``'s chunk chain down from the latest chunk that matches the plan."""
    pid = partition["partition_id"]
    pieces, last, start, stat_keys = [], None, None, {}
    k = plan.final_op_index
    while k >= 0:
        chunk = read_chunk(job_dir, pid, k, plan)
        if chunk is None:
            if last is not None:
                break  # the chain is broken below a committed chunk: only the ops above are known
            k -= 1
            continue
        if last is None:
            last = k
        pieces.append(chunk)
        stat_keys.update(json.loads(chunk.schema.metadata.get(b"stat_keys", b"{}")))
        start = int(chunk.schema.metadata[b"start_op"])
        k = start
    table = (
        pa.concat_tables([full_schema(p.replace_schema_metadata(None)) for p in pieces])
        if pieces
        else FULL_SCHEMA.empty_table()
    )
    return PartitionLineage(partition, table, last, -1 if start is None else start, stat_keys)


def read_chunk(job_dir: str, pid: int, op_index: int, plan) -> pa.Table | None:
    path = storage.join(job_dir, *lineage_file(pid, op_index).split("/"))
    try:
        table = pq.read_table(io.BytesIO(storage.read_bytes(path)))
    except FileNotFoundError:
        return None
    if table.schema.metadata.get(b"fingerprint", b"").decode() != str(plan.ops[op_index].fingerprint):
        return None  # written for another recipe: not this job's lineage
    return table


class JobLineage:
    """A job's lineage, loaded once for several questions (the CLI asks one, the UI many)."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        self.ctx = JobContext(job_dir)
        self.plan = self.ctx.plan
        self.parts = self.ctx.partitioning_info["partitions"]
        self._lineage: dict[int, PartitionLineage] = {}

    def of(self, pid: int) -> PartitionLineage:
        if pid not in self._lineage:
            self._lineage[pid] = partition_lineage(self.job_dir, self.parts[pid], self.plan)
        return self._lineage[pid]

    def partition_of(self, input_row: int) -> dict:
        for p in self.parts:
            if p["start_row"] <= input_row < p["end_row"]:
                return p
        total = self.parts[-1]["end_row"] if self.parts else 0
        raise RowNotFoundError(f"input row {input_row} is not in this job's input (rows 0-{total - 1})")

    def complete(self, pid: int) -> bool:
        pl = self.of(pid)
        return pl.last_op == self.plan.final_op_index and pl.starts_at == -1

    def kept_count(self, pid: int) -> int:
        return self.parts[pid]["num_rows"] - len(self.of(pid).removed_rows())

    # -- row numbers -----------------------------------------------------------
    def export_row(self, input_row: int) -> int | None:
        """The row's number in the export (0-based), or None when it is not kept or not yet known."""
        part = self.partition_of(input_row)
        pid = part["partition_id"]
        if not all(self.complete(p["partition_id"]) for p in self.parts[: pid + 1]):
            return None
        removed = self.of(pid).removed_rows()
        if input_row in set(removed.tolist()):
            return None
        before = sum(self.kept_count(p["partition_id"]) for p in self.parts[:pid])
        return before + (input_row - part["start_row"]) - int(np.searchsorted(removed, input_row))

    def input_row_of_export_row(self, export_row: int) -> int:
        offset = 0
        for p in self.parts:
            pid = p["partition_id"]
            if not self.complete(pid):
                raise RowNotFoundError(
                    f"export row {export_row}: partition {pid} has not committed its final op yet, so export rows "
                    f"from there on are not known; ask by --row"
                )
            kept = self.kept_count(pid)
            if export_row < offset + kept:
                rows = np.setdiff1d(np.arange(p["start_row"], p["end_row"]), self.of(pid).removed_rows())
                return int(rows[export_row - offset])
            offset += kept
        raise RowNotFoundError(f"export row {export_row} is past the export's end ({offset} rows)")

    def input_rows_where(self, field_name: str, value: str) -> list[int]:
        """Input rows whose ``field_name`` equals ``value`` (compared as text), in input order."""
        found: list[int] = []
        for p in self.parts:
            table = read_partition(self.ctx.partitioning_info, p["partition_id"])
            if field_name not in table.column_names:
                raise RowNotFoundError(
                    f"--where {field_name}=...: the input has no field {field_name!r} "
                    f"(its fields: {', '.join(table.column_names)})"
                )
            col = pc.cast(table.column(field_name), pa.string())
            hits = np.flatnonzero(pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False))
            found.extend(int(p["start_row"] + h) for h in hits)
        return found

    def input_sample(self, input_row: int) -> dict:
        """The row as the input holds it."""
        p = self.partition_of(input_row)
        table = read_partition(self.ctx.partitioning_info, p["partition_id"])
        return table.slice(input_row - p["start_row"], 1).to_pylist()[0]

    # -- the path --------------------------------------------------------------
    def path(self, input_row: int, *, texts: bool = True) -> RowPath:
        part = self.partition_of(input_row)
        pid = part["partition_id"]
        pl = self.of(pid)
        t = pl.table
        mine = t.filter(pc.equal(t.column("input_row"), input_row)).to_pylist()
        by_op: dict[int, list[dict]] = {}
        for e in mine:
            by_op.setdefault(int(e["op_index"]), []).append(e)
        steps: list[Step] = []
        fate, removed = "in_progress", False
        for op in self.plan.ops:
            step = Step(op.index, op.name, op.kind, "kept")
            if removed or pl.last_op is None or op.index > pl.last_op:
                step.fate = "not run" if removed else "not committed yet"
            elif op.index <= pl.starts_at:
                step.fate = "not recorded"
                step.reason = "this partition's state up to here was reused from an earlier job"
            for e in by_op.get(op.index, []):
                step.fate = FATE_NAMES[int(e["fate"])]
                step.stat = None if e["stat"] is None else float(e["stat"])
                step.reason = e["reason"]
                if e["fate"] in REMOVED:
                    removed, fate = True, step.fate
                if e["fate"] == FILTERED:
                    step.stat_key = pl.stat_keys.get(str(op.index))
                    step.reason = self._filter_reason(op, step.stat_key, step.stat)
                elif e["fate"] == DUPLICATE:
                    self._explain_duplicate(step, op, input_row, e)
                elif e["fate"] == CHANGED and texts:
                    step.before, step.after = self._texts(op.index, pid, input_row)
            steps.append(step)
        note = None
        if not removed:
            if self.complete(pid):
                fate = "kept"
            elif pl.starts_at > -1:
                note = (
                    f"partition {pid}'s state up to op {pl.starts_at} was reused from an earlier job, without lineage"
                )
            else:
                note = (
                    f"partition {pid} has committed up to op {pl.last_op}"
                    if pl.last_op is not None
                    else f"partition {pid} has committed no op yet"
                )
        label = f"p{pid} rows {part['start_row']}-{part['end_row'] - 1}"
        export = self.export_row(input_row) if fate == "kept" else None
        return RowPath(input_row, pid, label, fate, export, steps, note)

    def _filter_reason(self, op, stat_key: str | None, stat: float | None) -> str:
        args = {k: v for k, v in op.args.items() if k.startswith(("min_", "max_"))}
        bounds = ", ".join(f"{k}={v}" for k, v in sorted(args.items()))
        if stat is None:
            return f"{op.name} removed it" + (f" (bounds {bounds})" if bounds else "")
        return f"{op.name} removed it: {stat_key or 'its statistic'} {stat:g} outside {bounds or 'its bounds'}"

    def _explain_duplicate(self, step: Step, op, input_row: int, entry: dict) -> None:
        """What the duplicate matched: as recorded (the match columns), else derived (older jobs)."""
        step.band = entry.get("dup_band")
        band = f" (LSH band {step.band})" if step.band is not None else ""
        if entry.get("history_job") is not None:
            export_path = None
            hist = read_history_duplicates(self.job_dir, op.index, op.name)
            if hist is not None and hist.num_rows:
                hit = hist.filter(pc.equal(hist.column(INPUT_ROW_COLUMN), input_row))
                export_path = hit.column("history_export_path")[0].as_py() if hit.num_rows else None
            step.history = {
                "job_id": entry["history_job"],
                "export_row": int(entry["history_row"]),
                "export_path": export_path,
                "band": step.band,
            }
            step.reason = (
                f"{op.name} removed it as a duplicate of export row {entry['history_row']} "
                f"of earlier job {entry['history_job']}{band} (dedup history)"
            )
            return
        if entry.get("dup_of_row") is not None:
            step.duplicate_of = int(entry["dup_of_row"])
            step.duplicate_of_partition = self.partition_of(step.duplicate_of)["partition_id"]
            kind = "near-duplicate" if ("minhash" in op.name or "simhash" in op.name) else "duplicate"
            step.reason = (
                f"{op.name} removed it as a {kind} of input row {step.duplicate_of} "
                f"(partition {step.duplicate_of_partition}){band}"
            )
            if step.band is None and "minhash" in op.name:
                step.reason += " (no shared band: matched through other rows of its cluster)"
            return
        hist = read_history_duplicates(self.job_dir, op.index, op.name)
        if hist is not None and hist.num_rows:
            hit = hist.filter(pc.equal(hist.column(INPUT_ROW_COLUMN), input_row))
            if hit.num_rows:
                h = hit.to_pylist()[0]
                step.history = {
                    "job_id": h["history_job_id"],
                    "export_row": h["history_export_row"],
                    "export_path": h["history_export_path"],
                }
                step.reason = (
                    f"{op.name} removed it as a duplicate of export row {h['history_export_row']} "
                    f"of earlier job {h['history_job_id']} (dedup history)"
                )
                return
        step.duplicate_of = self.first_occurrence(op, input_row)
        step.reason = (
            f"{op.name} removed it as a duplicate of input row {step.duplicate_of}"
            if step.duplicate_of is not None
            else f"{op.name} removed it as a near-duplicate (the row it matched is not recorded for this op)"
        )

    def _rows_at(self, op_index: int, pid: int) -> np.ndarray:
        """The input rows of partition ``pid`` that reached op ``op_index``, in order."""
        p, t = self.parts[pid], self.of(pid).table
        early = t.filter(pc.less(t.column("op_index"), op_index))
        gone = early.filter(pc.is_in(early.column("fate"), pa.array(REMOVED, pa.uint8()))).column("input_row")
        return np.setdiff1d(np.arange(p["start_row"], p["end_row"]), gone.to_numpy())

    def first_occurrence(self, op, input_row: int) -> int | None:
        """The first row with ``input_row``'s key among the rows that reached exact-dedup op ``op``."""
        ks = keys_store(self.job_dir)
        keys = []
        for p in self.parts:
            cp = ks.load_valid(op.index, op.name, p["partition_id"], p["content_hash"], op.fingerprint)
            if cp is None or KEYS_COLUMN not in cp.table.column_names:
                return None  # keys gone (retention) or signatures (near dedup): not derivable
            keys.append(cp.table.column(KEYS_COLUMN))
        pid = self.partition_of(input_row)["partition_id"]
        rows = [self._rows_at(op.index, p["partition_id"]) for p in self.parts]
        if any(len(r) != len(k) for r, k in zip(rows, keys)):
            return None
        at = np.flatnonzero(rows[pid] == input_row)
        if not at.size:
            return None
        key = keys[pid][int(at[0])]
        for r, k in zip(rows, keys):
            hits = np.flatnonzero(pc.equal(k, key).to_numpy(zero_copy_only=False))
            if hits.size:
                return int(r[hits[0]])
        return None

    def _texts(self, op_index: int, pid: int, input_row: int) -> tuple[str | None, str | None]:
        key = self.ctx.recipe.text_key

        def text_at(k: int) -> str | None:
            if k < 0:
                table = read_partition(self.ctx.partitioning_info, pid)
                idx = input_row - self.parts[pid]["start_row"]
                return table.column(key)[idx].as_py() if key in table.column_names else None
            table = read_checkpoint(self.job_dir, k, pid)
            if table is None or key not in table.column_names:
                return None
            hit = table.filter(pc.equal(table.column(INPUT_ROW_COLUMN), input_row))
            return hit.column(key)[0].as_py() if hit.num_rows else None

        return text_at(op_index - 1), text_at(op_index)


def why(
    job_dir: str, *, input_row: int | None = None, export_row: int | None = None, where: str | None = None
) -> list[RowPath]:
    """The path of the rows asked for: one input row, one export row, or every row with FIELD=VALUE."""
    jl = JobLineage(job_dir)
    if sum(x is not None for x in (input_row, export_row, where)) != 1:
        raise ValueError("ask for exactly one of input_row, export_row, where")
    if export_row is not None:
        rows = [jl.input_row_of_export_row(export_row)]
    elif where is not None:
        name, sep, value = where.partition("=")
        if not sep or not name:
            raise RowNotFoundError(f"--where {where!r}: write FIELD=VALUE, e.g. --where id=doc-17")
        rows = jl.input_rows_where(name, value)
        if not rows:
            raise RowNotFoundError(f"no input row has {name} = {value!r}")
    else:
        assert input_row is not None  # exactly one of the three was given (checked above)
        rows = [input_row]
    return [jl.path(r) for r in rows]


def row_lookup(job_dir: str, input_row: int) -> dict | None:
    """The row's fate from lineage in the shape ``observe/why.py`` answers, or None
    when this job has no lineage (an older job, or recording off), so the trace look-up answers."""
    jl = JobLineage(job_dir)
    part = jl.partition_of(input_row)
    pl = jl.of(part["partition_id"])
    if pl.last_op is None:
        return None
    path = jl.path(input_row)
    base = {"input_row": input_row, "partition_id": path.partition_id, "partition_label": path.partition_label}
    lineage_src = lineage_file(path.partition_id, pl.last_op).rsplit("/", 1)[0]
    for s in path.steps:
        if s.fate in ("filtered", "duplicate", "failed"):
            sample = jl.input_sample(input_row)
            if s.stat_key is not None:
                sample[STATS_COLUMN] = {s.stat_key: s.stat}
            out = dict(base, fate=s.fate, op_index=s.op_index, op_name=s.op_name, reason=s.reason, sample=sample)
            out["source"] = lineage_src
            if s.fate == "duplicate":
                out["duplicate_of"] = s.duplicate_of
                out["duplicate_of_partition"] = s.duplicate_of_partition
                out["band"] = s.band
                out["history"] = s.history
            return out
    changed = [s for s in path.steps if s.fate == "changed"]
    kept = f"kept: export row {path.export_row}" if path.export_row is not None else (path.note or "not removed")
    if changed:
        s = changed[0]
        ops = ", ".join(f"{c.op_name} (op {c.op_index})" for c in changed)
        return dict(
            base,
            fate="changed",
            op_index=s.op_index,
            op_name=s.op_name,
            reason=f"changed by {ops}; {kept}",
            sample={"original_text": s.before, "processed_text": s.after},
            source=lineage_src,
            export_row=path.export_row,
        )
    # Kept when lineage followed it through every op into the export; else no record says what became of it.
    fate = "kept" if path.fate == "kept" and path.export_row is not None else "not_found"
    out = dict(base, fate=fate, op_index=None, op_name=None, reason=kept, sample=None, source=lineage_src)
    if fate == "kept":
        out["export_row"] = path.export_row
    return out
