"""Execution-group sizing and the resume fallback (pure functions and plan.execution_groups)."""

from __future__ import annotations

import pytest

from airflow_provider_dj.engine.planning.groups import (
    auto_group_size,
    overhead_ratio,
    resolve_group_size,
    uniform_positions,
)
from airflow_provider_dj.engine.planning.plan import execution_groups


def test_auto_picks_the_smallest_group_meeting_the_ratio():
    # 40 s model start-up; a partition is 10,000 rows at 1,000 rows/s = 10 s.
    # g >= 40 * 0.9 / (0.1 * 10) = 36:  40 / (40 + 360) = 0.1 exactly.
    d = auto_group_size(init_s=40, rows_per_s=1000, rows_per_partition=10_000, num_partitions=100, max_ratio=0.1)
    assert d.size == 36 and d.source == "auto" and d.ratio_met
    assert d.overhead_ratio == pytest.approx(0.1)
    assert overhead_ratio(40, 35, 10_000, 1000) > 0.1


def test_auto_is_bounded_by_the_partition_count_and_says_the_ratio_is_missed():
    d = auto_group_size(init_s=40, rows_per_s=1000, rows_per_partition=10_000, num_partitions=20, max_ratio=0.1)
    assert d.size == 20 and d.ratio_met is False
    assert d.overhead_ratio == pytest.approx(40 / 240)
    assert "above the 10% target" in d.reason


def test_cheap_models_need_no_grouping():
    assert auto_group_size(init_s=0, rows_per_s=10, rows_per_partition=100, num_partitions=8, max_ratio=0.1).size == 1
    # init 1 s against 100 s of work per partition: 1 / 101 < 10%
    assert auto_group_size(init_s=1, rows_per_s=10, rows_per_partition=1000, num_partitions=8, max_ratio=0.1).size == 1


def test_looser_ratio_needs_smaller_groups():
    strict = auto_group_size(init_s=30, rows_per_s=100, rows_per_partition=1000, num_partitions=50, max_ratio=0.05)
    loose = auto_group_size(init_s=30, rows_per_s=100, rows_per_partition=1000, num_partitions=50, max_ratio=0.5)
    # T = 10 s: strict g >= 30*0.95/(0.05*10) = 57 -> bounded to 50; loose g >= 30*0.5/(0.5*10) = 3
    assert strict.size == 50 and not strict.ratio_met
    assert loose.size == 3 and loose.overhead_ratio == pytest.approx(0.5)
    assert (
        auto_group_size(init_s=30, rows_per_s=100, rows_per_partition=1000, num_partitions=50, max_ratio=1.0).size == 1
    )


def test_explicit_integer_overrides_and_is_bounded_by_partitions():
    d = resolve_group_size(8, num_partitions=100, init_s=40, rows_per_s=1000, rows_per_partition=10_000)
    assert (d.size, d.source) == (8, "recipe")
    assert resolve_group_size(500, num_partitions=20).size == 20


def test_auto_without_probe_figures_keeps_the_default():
    d = resolve_group_size("auto", num_partitions=10, default=3)
    assert (d.size, d.source) == (3, "default")
    assert resolve_group_size(None, num_partitions=2, default=16).size == 2


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="execution_group_size"):
        resolve_group_size("big", num_partitions=4)
    with pytest.raises(ValueError, match="max_initialization_overhead_ratio"):
        auto_group_size(init_s=1, rows_per_s=1, rows_per_partition=1, num_partitions=1, max_ratio=0)


def _info(n: int) -> dict:
    return {"partitions": [{"partition_id": i, "start_row": 10 * i, "end_row": 10 * i + 10} for i in range(n)]}


def test_resume_with_mixed_checkpoint_positions_runs_one_partition_per_group():
    completed = {
        0: {"last_op": 1, "final": False},
        1: {"last_op": 3, "final": True},
        2: {"last_op": -1, "final": False},
        3: {"last_op": -1, "final": False},
    }
    assert not uniform_positions(completed)
    groups = execution_groups(_info(4), 4, completed)
    assert [list(g.partition_ids) for g in groups] == [[0], [1], [2], [3]]
    assert groups[2].label == "p2 rows 20-29"


def test_resume_with_one_position_keeps_the_group_size():
    # finished partitions do no work, so they never force the fallback
    completed = {
        0: {"last_op": 3, "final": True},
        1: {"last_op": 1, "final": False},
        2: {"last_op": 1, "final": False},
        3: {"last_op": 1, "final": False},
    }
    assert uniform_positions(completed)
    assert [list(g.partition_ids) for g in execution_groups(_info(4), 2, completed)] == [[0, 1], [2, 3]]
    assert [list(g.partition_ids) for g in execution_groups(_info(4), 4)] == [[0, 1, 2, 3]]
