"""Run a group of partitions of one segment as Ray tasks.

One Ray task per partition over whole Arrow partitions: per-block
scheduling of Ray Data costs more than the work itself at this grain
(see FACTS: 3.8 s vs 0.38 s for 200k short rows on 2 cores), while a plain
task per partition costs milliseconds.  Every partition of a group runs to
its end even if a sibling fails, so the next try has the most checkpoints
to resume from; then the first error is raised.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

log = logging.getLogger(__name__)


def _segment_task(job_dir: str, segment_index: int, partition_id: int, try_number: int | None, defaults: dict) -> dict:
    import logging as _logging

    _logging.basicConfig(level=_logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from airflow_provider_dj.engine.segment_runner import run_segment

    return run_segment(job_dir, segment_index, partition_id, try_number=try_number, event_defaults=defaults).to_dict()


def run_partitions(
    ray: Any,
    job_dir: str,
    segment_index: int,
    partition_ids: list[int],
    *,
    try_number: int | None = None,
    event_defaults: dict | None = None,
    num_cpus: float = 1,
    on_progress: Callable[[str], None] | None = None,
    rows_by_partition: dict[int, int] | None = None,
) -> list[dict]:
    remote = ray.remote(num_cpus=num_cpus, max_retries=0)(_segment_task)
    refs = {remote.remote(job_dir, segment_index, pid, try_number, dict(event_defaults or {})): pid for pid in partition_ids}
    pending = list(refs)
    results: dict[int, dict] = {}
    errors: list[tuple[int, BaseException]] = []
    t0 = time.perf_counter()
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=30.0)
        for ref in done:
            pid = refs[ref]
            try:
                results[pid] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - re-raised below after siblings finish
                errors.append((pid, exc))
        (on_progress or log.info)(_progress_line(segment_index, partition_ids, results, errors, rows_by_partition,
                                                 time.perf_counter() - t0))
    if errors:
        pid, exc = errors[0]
        cause = getattr(exc, "cause", None) or exc
        raise PartitionFailedError(f"partition {pid} failed in segment {segment_index}: {cause}") from exc
    return [results[pid] for pid in partition_ids]


class PartitionFailedError(RuntimeError):
    pass


def _progress_line(segment_index, partition_ids, results, errors, rows_by_partition, elapsed) -> str:
    """'segment 0: 3/4 partitions (750/1,000 rows) done, 0 failed, 2.1s, 357 rows/s, ETA 0.7s'."""
    line = f"segment {segment_index}: {len(results)}/{len(partition_ids)} partitions"
    if rows_by_partition:
        total = sum(rows_by_partition.get(p, 0) for p in partition_ids)
        done = sum(rows_by_partition.get(p, 0) for p in results)
        line += f" ({done:,}/{total:,} rows)"
        if done and elapsed > 0:
            rate = done / elapsed
            line += f" done, {len(errors)} failed, {elapsed:.1f}s, {rate:,.0f} rows/s, ETA {(total - done) / rate:.1f}s"
            return line
    return line + f" done, {len(errors)} failed, {elapsed:.1f}s"
