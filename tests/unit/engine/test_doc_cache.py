"""doc_cache: partitioning_info.json parsed once per process and version, handed out read-only."""

from __future__ import annotations

import copy
import json
import os
import pickle
import time

import orjson
import pytest

from airflow_provider_dj.engine.jobdir import doc_cache
from airflow_provider_dj.engine.jobdir.doc_cache import DocCache, FrozenDict, FrozenList, read_partitioning_info
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO, write_json
from airflow_provider_dj.engine.storage.context import JobContext


def _info(n: int, tag: str = "a") -> dict:
    parts = [
        {"partition_id": i, "start_row": 2 * i, "end_row": 2 * i + 2, "num_rows": 2, "content_hash": f"{tag}{i}"}
        for i in range(n)
    ]
    return {"version": 2, "algorithm": "jsonl", "total_rows": 2 * n, "partitions": parts, "input_files": []}


def _write_settled(path, doc: dict, when_ns: int | None = None) -> None:
    """Write ``doc`` atomically (as setup does) and age it past SETTLE_S, so the cache may keep it."""
    write_json(str(path), doc)
    old = when_ns or time.time_ns() - int(10 * doc_cache.SETTLE_S * 1e9)
    os.utime(path, ns=(old, old))


@pytest.fixture
def job_dir(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    return tmp_path


def _info_path(job_dir):
    return job_dir / PARTITIONING_INFO


def test_parsed_once_per_version_and_shared(job_dir, monkeypatch):
    _write_settled(_info_path(job_dir), _info(3))
    cache = DocCache()
    calls = []
    real = doc_cache.loads_json
    monkeypatch.setattr(doc_cache, "loads_json", lambda data: calls.append(len(data)) or real(data))
    first = cache.read(str(_info_path(job_dir)))
    second = cache.read(str(_info_path(job_dir)))
    assert first is second and len(calls) == 1
    assert [p["content_hash"] for p in second["partitions"]] == ["a0", "a1", "a2"]


def test_a_rewritten_file_is_read_again(job_dir):
    path = str(_info_path(job_dir))
    when = time.time_ns() - int(10 * doc_cache.SETTLE_S * 1e9)
    _write_settled(path, _info(3, "a"), when)
    first = os.stat(path)
    cache = DocCache()
    assert cache.read(path)["partitions"][2]["content_hash"] == "a2"
    _write_settled(path, _info(3, "b"), when)  # same size and mtime: only the new inode tells
    again = os.stat(path)
    assert (again.st_size, again.st_mtime_ns) == (first.st_size, first.st_mtime_ns)
    assert cache.read(path)["partitions"][2]["content_hash"] == "b2"
    _write_settled(path, _info(4, "c"))  # a re-plan with more partitions
    assert [p["content_hash"] for p in cache.read(path)["partitions"]] == ["c0", "c1", "c2", "c3"]


def test_an_in_place_rewrite_in_the_same_clock_tick_is_never_served_stale(job_dir):
    """Same inode, same size, same mtime: only the settle rule tells the versions apart."""
    path = _info_path(job_dir)
    path.write_bytes(json.dumps(_info(2, "a")).encode())
    st = os.stat(path)
    cache = DocCache()
    assert cache.read(str(path))["partitions"][1]["content_hash"] == "a1"
    with open(path, "r+b") as fh:  # in place: the same inode and size
        fh.write(json.dumps(_info(2, "b")).encode())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
    assert os.stat(path).st_ino == st.st_ino and os.stat(path).st_size == st.st_size
    assert cache.read(str(path))["partitions"][1]["content_hash"] == "b1"


def test_a_caller_cannot_change_what_others_read(job_dir):
    _write_settled(_info_path(job_dir), _info(2))
    info = read_partitioning_info(str(job_dir))
    assert isinstance(info, FrozenDict) and isinstance(info["partitions"], FrozenList)
    attempts = [
        lambda: info.__setitem__("total_rows", 0),
        lambda: info.update(total_rows=0),
        lambda: info.pop("partitions"),
        lambda: info.setdefault("x", 1),
        lambda: info["partitions"].append({}),
        lambda: info["partitions"].__setitem__(0, {}),
        lambda: info["partitions"].sort(key=lambda p: -p["partition_id"]),
        lambda: info["partitions"][0].__setitem__("num_rows", 99),
        lambda: info["partitions"][0].__delitem__("content_hash"),
    ]
    for attempt in attempts:
        with pytest.raises(TypeError, match="read-only"):
            attempt()
    mine = copy.deepcopy(info)  # a mutable copy for a caller that needs one
    mine["partitions"][0]["num_rows"] = 99
    mine["partitions"].append({"partition_id": 2})
    again = JobContext(str(job_dir)).partitioning_info
    assert again is info
    assert [p["num_rows"] for p in again["partitions"]] == [2, 2]
    assert type(mine) is dict and type(mine["partitions"]) is list


def test_frozen_documents_encode_copy_and_pickle_as_plain_json(job_dir):
    _write_settled(_info_path(job_dir), _info(2))
    info = read_partitioning_info(str(job_dir))
    assert json.loads(json.dumps(info)) == _info(2)
    assert orjson.loads(orjson.dumps(info)) == _info(2)
    back = pickle.loads(pickle.dumps(info))  # what Ray does with an argument
    assert back == _info(2) and type(back) is dict and type(back["partitions"][0]) is dict
    back["partitions"][0]["num_rows"] = 5
    assert dict(info["partitions"][0], num_rows=7)["num_rows"] == 7  # a changed copy, as callers make
    assert info["partitions"][0]["num_rows"] == 2


def test_missing_and_damaged_files_raise_as_read_json_does(job_dir):
    with pytest.raises(FileNotFoundError):
        read_partitioning_info(str(job_dir))
    _info_path(job_dir).write_bytes(b'{"partitions": [')
    with pytest.raises(ValueError):
        read_partitioning_info(str(job_dir))


def test_only_the_newest_documents_are_kept(tmp_path):
    cache = DocCache(max_docs=2)
    for name in ("a", "b", "c"):
        _write_settled(tmp_path / f"{name}.json", {"name": name})
        assert cache.read(str(tmp_path / f"{name}.json")) == {"name": name}
    assert [os.path.basename(p) for p in cache._docs] == ["b.json", "c.json"]
