"""Produce the words filters' conformance fixtures by running Data-Juicer 1.6.1.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file
does that, after ``make_assets.py`` wrote the word lists and models).  Only
this generator imports ``data_juicer``; our package never does.

Both sides get the same files: word lists through the op's
``flagged_words_dir`` / ``stopwords_dir`` (``{FIX}`` in variants.json is
this folder), SentencePiece models and the Hugging Face tokenizer through
``DATA_JUICER_EXTERNAL_MODELS_HOME=models`` (Data-Juicer's own search
order).  Its models and assets caches point at empty temporary folders, so
nothing already cached on the machine (or downloaded) can slip in.

* ``inputs/words.jsonl``: ``cases.TEXTS`` with an ``id``.
* ``expected/<op>__<variant>.jsonl``: per input row, DJ's stats, whether it
  kept the row and whether it failed on it, from the op's own methods
  exactly as DJ's executor calls them (one sample per batch).
* Every variant also goes through ``op.run(dataset)``; the generator checks
  that it keeps the same rows, except where DJ's ``Json`` stats column
  (pandas' ujson, 10 decimals) rounds a ratio across a bound: those rows are
  listed in ``expected/executor_rounding.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["DATA_JUICER_EXTERNAL_MODELS_HOME"] = os.path.join(HERE, "models")
_EMPTY = tempfile.mkdtemp(prefix="dj-words-conformance-")
os.environ["DATA_JUICER_MODELS_CACHE"] = os.path.join(_EMPTY, "models")
os.environ["DATA_JUICER_ASSETS_CACHE"] = os.path.join(_EMPTY, "assets")
sys.path.insert(0, HERE)

import cases  # noqa: E402

LINE_BREAKERS = "\x85\u2028\u2029"  # JSON allows them raw, line-splitting readers do not


def dumps(obj: object) -> str:
    line = json.dumps(obj, ensure_ascii=False, sort_keys=True)
    for ch in LINE_BREAKERS:
        line = line.replace(ch, "\\u%04x" % ord(ch))
    return line


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(dumps(row) + "\n")


def resolve(args: dict) -> dict:
    return {k: v.replace("{FIX}", HERE) if isinstance(v, str) else v for k, v in args.items()}


def _ujson_roundtrip(obj):
    import pandas as pd

    return None if obj is None else pd.io.json.ujson_loads(pd.io.json.ujson_dumps(obj))


def run_dj(name: str, args: dict, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import Fields
    from datasets import Dataset

    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    out = []
    for sample in Dataset.from_list(rows).to_list():
        sample[Fields.stats] = {}
        try:
            if op.is_batched_op():
                batch = op.compute_stats_batched({k: [v] for k, v in sample.items()})
                stats, kept = batch[Fields.stats][0], list(op.process_batched(batch))[0]
            else:
                sample = op.compute_stats_single(sample)
                stats, kept = sample[Fields.stats], op.process_single(sample)
        except Exception:  # noqa: BLE001 - DJ's skip_op_error drops exactly these samples
            out.append({"id": sample["id"], "stats": None, "kept": False, "error": True})
            continue
        out.append({"id": sample["id"], "stats": stats, "kept": bool(kept), "error": False})

    ds = NestedDataset(Dataset.from_list(rows))
    run_stats = {r["id"]: r.get(Fields.stats) for r in op.run(ds, reduce=False).to_list()}
    run_kept = {r["id"] for r in op.run(ds).to_list()}
    flipped = []
    for r in out:
        assert not r["error"], (name, args, r)
        assert run_stats[r["id"]] == _ujson_roundtrip(r["stats"]), (name, args, r, run_stats[r["id"]])
        if (r["id"] in run_kept) != r["kept"]:
            flipped.append({"id": r["id"], "stats": r["stats"], "op_run_stats": run_stats[r["id"]]})
    return out, flipped


def main() -> None:
    import data_juicer

    if not data_juicer.__version__.startswith("1.6.1"):
        sys.exit(f"expected data_juicer 1.6.1, found {data_juicer.__version__}")
    with open(os.path.join(HERE, "variants.json"), encoding="utf-8") as f:
        variants = json.load(f)
    os.makedirs(os.path.join(HERE, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    rows = [{"id": i, "text": t} for i, t in enumerate(cases.TEXTS)]
    write_jsonl(os.path.join(HERE, "inputs", "words.jsonl"), rows)
    rounding: dict[str, list] = {}
    for op_name, by_variant in variants.items():
        for vname, args in by_variant.items():
            out, flipped = run_dj(op_name, resolve(args), rows)
            write_jsonl(os.path.join(HERE, "expected", f"{op_name}__{vname}.jsonl"), out)
            if flipped:
                rounding[f"{op_name}__{vname}"] = flipped
            kept = sum(r["kept"] for r in out)
            print(f"{op_name}__{vname}: {len(rows)} rows, {kept} kept, {len(flipped)} flipped by op.run")
    with open(os.path.join(HERE, "expected", "executor_rounding.json"), "w", encoding="utf-8") as f:
        json.dump(rounding, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
