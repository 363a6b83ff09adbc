"""Fixtures for the GPU-probe unit tests: a small corpus and the fake CUDA ops registered per test."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # probe_test_ops importable here and in spawned workers


@pytest.fixture
def fake_cuda_ops(monkeypatch):
    """Register the fake CUDA ops (CPU code declaring uses_cuda=True: there is no GPU here) for one test."""
    import probe_test_ops

    from airflow_provider_dj.ops import registry

    registry.load_builtin_ops()
    for cls in probe_test_ops.ALL:
        monkeypatch.setitem(registry._REGISTRY, cls.name, cls)
    return probe_test_ops


@pytest.fixture
def small_corpus(tmp_path) -> str:
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    return write_corpus(str(tmp_path / "data" / "corpus.jsonl"), 300, seed=5)
