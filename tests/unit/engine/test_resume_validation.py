"""Strict resume: every refusal names what differs and leaves the job directory byte-for-byte unchanged."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timezone

import pytest
import xxhash

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.completed_export import verify_completed_export
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.resume import ResumeRefusedError
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.identity import JobIdError, job_id_for_run, new_job_id, validate_job_id
from airflow_provider_dj.engine.output.errors import ExportMismatchError
from airflow_provider_dj.testing.sample_corpus import write_corpus

RECIPE = """\
project_name: resume_unit
dataset_path: {data}
export_path: {out}
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{strategy: every_op}}
process:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 3}}
  - document_deduplicator:
"""


def snapshot(root: str) -> dict:
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, xxhash.xxh3_64_hexdigest(open(p, "rb").read()))
    return out


@pytest.fixture
def job(tmp_path):
    """A job with segment 0 done for all partitions (mid-run), and its recipe file."""
    data = write_corpus(str(tmp_path / "in.jsonl"), 120, seed=9)
    rpath = tmp_path / "r.yaml"
    rpath.write_text(RECIPE.format(data=data, out=tmp_path / "out.jsonl"))
    prepared = prepare_job(load_recipe(rpath), job_id="j", airflow_run_id="run_1")
    for pid in range(3):
        run_segment(prepared.job_dir, 0, pid)
    job_lock.release(prepared.job_dir, "run_1")
    return {"dir": prepared.job_dir, "recipe": rpath, "data": data, "tmp": tmp_path}


def _resume(job, overrides=None, run_id="run_2"):
    recipe = load_recipe(job["recipe"], dict({"resume": "j"}, **(overrides or {})))
    return prepare_job(recipe, job_id="j", airflow_run_id=run_id)


def _refused(job, reason, match, overrides=None):
    before = snapshot(job["dir"])
    with pytest.raises(ResumeRefusedError) as ei:
        _resume(job, overrides)
    assert ei.value.reason == reason, str(ei.value)
    assert re.search(match, str(ei.value)), str(ei.value)
    assert snapshot(job["dir"]) == before  # file list, sizes, mtimes, contents
    return ei.value


def test_clean_resume_reports_completed_checkpoints_and_accepts_non_result_changes(job):
    p = _resume(job, {"partition": {"num_of_partitions": 7}, "checkpoint": {"strategy": "every_n_ops", "n_ops": 2}})
    assert p.resumed and not p.job_complete and p.num_partitions == 3  # saved boundaries win
    assert any("partition.num_of_partitions" in c for c in p.accepted_changes)
    assert any("checkpoint.strategy" in c for c in p.accepted_changes)
    assert all(g.completed[str(g.partition_ids[0])]["last_op"] == 1 for g in p.groups)
    from airflow_provider_dj.engine.jobdir.events import read_events

    steps = [e["name"] for e in read_events(job["dir"], "validation_step")]
    assert steps == [
        "locate",
        "config_matches",
        "load_partitioning",
        "recreate_partitions",
        "verify_hashes",
        "completed_checkpoints",
    ]


def test_metadata_missing(job, tmp_path):
    os.remove(os.path.join(job["dir"], "metadata", "effective_config.json"))
    _refused(job, "metadata_missing", "lacks metadata/effective_config.json")


def test_no_job_directory(job):
    with pytest.raises(ResumeRefusedError, match="no job directory"):
        prepare_job(load_recipe(job["recipe"], {"resume": "nope"}), job_id="nope")
    assert not os.path.exists(os.path.join(os.path.dirname(job["dir"]), "nope"))


def _edit_info(job, fn):
    path = os.path.join(job["dir"], "checkpoints", "partitioning_info.json")
    info = json.load(open(path))
    fn(info)
    with open(path, "w") as fh:
        json.dump(info, fh)


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda i: i["partitions"][1].update(start_row=i["partitions"][1]["start_row"] + 1), "gap"),
        (lambda i: i["partitions"][1].update(start_row=i["partitions"][1]["start_row"] - 1), "overlap"),
        (
            lambda i: i["partitions"][2].update(end_row=999, num_rows=999 - i["partitions"][2]["start_row"]),
            "cover rows 0-999 but the job recorded 120",
        ),
        (lambda i: i["partitions"][0].update(end_row="40"), "not an integer"),
    ],
)
def test_invalid_boundaries(job, edit, match):
    _edit_info(job, edit)
    _refused(job, "boundaries_invalid", match)


def test_metadata_without_hashes_is_outdated(job):
    _edit_info(job, lambda i: [p.pop("content_hash") for p in i["partitions"]])
    _refused(job, "metadata_outdated", "without full-content hashes")


def test_old_metadata_version(job):
    _edit_info(job, lambda i: i.update(version=0))
    _refused(job, "metadata_outdated", "version 0")


def test_different_hash_algorithm(job):
    _edit_info(job, lambda i: i.update(algorithm="sha256/json-rows-v0"))
    _refused(job, "algorithm_changed", "sha256/json-rows-v0")


def _rewrite_input(job, fn):
    lines = open(job["data"]).read().splitlines(keepends=True)
    open(job["data"], "w").write("".join(fn(lines)))


@pytest.mark.parametrize(
    "fn,reason,match",
    [
        (lambda ls: ls + [ls[0]], "input_changed", "changed size"),  # row appended
        (lambda ls: ls[:-1], "input_changed", "changed size"),  # row removed
        (
            lambda ls: ls[:50] + [ls[50].replace("a", "e", 1)] + ls[51:],
            "hash_mismatch",
            r"partition 1 \(rows 40-79\)",
        ),  # same-size edit
        (lambda ls: ls[:10] + [ls[11], ls[10]] + ls[12:], "hash_mismatch", r"partition 0 \(rows 0-39\)"),  # reordered
    ],
)
def test_input_changes_are_refused(job, fn, reason, match):
    _rewrite_input(job, fn)
    _refused(job, reason, match)


def test_files_added_or_renamed(job):
    folder = job["tmp"] / "folder"
    folder.mkdir()
    # Re-plan a job over a directory input, then add a file and rename another.
    shutil.copy(job["data"], folder / "a.jsonl")
    shutil.copy(job["data"], folder / "b.jsonl")
    rpath = job["tmp"] / "dir.yaml"
    rpath.write_text(RECIPE.format(data=folder, out=job["tmp"] / "o2.jsonl"))
    prepare_job(load_recipe(rpath), job_id="d", airflow_run_id="r1")
    jd = os.path.join(job["tmp"], "d")
    job_lock.release(jd, "r1")
    d = {"dir": jd, "recipe": rpath}
    (folder / "c.jsonl").write_text(open(job["data"]).readline())
    before = snapshot(jd)
    with pytest.raises(ResumeRefusedError, match=r"added \[.*c.jsonl"):
        prepare_job(load_recipe(rpath, {"resume": "d"}), job_id="d")
    os.remove(folder / "c.jsonl")
    os.rename(folder / "b.jsonl", folder / "b2.jsonl")
    with pytest.raises(ResumeRefusedError, match=r"missing \[.*b.jsonl"):
        prepare_job(load_recipe(rpath, {"resume": "d"}), job_id="d")
    assert snapshot(jd) == before and d


def test_result_affecting_config_change_shows_a_diff(job):
    text = open(job["recipe"]).read().replace("min_num: 3", "min_num: 4")
    open(job["recipe"], "w").write(text)
    err = _refused(job, "config_changed", r"process.*min_num.*3.*4|process")
    assert "affect results" in str(err)


def test_completed_job_does_no_work_and_reverifies_export(job):
    resolve_global_op(job["dir"], 2)
    for pid in range(3):
        run_segment(job["dir"], 1, pid)
    export_job(job["dir"])
    before = snapshot(job["dir"])
    p = _resume(job)
    assert p.job_complete and p.groups == []
    verify_completed_export(job["dir"])
    after = snapshot(job["dir"])
    assert {k: v for k, v in after.items() if not k.startswith("events_")} == {
        k: v for k, v in before.items() if not k.startswith("events_")
    }
    out = job["tmp"] / "out.jsonl"
    out.write_text(out.read_text() + "{}\n")
    with pytest.raises(ExportMismatchError, match="changed since"):
        verify_completed_export(job["dir"])


def test_second_runner_is_refused_with_the_owner_identity(job):
    job_lock.acquire(job["dir"], job_lock.owner_identity("run_owner"))
    before = snapshot(job["dir"])
    with pytest.raises(job_lock.JobLockedError, match=r"host=\S+ pid=\d+ airflow_run_id=run_owner started="):
        _resume(job, run_id="run_intruder")
    assert snapshot(job["dir"]) == before
    _resume(job, run_id="run_owner")  # the owner itself (a retry, a cleared run) passes


def test_stale_locks_are_taken_over(job, monkeypatch):
    dead = job_lock.owner_identity(None, pid=2**22 + 12345)  # no such pid
    dead["pid_is_run"] = True
    job_lock.acquire(job["dir"], dead)
    p = _resume(job, run_id="run_new")
    assert "took over a stale lock" in p.lock_note and "gone" in p.lock_note
    old = job_lock.read_lock(job["dir"])
    old.update(airflow_run_id="other_run", heartbeat=0)
    open(os.path.join(job["dir"], "metadata", "runner.lock"), "w").write(json.dumps(old))
    p = _resume(job, run_id="run_newer")
    assert "no heartbeat" in p.lock_note


def test_job_ids():
    assert re.fullmatch(r"\d{8}_\d{6}_[0-9a-f]{6}", new_job_id())
    night = datetime(2026, 11, 28, 2, 0, tzinfo=timezone.utc)
    a = job_id_for_run("nightly", "scheduled__2026-11-28T02:00:00+00:00", night)
    assert a == job_id_for_run("nightly", "scheduled__2026-11-28T02:00:00+00:00", night)  # same night: same job
    assert re.fullmatch(r"20261128_020000_[0-9a-f]{6}", a)
    b = job_id_for_run(
        "nightly", "scheduled__2026-11-29T02:00:00+00:00", datetime(2026, 11, 29, 2, tzinfo=timezone.utc)
    )
    assert a != b
    for bad in ("../x", "a/b", "/abs", "..", ".hidden", "x" * 129, ""):
        with pytest.raises(JobIdError):
            validate_job_id(bad)


def test_job_id_and_resume_must_agree(job):
    from airflow_provider_dj.engine.config.recipe import RecipeError

    with pytest.raises(RecipeError, match="job_id"):
        load_recipe(job["recipe"], {"job_id": "a", "resume": "b"})


def test_changing_only_how_the_export_is_serialized_is_accepted_on_resume():
    """export_in_parallel changes how the export is written, not its bytes: no reason to refuse a resume."""
    from airflow_provider_dj.engine.job.resume import config_diff

    refused, accepted = config_diff(
        {"export_in_parallel": True, "process": [{"a": {}}]}, {"export_in_parallel": False, "process": [{"a": {}}]}
    )
    assert refused == [] and len(accepted) == 1 and "export_in_parallel" in accepted[0]
    refused, _ = config_diff({"keep_hashes_in_res_ds": False}, {"keep_hashes_in_res_ds": True})
    assert refused and "keep_hashes_in_res_ds" in refused[0]  # that one changes the exported rows
