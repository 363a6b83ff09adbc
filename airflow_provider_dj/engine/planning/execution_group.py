"""One execution group: consecutive partitions that one task (a mapped Airflow task instance, a
group of ``run_job``) runs through one segment.

Planning writes groups as plain dicts (``plan.execution_groups``, into ``dag_execution_plan.json``);
the validate task hands them to the partition tasks through XCom, where they are plain dicts too.
Between those edges the runner passes an ``ExecutionGroup``: ``from_dict`` and ``to_dict`` are the
two crossings, and ``to_dict`` gives back the same keys in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class ExecutionGroup:
    group_id: int
    partition_ids: tuple[int, ...]
    start_row: int
    end_row: int
    label: str
    #: On a resume: partition id (a string, as in JSON) -> {"last_op", "final"} (engine/job/setup.py).
    completed: dict[str, Any] | None = None
    #: Ray tasks of this group in flight at once (engine/planning/concurrency.py); None: all at once.
    max_in_flight: int | None = None
    #: The validate task's per-op actor plan, for a segment with a stateful op (engine/execution/actor_pool.py).
    actor_resources: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExecutionGroup:
        return cls(
            group_id=int(d["group_id"]),
            partition_ids=tuple(int(p) for p in d["partition_ids"]),
            start_row=int(d.get("start_row", 0)),
            end_row=int(d.get("end_row", 0)),
            label=str(d.get("label", "")),
            completed=d.get("completed"),
            max_in_flight=d.get("max_in_flight"),
            actor_resources=d.get("actor_resources"),
        )

    @classmethod
    def of(cls, group: ExecutionGroup | Mapping[str, Any]) -> ExecutionGroup:
        """``group`` itself, or the group a plain dict (XCom's, the plan file's) describes."""
        return group if isinstance(group, ExecutionGroup) else cls.from_dict(group)

    @classmethod
    def placeholder(cls) -> ExecutionGroup:
        """The group of a run with nothing to do: no partitions (its task finishes at once)."""
        return cls(group_id=0, partition_ids=(), start_row=0, end_row=0, label="no partitions to run")

    def to_dict(self) -> dict[str, Any]:
        """The plain dict planning wrote: its keys, in its order; the optional ones only when set."""
        d: dict[str, Any] = {
            "group_id": self.group_id,
            "partition_ids": list(self.partition_ids),
            "start_row": self.start_row,
            "end_row": self.end_row,
            "label": self.label,
        }
        optional = (
            ("completed", self.completed),
            ("max_in_flight", self.max_in_flight),
            ("actor_resources", self.actor_resources),
        )
        d.update((k, v) for k, v in optional if v is not None)
        return d
