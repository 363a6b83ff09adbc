"""Deterministic synthetic text corpus for the demo, the tests and the benchmarks.

No network at run time means no downloaded datasets: this generator makes
web-crawl-like rows with the features the demo ops act on — e-mail
addresses, odd Unicode whitespace, very short and very long texts, and
exact and near duplicates — from a seed, so every run sees the same rows.
"""

from __future__ import annotations

import json
import os
import random

_WORDS = (
    "data pipeline corpus model token train clean filter dedup partition checkpoint resume export quality "
    "language text sample shard cluster ray airflow schedule retry worker node object store parquet arrow "
    "research paper article news forum blog review comment question answer summary chapter section figure "
    "the a of and to in is for on with as by at from that this it be are was were not or an but"
).split()
_WS = ["\u00a0", "\u2003", "\u3000", "\t", "\u200b"]
_DOMAINS = ["example.com", "mail.org", "corp.net", "uni.edu"]


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", "!", "?"])


def make_row(i: int, rng: random.Random) -> dict:
    kind = rng.random()
    if kind < 0.05:
        text = rng.choice(_WORDS)  # too short: filtered
    else:
        n_sent = rng.randint(1, 12) if kind < 0.97 else rng.randint(80, 120)
        text = " ".join(_sentence(rng, rng.randint(4, 18)) for _ in range(n_sent))
    if rng.random() < 0.2:
        user = "".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 9)))
        text += f" Contact {user}.{rng.randint(1, 99)}@{rng.choice(_DOMAINS)} for details."
    if rng.random() < 0.25:
        pos = rng.randint(0, len(text))
        text = text[:pos] + rng.choice(_WS) + text[pos:]
    if rng.random() < 0.1:
        text = "  " + text + " \n"
    return {"id": i, "text": text, "meta": {"source": rng.choice(["web", "books", "forum"]), "lang": "en"}}


def generate_rows(n: int, seed: int = 42, dup_rate: float = 0.08):
    rng = random.Random(seed)
    recent: list[str] = []
    for i in range(n):
        row = make_row(i, rng)
        if recent and rng.random() < dup_rate:
            dup = rng.choice(recent)
            row["text"] = dup.upper() if rng.random() < 0.3 else dup  # exact or case-only duplicate
        recent.append(row["text"])
        if len(recent) > 500:
            recent.pop(0)
        yield row


def write_corpus(path: str, n: int, seed: int = 42) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in generate_rows(n, seed):
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def write_growth_file(path: str, earlier_texts: list[str], n: int, seed: int, dup_rate: float = 0.3) -> str:
    """A new input file for the next night of a growing corpus: ``n`` fresh rows, of which about
    ``dup_rate`` repeat a row of an earlier night, half exactly and half with one word changed
    (a near duplicate).  Deterministic from the seed, like ``write_corpus``."""
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for i, row in enumerate(generate_rows(n, seed)):
            if earlier_texts and rng.random() < dup_rate:
                text = rng.choice(earlier_texts)
                if rng.random() < 0.5:
                    words = text.split(" ")
                    words[rng.randrange(len(words))] = rng.choice(_WORDS)
                    text = " ".join(words)
                row["text"] = text
            row["id"] = f"{seed}-{i}"
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path
