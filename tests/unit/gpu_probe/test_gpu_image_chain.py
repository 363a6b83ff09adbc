"""Data-Juicer's GPU-preflight example, shipped as examples/gpu_preflight/image_chain.yaml.

``bucket_resize_mapper`` (CPU) feeds ``image_quality_mapper`` and ``image_rotation_mapper`` (GPU ops);
the recipe declares the field contracts.  The plan must probe the two GPU ops in parallel, each in its
own worker replaying only the resize; without the contracts, one ordered replay.  There is no GPU
here: the two "GPU" ops run their numpy path (``device: cpu``, the seam a GPU would sit behind) and
memory is the CPU path's RSS.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import sys

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.preflight.contracts import contract_of
from airflow_provider_dj.engine.preflight.image_chain import IMAGE_CHAIN_OPS, write_image_corpus
from airflow_provider_dj.engine.preflight.preflight import (
    OpEntry,
    PreflightSettings,
    op_entries_from_recipe,
    probe_plan,
    run_preflight,
)
from airflow_provider_dj.ops import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECIPE = os.path.join(ROOT, "examples", "gpu_preflight", "image_chain.yaml")
RESIZE, QUALITY, ROTATION = "bucket_resize_mapper", "image_quality_mapper", "image_rotation_mapper"


def _register(monkeypatch, classes) -> None:
    registry.load_builtin_ops()
    for cls in classes:
        monkeypatch.setitem(registry._REGISTRY, cls.name, cls)


def _plan(ops, max_concurrent=2):
    return [(u.mode, u.targets, u.replay) for u in probe_plan(ops, max_concurrent)]


def _without_contracts(ops: list[OpEntry]) -> list[OpEntry]:
    drop = ("input_columns", "output_columns")
    return [OpEntry(o.index, o.name, {k: v for k, v in o.args.items() if k not in drop}, o.cls) for o in ops]


def test_shipped_recipe_probes_both_image_targets_in_parallel_replaying_the_resize(monkeypatch):
    _register(monkeypatch, IMAGE_CHAIN_OPS)
    recipe = load_recipe(RECIPE)
    ops = op_entries_from_recipe(recipe)
    assert [o.name for o in ops] == [RESIZE, QUALITY, ROTATION]
    assert all(contract_of(o.cls, None) == (None, None) for o in ops)  # the classes declare nothing
    settings = PreflightSettings.from_recipe(recipe)
    assert settings.max_concurrent_gpu_probes == 2
    assert _plan(ops, settings.max_concurrent_gpu_probes) == [("parallel", [1], [0, 1]), ("parallel", [2], [0, 2])]

    (ordered,) = probe_plan(_without_contracts(ops), settings.max_concurrent_gpu_probes)
    assert (ordered.mode, ordered.targets, ordered.replay) == ("ordered", [1, 2], [0, 1, 2])
    assert "unknown contract" in ordered.reasons[1] and "unknown contract" in ordered.reasons[2]
    # max_concurrent_gpu_probes "auto" (one at a time): the same recipe in one ordered replay
    assert _plan(ops, 1) == [("ordered", [1, 2], [0, 1, 2])]


@pytest.fixture
def dj_reported_present(monkeypatch):
    """find_spec says data_juicer exists (so its ops resolve to adapter classes); importing it would
    fail, as it is not installed here."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "data_juicer" else real(name, *a)
    )
    assert "data_juicer" not in sys.modules


def test_data_juicer_op_ancestor_is_planned_from_recipe_contracts_without_importing_it(
    monkeypatch, dj_reported_present
):
    _register(monkeypatch, IMAGE_CHAIN_OPS)
    blur_cls = registry.get_op_class("image_blur_mapper")  # Data-Juicer's, through the adapter
    images = {"input_columns": ["images"], "output_columns": ["images"]}
    ops = [OpEntry(0, "image_blur_mapper", dict(images), blur_cls)] + [
        OpEntry(i + 1, cls.name, {"input_columns": ins, "output_columns": outs}, cls)
        for i, (cls, ins, outs) in enumerate(
            [
                (IMAGE_CHAIN_OPS[0], ["images"], ["_bucket_img"]),
                (IMAGE_CHAIN_OPS[1], ["images", "_bucket_img"], ["__dj__meta__.quality_score"]),
                (IMAGE_CHAIN_OPS[2], ["images", "_bucket_img"], ["__dj__meta__.rotation_*"]),
            ]
        )
    ]
    assert _plan(ops) == [("parallel", [2], [0, 1, 2]), ("parallel", [3], [0, 1, 3])]
    no_contract = [OpEntry(0, "image_blur_mapper", {}, blur_cls), *ops[1:]]
    (unit,) = probe_plan(no_contract, 2)
    assert (
        unit.mode == "ordered"
        and "ancestor image_blur_mapper (process[0]) declares no field contract" in unit.reasons[2]
    )
    indexed = [OpEntry(0, "image_blur_mapper", {**images, "index_key": "idx"}, blur_cls), *ops[1:]]
    (unit,) = probe_plan(indexed, 2)
    assert unit.mode == "ordered" and "dataset-level op image_blur_mapper" in unit.reasons[2]
    assert "data_juicer" not in sys.modules


def _spy_log(path) -> dict[int, list[str]]:
    ran: dict[int, list[str]] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        pid, name = line.split()
        ran[int(pid)].append(name)
    return ran


def test_each_probe_worker_replays_only_its_targets_cpu_ancestors(monkeypatch, tmp_path):
    import probe_test_ops

    _register(monkeypatch, probe_test_ops.IMAGE_CHAIN_SPIES)
    log = tmp_path / "ops.log"
    monkeypatch.setenv(probe_test_ops.OP_LOG_ENV, str(log))
    corpus = write_image_corpus(str(tmp_path / "data"), 12)
    ops = [
        OpEntry(o.index, o.name, {**o.args, "batch_size": 8, **({"device": "cpu"} if o.cls.uses_cuda else {})}, o.cls)
        for o in op_entries_from_recipe(load_recipe(RECIPE))
    ]
    settings = PreflightSettings(dataset_path=corpus, warmup=0, steady=1, max_concurrent_gpu_probes=2)
    report = run_preflight(ops, settings, str(tmp_path / "job"), executor="local", force_cpu=True)

    units = report["units"]
    assert [(u["mode"], u["targets"]) for u in units] == [("parallel", [1]), ("parallel", [2])]
    for unit, target in zip(units, (QUALITY, ROTATION)):
        assert [(r["op_name"], r["probed"]) for r in unit["ran"]] == [(RESIZE, False), (target, True)]
    by_pid = _spy_log(log)  # what the ops themselves saw, per process
    assert set(by_pid) == {u["worker"]["pid"] for u in units} and os.getpid() not in by_pid
    assert {pid: set(names) for pid, names in by_pid.items()} == {
        units[0]["worker"]["pid"]: {RESIZE, QUALITY},
        units[1]["worker"]["pid"]: {RESIZE, ROTATION},
    }
    for entry in report["ops"]:
        assert entry["probe_mode"] == "parallel" and entry["rows_out"] == 8
        assert [r["op_name"] for r in entry["replayed"]] == [RESIZE]

    # The same recipe without contracts: one worker replays the whole chain in order.
    log.unlink()
    report = run_preflight(_without_contracts(ops), settings, str(tmp_path / "job2"), executor="inline", force_cpu=True)
    (unit,) = report["units"]
    assert unit["mode"] == "ordered" and [r["op_name"] for r in unit["ran"]] == [RESIZE, QUALITY, ROTATION]
    assert [e["probe_mode"] for e in report["ops"]] == ["ordered", "ordered"]
    assert [r["op_name"] for r in report["ops"][1]["replayed"]] == [RESIZE, QUALITY]
    assert {pid: set(names) for pid, names in _spy_log(log).items()} == {os.getpid(): {RESIZE, QUALITY, ROTATION}}


def test_gpu_path_of_the_image_models_matches_their_cpu_path(tmp_path):
    """What runs on a GPU (torch) computes what the CPU path (numpy) computes; torch on the CPU here."""
    torch = pytest.importorskip("torch")
    import pyarrow as pa

    from airflow_provider_dj.engine.preflight.image_chain import read_image

    write_image_corpus(str(tmp_path / "data"), 8)
    rows = [{"images": [str(p)]} for p in sorted((tmp_path / "data" / "images").glob("*"))]
    assert read_image(rows[0]["images"][0]).ndim == 3
    table = IMAGE_CHAIN_OPS[0](bucket_size=32).process_table(pa.Table.from_pylist(rows))
    for cls in IMAGE_CHAIN_OPS[1:]:
        on_cpu = cls(device="cpu").process_table(table).column("__dj__meta__").to_pylist()
        op = cls(device="cpu")
        op.use_torch(torch, "cpu", 1)
        in_torch = op.process_table(table).column("__dj__meta__").to_pylist()
        for a, b in zip(on_cpu, in_torch):
            assert a.keys() == b.keys()
            for k in a:
                assert a[k] == pytest.approx(b[k], rel=1e-4), (cls.name, k)
