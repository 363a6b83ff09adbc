"""Small tokenizer models built offline, for tests that need a real one.

Data-Juicer's ``tokenization: true`` modes load a SentencePiece model
(``{lang}.sp.model``) or a Hugging Face tokenizer that it would download;
tests here never download.  These helpers train a tiny SentencePiece model
with the ``sentencepiece`` package and build a tiny byte-level BPE Hugging
Face tokenizer with the ``tokenizers`` package, from a few sentences, in
well under a second each.

Both are deterministic for a given corpus and arguments (SentencePiece is
trained on one thread; BPE training is
deterministic), so a test can rebuild the same model every run.  The
conformance fixtures in ``tests/conformance/words_filters`` commit the files
they were made with instead, so they never depend on a library version's
training behaviour.
"""

from __future__ import annotations

import io
import json
import os
from typing import Iterable

#: A mixed-script corpus: English, German, Chinese (no spaces), Vietnamese, emoji, digits.
DEFAULT_CORPUS = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.",
    "A filter keeps samples whose ratio of words lies between two bounds.",
    "Stopwords such as the, a, of and in are very common in English text.",
    "Über die Brücke gehen wir jeden Tag zur Arbeit und zurück.",
    "我们今天去公园散步，天气很好。数据处理是一个重要的步骤。",
    "Tôi yêu Việt Nam. Hà Nội là thủ đô của Việt Nam.",
    "Numbers like 42, 3.14 and 2026 appear in many documents 🙂 👍.",
    "bad words and worse words are flagged; good words are not flagged.",
)


def train_sentencepiece(
    model_path: str,
    corpus: Iterable[str] = DEFAULT_CORPUS,
    *,
    vocab_size: int = 120,
    model_type: str = "unigram",
    **options: object,
) -> str:
    """Train a SentencePiece model from ``corpus`` and write it to ``model_path`` (e.g. ``en.sp.model``).

    Extra ``options`` go to ``SentencePieceTrainer.train`` and override the defaults here
    (one thread, ``character_coverage=1.0``, soft vocabulary limit), say
    ``character_coverage=0.9995``.  Returns ``model_path``.
    """
    import sentencepiece as spm

    model = io.BytesIO()
    settings = {"num_threads": 1, "character_coverage": 1.0, "hard_vocab_limit": False, "minloglevel": 2, **options}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(corpus)),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        **settings,
    )
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    with open(model_path, "wb") as f:
        f.write(model.getvalue())
    return model_path


def build_hf_tokenizer(folder: str, corpus: Iterable[str] = DEFAULT_CORPUS, *, vocab_size: int = 400) -> str:
    """Build a byte-level BPE tokenizer (GPT-NeoX style, as Pythia's) and save it as a Hugging Face
    tokenizer folder: ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``,
    which ``transformers.AutoTokenizer`` (and ``AutoProcessor``) load with ``local_files_only``.
    Returns ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|padding|>",
        "model_max_length": 2048,
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, sort_keys=True)
        f.write("\n")
    special = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(special, f, indent=1, sort_keys=True)
        f.write("\n")
    return folder


__all__ = ["DEFAULT_CORPUS", "build_hf_tokenizer", "train_sentencepiece"]
