"""The failure-rate guard: an op failing on too much of its input stops the job before export.

Why it exists (Data-Juicer has no such guard): with ``skip_op_error`` (the
default, as in Data-Juicer) a sample an op raises on is set aside and the job
goes on.  That is right for a handful of bad rows in a million; it is wrong
when the op fails on everything (a misspelled field, a model that did not
load, an endpoint that answers garbage): the job "succeeds", the export is
empty or thin, and nothing on the terminal but the accounting line says so.
Data-Juicer's executors log per-sample errors and continue; its exporter
writes whatever is left.  Here a job that would export garbage stops loudly
(DESIGN.md, invariant 9).

The rule: an op's failed rows stop the job when they are more than
``max_failed_ratio`` of the rows the op received *and* either at least
``MIN_FAILED_ROWS`` or every one of them.  So an op failing every row always
stops the job, while 1 bad row of 2 never does.  It is checked twice:

* per partition, right after the op (``segment_runner``): the partition task
  fails before the op's checkpoint is written, with its failed rows already
  in ``failed/`` for the user to read;
* per op over the whole job, before the export (``export``): failures spread
  thinly over many small partitions add up there.

The limits live in ``metadata/failure_guard.json``, which every validate
rewrites from the current recipe, so a resume with a raised limit takes
effect on a job started with a lower one.  ``max_failed_ratio`` is not part
of any checkpoint fingerprint (``ops.base.ENGINE_OP_ARGS``): raising it and
resuming reuses every checkpoint; nothing is deleted.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.layout import FAILED_DIR, FAILURE_GUARD, op_dir_name, read_json, write_json
from airflow_provider_dj.engine.jobdir.layout import failed_file as layout_failed_file
from airflow_provider_dj.ops.columns import FAILED_ERROR_COLUMN

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe

#: Job default: more than half of an op's input failing is not "a few bad rows".
DEFAULT_MAX_FAILED_RATIO = 0.5
#: Fewer failed rows than this never stop a job, unless they are all of the op's input.
MIN_FAILED_ROWS = 10
#: Distinct reasons quoted in the error.
REASONS_SHOWN = 3


def exceeded(failed: int, rows_in: int, limit: float) -> bool:
    """Whether ``failed`` of ``rows_in`` rows is past the guard for ``limit`` (see the module docstring)."""
    if rows_in <= 0 or failed <= 0:
        return False
    return failed > limit * rows_in and (failed >= MIN_FAILED_ROWS or failed == rows_in)


class FailureRateExceededError(DJError, RuntimeError):
    """An op failed on more of its input than ``max_failed_ratio`` allows; the job stops before export."""

    def __init__(
        self,
        message: str,
        *,
        op_index: int,
        op_name: str,
        failed: int,
        rows_in: int,
        limit: float,
        partition_ids: list[int] | None = None,
    ) -> None:
        super().__init__(message)
        self.op_index, self.op_name = op_index, op_name
        self.failed, self.rows_in, self.limit = failed, rows_in, limit
        self.partition_ids = list(partition_ids or [])

    def __reduce__(
        self,
    ) -> tuple[Callable[..., FailureRateExceededError], tuple[Any, ...]]:  # crosses Ray and the Airflow task runner
        return (
            _rebuild,
            (str(self), self.op_index, self.op_name, self.failed, self.rows_in, self.limit, self.partition_ids),
        )


def _rebuild(
    message: str, op_index: int, op_name: str, failed: int, rows_in: int, limit: float, partition_ids: list[int]
) -> FailureRateExceededError:
    return FailureRateExceededError(
        message,
        op_index=op_index,
        op_name=op_name,
        failed=failed,
        rows_in=rows_in,
        limit=limit,
        partition_ids=partition_ids,
    )


@dataclass
class GuardSettings:
    """The job's limit and the per-op limits that override it (op index -> ratio)."""

    job_ratio: float = DEFAULT_MAX_FAILED_RATIO
    per_op: dict[int, float] = field(default_factory=dict)
    job_ratio_set: bool = False  # the recipe gave max_failed_ratio (else the default applies)

    def limit_for(self, op_index: int) -> float:
        return self.per_op.get(op_index, self.job_ratio)

    def source_of(self, op_index: int, op_name: str) -> str:
        if op_index in self.per_op:
            return f"process[{op_index}].{op_name}.max_failed_ratio"
        return "max_failed_ratio" if self.job_ratio_set else "the default max_failed_ratio"

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_failed_ratio": self.job_ratio,
            "set_in_recipe": self.job_ratio_set,
            "min_failed_rows": MIN_FAILED_ROWS,
            "per_op": {str(k): v for k, v in sorted(self.per_op.items())},
        }


def settings_from_recipe(recipe: Recipe) -> GuardSettings:
    per_op = {
        spec.index: float(spec.args["max_failed_ratio"])
        for spec in recipe.process
        if spec.args.get("max_failed_ratio") is not None
    }
    ratio = getattr(recipe, "max_failed_ratio", None)
    return GuardSettings(DEFAULT_MAX_FAILED_RATIO if ratio is None else float(ratio), per_op, ratio is not None)


def write_settings(job_dir: str, recipe: Recipe) -> GuardSettings:
    """Record the current recipe's limits in the job directory (every validate: new job and resume)."""
    settings = settings_from_recipe(recipe)
    write_json(storage.join(job_dir, *FAILURE_GUARD.split("/")), settings.to_dict())
    return settings


def load_settings(job_dir: str, recipe: Recipe) -> GuardSettings:
    """The limits the last validate recorded; the job's own recipe when there is no record (older jobs)."""
    path = storage.join(job_dir, *FAILURE_GUARD.split("/"))
    if not storage.exists(path):
        return settings_from_recipe(recipe)
    d = read_json(path)
    return GuardSettings(
        float(d["max_failed_ratio"]),
        {int(k): float(v) for k, v in d.get("per_op", {}).items()},
        bool(d.get("set_in_recipe")),
    )


# -- failed/ samples ----------------------------------------------------------


def failed_dir(job_dir: str, op_index: int, op_name: str) -> str:
    return storage.join(job_dir, FAILED_DIR, op_dir_name(op_index, op_name))


def failed_file(job_dir: str, op_index: int, op_name: str, partition_id: int) -> str:
    """``failed/op_<i>_<op>/partition_<p>.jsonl``: the samples op i set aside in one partition."""
    return storage.join(job_dir, *layout_failed_file(op_index, op_name, partition_id).split("/"))


def reasons_in_failed(
    job_dir: str, op_index: int, op_name: str, partition_ids: list[int], limit_rows: int = 1000
) -> list[str]:
    """The reasons recorded in ``failed/`` for these partitions (at most ``limit_rows`` rows read)."""
    out: list[str] = []
    for pid in partition_ids:
        path = failed_file(job_dir, op_index, op_name, pid)
        if not storage.exists(path):
            continue
        for line in storage.read_bytes(path).splitlines():
            if len(out) >= limit_rows:
                return out
            try:
                out.append(str(json.loads(line).get(FAILED_ERROR_COLUMN)))
            except ValueError:
                continue
    return out


def summarize_reasons(reasons: list[str], n: int = REASONS_SHOWN) -> str:
    """'KeyError: 'text' (98 rows); ValueError: ... (2 rows)' for the most common reasons."""
    if not reasons:
        return "(no reasons recorded)"
    counts = Counter(r[:300] for r in reasons)
    return "; ".join(f"{r} ({c} row{'s' if c != 1 else ''})" for r, c in counts.most_common(n))


def _advice(settings: GuardSettings, op_index: int, op_name: str, resume: str) -> str:
    return (
        f"Read the samples and reasons in failed/op_{op_index:03d}_{op_name}/. Fix the cause (the op's "
        f"arguments, text_keys or the input), or, if these failures are expected, raise "
        f"process[{op_index}].{op_name}.max_failed_ratio (or max_failed_ratio for every op; 1 turns the guard "
        f"off), then resume: {resume}. Nothing was exported and nothing was deleted."
    )


def check_partition(
    settings: GuardSettings,
    accounting: dict[str, Any],
    reasons: list[str],
    *,
    partition_id: int,
    label: str,
    resume: str,
) -> None:
    """Raise FailureRateExceededError when op ``accounting['op_index']`` failed past its limit in this partition."""
    i, name = accounting["op_index"], accounting["op_name"]
    failed, rows_in, limit = accounting["failed"], accounting["rows_in"], settings.limit_for(accounting["op_index"])
    if not exceeded(failed, rows_in, limit):
        return
    raise FailureRateExceededError(
        f"failure-rate guard: op {i} ({name}) failed {failed} of {rows_in} rows ({failed / rows_in:.0%}) in {label}, "
        f"above {settings.source_of(i, name)} = {limit:g}; the job stops before export. "
        f"First reasons: {summarize_reasons(reasons)}. {_advice(settings, i, name, resume)}",
        op_index=i,
        op_name=name,
        failed=failed,
        rows_in=rows_in,
        limit=limit,
        partition_ids=[partition_id],
    )


def check_job(
    job_dir: str,
    settings: GuardSettings,
    per_op: list[dict[str, Any]],
    per_partition: dict[int, list[dict[str, Any]]],
    *,
    resume: str,
) -> None:
    """Before export: every op's failures over the whole job must be within its limit."""
    for total in per_op:
        i = total["op_index"]
        name = total.get("op_name", f"op{i}")
        failed, rows_in, limit = total["failed"], total["rows_in"], settings.limit_for(i)
        if not exceeded(failed, rows_in, limit):
            continue
        pids = sorted(pid for pid, acct in per_partition.items() if i < len(acct) and acct[i]["failed"])
        shown = ", ".join(map(str, pids[:10])) + (f", ... ({len(pids) - 10} more)" if len(pids) > 10 else "")
        raise FailureRateExceededError(
            f"failure-rate guard: op {i} ({name}) failed {failed} of {rows_in} rows ({failed / rows_in:.0%}) over "
            f"the job (partitions {shown}), above {settings.source_of(i, name)} = {limit:g}; the export was not "
            f"written. First reasons: {summarize_reasons(reasons_in_failed(job_dir, i, name, pids))}. "
            f"{_advice(settings, i, name, resume)}",
            op_index=i,
            op_name=name,
            failed=failed,
            rows_in=rows_in,
            limit=limit,
            partition_ids=pids,
        )
