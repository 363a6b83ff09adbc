"""Field contracts -> dependency graph -> parallel vs ordered probe units (pure functions)."""

from __future__ import annotations

from airflow_provider_dj.engine.preflight.contracts import OpNode, ancestors, paths_overlap, plan_probe_units


def node(i, kind="mapper", cuda=False, ins=(), outs=(), glob=False, env=None, name=None):
    return OpNode(
        i,
        name or f"op{i}",
        kind,
        cuda,
        glob,
        None if ins is None else tuple(ins),
        None if outs is None else tuple(outs),
        env,
    )


def test_path_overlap_nested_and_wildcards():
    assert paths_overlap("__dj__meta__", "__dj__meta__.quality_score")
    assert paths_overlap("__dj__meta__.rotation_*", "__dj__meta__.rotation_x")
    assert not paths_overlap("__dj__meta__.rotation_*", "__dj__meta__.quality_score")
    assert not paths_overlap("text", "embedding")


def test_independent_gpu_targets_run_in_parallel_replaying_cpu_ancestors():
    nodes = [
        node(0, ins=["text"], outs=["text"]),  # CPU cleaner
        node(1, kind="filter", ins=["text"], outs=["__dj__stats__.len"]),
        node(2, cuda=True, ins=["text"], outs=["emb"]),  # GPU target A
        node(3, cuda=True, ins=["text"], outs=["__dj__meta__.q"]),
    ]  # GPU target B
    units = plan_probe_units(nodes, [2, 3], max_parallel=2)
    assert [(u.mode, u.targets, u.replay) for u in units] == [
        ("parallel", [2], [0, 1, 2]),
        ("parallel", [3], [0, 1, 3]),
    ]


def test_gpu_to_gpu_dependency_falls_back_to_ordered():
    nodes = [node(0, cuda=True, ins=["text"], outs=["emb"]), node(1, cuda=True, ins=["emb"], outs=["cluster"])]
    units = plan_probe_units(nodes, [0, 1], max_parallel=4)
    assert [(u.mode, u.targets) for u in units] == [("parallel", [0]), ("ordered", [1])]
    assert "GPU op op0" in units[1].reasons[1]
    assert units[1].replay == [0, 1]


def test_missing_contract_is_unknown_not_empty():
    nodes = [node(0, ins=None, outs=None), node(1, cuda=True, ins=["text"], outs=["emb"])]
    assert ancestors(nodes, 1) == [0]
    units = plan_probe_units(nodes, [1], max_parallel=4)
    assert units[0].mode == "ordered" and "no field contract" in units[0].reasons[1]
    # declared-empty outputs are not a dependency
    nodes = [node(0, ins=["text"], outs=[]), node(1, cuda=True, ins=["text"], outs=["emb"])]
    assert ancestors(nodes, 1) == []
    assert plan_probe_units(nodes, [1], max_parallel=4)[0].mode == "parallel"


def test_dataset_level_op_forces_ordered():
    nodes = [
        node(0, kind="deduplicator", glob=True, ins=["text"], outs=[]),
        node(1, cuda=True, ins=["text"], outs=["e"]),
    ]
    units = plan_probe_units(nodes, [1], max_parallel=4)
    assert units[0].mode == "ordered" and "dataset-level" in units[0].reasons[1]


def test_runtime_env_mismatch_forces_ordered():
    nodes = [node(0, ins=["text"], outs=["text"], env={"pip": ["x"]}), node(1, cuda=True, ins=["text"], outs=["e"])]
    assert plan_probe_units(nodes, [1], max_parallel=4)[0].mode == "ordered"


def test_one_probe_at_a_time_uses_one_ordered_unit():
    nodes = [
        node(0, cuda=True, ins=["text"], outs=["a"]),
        node(1, ins=["text"], outs=["b"]),
        node(2, cuda=True, ins=["text"], outs=["c"]),
    ]
    units = plan_probe_units(nodes, [0, 2], max_parallel=1)
    assert [(u.mode, u.targets, u.replay) for u in units] == [("ordered", [0, 2], [0, 1, 2])]


def test_half_a_contract_is_no_contract():
    # Data-Juicer 1.6.1 counts an op declaring one side only as undeclared; so do we, even where the
    # declared outputs alone would prove the target independent.
    for ins, outs in ((None, ["x"]), (["text"], None)):
        nodes = [node(0, ins=ins, outs=outs), node(1, cuda=True, ins=["text"], outs=["emb"])]
        assert ancestors(nodes, 1) == [0]
        (unit,) = plan_probe_units(nodes, [1], max_parallel=4)
        assert unit.mode == "ordered" and "ancestor op0 (process[0]) declares no field contract" in unit.reasons[1]


def test_unrelated_declared_op_is_not_replayed():
    nodes = [
        node(0, ins=["text"], outs=["text"]),
        node(1, ins=["images"], outs=["_bucket_img"]),
        node(2, cuda=True, ins=["images", "_bucket_img"], outs=["__dj__meta__.q"]),
    ]
    (unit,) = plan_probe_units(nodes, [2], max_parallel=2)
    assert (unit.mode, unit.replay) == ("parallel", [1, 2])


def test_dataset_level_target_keeps_the_ordered_replay():
    nodes = [node(0, ins=["text"], outs=["a"]), node(1, cuda=True, ins=["text"], outs=["e"], glob=True)]
    (unit,) = plan_probe_units(nodes, [1], max_parallel=4)
    assert unit.mode == "ordered" and "dataset-level" in unit.reasons[1]
