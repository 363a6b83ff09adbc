"""Row accounting: along each partition's op chain, every row in is out, filtered, a duplicate or failed.

One check for both of its readers: the export refuses to write when a chain does not close, and the job
summary reports the same problems for a job that ended otherwise.
"""

from __future__ import annotations

from airflow_provider_dj.engine.output.errors import AccountingError

COUNT_KEYS = ("rows_in", "rows_out", "filtered", "duplicates", "failed")


def check_partition_chain(pid: int, input_rows: int, acct: list[dict]) -> list[str]:
    """Accounting problems of one partition's op chain (empty when it closes)."""
    problems = []
    expected_in = input_rows
    for a in acct:
        lost = a["rows_in"] - a["rows_out"] - a["filtered"] - a["duplicates"] - a["failed"]
        if a["rows_in"] != expected_in or lost:
            problems.append(
                f"partition {pid} op {a['op_index']} ({a.get('op_name')}): rows_in={a['rows_in']} "
                f"(expected {expected_in}), out={a['rows_out']} filtered={a['filtered']} "
                f"duplicates={a['duplicates']} failed={a['failed']}"
            )
        expected_in = a["rows_out"]
    return problems


def check_accounting(per_partition: dict[int, list[dict]], num_ops: int, part_rows: dict[int, int]) -> list[dict]:
    """Verify each partition's op chain (raises AccountingError at the first gap) and return per-op totals."""
    totals = [
        {"op_index": i, "rows_in": 0, "rows_out": 0, "filtered": 0, "duplicates": 0, "failed": 0, "duration_s": 0.0}
        for i in range(num_ops)
    ]
    for pid, acct in per_partition.items():
        if [a["op_index"] for a in acct] != list(range(num_ops)):
            raise AccountingError(
                f"partition {pid}: accounting covers ops {[a['op_index'] for a in acct]}, expected 0..{num_ops - 1}"
            )
        problems = check_partition_chain(pid, part_rows[pid], acct)
        if problems:
            raise AccountingError(problems[0])
        for a in acct:
            t = totals[a["op_index"]]
            t["op_name"] = a["op_name"]
            for k in COUNT_KEYS:
                t[k] += a[k]
            t["duration_s"] = round(t["duration_s"] + a.get("duration_s", 0.0), 6)
    return totals
