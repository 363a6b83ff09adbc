"""Generate the near-dedup conformance fixtures with the reference Data-Juicer 1.6.1.

Run with DJ's own venv (see regenerate.sh); our package never imports DJ.
Writes inputs/near_dup.jsonl (seeded, ~300 rows with reworded sentences,
appended tails, case and spacing changes, CJK), variants.json, and for each
variant expected/<op>__<variant>.jsonl: the ids of the rows DJ's op keeps, in
order.  expected/pipeline__<variant>.jsonl is DJ's
whitespace_normalization_mapper followed by the dedup; optimal_param.json
holds DJ's LSH (bands, rows) choice on a grid of thresholds.
"""

from __future__ import annotations

import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

WORDS = (
    "data river model stone light paper garden signal market winter engine forest window "
    "silver theory number bridge cloud harbor planet letter memory orange valley machine "
    "question travel village copper music summer network coffee island rocket history "
    "pattern mirror journey yellow doctor kitchen circle"
).split()
CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可也你对说年"

VARIANTS = {
    "document_minhash_deduplicator": {
        "default": {},
        "character": {"tokenization": "character", "window_size": 4},
        "punctuation": {"tokenization": "punctuation", "window_size": 2, "jaccard_threshold": 0.5},
        "bands": {"num_permutations": 128, "num_bands": 16, "num_rows_per_band": 4, "lowercase": False},
        "ignore": {"ignore_pattern": "[0-9]+", "window_size": 3, "num_permutations": 64, "jaccard_threshold": 0.6},
        # regex-only syntax: Unicode punctuation, as in most of DJ's shipped recipes
        "ignore_punct": {"ignore_pattern": "\\p{P}", "window_size": 3, "jaccard_threshold": 0.6},
        "ignore_punct_character": {"ignore_pattern": "\\p{P}+", "tokenization": "character", "window_size": 4},
    },
    "document_simhash_deduplicator": {
        "default": {},
        "character": {"tokenization": "character", "window_size": 3, "hamming_distance": 5, "num_blocks": 7},
        "punctuation": {"tokenization": "punctuation", "window_size": 2, "lowercase": False},
        "tight": {"window_size": 3, "num_blocks": 4, "hamming_distance": 1, "ignore_pattern": "[0-9]+"},
        # the simhash step of DJ's shipped refine recipes (pile-nih-refine.yaml and others)
        "recipe_ignore_punct": {
            "tokenization": "space",
            "window_size": 6,
            "lowercase": True,
            "ignore_pattern": "\\p{P}",
            "num_blocks": 6,
            "hamming_distance": 4,
        },
        "ignore_punct_symbols": {
            "tokenization": "character",
            "window_size": 3,
            "ignore_pattern": "(?:\\p{P}|\\p{S})++",
        },
    },
}


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))]
    return " ".join(words).capitalize() + rng.choice([".", "!", "?", ";", ","])


def fresh(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return (
            "".join(rng.choice(CJK) for _ in range(rng.randint(20, 60)))
            + "。"
            + "".join(rng.choice(CJK) for _ in range(rng.randint(5, 20)))
            + "！"
        )
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 7)))


def near(rng: random.Random, text: str) -> str:
    kind = rng.choice(["reword", "tail", "case", "spaces", "digits", "drop", "exact"])
    if kind == "exact":
        return text
    if kind == "case":
        return text.upper() if rng.random() < 0.5 else text.lower()
    if kind == "spaces":
        return "  " + text.replace(" ", "   ", 3) + " \t"
    if kind == "digits":
        return text + f" {rng.randint(0, 99999)}"
    if " " not in text:  # CJK: change / append characters
        chars = list(text)
        for _ in range(rng.randint(1, 3)):
            chars[rng.randrange(len(chars))] = rng.choice(CJK)
        if kind == "tail":
            chars += list("".join(rng.choice(CJK) for _ in range(rng.randint(2, 12))))
        return "".join(chars)
    toks = text.split(" ")
    if kind == "reword":
        for _ in range(rng.randint(1, 4)):
            toks[rng.randrange(len(toks))] = rng.choice(WORDS)
    elif kind == "drop" and len(toks) > 4:
        del toks[rng.randrange(len(toks))]
    else:
        toks += [rng.choice(WORDS) for _ in range(rng.randint(1, 10))]
    return " ".join(toks)


def build_input(n: int = 300, seed: int = 4242) -> list[dict]:
    rng = random.Random(seed)
    rows: list[str] = []
    while len(rows) < n:
        if rows and rng.random() < 0.45:
            rows.append(near(rng, rng.choice(rows)))
        else:
            rows.append(fresh(rng))
    rows[5] = ""
    rows[17] = "short"
    rows[40] = "tiny one"
    rows += punctuation_variants()
    return [{"id": i, "text": t} for i, t in enumerate(rows)]


# Punctuation of many scripts (all general category P) and symbols that are not
# (category S: \p{P} must leave them), for pairs that differ only in those.
PUNCT = list(",.;:!?'\"()[]{}-_/\\@#%&*") + list("。，、！？；：「」『』（）《》…—–«»¿¡‘’“”・·‧")
SYMBOLS = list("$+<=>^`|~") + ["©", "€", "→", "™"]


def punctuation_variants(n: int = 40, seed: int = 4243) -> list[str]:
    """Rows that are duplicates once Unicode punctuation is ignored: each base
    text (Latin or CJK) is followed by one with its punctuation swapped for
    other punctuation, and some with a symbol swapped in (not punctuation)."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        if rng.random() < 0.5:
            words = [rng.choice(WORDS) for _ in range(rng.randint(10, 18))]
        else:
            words = ["".join(rng.choice(CJK) for _ in range(rng.randint(2, 5))) for _ in range(rng.randint(8, 14))]
        base = " ".join(w + (rng.choice(PUNCT) if rng.random() < 0.4 else "") for w in words)
        out.append(base)
        swapped = "".join(rng.choice(PUNCT) if c in PUNCT else c for c in base)
        out.append(swapped)
        if rng.random() < 0.5:
            out.append("".join(rng.choice(SYMBOLS) if c in PUNCT else c for c in base))
    return out


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(dumps(r) + "\n")


def run_ops(ops: list[dict], rows: list[dict]) -> list[dict]:
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from datasets import Dataset

    ds = NestedDataset(Dataset.from_list(rows))
    for op in load_ops([{k: dict(v, num_proc=1)} for spec in ops for k, v in spec.items()]):
        ds = op.run(ds)
    return [{"id": r["id"], "text": r["text"]} for r in ds.to_list()]


def main() -> None:
    from data_juicer.ops.deduplicator.document_minhash_deduplicator import optimal_param

    rows = build_input()
    write_jsonl(os.path.join(HERE, "inputs", "near_dup.jsonl"), rows)
    with open(os.path.join(HERE, "variants.json"), "w", encoding="utf-8") as f:
        json.dump(VARIANTS, f, indent=2, sort_keys=True)
    for op, variants in VARIANTS.items():
        for name, args in variants.items():
            kept = run_ops([{op: args}], rows)
            write_jsonl(os.path.join(HERE, "expected", f"{op}__{name}.jsonl"), [{"id": r["id"]} for r in kept])
            print(op, name, len(kept))
    for op in VARIANTS:
        kept = run_ops([{"whitespace_normalization_mapper": {}}, {op: {}}], rows)
        write_jsonl(os.path.join(HERE, "expected", f"pipeline__{op}.jsonl"), kept)
        print("pipeline", op, len(kept))
    grid = {}
    for perm in (16, 64, 128, 256):
        for th in (0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95):
            grid[f"{th}/{perm}"] = list(optimal_param(th, perm))
    with open(os.path.join(HERE, "expected", "optimal_param.json"), "w") as f:
        json.dump(grid, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
