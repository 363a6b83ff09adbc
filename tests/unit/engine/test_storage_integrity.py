"""Torn and changed files: one flipped byte after commit is caught at load, never trusted, and recomputed or refused.

Real files, in-process engine calls (prepare_job, run_segment,
resolve_global_op, export_job); no Airflow, no Ray (the integration module
tests/integration/test_storage_faults.py runs the same faults through a DAG).
"""

from __future__ import annotations

import glob
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.completed_export import verify_completed_export
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.resume import ResumeRefusedError
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.output.errors import ExportMismatchError
from airflow_provider_dj.ops import registry
from airflow_provider_dj.ops.base import ROW_ERROR_COLUMN, Mapper
from airflow_provider_dj.testing.sample_corpus import write_corpus


class FlagEveryNinthMapper(Mapper):
    """Uppercases text and flags every row whose id is a multiple of 9 as failed (so failed/ files exist)."""

    name = "flag_every_ninth_mapper_for_integrity_tests"

    def process_table(self, table):
        bad = pa.array([i % 9 == 0 for i in table.column("id").to_pylist()])
        texts = pc.if_else(bad, pa.scalar(None, pa.string()), pc.utf8_upper(table.column("text")))
        out = table.set_column(table.column_names.index("text"), "text", texts)
        errors = pc.if_else(bad, pa.scalar("InvalidAnswer: id divisible by 9"), pa.scalar(None, pa.string()))
        return out.append_column(ROW_ERROR_COLUMN, errors)


@pytest.fixture(autouse=True)
def _test_op(monkeypatch):
    """The test op is registered for these tests only (the generated op reference lists the registry)."""
    registry.load_builtin_ops()
    monkeypatch.setitem(registry._REGISTRY, FlagEveryNinthMapper.name, FlagEveryNinthMapper)


RECIPE = """\
project_name: integrity_unit
dataset_path: {data}
export_path: {out}
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{strategy: every_op}}
open_tracer: true
trace_num: 3
process:
  - flag_every_ninth_mapper_for_integrity_tests:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 3}}
  - document_deduplicator:
"""

WS, FLT = "whitespace_normalization_mapper", "words_num_filter"


def _run_all(job_dir: str, n: int = 3) -> None:
    for pid in range(n):
        run_segment(job_dir, 0, pid)
    resolve_global_op(job_dir, 3)
    for pid in range(n):
        run_segment(job_dir, 1, pid)
    export_job(job_dir)


def _new_job(tmp_path, name: str, data: str) -> dict:
    rpath = tmp_path / f"{name}.yaml"
    out = tmp_path / f"{name}_out.jsonl"
    rpath.write_text(RECIPE.format(data=data, out=out))
    prepared = prepare_job(load_recipe(rpath), job_id=name, airflow_run_id=f"{name}_run1")
    job_lock.release(prepared.job_dir, f"{name}_run1")
    return {"dir": prepared.job_dir, "recipe": rpath, "out": str(out)}


@pytest.fixture
def data(tmp_path) -> str:
    return write_corpus(str(tmp_path / "in.jsonl"), 150, seed=5)


@pytest.fixture
def clean(tmp_path, data) -> bytes:
    job = _new_job(tmp_path, "clean", data)
    _run_all(job["dir"])
    return open(job["out"], "rb").read()


def flip_byte(path: str, at: float = 0.5) -> int:
    """Change one byte of ``path`` in place (a bit rot / a stray write); returns its offset."""
    with open(path, "r+b") as fh:
        raw = bytearray(fh.read())
        i = int(len(raw) * at)
        raw[i] ^= 0x01
        fh.seek(0)
        fh.write(raw)
    return i


def _cp(job_dir: str, op: int, name: str, pid: int, ext: str = "parquet") -> str:
    return os.path.join(job_dir, "checkpoints", f"checkpoint_op_{op:03d}_{name}", f"partition_{pid:05d}.{ext}")


@pytest.mark.parametrize("op_index,op_name", [(1, WS), (2, FLT)])
def test_flipped_byte_in_a_committed_checkpoint_is_rejected_and_recomputed(tmp_path, data, clean, op_index, op_name):
    job = _new_job(tmp_path, "flip", data)
    for pid in range(3):
        run_segment(job["dir"], 0, pid)
    path = _cp(job["dir"], op_index, op_name, 1)
    flip_byte(path)

    res = run_segment(job["dir"], 0, 1)  # the partition's task, re-run (retry / clear)
    assert res.resumed_from_op == op_index - 1 and res.ops_run == list(range(op_index, 3))
    [rej] = read_events(job["dir"], "checkpoint_rejected")
    assert rej["checkpoint_path"] == path and rej["partition_id"] == 1 and rej["op_index"] == op_index
    assert "changed after commit" in rej["error_message"]
    # The damaged commit was set aside, not deleted; the recomputed checkpoint is committed anew.
    assert glob.glob(path.replace(".parquet", ".commit.json.rejected-*"))
    assert os.path.exists(path.replace(".parquet", ".commit.json"))
    resolve_global_op(job["dir"], 3)
    for pid in range(3):
        run_segment(job["dir"], 1, pid)
    export_job(job["dir"])
    assert open(job["out"], "rb").read() == clean


def test_final_checkpoint_damaged_before_the_export_fails_it_until_the_partition_is_recomputed(tmp_path, data, clean):
    from airflow_provider_dj.engine.job.export import MissingFinalCheckpointError

    job = _new_job(tmp_path, "final", data)
    for pid in range(3):
        run_segment(job["dir"], 0, pid)
    resolve_global_op(job["dir"], 3)
    for pid in range(3):
        run_segment(job["dir"], 1, pid)
    final = _cp(job["dir"], 3, "document_deduplicator", 2)
    flip_byte(final)
    with pytest.raises(MissingFinalCheckpointError, match="partition 2: final checkpoint is torn; clear its task"):
        export_job(job["dir"])
    assert not os.path.exists(job["out"])
    [rej] = read_events(job["dir"], "checkpoint_rejected")
    assert rej["checkpoint_path"] == final
    with pytest.raises(MissingFinalCheckpointError, match="partition 2 .* has no committed final output"):
        export_job(job["dir"])  # retrying the export alone cannot help: the marker was set aside
    res = run_segment(job["dir"], 1, 2)  # clearing the partition's task recomputes it
    assert res.ops_run == [3]
    export_job(job["dir"])
    assert open(job["out"], "rb").read() == clean


def test_a_damaged_export_is_written_again_after_the_summary_is_moved_aside(tmp_path, data, clean):
    job = _new_job(tmp_path, "reexp", data)
    _run_all(job["dir"])
    flip_byte(job["out"], 0.3)
    summary = os.path.join(job["dir"], "job_summary.json")
    os.rename(summary, summary + ".damaged-export")
    prepared = prepare_job(load_recipe(job["recipe"], {"resume": "reexp"}), job_id="reexp", airflow_run_id="r2")
    assert prepared.resumed and not prepared.job_complete
    for pid in range(3):
        assert run_segment(job["dir"], 0, pid).skipped and run_segment(job["dir"], 1, pid).skipped
    resolve_global_op(job["dir"], 3)
    export_job(job["dir"])
    assert open(job["out"], "rb").read() == clean
    assert verify_completed_export(job["dir"])["integrity_problems"] == []


def test_torn_checkpoint_is_rejected_by_size(tmp_path, data):
    job = _new_job(tmp_path, "torn", data)
    run_segment(job["dir"], 0, 0)
    path = _cp(job["dir"], 2, FLT, 0)
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)
    res = run_segment(job["dir"], 0, 0)
    assert res.resumed_from_op == 1 and res.ops_run == [2]
    [rej] = read_events(job["dir"], "checkpoint_rejected")
    assert rej["checkpoint_path"] == path and "(torn)" in rej["error_message"]


def test_changed_failed_samples_file_invalidates_the_checkpoints_that_count_it(tmp_path, data, clean):
    job = _new_job(tmp_path, "failed", data)
    for pid in range(3):
        run_segment(job["dir"], 0, pid)
    failed = os.path.join(
        job["dir"], "failed", "op_000_flag_every_ninth_mapper_for_integrity_tests", "partition_00002.jsonl"
    )
    original = open(failed, "rb").read()
    assert original.count(b"\n") > 0
    flip_byte(failed)
    res = run_segment(job["dir"], 0, 2)
    assert res.resumed_from_op == -1 and res.ops_run == [0, 1, 2]  # every checkpoint after op 0 counted it
    rejected = read_events(job["dir"], "checkpoint_rejected")
    assert rejected and all(failed in e["error_message"] for e in rejected)
    assert open(failed, "rb").read() == original  # recomputed, byte for byte
    resolve_global_op(job["dir"], 3)
    for pid in range(3):
        run_segment(job["dir"], 1, pid)
    summary = export_job(job["dir"])
    assert open(job["out"], "rb").read() == clean
    seals = [a["failed_file"] for p in summary["partitions"] for a in p["accounting"] if "failed_file" in a]
    assert {s["path"] for s in seals} == {
        f"failed/op_000_flag_every_ninth_mapper_for_integrity_tests/partition_{p:05d}.jsonl" for p in range(3)
    }


@pytest.mark.parametrize("where", ["hash_digit", "byte_count", "json_syntax"])
def test_flipped_byte_in_partitioning_info_refuses_resume_naming_the_file(tmp_path, data, where):
    from tests.unit.engine.test_resume_validation import snapshot

    job = _new_job(tmp_path, "pinfo", data)
    for pid in range(3):
        run_segment(job["dir"], 0, pid)
    path = os.path.join(job["dir"], "checkpoints", "partitioning_info.json")
    text = open(path, encoding="utf-8").read()
    info = json.loads(text)
    if where == "hash_digit":  # still valid JSON, same structure: only the checksum can tell
        h = info["partitions"][1]["content_hash"]
        i = text.index(h) + 3
    elif where == "byte_count":
        i = text.index(f'"nbytes": {info["partitions"][0]["nbytes"]}') + len('"nbytes": ')
    else:
        i = text.index('"partitions"') - 1
    raw = bytearray(text.encode())
    raw[i] = ord("7") if raw[i] != ord("7") else ord("8")
    if where == "json_syntax":
        raw[i] = ord("x")
    open(path, "wb").write(bytes(raw))
    before = snapshot(job["dir"])
    with pytest.raises(ResumeRefusedError) as ei:
        prepare_job(load_recipe(job["recipe"], {"resume": "pinfo"}), job_id="pinfo", airflow_run_id="r2")
    assert ei.value.reason == "metadata_corrupt", str(ei.value)
    assert path in str(ei.value) and "Nothing in the job directory was changed" in str(ei.value)
    assert snapshot(job["dir"]) == before  # refused before anything was written, nothing deleted


def test_partitioning_info_version_1_without_checksum_still_resumes(tmp_path, data):
    job = _new_job(tmp_path, "legacy", data)
    path = os.path.join(job["dir"], "checkpoints", "partitioning_info.json")
    info = json.load(open(path))
    info.pop("checksum_xxh3_128")
    info["version"] = 1
    json.dump(info, open(path, "w"), indent=2)
    steps = []
    prepared = prepare_job(
        load_recipe(job["recipe"], {"resume": "legacy"}), job_id="legacy", airflow_run_id="r2", log_step=steps.append
    )
    assert prepared.resumed and any("written before checksums: not verified" in s for s in steps)


def test_flipped_byte_in_the_export_of_a_completed_job_is_refused_naming_it(tmp_path, data, clean):
    job = _new_job(tmp_path, "exp", data)
    _run_all(job["dir"])
    assert verify_completed_export(job["dir"])["integrity_problems"] == []
    flip_byte(job["out"], 0.9)
    changed = open(job["out"], "rb").read()
    with pytest.raises(ExportMismatchError, match="changed since") as ei:
        verify_completed_export(job["dir"])
    assert job["out"] in str(ei.value) and "nothing was rewritten" in str(ei.value)
    assert open(job["out"], "rb").read() == changed


def test_changed_trace_and_failed_files_of_a_completed_job_are_reported_by_path(tmp_path, data):
    job = _new_job(tmp_path, "side", data)
    _run_all(job["dir"])
    trace = os.path.join(job["dir"], "trace", f"sample_trace-{WS}.jsonl")
    failed = os.path.join(
        job["dir"], "failed", "op_000_flag_every_ninth_mapper_for_integrity_tests", "partition_00000.jsonl"
    )
    assert os.path.getsize(trace) > 0
    flip_byte(trace)
    flip_byte(failed)
    problems = verify_completed_export(job["dir"])["integrity_problems"]
    assert len(problems) == 2
    assert any(failed in p and "changed after commit" in p for p in problems)
    assert any(p.startswith(trace) and "changed after commit" in p for p in problems)


def test_flipped_trace_candidates_are_not_merged(tmp_path, data, caplog):
    from airflow_provider_dj.engine.observe.tracer import merge_traces

    job = _new_job(tmp_path, "cand", data)
    _run_all(job["dir"])
    cand = os.path.join(job["dir"], "trace", "parts", f"op_001_{WS}", "partition_00000.json")
    doc = json.load(open(cand))
    assert doc["entries"]
    text = open(cand, encoding="utf-8").read()
    # change one character of one traced text: still valid JSON
    i = text.index("processed_text") + len('processed_text":"') + 2
    raw = bytearray(text.encode())
    raw[i] = ord("Q") if raw[i] != ord("Q") else ord("R")
    open(cand, "wb").write(bytes(raw))
    report = merge_traces(job["dir"])
    [ws] = [o for o in report["ops"] if o["op_name"] == WS]
    assert ws["complete"] is False and 0 in ws["partitions_without_candidates"]
    assert cand in caplog.text and "damaged trace candidates" in caplog.text


# -- disk full, through the fault seam (a real full file system: test_storage_full_fs below) ----------------
def _no_temp_files(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if ".tmp-" in f]


def test_enospc_at_a_checkpoint_write_fails_clearly_then_resumes(tmp_path, data, clean, monkeypatch):
    from airflow_provider_dj.core.fs import StorageFullError

    job = _new_job(tmp_path, "full", data)
    monkeypatch.setenv("DJ_CHECKPOINT_PIPELINE", "0")  # the background writer re-raises the same error; keep it simple
    monkeypatch.setenv("DJ_STORAGE_ENOSPC", f"checkpoint_op_002_{FLT}/partition_00001")
    with pytest.raises(StorageFullError) as ei:
        run_segment(job["dir"], 0, 1)
    msg = str(ei.value)
    assert "No space left on device" in msg and "writing the checkpoint of op 2 (words_num_filter) partition 1" in msg
    assert _cp(job["dir"], 2, FLT, 1) in msg and "retry the task" in msg
    assert not os.path.exists(_cp(job["dir"], 2, FLT, 1, "commit.json"))
    assert not os.path.exists(_cp(job["dir"], 2, FLT, 1)) and _no_temp_files(job["dir"]) == []
    monkeypatch.delenv("DJ_STORAGE_ENOSPC")  # space freed
    res = run_segment(job["dir"], 0, 1)
    assert res.resumed_from_op == 1 and res.ops_run == [2]
    for pid in (0, 2):
        run_segment(job["dir"], 0, pid)
    resolve_global_op(job["dir"], 3)
    for pid in range(3):
        run_segment(job["dir"], 1, pid)
    export_job(job["dir"])
    assert open(job["out"], "rb").read() == clean


def test_enospc_during_the_export_leaves_no_export_and_a_retry_matches(tmp_path, data, clean, monkeypatch):
    from airflow_provider_dj.core.fs import StorageFullError

    job = _new_job(tmp_path, "fullexp", data)
    for pid in range(3):
        run_segment(job["dir"], 0, pid)
    resolve_global_op(job["dir"], 3)
    for pid in range(3):
        run_segment(job["dir"], 1, pid)
    monkeypatch.setenv("DJ_STORAGE_ENOSPC", os.path.basename(job["out"]))
    with pytest.raises(StorageFullError, match="No space left on device .*writing the export") as ei:
        export_job(job["dir"])
    assert job["out"] in str(ei.value)
    assert not os.path.exists(job["out"]) and _no_temp_files(os.path.dirname(job["out"])) == []
    assert not os.path.exists(os.path.join(job["dir"], "job_summary.json"))
    monkeypatch.delenv("DJ_STORAGE_ENOSPC")
    export_job(job["dir"])
    assert open(job["out"], "rb").read() == clean


def test_enospc_at_an_event_write_fails_clearly_and_leaves_no_torn_line(tmp_path, monkeypatch):
    from airflow_provider_dj.core.fs import StorageFullError
    from airflow_provider_dj.engine.jobdir.events import EventLog, parse_event_lines

    log = EventLog(str(tmp_path), "j", writer="w")
    log.emit("job_start")
    before = open(log.path, "rb").read()
    monkeypatch.setenv("DJ_STORAGE_ENOSPC", "events_w")
    with pytest.raises(StorageFullError, match="No space left on device .*writing the op_start event") as ei:
        log.emit("op_start", op_index=0)
    assert log.path in str(ei.value)
    assert open(log.path, "rb").read() == before
    monkeypatch.delenv("DJ_STORAGE_ENOSPC")
    log.emit("op_complete", op_index=0)
    assert [e["event_type"] for e in parse_event_lines(open(log.path, "rb").read())] == ["job_start", "op_complete"]


def test_seam_counts_writes_and_keeps_the_old_file(tmp_path, monkeypatch):
    from airflow_provider_dj.core import fs as storage

    path = str(tmp_path / "d" / "f.json")
    monkeypatch.setenv("DJ_STORAGE_ENOSPC", "f.json@3")
    storage.atomic_write_bytes(path, b"one")
    storage.atomic_write_bytes(path, b"two")
    with pytest.raises(storage.StorageFullError) as ei:
        storage.atomic_write_bytes(path, b"three", what="the test file")
    assert ei.value.errno == 28 and ei.value.filename == path
    assert open(path, "rb").read() == b"two" and _no_temp_files(str(tmp_path)) == []
    import pickle  # crosses Ray as any OSError does

    again = pickle.loads(pickle.dumps(ei.value))
    assert isinstance(again, storage.StorageFullError) and str(again) == str(ei.value)


# -- a real full file system -------------------------------------------------------------------------------
@pytest.fixture
def small_fs(tmp_path):
    """A 256 KiB tmpfs mounted for this test (root only; skipped where mounting is not permitted)."""
    import subprocess

    mnt = tmp_path / "small_fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); the fault-seam tests above "
            f"cover ENOSPC instead"
        )
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: str, leave: int = 0) -> str:
    """Fill the file system of ``directory`` until at most ``leave`` bytes are free; returns the filler's path."""
    filler = os.path.join(directory, "filler.bin")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == 28, exc
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler


def test_real_full_file_system_atomic_write_and_event_append(small_fs):
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir.events import EventLog, parse_event_lines

    log = EventLog(small_fs, "j", writer="w")
    log.emit("job_start")
    storage.atomic_write_bytes(os.path.join(small_fs, "keep.json"), b"old")
    filler = fill(small_fs)
    with pytest.raises(storage.StorageFullError, match="No space left on device") as ei:
        storage.atomic_write_bytes(os.path.join(small_fs, "keep.json"), os.urandom(64 << 10), what="the test file")
    assert "writing the test file (65,536 bytes, " in str(ei.value) and " bytes free there)" in str(ei.value)
    assert open(os.path.join(small_fs, "keep.json"), "rb").read() == b"old"
    assert _no_temp_files(small_fs) == []
    big = "x" * (16 << 10)  # more than the free page slack: the append fails part-way or at once
    with pytest.raises(storage.StorageFullError, match="writing the op_start event"):
        log.emit("op_start", note=big)
    events = parse_event_lines(open(log.path, "rb").read())
    assert [e["event_type"] for e in events] == ["job_start"] and open(log.path, "rb").read().endswith(b"\n")
    os.remove(filler)  # space freed: both work again
    log.emit("op_complete")
    storage.atomic_write_bytes(os.path.join(small_fs, "keep.json"), b"new")
    assert [e["event_type"] for e in parse_event_lines(open(log.path, "rb").read())] == ["job_start", "op_complete"]
