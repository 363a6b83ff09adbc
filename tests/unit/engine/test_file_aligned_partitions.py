"""partition.align: file — partitions never span two input files, sizes within a file differ by at most
one row, and new files leave the old partitions' boundaries and content hashes unchanged (nightly reuse)."""

from __future__ import annotations

import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.input.partitioning import PartitioningError, file_aligned_boundaries, plan_partitions
from airflow_provider_dj.testing.sample_corpus import write_corpus


def _files_of(bounds, file_rows):
    edges, acc = [], 0
    for n in file_rows:
        edges.append((acc, acc + n))
        acc += n
    return [[i for i, (a, b) in enumerate(edges) if a <= s and e <= b] for s, e in bounds]


@pytest.mark.parametrize(
    ("file_rows", "count", "size"),
    [([10, 7, 3], 6, None), ([100, 1, 50], 4, None), ([9, 9], 2, None), ([10, 7, 3], None, 4), ([5, 0, 5], 3, None)],
)
def test_partitions_stay_inside_one_file_and_differ_by_at_most_one_row_there(file_rows, count, size):
    bounds = file_aligned_boundaries(file_rows, count, size)
    assert bounds[0][0] == 0 and bounds[-1][1] == sum(file_rows)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # exact, contiguous, no empty partition
    assert all(e > s for s, e in bounds)
    owners = _files_of(bounds, file_rows)
    assert all(len(o) == 1 for o in owners), owners
    for f in {o[0] for o in owners}:
        sizes = [e - s for (s, e), o in zip(bounds, owners) if o[0] == f]
        assert max(sizes) - min(sizes) <= 1
    if count is not None and count >= sum(1 for n in file_rows if n):
        assert len(bounds) == count  # the requested count where possible


def test_exact_sizes_and_counts():
    assert file_aligned_boundaries([10, 7, 3], 6) == [(0, 4), (4, 7), (7, 10), (10, 14), (14, 17), (17, 20)]
    assert file_aligned_boundaries([10, 7, 3], None, 4) == [(0, 4), (4, 7), (7, 10), (10, 14), (14, 17), (17, 20)]
    # more files than partitions asked for: one per file (a partition never spans two)
    assert file_aligned_boundaries([4, 4, 4], 2) == [(0, 4), (4, 8), (8, 12)]


def test_more_partitions_than_rows_is_an_error():
    with pytest.raises(PartitioningError, match="at most 5"):
        file_aligned_boundaries([3, 2], 6)


def test_new_files_keep_the_old_partitions_and_hashes(tmp_path):
    data = tmp_path / "in"
    for i in range(3):
        write_corpus(str(data / f"part_{i}.jsonl"), 120 + 17 * i, seed=i)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'o.jsonl'}\n"
        "partition: {mode: manual, size: 50, align: file}\nprocess:\n  - whitespace_normalization_mapper:\n"
    )
    cfg = load_recipe(str(recipe)).partition
    night1 = plan_partitions(str(data), cfg)
    write_corpus(str(data / "part_3.jsonl"), 40, seed=9)
    night2 = plan_partitions(str(data), cfg)
    assert night1["align"] == "file" and "aligned to input files" in night2["how_chosen"]
    keep = ("start_row", "end_row", "content_hash", "segments")
    old = [{k: p[k] for k in keep} for p in night1["partitions"]]
    assert [{k: p[k] for k in keep} for p in night2["partitions"][: len(old)]] == old
    assert len(night2["partitions"]) == len(old) + 1 and night2["partitions"][-1]["num_rows"] == 40
    # the default (rows) splits all rows evenly: the same growth moves every boundary
    cfg_rows = load_recipe(str(recipe), overrides={"partition.align": "rows"}).partition
    assert "align" not in plan_partitions(str(data), cfg_rows)


def test_align_must_be_rows_or_file(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path}\nexport_path: {tmp_path / 'o.jsonl'}\npartition: {{align: files}}\n"
        "process:\n  - whitespace_normalization_mapper:\n"
    )
    with pytest.raises(RecipeError, match="partition.align"):
        load_recipe(str(recipe))
