"""MarkerCache: a directory's markers are reused while its mtime stands still and is settled."""

from __future__ import annotations

import json
import os

from airflow_provider_dj.engine.storage import marker_cache
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore


def _commit(store: CheckpointStore, pid: int, rows: int) -> None:
    op_dir = store.op_dir(0, "m")
    os.makedirs(op_dir, exist_ok=True)
    tmp = os.path.join(op_dir, "tmp")
    with open(tmp, "w") as fh:
        json.dump({"partition_id": pid, "num_rows": rows}, fh)
    os.replace(tmp, store.marker_path(0, "m", pid))  # the atomic rename a commit does


def _age(store: CheckpointStore, seconds: float) -> None:
    op_dir = store.op_dir(0, "m")
    t = os.stat(op_dir).st_mtime - seconds
    os.utime(op_dir, (t, t))


def test_markers_are_reused_until_their_directory_changes(tmp_path, monkeypatch):
    store = CheckpointStore(str(tmp_path))
    _commit(store, 0, 5)
    cache = marker_cache.MarkerCache()
    assert cache.reader(store)(0, "m", 0)["num_rows"] == 5
    _age(store, 10)
    assert cache.reader(store)(0, "m", 0)["num_rows"] == 5  # settled now: cached from here on
    reads = []
    monkeypatch.setattr(store, "read_marker", lambda *a: reads.append(a) or None)
    assert cache.reader(store)(0, "m", 0)["num_rows"] == 5 and not reads
    monkeypatch.undo()
    _commit(store, 0, 7)  # a re-commit renames into the directory: its mtime moves
    assert cache.reader(store)(0, "m", 0)["num_rows"] == 7
    assert cache.reader(store)(0, "m", 1) is None


def test_a_directory_changed_just_now_is_read_afresh(tmp_path):
    store = CheckpointStore(str(tmp_path))
    _commit(store, 0, 5)
    cache = marker_cache.MarkerCache()
    cache.reader(store)(0, "m", 0)
    mtime = os.stat(store.op_dir(0, "m")).st_mtime_ns
    with open(store.marker_path(0, "m", 0), "w") as fh:  # same tick: the mtime may not move
        json.dump({"partition_id": 0, "num_rows": 9}, fh)
    os.utime(store.op_dir(0, "m"), ns=(mtime, mtime))
    assert cache.reader(store)(0, "m", 0)["num_rows"] == 9
