"""Full and damaged storage through a real DAG: real Airflow (dag.test), real local Ray, real file systems.

* A full disk is a real one where the test may mount a tmpfs (root): the job's
  work_dir (or the export's directory) lives on a small tmpfs that is filled
  before the run; the run fails with "No space left on device" naming the
  file; nothing committed-looking is left; after space is freed the resumed
  run's export is byte for byte a clean run's.  Where mounting is not
  permitted these tests skip with the reason, and the CLI test below drives
  the same failure through storage's fault seam (DJ_STORAGE_ENOSPC), which
  reaches the Ray workers of a ``dj-airflow run`` through their environment.
* A flipped byte in a committed checkpoint between two runs is rejected
  (event and path), recomputed, and the export still matches.
"""

from __future__ import annotations

import glob
import json
import os
import random
import string
import subprocess

import pytest
import xxhash

from airflow_provider_dj.engine.jobdir.events import read_events
from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import run_cli, tail

pytestmark = pytest.mark.integration

#: Room left on the work dir's file system: enough for the plan, events and logs, not for a first checkpoint.
WORK_DIR_ROOM = 100 << 10


def _state(dr) -> str:
    return str(dr.state).split(".")[-1].lower()


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> str:
    """240 rows of ~3.6 KB of random letter words each, so that Parquet's compression cannot shrink a
    partition's first checkpoint (~180 KB) below WORK_DIR_ROOM: the few KB of metadata, events and logs
    written before it fit there, the checkpoint does not."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("storage_faults_data") / "big.jsonl"

    def word() -> str:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 7)))

    with open(path, "w") as fh:
        for i in range(240):
            words = " ".join(word() for _ in range(600))
            fh.write(json.dumps({"id": i, "text": f"Row {i}. {words}."}) + "\n")
    return str(path)


@pytest.fixture
def mount_tmpfs(tmp_path):
    """Mount a tmpfs of the given size (root only); skip with the reason where that is not permitted."""
    mounted: list[str] = []

    def mount(name: str, size: str) -> str:
        mnt = tmp_path / name
        mnt.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        if r.returncode != 0:
            pytest.skip(
                f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); "
                f"test_enospc_through_the_fault_seam_in_a_cli_run covers ENOSPC instead"
            )
        mounted.append(str(mnt))
        return str(mnt)

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", mnt], check=False)


def fill(directory: str, leave: int) -> str:
    """Fill ``directory``'s file system so that about ``leave`` bytes stay free; returns the filler file."""
    filler = os.path.join(directory, "filler.bin")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == 28, exc
    finally:
        os.close(fd)
    os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler


def committed_but_invalid(job_dir: str) -> list[str]:
    """Commit markers whose data file is missing or differs from what they recorded (must be none)."""
    bad = []
    for marker in glob.glob(os.path.join(job_dir, "checkpoints", "*", "*.commit.json")):
        m = json.load(open(marker))
        data = os.path.join(os.path.dirname(marker), m["data_file"])
        if not os.path.exists(data):
            bad.append(f"{marker}: data missing")
            continue
        raw = open(data, "rb").read()
        if len(raw) != m["size"] or xxhash.xxh3_128_hexdigest(raw) != m["checksum"]:
            bad.append(f"{marker}: data differs")
    return bad


def temp_files(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if ".tmp-" in f]


@pytest.fixture
def clean_export(make_recipe, run_dag, big_corpus) -> bytes:
    recipe = make_recipe("sf_clean", parts=3, data=big_corpus)
    assert _state(run_dag(recipe, {"job_id": "clean"}, retries=0)) == "success"
    return open(recipe.replace(".yaml", "_out.jsonl"), "rb").read()


def test_full_work_dir_fails_clearly_and_resumes_to_the_clean_export(
    tmp_path, make_recipe, run_dag, big_corpus, clean_export, mount_tmpfs
):
    work = mount_tmpfs("work_fs", "6m")
    recipe = make_recipe("sf_full", parts=3, data=big_corpus)
    text = open(recipe).read().replace(f"work_dir: {tmp_path / 'work'}", f"work_dir: {work}")
    open(recipe, "w").write(text)
    first_checkpoints = glob.glob(
        str(tmp_path / "work" / "clean" / "checkpoints" / "checkpoint_op_000_*" / "*.parquet")
    )
    assert len(first_checkpoints) == 3  # precondition: no partition's first checkpoint fits in the room left
    assert min(os.path.getsize(p) for p in first_checkpoints) > 1.3 * WORK_DIR_ROOM, first_checkpoints
    filler = fill(work, leave=WORK_DIR_ROOM)
    dr = run_dag(recipe, {"job_id": "full"}, retries=0)
    assert _state(dr) == "failed"
    job_dir = os.path.join(work, "full")
    export = recipe.replace(".yaml", "_out.jsonl")
    assert not os.path.exists(export)
    assert committed_but_invalid(job_dir) == [] and temp_files(work) == []
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["status"] == "failed"
    err = summary["error"]
    assert "No space left on device writing the checkpoint of op 0 (clean_email_mapper)" in err, err
    assert os.path.join(job_dir, "checkpoints", "checkpoint_op_000_clean_email_mapper") in err, err

    os.remove(filler)  # space freed
    dr = run_dag(recipe, {"resume": "full"}, retries=0)
    assert _state(dr) == "success"
    assert open(export, "rb").read() == clean_export


def test_full_export_volume_fails_clearly_and_a_resume_exports_identically(
    tmp_path, make_recipe, run_dag, big_corpus, clean_export, mount_tmpfs
):
    out_dir = mount_tmpfs("export_fs", "4m")
    recipe = make_recipe("sf_export", parts=3, data=big_corpus)
    export = os.path.join(out_dir, "out.jsonl")
    text = (
        open(recipe).read().replace(f"export_path: {recipe.replace('.yaml', '_out.jsonl')}", f"export_path: {export}")
    )
    open(recipe, "w").write(text)
    assert len(clean_export) > 256 << 10
    filler = fill(out_dir, leave=128 << 10)  # less than the export needs
    dr = run_dag(recipe, {"job_id": "fullexp"}, retries=0)
    assert _state(dr) == "failed"
    job_dir = os.path.join(tmp_path, "work", "fullexp")
    assert not os.path.exists(export) and temp_files(out_dir) == []
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["status"] == "failed"
    assert "No space left on device writing the export" in summary["error"] and export in summary["error"]
    assert committed_but_invalid(job_dir) == []

    ops_started = len(read_events(job_dir, "op_start"))
    os.remove(filler)
    dr = run_dag(recipe, {"resume": "fullexp"}, retries=0)
    assert _state(dr) == "success"
    assert open(export, "rb").read() == clean_export
    # the resumed run did no partition work again: every partition's output was already committed
    assert len(read_events(job_dir, "op_start")) == ops_started


def test_flipped_byte_in_a_committed_checkpoint_is_recomputed_through_the_dag(
    tmp_path, make_recipe, run_dag, big_corpus, clean_export
):
    recipe = make_recipe("sf_flip", parts=3, data=big_corpus)
    job_dir = os.path.join(tmp_path, "work", "flip")
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump([{"point": "global_mid", "times": 1}], fh)  # stop after segment 0: its checkpoints committed
    assert _state(run_dag(recipe, {"job_id": "flip"}, retries=0)) == "failed"
    # segment 0's output for partition 1 (what its task checks first on the resume)
    target = os.path.join(job_dir, "checkpoints", "checkpoint_op_003_text_length_filter", "partition_00001.parquet")
    with open(target, "r+b") as fh:
        fh.seek(os.path.getsize(target) // 2)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0x10]))

    assert _state(run_dag(recipe, {"resume": "flip"}, retries=0)) == "success"
    assert open(recipe.replace(".yaml", "_out.jsonl"), "rb").read() == clean_export
    rejected = read_events(job_dir, "checkpoint_rejected")
    assert [e["checkpoint_path"] for e in rejected] == [target]
    assert "changed after commit" in rejected[0]["error_message"]
    assert glob.glob(target.replace(".parquet", ".commit.json.rejected-*"))  # set aside, not deleted
    assert committed_but_invalid(job_dir) == []


#: The engine's local executor, partitions in the CLI's own process: the seam is the storage layer's,
#: the same whatever runs the partitions, and a private Ray would only add its start-up.
SEAM_FLAGS = ["--executor", "local", "--num-cpus", "1"]


def test_enospc_through_the_fault_seam_in_a_cli_run(tmp_path, big_corpus, clean_export, airflow_home):
    """The fault seam (no mount needed): every write of op 1's checkpoints fails as a full disk would."""
    from tests.integration.conftest import RECIPE

    recipe = tmp_path / "seam.yaml"
    export = tmp_path / "seam_out.jsonl"
    recipe.write_text(
        RECIPE.format(
            name="sf_seam", data=big_corpus, export=export, work=tmp_path / "work", parts=3, strategy="every_op"
        )
    )
    env = {"DJ_TASK_RETRIES": "0", "DJ_STORAGE_ENOSPC": "checkpoint_op_001_whitespace_normalization_mapper"}
    run = run_cli(
        ["run", str(recipe), "--job-id", "seam", *SEAM_FLAGS],
        str(tmp_path / "seam.log"),
        env_extra=env,
        timeout=480,
    )
    assert run.rc != 0, tail(run.output)
    assert "writing the checkpoint of op 1 (whitespace_normalization_mapper)" in run.output, tail(run.output)
    job_dir = tmp_path / "work" / "seam"
    assert not export.exists() and committed_but_invalid(str(job_dir)) == [] and temp_files(str(job_dir)) == []
    env.pop("DJ_STORAGE_ENOSPC")
    run = run_cli(
        ["run", str(recipe), "--resume", "seam", *SEAM_FLAGS],
        str(tmp_path / "seam2.log"),
        env_extra=env,
        timeout=480,
    )
    assert run.rc == 0, tail(run.output)
    assert_same_bytes(export.read_bytes(), clean_export)
    loads = [e for e in read_events(str(job_dir), "checkpoint_load") if e.get("op_index") == 0]
    assert {e["partition_id"] for e in loads} == {0, 1, 2}  # resumed after op 0, not from the input
