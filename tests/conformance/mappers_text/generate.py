"""Produce the text mappers' conformance fixtures by running Data-Juicer 1.6.1.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file
does that).  Besides ``tests/conformance/generate_expected.py`` this is the
only file that imports ``data_juicer``; our package never does.

* ``inputs/<op>.jsonl``: the hand-written rows of ``cases.py``.
* ``expected/<op>__<variant>.jsonl``: every row's text after DJ's op with
  the arguments of ``variants.json``, run the way DJ's executor runs it
  (``op.run(dataset)``).  ``lowercase_mapper`` is this project's own op (DJ
  has none); its reference is Python's ``str.lower()``.
* ``expected/charsets.json``: the ``regex``-module character classes and the
  punctuation table our RE2 translations spell out, so tests catch drift.
"""

from __future__ import annotations

import json
import os
import sys

import cases

HERE = os.path.dirname(os.path.abspath(__file__))
LINE_BREAKERS = "\x85\u2028\u2029"  # JSON allows them raw, line-splitting readers do not
REQUIRED = {"data_juicer": "1.6.1", "ftfy": "6.3.1", "selectolax": "1.0.2"}


def dumps(obj: object) -> str:
    line = json.dumps(obj, ensure_ascii=False, sort_keys=True)
    for ch in LINE_BREAKERS:
        line = line.replace(ch, "\\u%04x" % ord(ch))
    return line


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(dumps(row) + "\n")


def ranges(cps) -> str:
    out: list[list[int]] = []
    for c in sorted(set(cps)):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return " ".join(f"{a:X}" if a == b else f"{a:X}-{b:X}" for a, b in out)


def check_versions() -> None:
    import importlib

    for name, want in REQUIRED.items():
        have = importlib.import_module(name).__version__
        if not have.startswith(want):
            sys.exit(f"expected {name} {want} in the Data-Juicer venv, found {have}")


def run_dj(name: str, args: dict, rows: list[dict]) -> list[dict]:
    if name == "lowercase_mapper":
        return [{"id": r["id"], "text": r["text"].lower()} for r in rows]
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from datasets import Dataset

    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    out = op.run(NestedDataset(Dataset.from_list(rows))).to_list()
    return [{"id": r["id"], "text": r["text"]} for r in out]


def charsets() -> dict:
    import regex
    from data_juicer.ops.mapper.punctuation_normalization_mapper import PunctuationNormalizationMapper

    every = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]

    def members(pattern: str) -> str:
        compiled = regex.compile(pattern)
        return ranges(c for c in every if compiled.match(chr(c)))

    return {
        "regex_word": members(r"\w"),
        "links_ci_letter": members(r"(?i)[a-z]"),
        "links_ci_word_or_hyphen": members(r"(?i)[\w-]"),
        "links_not_space_paren": members(r"(?i)[^\s()<>]"),
        "links_end_char": members(r"(?i)[^\s`!()\[\]{};:\'\".,<>?«»“”‘’]"),
        "links_ci_w": members(r"(?i)w"),
        "copyright_ci": {ch: members("(?i)" + ch) for ch in "copyright"},
        "sentence_last_step_class": members(r"[.。!！？\?\.{6}\…{2}]"),
        "punctuation_map": PunctuationNormalizationMapper().punctuation_unicode,
    }


def main() -> None:
    check_versions()
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
    with open(os.path.join(HERE, "expected", "charsets.json"), "w", encoding="utf-8") as f:
        json.dump(charsets(), f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
