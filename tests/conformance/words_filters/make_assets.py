"""Write the word lists and tokenizer models both sides of the words-filter conformance test use.

Run with the project's venv (it needs ``sentencepiece`` and ``tokenizers``,
not Data-Juicer); ``regenerate.sh`` runs it before ``generate.py``.  The
outputs are committed, so CI uses exactly the files Data-Juicer saw:

* ``wordlists/basic/``: two ``*flagged_words*.json`` and two
  ``*stopwords*.json`` files whose language keys overlap (Data-Juicer
  concatenates them), plus files it must ignore (``notes.json``,
  ``flagged_words.txt``);
* ``wordlists/all_key/``: a list that defines ``all`` itself, so ``lang:
  all`` must use that list and not the union;
* ``models/en.sp.model``, ``models/zh.sp.model``: SentencePiece models for
  ``tokenization: true`` (``{lang}.sp.model``), found through
  ``DATA_JUICER_EXTERNAL_MODELS_HOME=models``;
* ``models/EleutherAI/pythia-6.9b-deduped/``: a small byte-level BPE
  tokenizer under the name ``alphanumeric_filter`` hard-codes.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..")))  # tests/, for helpers_models

from helpers_models import DEFAULT_CORPUS, build_hf_tokenizer, train_sentencepiece  # noqa: E402

WORDLISTS = {
    "basic/flagged_words.json": {
        "en": ["bad", "worse", "damn", "fox", "σοφία", "straße"],
        "zh": ["坏", "坏人", "公园", "散步"],
        "vi": ["việt nam", "hà nội", "xấu"],
    },
    "basic/extra_flagged_words_2.json": {"en": ["ugly", "bad"], "de": ["schlecht"], "vi": ["việt nam là"]},
    "basic/stopwords.json": {
        "en": ["the", "a", "an", "of", "in", "is", "and", "to", "are", "ς"],
        "zh": ["的", "是", "我们", "很", "天气"],
        "vi": ["là", "của", "tôi"],
    },
    "basic/my_stopwords_de.json": {"de": ["die", "der", "und", "zur"], "en": ["it", "we"]},
    "basic/notes.json": {"en": ["the", "bad"]},
    "all_key/flagged_words.json": {"all": ["dog", "坏人"], "en": ["bad"], "zh": ["坏"]},
    "all_key/stopwords.json": {"all": ["the", "的"], "en": ["a"]},
}
IGNORED_TEXT = {"basic/flagged_words.txt": "the\na\nof\n"}

ZH_CORPUS = (
    "我们今天去公园散步，天气很好。",
    "数据处理是一个重要的步骤，我们需要过滤坏的样本。",
    "坏人做坏事，好人做好事。公园里有很多人在散步。",
    "中文文本没有空格，所以分词需要模型。",
)


def main() -> None:
    for rel, data in WORDLISTS.items():
        path = os.path.join(HERE, "wordlists", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1, sort_keys=True)
            f.write("\n")
    for rel, text in IGNORED_TEXT.items():
        with open(os.path.join(HERE, "wordlists", rel), "w", encoding="utf-8") as f:
            f.write(text)
    models = os.path.join(HERE, "models")
    # identity normalization keeps the model file small (NFKC's table is ~240 kB); both sides
    # run the same model through the same library, so the rule does not change what is compared.
    train_sentencepiece(os.path.join(models, "en.sp.model"), vocab_size=150, normalization_rule_name="identity")
    train_sentencepiece(
        os.path.join(models, "zh.sp.model"),
        ZH_CORPUS + DEFAULT_CORPUS,
        vocab_size=120,
        normalization_rule_name="identity",
    )
    build_hf_tokenizer(os.path.join(models, "EleutherAI", "pythia-6.9b-deduped"), vocab_size=400)
    print("wrote", sorted(WORDLISTS) + sorted(IGNORED_TEXT), "and models/")


if __name__ == "__main__":
    main()
