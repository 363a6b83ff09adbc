"""Writes confined after links are resolved (core/write_roots.py): each writer the job uses refuses a path
that a symlink leads out of ``[dj] allowed_roots``, before it creates or writes anything, and the outside
folder is unchanged afterwards.  Real files and real links; no mocks."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.write_roots import WriteOutsideRootsError, check_write


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """``root`` is allowed; ``root/link`` points at ``outside``, which is not."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "own.txt").write_text("outside's own file\n")
    os.symlink(outside, root / "link")
    monkeypatch.setenv("AIRFLOW__DJ__ALLOWED_ROOTS", str(root))
    return root, outside


def _tree(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, ds, fs in os.walk(path) for f in ds + fs)


def _write_export(path: str) -> None:
    with storage.AtomicFileWriter(path, tmp_tag="job1", what="the export") as fh:
        fh.write(b"{}\n")


def _history_commit_file(path: str) -> None:
    from airflow_provider_dj.engine.history.index import _write_atomic

    _write_atomic(path, b"x")


def _reuse_entry(path: str) -> None:
    from airflow_provider_dj.engine.storage.reuse_index import ReuseIndex

    ReuseIndex(os.path.dirname(path)).publish("ab" * 16, {"job_id": "j"})


def _export_shard_link(path: str) -> None:
    from airflow_provider_dj.engine.output.shards import _link_or_copy

    source = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "source.bin")  # in the root
    with open(source, "wb") as fh:
        fh.write(b"part")
    _link_or_copy(source, path)


def _job_lock(path: str) -> None:
    from airflow_provider_dj.engine.jobdir import lock as job_lock

    job_lock.acquire(path, {"pid": os.getpid()})


WRITERS = {
    "atomic_write_bytes (checkpoints, failed/, configs, lineage, trace)": lambda p: storage.atomic_write_bytes(p, b"x"),
    "append_bytes (events)": lambda p: storage.append_bytes(p, b"x\n"),
    "makedirs (every folder the job creates)": storage.makedirs,
    "AtomicFileWriter (the export and its temporary file)": _write_export,
    "rename (a file moved aside)": lambda p: storage.rename(__file__ + ".nope", p),
    "dedup_history's commit": _history_commit_file,
    "the reuse index": _reuse_entry,
    "an export shard's link or copy": _export_shard_link,
    "the job's runner lock": _job_lock,
}


@pytest.mark.parametrize("writer", list(WRITERS), ids=lambda w: w.split(" (")[0])
def test_every_writer_refuses_a_path_a_link_leads_outside(layout, writer):
    root, outside = layout
    before = _tree(outside)
    with pytest.raises(WriteOutsideRootsError) as err:
        WRITERS[writer](str(root / "link" / "job" / "file.bin"))
    assert str(outside) in str(err.value) and "allowed_roots" in str(err.value)
    assert _tree(outside) == before


def test_inside_the_roots_writes_go_through_and_unset_roots_confine_nothing(layout, monkeypatch):
    root, outside = layout
    storage.atomic_write_bytes(str(root / "job" / "a.bin"), b"x")
    assert (root / "job" / "a.bin").read_bytes() == b"x"
    monkeypatch.delenv("AIRFLOW__DJ__ALLOWED_ROOTS")
    check_write(str(root / "link" / "b.bin"))  # no roots: nothing is confined
    check_write("s3://bucket/anything")  # URLs are confined by name when the recipe is validated
    assert _tree(outside) == ["own.txt"]
