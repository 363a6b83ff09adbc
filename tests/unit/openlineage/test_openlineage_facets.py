"""OpenLineage facets of a real job directory, compared field by field with its ``job_summary.json``.

Real engine, real files: the jobs are run in-process by ``engine.run_job`` (inline, no Airflow, no
Ray), one to completion and one with a partition that fails; the facets are built from their job
directories as the operators build them, serialized as OpenLineage's client sends them, and the run
facet is checked against the JSON schema shipped in the package.
"""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from airflow_provider_dj.openlineage_facets.job_facts import dataset_name, input_location, read_job_facts
from airflow_provider_dj.openlineage_facets.schema import FACET_KEY, FACET_NAME, SCHEMA_URL, schema_path
from tests.helpers_openlineage import FUNNEL_KEYS, check_facet_against_summary
from tests.integration.crash_helpers import write_faults

pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is not installed")

ROWS = [
    {"id": 0, "text": "mail me at bob@example.com about the plan", "meta": {"lang": "en"}},
    {"id": 1, "text": "tiny", "meta": {"lang": "en"}},  # filtered (1 word)
    {"id": 2, "text": "the same words appear here twice", "meta": {"lang": "en"}},
    {"id": 3, "text": None, "meta": {"lang": "en"}},  # failed in op 0: no text
    {"id": 4, "text": "another   fine sample with words", "meta": {"lang": "de"}},
    {"id": 5, "text": "the same words appear here twice", "meta": {"lang": "en"}},  # duplicate of row 2
    {"id": 6, "text": "last row kept as is", "meta": {"lang": "fr"}},
    {"id": 7, "text": "no", "meta": {"lang": "en"}},  # filtered
]
PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 3, max_num: 100}
  - document_deduplicator:
"""


def _recipe(root, name: str) -> str:
    data = root / "in.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = root / f"{name}.yaml"
    recipe.write_text(
        f"project_name: {name}\ndataset_path: {data}\nexport_path: {root / name}.jsonl\nwork_dir: {root / 'work'}\n"
        f"partition: {{mode: manual, num_of_partitions: 2}}\ncheckpoint: {{strategy: every_op}}\n{PROCESS}"
    )
    return str(recipe)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """A completed job and a job whose partition 1 failed after op 1 (both in-process, inline)."""
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.execution.ray_dispatch import PartitionFailedError

    root = tmp_path_factory.mktemp("ol_jobs")
    done = run_job(_recipe(root, "ol_done"), job_id="ol_done", workers=1)
    failing_dir = str(root / "work" / "ol_fail")
    write_faults(failing_dir, [{"point": "after_op", "partition_id": 1, "op_index": 1, "times": 1, "kind": "raise"}])
    with pytest.raises(PartitionFailedError):
        run_job(_recipe(root, "ol_fail"), job_id="ol_fail", workers=1)
    return {"done": done.job_dir, "failed": failing_dir, "root": root}


def _summary(job_dir: str) -> dict:
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        return json.load(fh)


def _run_facet_json(lineage) -> dict:
    """The run facet as the provider sends it: through its secrets redactor, then serialized."""
    from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
    from openlineage.client.serde import Serde

    redacted = OpenLineageAdapter()._redacter.redact(lineage.run_facets[FACET_KEY], max_depth=20)
    return json.loads(Serde.to_json(redacted))


def _validate_against_packaged_schema(facet: dict) -> None:
    with open(schema_path()) as fh:
        schema = json.load(fh)
    own = schema["$defs"][FACET_NAME]["allOf"][1]  # the first member is OpenLineage's RunFacet (by URL)
    jsonschema.validate(facet, {"$defs": schema["$defs"], **own})
    assert facet["_schemaURL"] == SCHEMA_URL
    assert SCHEMA_URL.split("#")[0].endswith(os.path.basename(schema_path()))
    assert SCHEMA_URL.split("#")[0] == schema["$id"]


def test_a_completed_jobs_facts_are_its_summarys(jobs):
    summary = _summary(jobs["done"])
    facts = read_job_facts(jobs["done"])
    assert summary["status"] == "completed" and summary["failed_samples"] == 1  # the row without text
    assert facts.job_id == summary["job_id"] and facts.resume_token == summary["resume_airflow_conf"]["resume"]
    assert facts.export.written and facts.export.rows == summary["export"]["rows"]
    assert facts.export.bytes == summary["export"]["bytes"] == os.path.getsize(summary["export"]["path"])
    assert facts.history_version is None  # no dedup_history in the recipe
    assert facts.text_key == "text"
    fields = {f.name: f for f in facts.inputs[0].fields}
    assert fields["text"].type == "string" and fields["id"].type == "int64"
    assert [f.name for f in fields["meta"].fields] == ["lang"]


@pytest.mark.parametrize(
    ("step", "segment", "reads_input", "writes_export"),
    [
        ("validate", None, True, False),
        ("partitions", 0, True, False),
        ("global", None, False, False),
        ("partitions", 1, False, False),
        ("export", None, True, True),
    ],
)
def test_each_step_reports_its_datasets_and_the_jobs_run_facet(jobs, step, segment, reads_input, writes_export):
    from openlineage.client.serde import Serde

    from airflow_provider_dj.openlineage_facets.lineage import StepScope, operator_lineage

    job_dir = jobs["done"]
    summary = _summary(job_dir)
    scope = StepScope(step, segment_index=segment, partition_ids=[0, 1] if step == "partitions" else None)
    lineage = operator_lineage(job_dir, scope)
    facet = _run_facet_json(lineage)
    check_facet_against_summary(facet, summary)
    _validate_against_packaged_schema(facet)
    assert facet["step"] == step and facet.get("segmentIndex") == segment

    inputs = [json.loads(Serde.to_json(d)) for d in lineage.inputs]
    if reads_input:
        assert [(d["namespace"], d["name"]) for d in inputs] == [("file", str(jobs["root"] / "in.jsonl"))]
        assert [f["name"] for f in inputs[0]["facets"]["schema"]["fields"]] == ["id", "text", "meta"]
    else:
        assert inputs == []
    outputs = [json.loads(Serde.to_json(d)) for d in lineage.outputs]
    if not writes_export:
        assert outputs == []
        return
    (out,) = outputs
    assert (out["namespace"], out["name"]) == ("file", summary["export"]["path"])
    stats = out["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"]) == (summary["export"]["rows"], summary["export"]["bytes"])
    with open(summary["export"]["path"]) as fh:
        first = json.loads(fh.readline())
    assert [f["name"] for f in out["facets"]["schema"]["fields"]] == list(first)
    (source,) = out["facets"]["columnLineage"]["fields"]["text"]["inputFields"]
    assert (source["namespace"], source["name"], source["field"]) == ("file", str(jobs["root"] / "in.jsonl"), "text")
    assert [(t["type"], t["subtype"], t["description"]) for t in source["transformations"]] == [
        ("DIRECT", "TRANSFORMATION", "clean_email_mapper, whitespace_normalization_mapper"),
        ("INDIRECT", "FILTER", "words_num_filter, document_deduplicator"),
    ]


def test_a_failed_partitions_facet_is_the_failed_summarys(jobs):
    from airflow_provider_dj.openlineage_facets.lineage import StepScope, operator_lineage

    summary = _summary(jobs["failed"])
    assert summary["status"] == "failed"
    assert [len(p["accounting"]) for p in summary["partitions"]] == [3, 2]  # partition 1 failed after op 1
    # The failing task's FAIL event: the summary was written by its failure callback, after it started.
    scope = StepScope("partitions", segment_index=0, partition_ids=[1])
    lineage = operator_lineage(jobs["failed"], scope, final_since=summary["end_time"] - 60)
    facet = _run_facet_json(lineage)
    check_facet_against_summary(facet, summary)
    _validate_against_packaged_schema(facet)
    assert facet["partitionIds"] == [1]
    # Op 2 counts partition 0's rows only; op 3 (global) never ran.
    assert (
        [s["partitionsDone"] for s in facet["funnel"]] == [o["partitions_done"] for o in summary["ops"]] == [2, 2, 1, 0]
    )


def test_a_failed_summary_is_reported_only_by_the_failure_it_records(jobs):
    """A cleared task that runs again, or a task that failed before the summary was written (a retry
    pending), reports the view built from the job directory, status running: the failed summary stays on
    disk, stale, until the job ends again."""
    from airflow_provider_dj.engine.job.summary import build_job_summary

    job_dir = jobs["failed"]
    summary = _summary(job_dir)
    view = build_job_summary(job_dir, "running")
    for since in (None, summary["end_time"] + 1):
        facts = read_job_facts(job_dir, with_schema=False, final_since=since)
        assert facts.status == "running" and facts.inputs[0].fields == ()
        assert list(facts.funnel) == [
            {**{camel: op[key] for camel, key in FUNNEL_KEYS.items()}, "partitionsDone": op["partitions_done"]}
            for op in view["ops"]
        ]
    assert read_job_facts(job_dir, with_schema=False, final_since=summary["end_time"]).status == "failed"


def test_the_pinned_history_version_is_reported(jobs, tmp_path):
    import shutil

    from airflow_provider_dj.engine.history.pin import write_pin

    job_dir = str(tmp_path / "pinned")
    shutil.copytree(jobs["done"], job_dir)
    write_pin(job_dir, {"path": str(tmp_path / "history"), "version": 7, "ops": {}})
    assert read_job_facts(job_dir, with_schema=False).history_version == 7


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data/in/corpus.jsonl", ("file", "/data/in/corpus.jsonl")),
        ("file:///data/in/corpus.jsonl", ("file", "/data/in/corpus.jsonl")),
        ("s3://bucket/crawl/2026/part-0.jsonl.gz", ("s3://bucket", "crawl/2026/part-0.jsonl.gz")),
        ("gs://bucket/crawl/", ("gs://bucket", "crawl")),
    ],
)
def test_dataset_names_follow_openlineages_conventions(path, expected):
    assert dataset_name(path) == expected


def test_a_glob_or_directory_is_one_dataset_named_by_its_directory():
    files = ["/data/crawl/a.jsonl", "/data/crawl/b.jsonl"]
    assert input_location("/data/crawl/*.jsonl", files) == "/data/crawl"
    assert input_location("/data/crawl/", files) == "/data/crawl"
    assert input_location("s3://bucket/crawl/2026-*/*.jsonl", ["s3://bucket/crawl/2026-01/a.jsonl"]) == (
        "s3://bucket/crawl"
    )
    assert input_location("/data/one.jsonl", ["/data/one.jsonl"]) == "/data/one.jsonl"


def test_the_schema_ships_as_package_data_and_the_extra_pins_a_provider_for_this_airflow():
    import fnmatch

    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)
    patterns = project["tool"]["setuptools"]["package-data"]["airflow_provider_dj.openlineage_facets"]
    rel = os.path.relpath(schema_path(), os.path.join(root, "airflow_provider_dj", "openlineage_facets"))
    assert os.path.isfile(schema_path()) and any(fnmatch.fnmatch(rel, p) for p in patterns)
    extras = project["project"]["optional-dependencies"]
    assert extras["openlineage"] == ["apache-airflow-providers-openlineage>=2.20,<3"]
    assert set(extras["openlineage"]) <= set(extras["test"])  # the suite exercises it
