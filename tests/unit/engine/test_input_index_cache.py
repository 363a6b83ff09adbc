"""Planning's input index cache (engine/input/index_cache.py): an unchanged file's row count, boundary
offsets and partition hashes come from an earlier plan, and the plan is exactly the plan of reading every
byte; a file edited in place (even with its mtime put back), a damaged entry, other boundaries or a file
written just before the plan are read again.  Real files, real planning; no job runs."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.input import index_cache
from airflow_provider_dj.engine.input.index_cache import InputIndexCache
from airflow_provider_dj.engine.input.partitioning import plan_partitions
from airflow_provider_dj.testing.sample_corpus import write_corpus

KEEP = ("start_row", "end_row", "num_rows", "content_hash", "segments")


def _cfg(tmp_path, size=50):
    recipe = tmp_path / f"r{size}.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path / 'in'}\nexport_path: {tmp_path / 'o.jsonl'}\n"
        f"partition: {{mode: manual, size: {size}, align: file}}\nprocess:\n  - whitespace_normalization_mapper:\n"
    )
    return load_recipe(str(recipe)).partition


def _plan(data, cfg, cache=None):
    info = plan_partitions(str(data), cfg, cache)
    return info, [{k: p[k] for k in KEEP} for p in info["partitions"]], info["input_files"]


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(index_cache, "RACY_MARGIN_NS", 0)  # files written a moment ago count as settled
    data = tmp_path / "in"
    for i in range(3):
        write_corpus(str(data / f"part_{i}.jsonl"), 120 + 17 * i, seed=i)
    return data, InputIndexCache(str(tmp_path / "cache"))


def test_unchanged_files_plan_from_the_cache_exactly_as_from_their_bytes(tmp_path, corpus):
    data, cache = corpus
    cfg = _cfg(tmp_path)
    night1, _, _ = _plan(data, cfg, cache)
    assert night1["timing"]["index_cache"] == {"files_from_cache": 0, "hashes_from_cache": 0, "files_cached": 3}
    write_corpus(str(data / "part_3.jsonl"), 40, seed=9)
    night2, parts, files = _plan(data, cfg, InputIndexCache(cache.root))
    assert night2["timing"]["index_cache"]["files_from_cache"] == 3
    assert night2["timing"]["index_cache"]["hashes_from_cache"] == 10  # 3 + 3 + 4 partitions of 120, 137, 154 rows
    assert night2["timing"]["hashed_bytes"] == os.path.getsize(data / "part_3.jsonl")  # only the new file read
    _, parts_read, files_read = _plan(data, cfg)
    assert parts == parts_read and files == files_read


def test_a_file_edited_in_place_with_its_mtime_put_back_is_read_again(tmp_path, corpus):
    data, cache = corpus
    cfg = _cfg(tmp_path)
    _, before, _ = _plan(data, cfg, cache)
    target = data / "part_1.jsonl"
    st = os.stat(target)
    raw = target.read_bytes()
    at = raw.index(b'"text": "') + 9
    target.write_bytes(raw[:at] + (b"X" if raw[at : at + 1] != b"X" else b"Y") + raw[at + 1 :])  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # what cp -p / rsync -t do: only ctime moves
    assert os.stat(target).st_mtime_ns == st.st_mtime_ns and os.stat(target).st_size == st.st_size
    info, parts, _ = _plan(data, cfg, InputIndexCache(cache.root))
    assert info["timing"]["index_cache"]["files_from_cache"] == 2
    _, parts_read, _ = _plan(data, cfg)
    assert parts == parts_read
    assert parts[3]["content_hash"] != before[3]["content_hash"]  # part_1's first partition holds the edit


def test_a_damaged_entry_is_ignored(tmp_path, corpus):
    data, cache = corpus
    cfg = _cfg(tmp_path)
    _plan(data, cfg, cache)
    for name in os.listdir(cache.root):
        path = os.path.join(cache.root, name)
        doc = json.loads(open(path).read())
        doc["entry"]["hashes"] = {k: ["0" * 32, v[1]] for k, v in doc["entry"]["hashes"].items()}
        open(path, "w").write(json.dumps(doc))  # its own xxh3 no longer matches
    info, parts, _ = _plan(data, cfg, InputIndexCache(cache.root))
    assert info["timing"]["index_cache"]["files_from_cache"] == 0
    assert parts == _plan(data, cfg)[1]


def test_other_boundaries_index_the_file_again(tmp_path, corpus):
    data, cache = corpus
    _plan(data, _cfg(tmp_path, 50), cache)
    cfg = _cfg(tmp_path, 30)
    info, parts, _ = _plan(data, cfg, InputIndexCache(cache.root))
    assert info["timing"]["index_cache"]["files_from_cache"] == 0  # no offsets for rows 30, 60, ...
    assert parts == _plan(data, cfg)[1]
    again, parts_again, _ = _plan(data, cfg, InputIndexCache(cache.root))  # now both sizes are cached
    assert again["timing"]["index_cache"]["files_from_cache"] == 3 and parts_again == parts


def test_a_file_written_just_before_the_plan_is_not_cached(tmp_path, monkeypatch):
    data = tmp_path / "in"
    write_corpus(str(data / "part_0.jsonl"), 100, seed=1)
    info = plan_partitions(str(data), _cfg(tmp_path), InputIndexCache(str(tmp_path / "cache")))
    assert info["timing"]["index_cache"]["files_cached"] == 0  # its timestamps are younger than the margin
    assert not os.path.exists(tmp_path / "cache")
