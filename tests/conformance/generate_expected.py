"""Produce the conformance fixtures by running the reference Data-Juicer.

Run with the Data-Juicer 1.6.1 venv's python (``regenerate.sh`` does that);
this is the only file in the repository that imports ``data_juicer``.

* For every op and argument variant in ``fixtures/variants.json`` the op's
  input file ``fixtures/inputs/<op>.jsonl`` goes through the DJ op exactly as
  DJ's default executor runs it (``op.run(dataset)``), and the result goes to
  ``fixtures/expected/<op>__<variant>.jsonl``:
  mappers -> every row's final text; filters -> every row with its stats and
  whether DJ kept it; deduplicators -> the rows DJ keeps, in order.
* ``fixtures/expected/charsets.json`` records the character sets DJ
  hard-codes, so the tests can check our copies never drift.
* ``fixtures/pipeline/input.jsonl`` is built from a seeded generator and run
  through ``dj-process`` with ``fixtures/pipeline/recipe.yaml``; DJ's export
  is committed unchanged as ``fixtures/pipeline/expected.jsonl`` (and its stats
  sidecar as ``expected_stats.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import string
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")
LINE_BREAKERS = "\x85\u2028\u2029"  # JSON allows them raw, line-splitting readers do not


def dumps(obj: object) -> str:
    line = json.dumps(obj, ensure_ascii=False, sort_keys=True)
    for ch in LINE_BREAKERS:
        line = line.replace(ch, "\\u%04x" % ord(ch))
    return line


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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


def run_op(name: str, args: dict, rows: list[dict]) -> list[dict]:
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.base_op import Deduplicator, Filter, Mapper
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import Fields
    from datasets import Dataset

    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    ds = NestedDataset(Dataset.from_list(rows))
    if isinstance(op, Mapper):
        return [{"id": r["id"], "text": r["text"]} for r in op.run(ds).to_list()]
    if isinstance(op, Filter):
        with_stats = op.run(ds, reduce=False).to_list()
        kept = {r["id"] for r in op.run(ds).to_list()}
        return [
            {"id": r["id"], "text": r["text"], "stats": r[Fields.stats], "kept": r["id"] in kept} for r in with_stats
        ]
    if isinstance(op, Deduplicator):
        return [{"id": r["id"], "text": r["text"]} for r in op.run(ds).to_list()]
    raise TypeError(f"unexpected op kind for {name}")


def charsets() -> dict:
    import regex
    from data_juicer.ops.common.special_characters import SPECIAL_CHARACTERS, VARIOUS_WHITESPACES

    every = range(0x110000)
    return {
        "special_characters_single": ranges(ord(c) for c in SPECIAL_CHARACTERS if len(c) == 1),
        "various_whitespaces": ranges(ord(c) for c in VARIOUS_WHITESPACES),
        "regex_space": ranges(c for c in every if regex.match(r"\s", chr(c))),
        "regex_digit": ranges(c for c in every if regex.match(r"\d", chr(c))),
        "punctuation": string.punctuation,
        "python_isspace": ranges(c for c in every if chr(c).isspace()),
    }


# --- pipeline input -----------------------------------------------------------
VOCAB = (
    "the of and a to in is was for on that with as by at from his her it an were are which this "
    "be or has had not but their they one new first also after who its been more other two when "
    "data model river city music history science garden window station market morning language"
).split()
LONG_WORDS = ["internationalization", "characteristically", "incomprehensibilities", "counterrevolutionary"]
EMAILS = ["jane.doe@example.com", "info@shop.co.uk", "a.b+c@mail.org", "Boss@Corp.COM", "x_y@host.io"]
ODD_WS = ["\u3000", "\xa0", "\u200b", "\t", "\u2003", "\x1c", "\u2009", "\ufffc"]
CJK = ["数据清洗是重要的步骤。", "今天天气很好，我们去公园散步吧！", "机器学习需要大量高质量的数据。"]
EMOJI = ["🙂", "🚀", "👍🏽", "🎉", "❤️"]


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(VOCAB) for _ in range(rng.randint(lo, hi))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", "!", "?", ";", ""])


def fresh_text(rng: random.Random, kind: str) -> str:
    if kind == "normal":
        return " ".join(sentence(rng, 4, 14) for _ in range(rng.randint(1, 4)))
    if kind == "email":
        s = sentence(rng, 5, 20).split(" ")
        s.insert(rng.randint(0, len(s)), rng.choice(EMAILS))
        return " ".join(s)
    if kind == "whitespace":
        s = sentence(rng, 6, 25).split(" ")
        out = s[0]
        for w in s[1:]:
            out += (rng.choice(ODD_WS) if rng.random() < 0.4 else " ") + w
        return rng.choice(["", "  ", "\n", "\u3000", "\u200b"]) + out + rng.choice(["", " ", "\t\n", "\xa0"])
    if kind == "short":
        return rng.choice(["ok", "Hi there", "a b c d", "Too short.", "yes no", "One two three four five"])
    if kind == "many_words":  # > 200 words but < 2000 chars
        return " ".join(rng.choice(["a", "an", "of", "to", "in"]) for _ in range(rng.randint(205, 260)))
    if kind == "many_chars":  # > 2000 chars with <= 200 words
        return " ".join(rng.choice(LONG_WORDS) for _ in range(rng.randint(110, 150)))
    if kind == "cjk":
        return rng.choice(CJK) + " " + sentence(rng, 4, 10) + " " + rng.choice(EMOJI)
    raise ValueError(kind)


def variant_of(rng: random.Random, text: str) -> str:
    how = rng.choice(["exact", "upper", "lower", "pad", "email", "ws"])
    if how == "upper":
        return text.upper()
    if how == "lower":
        return text.lower()
    if how == "pad":
        return "  " + text + "\n"
    if how == "email":
        return text + " " + rng.choice(EMAILS)
    if how == "ws":
        return text.replace(" ", "\u3000", 2)
    return text


def build_pipeline_input(n: int = 300, seed: int = 20240601) -> list[dict]:
    rng = random.Random(seed)
    kinds = ["normal"] * 40 + ["email"] * 12 + ["whitespace"] * 12 + ["short"] * 8
    kinds += ["many_words"] * 3 + ["many_chars"] * 3 + ["cjk"] * 5
    rows: list[dict] = []
    for i in range(n):
        if rows and rng.random() < 0.22:
            text = variant_of(rng, rng.choice(rows)["text"])
        else:
            text = fresh_text(rng, rng.choice(kinds))
        meta = {"source": rng.choice(["web", "books", "forum"]), "quality": rng.randint(1, 5)}
        rows.append({"id": i, "text": text, "meta": meta})
    return rows


def run_pipeline(dj_bin: str) -> None:
    pdir = os.path.join(FIX, "pipeline")
    write_jsonl(os.path.join(pdir, "input.jsonl"), build_pipeline_input())
    with tempfile.TemporaryDirectory() as tmp:
        export = os.path.join(tmp, "out", "result.jsonl")
        cmd = [
            os.path.join(dj_bin, "dj-process"),
            "--config", os.path.join(pdir, "recipe.yaml"),
            "--dataset_path", os.path.join(pdir, "input.jsonl"),
            "--export_path", export,
            "--work_dir", os.path.join(tmp, "work"),
        ]  # fmt: skip
        subprocess.run(cmd, check=True, cwd=tmp)
        shutil.copyfile(export, os.path.join(pdir, "expected.jsonl"))
        # DJ writes the kept rows' stats to a sidecar file next to the export.
        shutil.copyfile(export.replace(".jsonl", "_stats.jsonl"), os.path.join(pdir, "expected_stats.jsonl"))
        print("DJ export folder held:", sorted(os.listdir(os.path.dirname(export))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-pipeline", action="store_true")
    parser.add_argument("--only-pipeline", action="store_true")
    opts = parser.parse_args()
    if not opts.only_pipeline:
        with open(os.path.join(FIX, "variants.json"), encoding="utf-8") as f:
            variants = json.load(f)
        os.makedirs(os.path.join(FIX, "expected"), exist_ok=True)
        for op, by_name in variants.items():
            rows = read_jsonl(os.path.join(FIX, "inputs", f"{op}.jsonl"))
            for vname, args in by_name.items():
                out = run_op(op, args, rows)
                write_jsonl(os.path.join(FIX, "expected", f"{op}__{vname}.jsonl"), out)
                print(f"{op}__{vname}: {len(rows)} in, {len(out)} rows written")
        with open(os.path.join(FIX, "expected", "charsets.json"), "w", encoding="utf-8") as f:
            json.dump(charsets(), f, indent=1, sort_keys=True)
            f.write("\n")
    if not opts.skip_pipeline:
        run_pipeline(os.path.dirname(sys.executable))


if __name__ == "__main__":
    main()
