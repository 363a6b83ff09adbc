"""How one partition's run of one segment ended, as the engine passes it on.

A light module of its own (no Arrow, no stores): the dispatchers, the runner's steps and the Airflow
operators import it, and an operator's module is imported when a DAG is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, TypeAlias


@dataclass
class SegmentResult:
    """How one partition's run of one segment ended: what ``run_segment`` returns, what every dispatcher
    hands back and the runner's steps read.  A plain dict (``to_dict``) only where it leaves the engine:
    an Airflow task's XCom and a Ray Job's record in the job directory."""

    partition_id: int
    segment_index: int
    resumed_from_op: int | None  # op index of the checkpoint loaded; -1 = input; None = nothing to do
    ops_run: list[int] = field(default_factory=list)
    rows_out: int = 0
    failed_rows: int = 0
    skipped: bool = False
    reused_from_job: str | None = None  # the earlier job whose checkpoint this run started from (reuse.py)

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SegmentResult:
        return cls(**{k: d[k] for k in _SEGMENT_RESULT_FIELDS if k in d})

    def line(self) -> str:
        """The partition's line in a task's log."""
        if self.skipped:
            return f"partition {self.partition_id}: already complete, no work done"
        return (
            f"partition {self.partition_id}: resumed after op {self.resumed_from_op}, ran ops {self.ops_run}, "
            f"{self.rows_out} rows out, {self.failed_rows} failed samples"
        )


_SEGMENT_RESULT_FIELDS = tuple(f.name for f in fields(SegmentResult))


@dataclass(frozen=True)
class SegmentStopped:
    """A partition that honoured a graceful stop request at a committed boundary: an outcome, not an error,
    so a dispatcher waits for the partition's siblings before it raises ``StopRequested``."""

    partition_id: int
    segment_index: int
    request: dict[str, Any]


#: What one partition task (``ray_dispatch.segment_task``, an actor's ``run``) returns.
SegmentOutcome: TypeAlias = SegmentResult | SegmentStopped
