"""``export_layout: partition_shards`` with parallel parts: the workers' part files become the shards.

A part file (engine/output/parts.py) holds exactly one shard's bytes, so on a local export it is
hard-linked into the shard set instead of copied (engine/job/export_shards.py).  Real engine, real
files, no Ray: the workers' function (``write_part``) is called in-process by the part source, as
in tests/unit/engine/test_export_shards.py.  Every export here is compared, file by file and the
manifest byte for byte, with the same job's serial export (this process serializing every shard).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.input import index_cache
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault
from airflow_provider_dj.engine.output.parts import PARTS_DIR, write_part
from airflow_provider_dj.testing.sample_corpus import write_corpus
from tests.helpers_compare import assert_same_bytes
from tests.unit.engine.test_partition_shards import _grow, _recipe, _run

PARTS, ROWS = 4, 200
EMPTY = 2  # this partition's rows are all filtered out: it has a part (empty) and no shard
MANIFEST = "result.manifest.json"


def _corpus(path: Path) -> None:
    per = ROWS // PARTS
    with path.open("w", encoding="utf-8") as fh:
        for i in range(ROWS):
            text = f"row {i}" if i // per == EMPTY else f"row {i} has  enough words to pass the filter " + "x" * (i % 7)
            fh.write(json.dumps({"text": text, "i": i}) + "\n")


@pytest.fixture
def job(tmp_path: Path) -> dict:
    """A job of four partitions (one exported empty), computed, and its serial export: every file of
    the output directory by name, the summary's checksum and the set's shard names."""
    _corpus(tmp_path / "in.jsonl")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"project_name: pshards\ndataset_path: {tmp_path / 'in.jsonl'}\n"
        f"export_path: {tmp_path / 'out' / 'result.jsonl'}\nwork_dir: {tmp_path / 'work'}\n"
        f"export_layout: partition_shards\npartition: {{mode: manual, num_of_partitions: {PARTS}}}\n"
        "process:\n  - whitespace_normalization_mapper:\n  - words_num_filter: {min_num: 5}\n",
        encoding="utf-8",
    )
    job_dir = prepare_job(load_recipe(str(recipe)), job_id="pj").job_dir
    for pid in range(PARTS):
        run_segment(job_dir, 0, pid)
    summary = export_job(job_dir)
    out = tmp_path / "out"
    files = {n: (out / n).read_bytes() for n in os.listdir(out)}
    shards = [s["file"] for s in json.loads(files[MANIFEST])["shards"]]
    assert len(shards) == PARTS - 1 and sorted(files) == sorted([*shards, MANIFEST])
    return {"job_dir": job_dir, "out": out, "files": files, "shards": shards, "summary": summary}


def _part_source(job_dir: str, seen: dict | None = None):
    """The workers' part files, in order; ``seen`` gets each part's (device, inode) as its worker left it."""

    def source():
        for pid in range(PARTS):
            part = write_part(job_dir, pid)
            if seen is not None:
                st = os.stat(part["path"])
                seen[pid] = (st.st_dev, st.st_ino)
            yield part

    return source


def _assert_serial_export(job: dict, summary: dict | None = None) -> None:
    """The output directory holds exactly the serial export's files, byte for byte (manifest included)."""
    out = job["out"]
    assert sorted(os.listdir(out)) == sorted(job["files"])  # no staged, copying or retiring leftovers
    for name, data in job["files"].items():
        assert_same_bytes((out / name).read_bytes(), data)
    if summary is not None:
        assert summary["export"]["checksum_xxh3_128"] == job["summary"]["export"]["checksum_xxh3_128"]
        assert summary["export"]["shards"] == job["summary"]["export"]["shards"]


def _shard_ids(job: dict) -> dict[int, os.stat_result]:
    manifest = json.loads((job["out"] / MANIFEST).read_text())
    return {s["partition_id"]: os.stat(job["out"] / s["file"]) for s in manifest["shards"]}


def test_a_part_records_its_size_and_xxh3_as_written(job: dict) -> None:
    part = write_part(job["job_dir"], 0)
    data = Path(part["path"]).read_bytes()
    assert (part["rows"], part["bytes"]) == (data.count(b"\n"), len(data)) and part["rows"] > 0
    assert part["xxh3_128"] == xxhash.xxh3_128_hexdigest(data)


def test_the_parts_become_the_shards_without_a_copy(job: dict) -> None:
    """Same shards, manifest and checksum as the serial export; each shard is its part's file (the same
    inode: the export process wrote none of its bytes), alone once the parts are removed."""
    seen: dict = {}
    summary = export_job(job["job_dir"], part_source=_part_source(job["job_dir"], seen))
    _assert_serial_export(job, summary)
    shards = _shard_ids(job)
    assert sorted(shards) == [p for p in range(PARTS) if p != EMPTY]
    for pid, st in shards.items():
        assert (st.st_dev, st.st_ino) == seen[pid]
        assert st.st_nlink == 1  # the part's name is gone: the commit came first, then the parts' removal
    assert not (Path(job["job_dir"]) / PARTS_DIR).exists()
    event = read_events(job["job_dir"], "export_complete")[-1]
    assert event["serialized_in_parallel"] is True and event["parts_linked_as_shards"] == PARTS - 1


def test_a_link_refused_falls_back_to_a_copy(job: dict, monkeypatch) -> None:
    """Another file system cannot be had here: ``os.link`` raises EXDEV for the shard set's staged names
    only (the one seam a cross-device export hits), so each part is copied, with the same result."""
    real_link = os.link

    def cross_device(src, dst, *args, **kwargs):
        if ".staged-" in os.fspath(dst):
            raise OSError(errno.EXDEV, "Invalid cross-device link (simulated)", os.fspath(dst))
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", cross_device)
    seen: dict = {}
    summary = export_job(job["job_dir"], part_source=_part_source(job["job_dir"], seen))
    _assert_serial_export(job, summary)
    for pid, st in _shard_ids(job).items():
        assert (st.st_dev, st.st_ino) != seen[pid] and st.st_nlink == 1
    assert read_events(job["job_dir"], "export_complete")[-1]["parts_linked_as_shards"] == 0


@pytest.mark.parametrize("point", ["export_mid", "export_commit"])
def test_a_fault_before_the_commit_loses_nothing_and_the_rerun_is_identical(job: dict, point: str) -> None:
    """``export_mid`` (a part linked, the rest not): the previous set stands as it was.  ``export_commit``
    (the shards in place, no manifest): no reader trusts the set.  Either way the parts are still there
    (removed only after a commit) and the rerun gives the serial export."""
    job_dir = Path(job["job_dir"])
    (job_dir / FAULT_FILE).write_text(json.dumps([{"point": point, "times": 1, "kind": "raise"}]))
    with pytest.raises(InjectedFault):
        export_job(str(job_dir), part_source=_part_source(str(job_dir)))
    written = 1 if point == "export_mid" else PARTS  # the in-process source writes a part when asked for it
    assert sorted(p.name for p in (job_dir / PARTS_DIR).glob("part_*.jsonl")) == [
        f"part_{p:05d}.jsonl" for p in range(written)
    ]
    if point == "export_mid":
        _assert_serial_export(job)  # the previous set, untouched, and no staged shard left
    else:
        assert not (job["out"] / MANIFEST).exists()
    seen: dict = {}
    summary = export_job(str(job_dir), part_source=_part_source(str(job_dir), seen))
    _assert_serial_export(job, summary)
    assert all((st.st_dev, st.st_ino) == seen[pid] for pid, st in _shard_ids(job).items())
    assert not (job_dir / PARTS_DIR).exists()


_CRASHING_EXPORT = """
import sys
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.output.parts import write_part

job_dir, parts = sys.argv[1], int(sys.argv[2])
export_job(job_dir, part_source=lambda: (write_part(job_dir, pid) for pid in range(parts)))
"""


@pytest.mark.parametrize("point", ["export_mid", "export_commit"])
def test_a_process_dying_before_the_commit_then_a_rerun_gives_the_same_export(job: dict, point: str) -> None:
    """The export process dies (``kind: exit``: no cleanup runs) with staged links to the parts, or the
    shards renamed into place without a manifest; the rerun's workers write new part files under the
    same names, and the set it commits is the serial export, with no leftover of the dead attempt."""
    job_dir = Path(job["job_dir"])
    (job_dir / FAULT_FILE).write_text(json.dumps([{"point": point, "times": 1, "kind": "exit"}]))
    root = Path(__file__).parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    died = subprocess.run(
        [sys.executable, "-c", _CRASHING_EXPORT, str(job_dir), str(PARTS)], env=env, capture_output=True, text=True
    )
    assert died.returncode == 17, died.stderr[-2000:]
    left = os.listdir(job["out"])
    if point == "export_mid":
        assert any(".staged-" in n for n in left) and MANIFEST in left  # a linked part, and the previous set
    else:
        assert MANIFEST not in left
    seen: dict = {}
    summary = export_job(str(job_dir), part_source=_part_source(str(job_dir), seen))
    _assert_serial_export(job, summary)
    assert all((st.st_dev, st.st_ino) == seen[pid] for pid, st in _shard_ids(job).items())


def test_the_next_night_links_the_shards_the_parts_became(tmp_path: Path, monkeypatch) -> None:
    """Nightly reuse (``partition.align: file``): night 1 exported from parallel parts publishes its shards,
    which after the parts' removal hold their files alone; night 2 links them (the parts' very files)
    and writes only its new partition, and its set is the from-scratch export of night 2's input."""
    monkeypatch.setattr(index_cache, "RACY_MARGIN_NS", 0)
    data = tmp_path / "in"
    for i in range(3):
        write_corpus(str(data / f"part_{i}.jsonl"), 200, seed=i)
    export = tmp_path / "out" / "corpus.jsonl"
    job1, _ = _run(_recipe(tmp_path, data, "night1", tmp_path / "work", export, layout="partition_shards"), "night1")
    seen: dict = {}
    pids = range(len(json.loads((export.parent / "corpus.manifest.json").read_text())["shards"]))

    def parts():
        for pid in pids:
            part = write_part(job1, pid)
            seen[pid] = os.stat(part["path"]).st_ino
            yield part

    export_job(job1, part_source=parts)  # night 1's export again, as the Ray workers would make it
    assert read_events(job1, "export_complete")[-1]["parts_linked_as_shards"] == len(pids) == 6
    _grow(data)
    _, n2 = _run(_recipe(tmp_path, data, "night2", tmp_path / "work", export, layout="partition_shards"), "night2")
    _run(_recipe(tmp_path, data, "s2", tmp_path / "scratch", tmp_path / "s2.jsonl", layout=None, reuse=False), "s2")
    manifest = json.loads((export.parent / "corpus.manifest.json").read_text())
    joined = b"".join((export.parent / s["file"]).read_bytes() for s in manifest["shards"])
    assert_same_bytes(joined, (tmp_path / "s2.jsonl").read_bytes())
    assert n2["reuse"]["export_shards_linked"] == 6
    for s in manifest["shards"][:6]:  # night 1's names were retired: each file is held by night 2's name alone
        assert os.stat(export.parent / s["file"]).st_ino == seen[s["partition_id"]]
