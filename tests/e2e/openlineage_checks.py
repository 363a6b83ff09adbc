"""OpenLineage events of a recipe DAG's run on ``airflow standalone``, read back from the file transport.

The server's provider writes each event to its own file (``E2E.openlineage_dir``).  A task's events are
found by the job id in their ``dataJuicerJob`` run facet and by the task in the job name
(``<dag_id>.<task_id>``), and checked field by field against the job's ``job_summary.json`` as it was
when the task ended.  A task reports its final state to Airflow before its listener's events are
written, so the reader waits for the events it needs.
"""

from __future__ import annotations

import glob
import json
import os
import time

from tests.helpers_openlineage import check_facet_against_summary

FACET = "dataJuicerJob"


def read_events(ol_dir: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(ol_dir, "event-*.json"))):
        try:
            with open(path, encoding="utf-8") as fh:
                out.append(json.loads(fh.read()))
        except (OSError, ValueError):
            continue  # being written: read again by the next poll
    return out


def job_events(ol_dir: str, job_id: str) -> list[dict]:
    return [
        e
        for e in read_events(ol_dir)
        if ((e.get("run") or {}).get("facets") or {}).get(FACET, {}).get("jobId") == job_id
    ]


def wait_events(ol_dir: str, job_id: str, wanted: list[tuple[str, str]], timeout: float = 120) -> list[dict]:
    """The job's events once one exists for each (task id, event type) in ``wanted``."""
    deadline = time.monotonic() + timeout
    while True:
        events = job_events(ol_dir, job_id)
        have = {(e["job"]["name"].rsplit(".", 1)[-1], e["eventType"]) for e in events}
        missing = [w for w in wanted if w not in have]
        if not missing or time.monotonic() > deadline:
            assert not missing, f"no OpenLineage event for {missing} of job {job_id}; have {sorted(have)}"
            return events
        time.sleep(1)


def one(events: list[dict], task_id: str, event_type: str, **facet: object) -> dict:
    found = [
        e
        for e in events
        if e["job"]["name"].rsplit(".", 1)[-1] == task_id
        and e["eventType"] == event_type
        and all(e["run"]["facets"][FACET].get(k) == v for k, v in facet.items())
    ]
    assert len(found) == 1, f"{len(found)} {event_type} events of {task_id} {facet}"
    return found[0]


def _dataset(d: dict) -> tuple[str, str]:
    return d["namespace"], d["name"]


def check_successful_run(ol_dir: str, job_id: str, summary: dict, partitions: int) -> None:
    """A completed job: validate, every partition task and export sent START and COMPLETE; the export's
    COMPLETE says what the summary says (funnel, failed samples, the export's rows and bytes)."""
    wanted = [("validate", "COMPLETE"), ("export", "START"), ("export", "COMPLETE")]
    events = wait_events(ol_dir, job_id, wanted + [("partitions_seg0", "COMPLETE")])
    corpus = ("file", summary["input"]["dataset_path"])
    done = one(events, "export", "COMPLETE")
    check_facet_against_summary(done["run"]["facets"][FACET], summary)
    assert [_dataset(d) for d in done["inputs"]] == [corpus]
    assert "text" in [f["name"] for f in done["inputs"][0]["facets"]["schema"]["fields"]]
    (out,) = done["outputs"]
    assert _dataset(out) == ("file", summary["export"]["path"])
    stats = out["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"]) == (summary["export"]["rows"], summary["export"]["bytes"])
    (source,) = out["facets"]["columnLineage"]["fields"]["text"]["inputFields"]
    assert (source["namespace"], source["name"], source["field"]) == (*corpus, "text")

    validated = one(events, "validate", "COMPLETE")["run"]["facets"][FACET]
    assert (validated["jobId"], validated["resumeToken"], validated["partitionsCount"]) == (
        summary["job_id"],
        summary["resume_airflow_conf"]["resume"],
        partitions,
    )
    seen = sorted(
        pid
        for e in events
        if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".partitions_seg0")
        for pid in e["run"]["facets"][FACET]["partitionIds"]
    )
    assert seen == list(range(partitions))  # every partition task reported its partitions
    for e in events:
        if e["job"]["name"].endswith(".partitions_seg0"):
            assert [_dataset(d) for d in e["inputs"]] == [corpus] and e["outputs"] == []


def check_failed_partition(ol_dir: str, job_id: str, failed_summary: dict, partition_id: int) -> None:
    """The failed partition task sent FAIL with the failed summary's funnel (its failure callback wrote
    the summary first); no export event was sent, the export never ran."""
    events = wait_events(ol_dir, job_id, [("partitions_seg0", "FAIL")])
    fail = one(events, "partitions_seg0", "FAIL", partitionIds=[partition_id])
    facet = fail["run"]["facets"][FACET]
    assert facet["status"] == "failed" and facet["step"] == "partitions" and facet["segmentIndex"] == 0
    check_facet_against_summary(facet, failed_summary)
    assert "errorMessage" in fail["run"]["facets"]  # the provider's: the task's exception
    assert not [e for e in events if e["job"]["name"].endswith(".export")]
