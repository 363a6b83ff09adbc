"""perplexity_filter: KenLM + SentencePiece perplexity, offline.

Data-Juicer 1.6.1's op, same arguments, same statistic: the text is cut into
SentencePiece pieces (``encode_as_pieces``), the pieces are joined with
spaces, and every line of that (``str.splitlines``) is scored by KenLM with
sentence start and end (``Model.score``: log10).  The perplexity is
``10 ** (-sum of scores / (words + lines))`` -- each line's ``</s>`` counts
as a word -- rounded to one decimal (Python's ``round``), and 0.0 for a text
without pieces.  The sum runs in the same order and in Python floats, so the
value is Data-Juicer's bit for bit when both load the same files.  Stored as
``__dj__stats__.perplexity`` (float64); a row that has it keeps it.

Models: ``{lang}.sp.model`` (SentencePiece) and ``{lang}.arpa.bin`` (KenLM:
binary or ARPA text, KenLM tells them apart by content), found where
Data-Juicer finds them (DATA_JUICER_EXTERNAL_MODELS_HOME, then its models
cache), or given as ``sp_model_path`` / ``kenlm_model_path`` (our
arguments; Data-Juicer's op has none).  Nothing is downloaded: a missing
file refuses the op at validation, naming the file and where to put it.

The models load on first use (``setup()`` in an actor, else the first
batch), once per process.  SentencePiece encodes a whole batch in one call;
KenLM scores line by line (one C++ call each).

The same bytes wherever a partition runs (invariant 2): KenLM scores each
line on the calling thread from the sentence-start state, and the sum and
the power are Python floats in a fixed order, so a row's perplexity depends
neither on its batch nor on the process's threads.  SentencePiece's batch
encode may use threads, but what it returns are pieces (strings), the same
whatever the threads (tests/unit/ops/test_float_ops_batches.py,
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
from airflow_provider_dj.ops.dj_compat.model_files import locate_model_file, require_model_arg
from airflow_provider_dj.ops.filters.stat_range import RangeFilter, StatBounds
from airflow_provider_dj.ops.kernels.text import text_array
from airflow_provider_dj.ops.registry import register
from airflow_provider_dj.ops.stats import get_stat, set_stat

OP_NAME = "perplexity_filter"
SP_PATTERN = "{}.sp.model"  # Data-Juicer's names (prepare_sentencepiece_for_lang, prepare_kenlm_model)
KENLM_PATTERN = "{}.arpa.bin"
STAT_KEY = "perplexity"
SP_WHAT = "SentencePiece tokenizer model"
KENLM_WHAT = "KenLM language model (binary or ARPA text)"


def model_files(lang: str, sp_model_path: str | None, kenlm_model_path: str | None) -> tuple[str, str]:
    """(tokenizer, language model) paths; OpArgumentError naming the first missing file and where to put it."""
    wanted = [
        ("sp_model_path" if sp_model_path else "lang", sp_model_path or SP_PATTERN.format(lang), SP_WHAT),
        (
            "kenlm_model_path" if kenlm_model_path else "lang",
            kenlm_model_path or KENLM_PATTERN.format(lang),
            KENLM_WHAT,
        ),
    ]
    found = []
    for i, (arg, name, what) in enumerate(wanted):
        try:
            found.append(require_model_arg(name, op=OP_NAME, arg=arg, what=what))
        except OpArgumentError as exc:
            rest = [n for _, n, _ in wanted[i + 1 :] if locate_model_file(os.path.expanduser(n)) is None]
            if rest:  # say so now rather than after the user fixed the first one
                raise OpArgumentError(exc.key, f"{exc} (the {KENLM_WHAT} {rest[0]!r} is missing too)") from None
            raise
    return found[0], found[1]


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=4)
def load_sentencepiece(path: str, _stamp: tuple[int, int]) -> Any:
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.load(path)
    except (OSError, RuntimeError) as exc:
        raise OpFatalError(f"{OP_NAME}: cannot load the {SP_WHAT} {path!r}: {exc}") from exc
    return sp


@functools.lru_cache(maxsize=4)
def load_kenlm(path: str, _stamp: tuple[int, int]) -> Any:
    import kenlm

    try:
        return kenlm.Model(path)
    except (OSError, RuntimeError) as exc:
        raise OpFatalError(f"{OP_NAME}: cannot load the {KENLM_WHAT} {path!r}: {exc}") from exc


def perplexities(sp: Any, lm: Any, texts: list[str]) -> np.ndarray:
    """Data-Juicer's perplexity of every text, rounded to 0.1 (see the module docstring)."""
    pieces = sp.encode(texts, out_type=str) if texts else []
    score = lm.score
    out = np.empty(len(texts), np.float64)
    for i, words in enumerate(pieces):
        logits, length = 0, 0
        for line in " ".join(words).splitlines():
            logits += score(line)
            length += len(line.split()) + 1
        out[i] = round((10.0 ** (-logits / length)) if length != 0 else 0.0, 1)
    return out


@register
class PerplexityFilter(RangeFilter):
    """Keep samples whose KenLM perplexity over SentencePiece pieces (stat ``perplexity``) is in [min_ppl, max_ppl].

    Lower is more like the language model's training text (Data-Juicer's
    models: Wikipedia).  A null text counts as '' (perplexity 0.0).
    """

    name = OP_NAME
    path_args = ("sp_model_path", "kenlm_model_path")
    bounds = StatBounds(STAT_KEY, pa.float64(), float, min=("min_ppl", 0), max=("max_ppl", 1500), after="lang")
    stateful = True  # the models load once per actor, not per partition

    def __init__(
        self,
        *,
        lang: str = "en",
        sp_model_path: str | None = None,
        kenlm_model_path: str | None = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.lang = lang
        self.sp_model_path = sp_model_path
        self.kenlm_model_path = kenlm_model_path

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        lang = args.get("lang", "en")
        if not lang and not (args.get("sp_model_path") and args.get("kenlm_model_path")):
            raise OpArgumentError(
                "lang",
                f"{OP_NAME}: lang must name the models' language (en -> en.sp.model, "
                f"en.arpa.bin), or give sp_model_path and kenlm_model_path",
            )
        super().check_values(args)
        for module in ("sentencepiece", "kenlm"):
            if importlib.util.find_spec(module) is None:
                raise OpArgumentError(
                    "lang", f"{OP_NAME} needs the {module!r} package; install the 'models' extra of airflow-provider-dj"
                )
        model_files(lang, args.get("sp_model_path"), args.get("kenlm_model_path"))

    def resolved_model_paths(self) -> tuple[str, str]:
        return model_files(self.lang, self.sp_model_path, self.kenlm_model_path)

    def models(self) -> tuple[Any, Any]:
        """Both models, loaded once per process; OpFatalError when a file is missing or unusable here
        (no row could be processed, so ``skip_op_error`` must not send every row to ``failed/``)."""
        try:
            sp_path, lm_path = self.resolved_model_paths()
        except OpArgumentError as exc:  # there at validation, gone where the op runs (another node?)
            raise OpFatalError(str(exc)) from None
        return load_sentencepiece(sp_path, _stamp(sp_path)), load_kenlm(lm_path, _stamp(lm_path))

    def setup(self) -> None:
        """Load both models now (the actor pool times this as the op's start-up)."""
        self.models()

    def compute_stats(self, table: pa.Table) -> pa.Table:
        old = get_stat(table, STAT_KEY)
        if old is not None and old.null_count == 0:
            return table
        texts = pc.fill_null(text_array(table, self.text_key), "")
        rows = np.arange(table.num_rows) if old is None else np.flatnonzero(np.asarray(pc.is_null(old)))
        todo = texts if len(rows) == table.num_rows else texts.take(pa.array(rows))
        values = pa.array(perplexities(*self.models(), todo.to_pylist()), pa.float64())
        if old is not None:  # DJ keeps a perplexity that is already there
            mask = np.zeros(table.num_rows, bool)
            mask[rows] = True
            values = pc.replace_with_mask(old.cast(pa.float64()), pa.array(mask), values)
        return set_stat(table, STAT_KEY, values)
