"""Produce the LaTeX and word mappers' conformance fixtures by running Data-Juicer 1.6.1.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file
does that); our package never imports ``data_juicer``.

* ``inputs/<op>.jsonl``: the rows of ``cases.py`` (real LaTeX sources).
* ``expected/<op>__<variant>.jsonl``: every row's text after DJ's op with the
  arguments of ``variants.json``, run as DJ's executor runs it (``op.run``).
* ``models/en.sp.model``: a small SentencePiece model trained here on
  ``cases.SP_TRAINING_TEXT`` (kept when it exists; ``--retrain`` makes a new
  one), found by DJ through ``DATA_JUICER_EXTERNAL_MODELS_HOME`` for the
  ``tokenization`` variants: no model is ever downloaded.
* ``expected/checks.json``: facts our implementation relies on, checked
  here against the reference ``regex`` module (the generator fails when one
  does not hold).
"""

from __future__ import annotations

import json
import os
import random
import sys

import cases

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
LINE_BREAKERS = "\x85\u2028\u2029"  # JSON allows them raw, line-splitting readers do not
REQUIRED = {"data_juicer": "1.6.1", "regex": "2026.11.19", "sentencepiece": "0.2.3"}


def dumps(obj: object) -> str:
    line = json.dumps(obj, ensure_ascii=False, sort_keys=True)
    for ch in LINE_BREAKERS:
        line = line.replace(ch, "\\u%04x" % ord(ch))
    return line


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(dumps(row) + "\n")


def check_versions() -> None:
    import importlib

    for name, want in REQUIRED.items():
        have = importlib.import_module(name).__version__
        if not have.startswith(want):
            sys.exit(f"expected {name} {want} in the Data-Juicer venv, found {have}")


def train_sentencepiece(retrain: bool) -> None:
    path = os.path.join(MODELS, "en.sp.model")
    if os.path.exists(path) and not retrain:
        return
    import sentencepiece

    os.makedirs(MODELS, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(line for t in cases.SP_TRAINING_TEXT for line in t.splitlines() if line.strip()),
        model_prefix=os.path.join(MODELS, "en.sp"),
        vocab_size=300,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        normalization_rule_name="identity",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    os.remove(os.path.join(MODELS, "en.sp.vocab"))


def template_checks() -> dict:
    """expand_macro_mapper's values go through ``unicode-escape`` and a ``regex`` template;
    our op inserts them literally, which is right only if that decodes to the value itself."""
    import regex

    def through_template(value: str) -> str:
        escaped = value.encode("unicode-escape").decode("utf-8")
        return regex.sub(r"(x)(y)", escaped + r"\2", "xy")[:-1]

    every = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    bad = [hex(ord(c)) for c in every if through_template(c) != c]
    rnd = random.Random(3)
    pool = every[:300] + ["\\", "1", "g", "<", ">", "0", "x", "u", "N", "{", "}", "\t", "\r", "é", "中", "😀"] * 20
    samples = ["".join(rnd.choice(pool) for _ in range(rnd.randint(1, 12))) for _ in range(20000)]
    bad += [s for s in samples if through_template(s) != s]
    if bad:
        sys.exit(f"unicode-escape + regex template does not round-trip for {bad[:10]}: fix expand_macros")
    return {"template_roundtrip_chars": len(every), "template_roundtrip_strings": len(samples)}


def run_dj(name: str, args: dict, rows: list[dict]) -> list[dict]:
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from datasets import Dataset

    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    out = op.run(NestedDataset(Dataset.from_list(rows))).to_list()
    return [{"id": r["id"], "text": r["text"]} for r in out]


def main() -> None:
    check_versions()
    train_sentencepiece("--retrain" in sys.argv)
    # Read by data_juicer.utils.model_utils when it is imported (below, in run_dj).
    os.environ["DATA_JUICER_EXTERNAL_MODELS_HOME"] = MODELS
    with open(os.path.join(HERE, "variants.json"), encoding="utf-8") as f:
        variants = json.load(f)
    os.makedirs(os.path.join(HERE, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    for op, texts in cases.CASES.items():
        rows = [{"id": i, "text": t} for i, t in enumerate(texts)]
        write_jsonl(os.path.join(HERE, "inputs", f"{op}.jsonl"), rows)
        for vname, args in variants[op].items():
            out = run_dj(op, args, rows)
            write_jsonl(os.path.join(HERE, "expected", f"{op}__{vname}.jsonl"), out)
            changed = sum(a["text"] != b["text"] for a, b in zip(rows, out))
            print(f"{op}__{vname}: {len(rows)} rows, {changed} changed")
    with open(os.path.join(HERE, "expected", "checks.json"), "w", encoding="utf-8") as f:
        json.dump(template_checks(), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
