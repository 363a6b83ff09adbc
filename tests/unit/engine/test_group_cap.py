"""The execution-group cap: no segment maps more task instances than Airflow's max_map_length allows,
nor, for sizes the planner chose, more than [dj] max_groups_per_segment (engine/planning/groups.py)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.engine.planning.decisions import decide_run
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.planning.groups import (
    balanced_sizes,
    bound_group_size,
    group_cap,
    group_sizes,
    resolve_group_size,
)
from airflow_provider_dj.engine.planning.plan import execution_groups, plan_groups


def _info(n: int, rows: int = 1) -> dict:
    """Synthetic partitioning metadata: ``n`` partitions of ``rows`` rows each."""
    return {
        "partitions": [{"partition_id": i, "start_row": rows * i, "end_row": rows * (i + 1)} for i in range(n)],
        "num_partitions": n,
        "total_rows": n * rows,
    }


def _check_groups(groups: list[ExecutionGroup], n: int, rows: int, cap: int) -> None:
    """At most ``cap`` groups; contiguous, in order, covering every partition once; sizes within one."""
    assert 0 < len(groups) <= cap
    assert [pid for g in groups for pid in g.partition_ids] == list(range(n))
    sizes = [len(g.partition_ids) for g in groups]
    assert max(sizes) - min(sizes) <= 1
    assert [g.group_id for g in groups] == list(range(len(groups)))
    for before, after in zip(groups, groups[1:]):
        assert before.end_row == after.start_row
    assert groups[0].start_row == 0 and groups[-1].end_row == n * rows
    first = groups[0]
    assert first.label == f"p0-p{sizes[0] - 1} rows 0-{sizes[0] * rows - 1}"


def test_the_cap_is_airflows_limit_and_the_readable_one_for_planned_sizes():
    assert group_cap(None, 256, explicit=False) is None  # nothing maps the groups: the local executor
    assert group_cap(1024, 256, explicit=False) == 256
    assert group_cap(16, 256, explicit=False) == 16
    assert group_cap(1024, 0, explicit=False) == 1024  # 0 turns the readable cap off
    assert group_cap(1024, 256, explicit=True) == 1024  # a recipe's integer is bound by Airflow only
    with pytest.raises(ValueError, match="max_mapped_tasks"):
        group_cap(0, 256, explicit=False)


def test_sizes_within_the_cap_keep_the_chosen_size_and_balance_past_it():
    assert group_sizes(10, 4) == [4, 4, 2]
    assert group_sizes(10, 4, cap=3) == [4, 4, 2]
    assert group_sizes(10, 1, cap=3) == [4, 3, 3]
    assert group_sizes(1100, 1, cap=1024) == [2] * 76 + [1] * 948
    assert group_sizes(0, 1, cap=3) == []
    assert balanced_sizes(7, 7) == [1] * 7
    with pytest.raises(ValueError):
        balanced_sizes(3, 4)


def test_1100_partitions_fit_airflows_default_1024_with_the_readable_cap_off(monkeypatch):
    monkeypatch.setenv("DJ_MAX_GROUPS_PER_SEGMENT", "0")
    groups = plan_groups(_info(1100), 1, max_mapped_tasks=1024)
    assert len(groups) == 1024
    _check_groups(groups, 1100, 1, 1024)
    assert groups[0].label == "p0-p1 rows 0-1" and groups[-1].label == "p1099 rows 1099-1099"


def test_1100_partitions_under_the_readable_cap():
    groups = plan_groups(_info(1100), 1, max_mapped_tasks=1024)
    assert len(groups) == 256
    _check_groups(groups, 1100, 1, 256)


@pytest.mark.parametrize("n", [100_000, 1_000_000])
def test_the_planner_alone_at_scale(n):
    info = _info(n, rows=50_000)
    groups = plan_groups(info, 1, max_mapped_tasks=1024)
    _check_groups(groups, n, 50_000, 256)
    assert len(groups) == 256
    # An explicit integer past Airflow's limit: the same bound, 1,024 groups.
    explicit = plan_groups(info, 1, max_mapped_tasks=1024, explicit=True)
    _check_groups(explicit, n, 50_000, 1024)
    assert len(explicit) == 1024


def test_no_cap_without_airflow_keeps_one_group_per_partition():
    assert len(plan_groups(_info(1100), 1)) == 1100


def test_resume_with_mixed_positions_stays_within_the_cap():
    completed = {i: {"last_op": i % 3, "final": False} for i in range(1100)}
    groups = execution_groups(_info(1100), 4, completed, max_groups=16)
    _check_groups(groups, 1100, 1, 16)
    assert len(groups) == 16
    assert len(execution_groups(_info(10), 4, {i: completed[i] for i in range(10)}, max_groups=16)) == 10


def test_an_explicit_size_past_the_limit_is_raised_and_says_why():
    d = bound_group_size(resolve_group_size(1, num_partitions=1100), 1100, 1024, 1024)
    assert d.size == 2 and d.source == "recipe"
    assert d.bounded_by == "Airflow's [core] max_map_length=1024"
    assert "raised from 1 to 2" in d.reason and "1100 partitions" in d.reason
    assert json.loads(json.dumps(d.to_dict()))["bounded_by"] == d.bounded_by
    fits = resolve_group_size(2, num_partitions=1100)
    assert bound_group_size(fits, 1100, 1024, 1024) is fits


def test_decide_run_bounds_the_default_size(tmp_path):
    from airflow_provider_dj.engine.config.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(
        f"project_name: cap\ndataset_path: {tmp_path}/in.jsonl\nexport_path: {tmp_path}/out.jsonl\n"
        f"work_dir: {tmp_path}/work\nprocess:\n  - whitespace_normalization_mapper:\n"
    )
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    recipe = load_recipe(str(path))
    d = decide_run(recipe, _info(1100), None, max_groups=256, max_mapped_tasks=1024, airflow_max_active=4)
    assert d.group.size == 5 and d.group.bounded_by == "[dj] max_groups_per_segment=256"
    assert d.group.planned_size == 1  # the groups are planned from it, balanced under the cap
    sizes = [len(g.partition_ids) for g in execution_groups(_info(1100), d.group.planned_size, max_groups=256)]
    assert len(sizes) == 256 and set(sizes) == {4, 5}
    assert d.concurrent_groups == 4


def test_runs_of_partitions_reused_whole_are_one_group_each():
    """``whole`` (partitions an earlier job's checkpoints cover): each consecutive run is one group; the
    rest keep their size; packing that would not make fewer groups, or would pass the cap, is skipped."""

    def ids(groups):
        return [list(g.partition_ids) for g in groups]

    assert ids(execution_groups(_info(6), 1, whole=frozenset({0, 1, 2, 4}))) == [[0, 1, 2], [3], [4], [5]]
    assert ids(execution_groups(_info(7), 2, whole=frozenset(range(5)))) == [[0, 1, 2, 3, 4], [5, 6]]
    groups = execution_groups(_info(4, rows=10), 1, whole=frozenset({1, 2}))
    assert groups[1].label == "p1-p2 rows 10-29" and (groups[1].start_row, groups[1].end_row) == (10, 30)
    # alternating runs with a group size of 2: packing would make more groups than plain sizing
    assert ids(execution_groups(_info(4), 2, whole=frozenset({0, 2}))) == [[0, 1], [2, 3]]
    # more runs than the cap allows: the cap's balanced groups
    assert len(execution_groups(_info(10), 1, max_groups=3, whole=frozenset({0, 2, 4, 6, 8}))) == 3
    assert ids(execution_groups(_info(3), 1)) == [[0], [1], [2]]
