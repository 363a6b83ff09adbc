"""Resume over a multi-file input whose partitions straddle file boundaries.

Input: a directory with a.jsonl (90 rows), b.jsonl (150) and c.jsonl (120):
360 rows in 5 partitions of 72, so no partition boundary falls on a file
boundary (90, 240) and partitions 1 and 3 each span two files.  Crashes hit
a partition spanning files 1-2 and one lying inside file 2 (segment 0), and
on the first resume one spanning files 2-3 in segment 1 (after the
deduplicator's keep mask).  The final resume must export exactly what a
clean run exports: every surviving row once, in input order, all of file 3.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.jobdir.events import read_events
from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

SIZES = {"a": 90, "b": 150, "c": 120}
# (file, row) -> text of an earlier row: the deduplicator (lowercase: true) drops these later copies,
# across file and partition boundaries.
DUPLICATES = {("b", 3): ("a", 80), ("c", 10): ("a", 5), ("c", 50): ("b", 100)}
TOO_SHORT = {("b", 120)}  # words_num_filter (min 5 words) drops it


def _text(f: str, i: int) -> str:
    return f"Row {f}{i:03d} of file {f}: clean filter dedup partition checkpoint resume export sample {i * 7 % 13}."


def _write_inputs(directory) -> list[str]:
    """The three files; a.jsonl has no trailing newline (its last row must still end at the file boundary)."""
    os.makedirs(directory)
    expected = []
    for f, n in SIZES.items():
        lines = []
        for i in range(n):
            text = _text(f, i)
            if (f, i) in DUPLICATES:
                src = DUPLICATES[(f, i)]
                text = _text(*src).upper() if f == "c" else _text(*src)
            elif (f, i) in TOO_SHORT:
                text = "too short"
            else:
                expected.append(f"{f}{i:03d}")
            lines.append(json.dumps({"id": f"{f}{i:03d}", "text": text, "meta": {"file": f}}))
        body = "\n".join(lines) + ("" if f == "a" else "\n")
        with open(os.path.join(directory, f"{f}.jsonl"), "w", encoding="utf-8") as fh:
            fh.write(body)
    return expected


def _state(dr) -> str:
    return str(dr.state).split(".")[-1].lower()


def test_crash_in_straddling_partitions_then_resume_matches_clean_run(make_recipe, run_dag, tmp_path):
    data = tmp_path / "input"
    expected_ids = _write_inputs(data)

    clean = make_recipe("mf_clean", parts=5, data=str(data))
    assert _state(run_dag(clean, {"job_id": "mf_clean"}, retries=0)) == "success"
    clean_out = clean.replace(".yaml", "_out.jsonl")
    assert [r["id"] for r in read_jsonl(clean_out)] == expected_ids  # the clean run itself is right

    work = os.path.join(os.path.dirname(clean), "work")
    with open(os.path.join(work, "mf_clean", "checkpoints", "partitioning_info.json")) as fh:
        info = json.load(fh)
    bounds = [(p["start_row"], p["end_row"]) for p in info["partitions"]]
    assert bounds == [(0, 72), (72, 144), (144, 216), (216, 288), (288, 360)]
    files_of = [[s["file"] for s in p["segments"]] for p in info["partitions"]]
    assert files_of == [[0], [0, 1], [1], [1, 2], [2]]  # partitions 1 and 3 straddle file boundaries

    recipe = make_recipe("mf_crash", parts=5, data=str(data))
    out = recipe.replace(".yaml", "_out.jsonl")
    job_dir = os.path.join(work, "mf_crash")
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(
            [
                {"point": "after_op", "partition_id": 1, "op_index": 1, "times": 1, "kind": "raise"},  # spans a/b
                {"point": "op_start", "partition_id": 2, "op_index": 3, "times": 1, "kind": "raise"},  # inside b
                {
                    "point": "after_op",
                    "partition_id": 3,
                    "op_index": 4,
                    "times": 1,
                    "kind": "raise",
                },  # spans b/c, seg 1
            ],
            fh,
        )

    assert _state(run_dag(recipe, {"job_id": "mf_crash"}, retries=0)) == "failed"
    assert not os.path.exists(out)
    fired = sorted(os.listdir(os.path.join(job_dir, "_fault_injection.fired")))
    assert fired == ["fault0_0", "fault1_0"]  # segment 1 never started

    assert _state(run_dag(recipe, {"resume": "mf_crash"}, retries=0)) == "failed"
    assert not os.path.exists(out)
    fired = sorted(os.listdir(os.path.join(job_dir, "_fault_injection.fired")))
    assert fired == ["fault0_0", "fault1_0", "fault2_0"]

    assert _state(run_dag(recipe, {"resume": "mf_crash"}, retries=0)) == "success"
    with open(out, "rb") as a, open(clean_out, "rb") as b:
        assert a.read() == b.read()
    rows = read_jsonl(out)
    ids = [r["id"] for r in rows]
    assert ids == expected_ids  # nothing skipped, nothing duplicated, input order
    assert len(set(ids)) == len(ids)
    assert [i for i in ids if i.startswith("c")] == [
        f"c{i:03d}" for i in range(SIZES["c"]) if ("c", i) not in DUPLICATES
    ]

    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        summary = json.load(fh)
    with open(os.path.join(work, "mf_clean", "job_summary.json")) as fh:
        clean_summary = json.load(fh)
    keys = ("op_index", "rows_in", "rows_out", "filtered", "duplicates", "failed")
    assert [{k: o[k] for k in keys} for o in summary["ops"]] == [{k: o[k] for k in keys} for o in clean_summary["ops"]]
    assert summary["ops"][-1]["duplicates"] == len(DUPLICATES)
    assert summary["ops"][2]["filtered"] == len(TOO_SHORT)

    # the crashed partitions resumed from their own checkpoints, not from the input
    loads = {
        (e["partition_id"], e["op_index"])
        for e in read_events(job_dir, "checkpoint_load")
        if e.get("airflow_task_id") == "partitions_seg0"
    }
    assert (1, 1) in loads and (2, 2) in loads
