"""Data-Juicer's word-list assets (``flagged_words``, ``stopwords``), read the way it reads them.

Data-Juicer 1.6.1 (``load_words_asset``) lists the op's words folder
(``flagged_words_dir`` / ``stopwords_dir``, default its assets cache
``DATA_JUICER_ASSETS_CACHE``) and reads *every* file whose name ends in
``.json`` and contains the list type (``flagged_words``, ``stopwords``).
Each file is a JSON object mapping a language key (``en``, ``zh``...) to a
list of words; lists of the same key from several files are concatenated.
The ops then use the key ``lang``; ``all`` is the union of every key unless
a file defines ``all`` itself (then that list alone, as in Data-Juicer).
When no file is found, Data-Juicer downloads its own list into that folder:
this engine never downloads, so it refuses with the file it looked for and
where to put it.

Data-Juicer would accept some malformed lists and fail later or quietly
(a string instead of a list becomes a set of its characters, an unknown
``lang`` is a KeyError on the first sample); here both are validation
errors naming the file and the key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.dj_compat.model_files import dj_assets_cache

WORD_LIST_TYPES = ("flagged_words", "stopwords")


@dataclass(frozen=True)
class WordLists:
    """Every language's words of one list type in one folder."""

    folder: str
    files: tuple[str, ...]
    words: dict[str, frozenset[str]]
    #: sha256 over the files' names and bytes: what a checkpoint fingerprint needs to notice an edit.
    digest: str

    def for_lang(self, lang: str, *, op: str) -> frozenset[str]:
        """The words for ``lang``: its key, or for ``all`` the union of all keys (unless a file has ``all``)."""
        if lang in self.words:
            return self.words[lang]
        if lang == "all":
            return frozenset().union(*self.words.values())
        raise OpArgumentError(
            "lang",
            f"{op}: lang {lang!r} has no word list in {', '.join(self.files)} (languages there: "
            f"{', '.join(sorted(self.words))}); set lang to one of them or to 'all', or add a {lang!r} key",
        )


def resolve_words_dir(words_dir: str | None) -> str:
    """The folder an op reads: its ``*_dir`` argument, else Data-Juicer's assets cache (read now)."""
    return os.path.abspath(os.path.expanduser(words_dir)) if words_dir else dj_assets_cache()


def _missing(op: str, arg: str, words_type: str, folder: str, why: str) -> OpArgumentError:
    return OpArgumentError(
        arg,
        f"{op}: no {words_type} word list: {why}. Looked for {os.path.join(folder, words_type + '.json')} "
        f"(any *.json file in that folder whose name contains {words_type!r}); this engine never downloads "
        f"word lists. Put a JSON object mapping language codes to lists of words there (Data-Juicer's own "
        f"{words_type}.json works as is), or point {arg} (or DATA_JUICER_ASSETS_CACHE) at the folder holding it",
    )


def load_word_lists(words_dir: str | None, words_type: str, *, op: str, arg: str) -> WordLists:
    """Read ``words_type`` lists from ``words_dir`` (see the module docstring) or raise OpArgumentError."""
    if words_type not in WORD_LIST_TYPES:
        raise ValueError(f"unknown word list type {words_type!r}; expected one of {WORD_LIST_TYPES}")
    folder = resolve_words_dir(words_dir)
    if not os.path.isdir(folder):
        raise _missing(op, arg, words_type, folder, f"the folder {folder} does not exist")
    names = sorted(
        n
        for n in os.listdir(folder)
        if n.endswith(".json") and words_type in n and os.path.isfile(os.path.join(folder, n))
    )
    if not names:
        raise _missing(op, arg, words_type, folder, f"{folder} holds no *.json file with {words_type!r} in its name")
    stamps = tuple((n, *_stamp(os.path.join(folder, n))) for n in names)
    return _load(folder, words_type, op, arg, stamps)


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=32)
def _load(folder: str, words_type: str, op: str, arg: str, stamps: tuple) -> WordLists:
    """Parse the files once per process while their sizes and mtimes stay the same."""
    merged: dict[str, list[str]] = {}
    digest = hashlib.sha256()
    files = []
    for name, *_ in stamps:
        path = os.path.join(folder, name)
        files.append(path)
        with open(path, "rb") as f:
            raw = f.read()
        digest.update(name.encode() + b"\0" + raw + b"\0")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise OpArgumentError(arg, f"{op}: {path} is not valid UTF-8 JSON ({exc}); fix or remove it") from None
        if not isinstance(data, dict):
            raise OpArgumentError(
                arg,
                f"{op}: {path} must hold a JSON object mapping language codes to lists of words, "
                f"not a {type(data).__name__}",
            )
        for lang, words in data.items():
            if not isinstance(words, list):
                raise OpArgumentError(
                    arg, f"{op}: {path}: key {lang!r} must map to a list of words, not a {type(words).__name__}"
                )
            for i, word in enumerate(words):
                if not isinstance(word, str):
                    raise OpArgumentError(
                        arg, f"{op}: {path}: {lang}[{i}] is {word!r}, not a string; every word must be a string"
                    )
            merged.setdefault(lang, []).extend(words)
    if not merged:
        raise _missing(op, arg, words_type, folder, f"the files {', '.join(files)} define no language")
    return WordLists(folder, tuple(files), {k: frozenset(v) for k, v in merged.items()}, digest.hexdigest())


__all__ = ["WORD_LIST_TYPES", "WordLists", "load_word_lists", "resolve_words_dir"]
