"""Checks shared by the OpenLineage tests: a run facet says what the job summary says, field by field."""

from __future__ import annotations

#: The run facet's funnel fields and the summary's per-op keys they come from.
FUNNEL_KEYS = {
    "opIndex": "op_index",
    "opName": "op_name",
    "rowsIn": "rows_in",
    "rowsOut": "rows_out",
    "filtered": "filtered",
    "duplicates": "duplicates",
    "failed": "failed",
}


def check_facet_against_summary(facet: dict, summary: dict) -> None:
    """``facet``: a ``dataJuicerJob`` run facet as sent (JSON); ``summary``: the job's job_summary.json."""
    assert facet["jobId"] == summary["job_id"]
    assert facet["resumeToken"] == summary["resume_airflow_conf"]["resume"]
    assert facet["recipePath"] == summary["recipe_file"]
    assert facet["status"] == summary["status"]
    assert facet["partitionsCount"] == summary["input"]["partitions"]
    assert facet["inputRows"] == summary["input"]["total_rows"]
    assert facet["failedSamples"] == summary["failed_samples"]
    assert facet["failedSamplesByOp"] == summary["failed_samples_by_op"]
    assert [{k: s[k] for k in FUNNEL_KEYS} for s in facet["funnel"]] == [
        {camel: op[key] for camel, key in FUNNEL_KEYS.items()} for op in summary["ops"]
    ]
    if summary["export"].get("written"):
        assert facet["exportRows"] == summary["export"]["rows"]
    else:
        assert "exportRows" not in facet
