"""The tokenizers of Data-Juicer's ``tokenization: true`` modes, found offline and run per batch.

Two kinds, as in Data-Juicer 1.6.1:

* SentencePiece, for ``words_num_filter``, ``word_repetition_filter``,
  ``flagged_words_filter`` and ``stopwords_filter``: the model file
  ``{lang}.sp.model`` looked up like every Data-Juicer model
  (``model_files.require_model_file``); words are ``encode_as_pieces``.
* A Hugging Face tokenizer, for ``alphanumeric_filter``: Data-Juicer
  hard-codes ``EleutherAI/pythia-6.9b-deduped`` and resolves it as a path,
  then ``$DATA_JUICER_EXTERNAL_MODELS_HOME/<name>``, then the Hugging Face
  hub.  We take the hub step from the local Hugging Face cache only
  (``HF_HUB_OFFLINE`` semantics), so nothing is ever downloaded; tokens are
  ``tokenizer.tokenize(text)`` (no special tokens, no truncation).

Validation only looks for the files (DAG parsing validates recipes and must
not import sentencepiece or transformers); models load on the op's first
batch, once per process (``functools.lru_cache``), so an op instance on a
Ray actor keeps its tokenizer across partitions.  Texts go to each library's
batch API (SentencePiece's ``encode`` on a list, the Rust ``encode_batch``
behind a fast Hugging Face tokenizer), the per-row work staying in C++/Rust.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.dj_compat.model_files import external_model_dirs, require_model_file
from airflow_provider_dj.ops.kernels.text import SPECIAL_CHARACTERS, py_lower

#: The tokenizer Data-Juicer's alphanumeric_filter loads (it has no argument to change it).
ALPHANUMERIC_HF_TOKENIZER = "EleutherAI/pythia-6.9b-deduped"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


# --- SentencePiece ------------------------------------------------------------------
def sentencepiece_model_name(lang: str) -> str:
    """Data-Juicer's name for a language's SentencePiece model (``prepare_sentencepiece_for_lang``)."""
    return f"{lang}.sp.model"


def require_sentencepiece(lang: str, *, op: str) -> str:
    """The path of ``{lang}.sp.model`` or an OpArgumentError that says where to put it."""
    if importlib.util.find_spec("sentencepiece") is None:  # checked without importing it (DAG parse)
        raise OpArgumentError(
            "tokenization",
            f"{op}: tokenization=true needs the 'sentencepiece' package (pip install "
            f"'airflow-provider-dj[models]'), or set tokenization to false",
        )
    try:
        return require_model_file(
            sentencepiece_model_name(lang),
            op=op,
            arg="tokenization",
            what="SentencePiece model (for tokenization: true)",
        )
    except OpArgumentError as exc:
        raise OpArgumentError(exc.key, f"{exc}; or set tokenization to false to split words on whitespace") from None


@functools.lru_cache(maxsize=8)
def load_sentencepiece(path: str) -> Any:
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor()
    try:
        model.load(path)
    except (OSError, RuntimeError) as exc:
        raise OpArgumentError(
            "tokenization",
            f"{path} is not a SentencePiece model ({exc}); replace the file (or set tokenization to false)",
        ) from None
    return model


def sentencepiece_pieces(model: Any, arr: pa.Array) -> pa.ListArray:
    """``encode_as_pieces`` of every row (null as ''), as one list<string> array."""
    texts = pc.fill_null(arr, "").to_pylist()
    if not texts:
        return pa.array([], pa.list_(pa.string()))
    pieces = model.encode(texts, out_type=str, num_threads=min(4, os.cpu_count() or 1))
    return pa.array(pieces, pa.list_(pa.string()))


# --- Hugging Face --------------------------------------------------------------------
def _looks_like_tokenizer(folder: str) -> bool:
    return os.path.isdir(folder) and any(os.path.isfile(os.path.join(folder, f)) for f in _TOKENIZER_FILES)


def hf_hub_cache() -> str:
    """The Hugging Face hub cache folder, from the variables ``huggingface_hub`` reads, read at
    each call (``huggingface_hub`` itself reads them once, at import)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.path.expanduser(os.environ[var])
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.expanduser(os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")), "hub")


def _hf_cache_snapshot(repo_id: str) -> tuple[str | None, str]:
    """(snapshot folder of ``repo_id`` in the local Hugging Face cache or None, the cache folder).

    The hub cache layout read directly (``models--{org}--{name}/refs/main`` names the snapshot
    under ``snapshots/``), as ``huggingface_hub`` does offline, without importing it at
    validation.  A cache copied without its ``refs`` folder is accepted when it holds exactly
    one snapshot."""
    cache = hf_hub_cache()
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    snapshots = os.path.join(repo, "snapshots")
    ref = os.path.join(repo, "refs", "main")
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            folder = os.path.join(snapshots, f.read().strip())
        if os.path.isdir(folder):
            return folder, cache
    if os.path.isdir(snapshots):
        entries = [e for e in os.listdir(snapshots) if os.path.isdir(os.path.join(snapshots, e))]
        if len(entries) == 1:
            return os.path.join(snapshots, entries[0]), cache
    return None, cache


def locate_hf_tokenizer(name: str, *, op: str) -> str:
    """The local folder of Hugging Face tokenizer ``name``, in Data-Juicer's order, or an OpArgumentError.

    Order: ``name`` as a path; ``<dir>/<name>`` for each folder of
    ``DATA_JUICER_EXTERNAL_MODELS_HOME`` (Data-Juicer's ``check_model_home``);
    the local Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME``), offline.
    """
    if _looks_like_tokenizer(name):
        return os.path.abspath(name)
    external = external_model_dirs()  # Data-Juicer never looks for a Hugging Face model in its models cache
    for folder in external:
        if _looks_like_tokenizer(os.path.join(folder, name)):
            return os.path.join(folder, name)
    snapshot, cache = _hf_cache_snapshot(name)
    if snapshot and _looks_like_tokenizer(snapshot):
        return snapshot
    places = [os.path.join(d, name) for d in external] + [os.path.join(cache, "models--" + name.replace("/", "--"))]
    raise OpArgumentError(
        "tokenization",
        f"{op}: tokenization=true needs the Hugging Face tokenizer {name!r}, which was not found locally "
        f"(looked at {', '.join(places)}); this engine never downloads models. Put the tokenizer's files "
        f"(tokenizer.json, tokenizer_config.json) in a folder {os.path.join('<dir>', name)} and set "
        f"DATA_JUICER_EXTERNAL_MODELS_HOME=<dir>, or fill the Hugging Face cache on a connected machine "
        f"(huggingface-cli download {name} tokenizer.json tokenizer_config.json special_tokens_map.json) and "
        f"copy it here; or set tokenization to false",
    )


class HFTokenCounter:
    """``len(tokenizer.tokenize(text))`` for many texts at once.

    Loaded with ``transformers`` when it is installed (what Data-Juicer
    uses, so model-specific tokenizer classes behave the same); counting
    goes through the Rust backend's ``encode_batch`` without special tokens
    or truncation, which is what ``tokenize`` does for a fast tokenizer.
    Without ``transformers`` a folder's ``tokenizer.json`` is loaded with the
    ``tokenizers`` package directly.  A slow (Python) tokenizer is called row
    by row.
    """

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._slow = None
        self._backend = None
        try:
            from transformers import AutoTokenizer
        except ImportError:
            AutoTokenizer = None
        if AutoTokenizer is not None:
            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            backend = getattr(tok, "backend_tokenizer", None)
            if backend is None:
                self._slow = tok
            else:
                self._backend = backend
        else:
            path = os.path.join(folder, "tokenizer.json")
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise OpArgumentError(
                    "tokenization",
                    "alphanumeric_filter: tokenization=true needs the 'tokenizers' (or 'transformers') package "
                    "to run a Hugging Face tokenizer; install it, or set tokenization to false",
                ) from None
            if not os.path.isfile(path):
                raise OpArgumentError(
                    "tokenization",
                    f"{folder} has no tokenizer.json; without 'transformers' installed only "
                    f"fast tokenizers (tokenizer.json) can be loaded",
                )
            self._backend = Tokenizer.from_file(path)
        if self._backend is not None:
            # tokenize() never truncates or pads; a tokenizer.json may carry either setting.
            self._backend.no_truncation()
            self._backend.no_padding()

    def counts(self, arr: pa.Array) -> np.ndarray:
        texts = pc.fill_null(arr, "").to_pylist()
        if self._backend is not None:
            # encode_batch_fast (tokenizers >= 0.20) skips the character offsets: same tokens, ~25% faster
            encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            encodings = encode(texts, add_special_tokens=False) if texts else []
            return np.fromiter((len(e.ids) for e in encodings), np.int64, len(texts))
        return np.fromiter((len(self._slow.tokenize(t)) for t in texts), np.int64, len(texts))


@functools.lru_cache(maxsize=4)
def load_hf_token_counter(folder: str) -> HFTokenCounter:
    return HFTokenCounter(folder)


__all__ = [
    "ALPHANUMERIC_HF_TOKENIZER",
    "HFTokenCounter",
    "load_hf_token_counter",
    "load_sentencepiece",
    "locate_hf_tokenizer",
    "require_sentencepiece",
    "sentencepiece_model_name",
    "sentencepiece_pieces",
]


# --- Data-Juicer's words ------------------------------------------------------------
_SPECIAL_STR = "".join(sorted(SPECIAL_CHARACTERS))


def _starts(row: np.ndarray, rows: int) -> np.ndarray:
    starts = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=rows), out=starts[1:])
    return starts


def _strip_and_drop(words: pa.Array, row: np.ndarray, rows: int) -> tuple[pa.Array, np.ndarray]:
    words = pc.utf8_trim(words, characters=_SPECIAL_STR)
    nonempty = pc.greater(pc.binary_length(words), 0)
    return words.filter(nonempty), _starts(row[nonempty.to_numpy(zero_copy_only=False)], rows)


def whitespace_words(arr: pa.Array, *, lower: bool) -> tuple[pa.Array, np.ndarray]:
    """Data-Juicer's words without a tokenizer (``split_on_whitespace`` on ' ', '\n', '\t',
    then ``words_refinement`` with SPECIAL_CHARACTERS), as (words of all rows, row starts R + 1).

    No list array is built: in UTF-8 the three separator bytes never occur inside another
    character, so the word boundaries are the separator positions of the text buffer itself,
    and the words are one zero-copy string array over that buffer whose every element is a
    word plus the separator after it.  The separators are special characters, so the strip
    removes them with the word's own special ends.  Lower-casing the whole text first equals
    DJ's per-word ``lower()``: nothing lower-cases to a separator, and a separator ends
    Python's final-sigma context just as a word's end does.
    """
    arr = pc.fill_null(arr, "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    rows = len(arr)
    if lower and rows:
        arr = py_lower(arr)
    wide = pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)[arr.offset : arr.offset + rows + 1]
    offsets = offsets.astype(np.int64)
    if not rows or offsets[-1] == offsets[0]:
        return pa.array([], pa.large_string()), np.zeros(rows + 1, np.int64)
    data_buf = arr.buffers()[2]
    lo, hi = int(offsets[0]), int(offsets[-1])
    text = np.frombuffer(data_buf, np.uint8)[lo:hi]
    after_sep = np.flatnonzero((text == 0x20) | (text == 0x0A) | (text == 0x09)) + (lo + 1)
    # Two sorted runs: a stable (tim)sort merges them in linear time; then drop repeats (a row's
    # start that follows its predecessor's last separator, empty rows).
    bounds = np.sort(np.concatenate([offsets, after_sep]), kind="stable")
    bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])]
    row = np.searchsorted(offsets, bounds[:-1], side="right") - 1  # empty rows share a start: take the last
    words = pa.LargeStringArray.from_buffers(len(bounds) - 1, pa.py_buffer(bounds), data_buf)
    return _strip_and_drop(words, row, rows)


def piece_words(model: Any, arr: pa.Array, *, lower: bool) -> tuple[pa.Array, np.ndarray]:
    """Data-Juicer's words with ``tokenization: true``: ``encode_as_pieces``, then
    ``words_refinement`` (``str.lower`` per piece when ``lower``, SPECIAL_CHARACTERS stripped,
    empty ones dropped), as (words of all rows, row starts R + 1)."""
    pieces = sentencepiece_pieces(model, pc.fill_null(arr, ""))
    flat = pc.list_flatten(pieces)
    row = pc.list_parent_indices(pieces).to_numpy(zero_copy_only=False)
    if lower and len(flat):
        flat = py_lower(flat)  # per piece: a piece boundary is not a word boundary for final sigma
    return _strip_and_drop(flat, row, len(pieces))


def refined_words(arr: pa.Array, pieces_model: Any = None, *, lower: bool) -> tuple[pa.Array, np.ndarray]:
    """``piece_words`` with a SentencePiece model, else ``whitespace_words``."""
    if pieces_model is not None:
        return piece_words(pieces_model, arr, lower=lower)
    return whitespace_words(arr, lower=lower)


def augment_words(flat: pa.Array, starts: np.ndarray, group_size: int, join_char: str) -> tuple[pa.Array, np.ndarray]:
    """Data-Juicer's ``words_augmentation``: every run of ``group_size`` consecutive words of a
    row joined by ``join_char`` (none for a row with fewer words).  Returns the joined words of
    all rows and the rows' start offsets, like ``refined_words``."""
    n_words = np.diff(starts)
    n_aug = np.maximum(n_words - group_size + 1, 0)
    out_starts = np.zeros(len(n_words) + 1, np.int64)
    np.cumsum(n_aug, out=out_starts[1:])
    if out_starts[-1] == 0:
        return pa.array([], flat.type), out_starts
    # The first word of each run: row start + 0 .. n_aug - 1.
    first = np.repeat(starts[:-1], n_aug) + (np.arange(out_starts[-1]) - np.repeat(out_starts[:-1], n_aug))
    parts = [pc.take(flat, pa.array(first + k)) for k in range(group_size)]
    if group_size == 1:
        return parts[0], out_starts
    return pc.binary_join_element_wise(*parts, pa.scalar(join_char, flat.type)), out_starts


__all__ += ["augment_words", "piece_words", "refined_words", "whitespace_words"]
