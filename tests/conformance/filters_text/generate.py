"""Produce the text/field filters' conformance fixtures by running Data-Juicer 1.6.1.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file
does that).  Only the fixture generators import ``data_juicer``; our package
never does.

* ``inputs/<set>.jsonl``: the hand-written rows of ``cases.py`` with an ``id``.
* ``expected/<set>__<variant>.jsonl``: one line per input row with DJ's stats
  (``null`` for ``suffix_filter``, which writes none), whether DJ kept the
  row, and whether DJ failed on it (``error``).  Each sample goes through the
  op's own methods exactly as DJ's executor calls them (compute_stats, then
  process, on the sample as the dataset decodes it, one sample per batch as
  with ``skip_op_error``).
* The same rows also go through ``op.run(dataset)``.  With the installed
  ``datasets`` (5.x) DJ's stats column becomes a ``Json`` column, stored
  with pandas' ujson (10 decimals, imprecise parsing), so that path returns
  e.g. 0.6000000000000001 for 0.6 and decides on those values.  The
  generator checks that this is the *only* difference and lists the rows
  whose keep decision it flips in ``expected/executor_rounding.json``.
* ``expected/charsets.json``: ``str.isalnum`` and ``str.splitlines`` breaks
  in DJ's interpreter, so the tests notice a Unicode-version drift.
"""

from __future__ import annotations

import json
import os
import sys

import cases

HERE = os.path.dirname(os.path.abspath(__file__))
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


def ranges(cps) -> str:
    out: list[list[int]] = []
    for c in sorted(set(cps)):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return " ".join(f"{a:X}" if a == b else f"{a:X}-{b:X}" for a, b in out)


def _ujson_roundtrip(obj):
    import pandas as pd

    return None if obj is None else pd.io.json.ujson_loads(pd.io.json.ujson_dumps(obj))


def run_dj(name: str, args: dict, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(per-row results of the op's methods, ids whose keep flag op.run decides differently)."""
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.base_op import NON_STATS_FILTERS
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import Fields
    from datasets import Dataset

    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    writes_stats = name not in NON_STATS_FILTERS.modules
    out = []
    for sample in Dataset.from_list(rows).to_list():  # decoded as DJ's dataset decodes it
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
        out.append({"id": sample["id"], "stats": stats if writes_stats else None, "kept": bool(kept), "error": False})

    # Cross-check against DJ's executor path (op.run on a dataset).
    ds = NestedDataset(Dataset.from_list(rows))
    try:
        run_stats = {r["id"]: r.get(Fields.stats) for r in op.run(ds, reduce=False).to_list()}
        run_kept = {r["id"] for r in op.run(ds).to_list()}
    except Exception:  # noqa: BLE001 - without skip_op_error one failing sample fails the run
        assert any(r["error"] for r in out), f"{name} {args}: op.run failed but no sample did"
        return out, []
    flipped = []
    for r in out:
        assert (r["id"] not in run_stats) == r["error"], (name, args, r)
        if not r["error"]:
            assert run_stats[r["id"]] == _ujson_roundtrip(r["stats"]), (name, args, r, run_stats[r["id"]])
            if (r["id"] in run_kept) != r["kept"]:
                flipped.append({"id": r["id"], "stats": r["stats"], "op_run_stats": run_stats[r["id"]]})
    return out, flipped


def charsets() -> dict:
    every = range(0x110000)
    return {
        "python_isalnum": ranges(c for c in every if chr(c).isalnum()),
        "splitlines_breaks": ranges(c for c in every if len(("a" + chr(c) + "b").splitlines()) == 2),
    }


def main() -> None:
    import data_juicer

    if not data_juicer.__version__.startswith("1.6.1"):
        sys.exit(f"expected data_juicer 1.6.1, found {data_juicer.__version__}")
    with open(os.path.join(HERE, "variants.json"), encoding="utf-8") as f:
        variants = json.load(f)
    if set(variants) != set(cases.CASES):
        sys.exit(f"variants.json and cases.py name different sets: {sorted(set(variants) ^ set(cases.CASES))}")
    os.makedirs(os.path.join(HERE, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    rounding: dict[str, list] = {}
    for set_name, (op, items) in cases.CASES.items():
        rows = [dict(item if isinstance(item, dict) else {"text": item}, id=i) for i, item in enumerate(items)]
        write_jsonl(os.path.join(HERE, "inputs", f"{set_name}.jsonl"), rows)
        for vname, args in variants[set_name].items():
            out, flipped = run_dj(op, args, rows)
            write_jsonl(os.path.join(HERE, "expected", f"{set_name}__{vname}.jsonl"), out)
            if flipped:
                rounding[f"{set_name}__{vname}"] = flipped
            kept, failed = sum(r["kept"] for r in out), sum(r["error"] for r in out)
            print(
                f"{set_name}__{vname}: {len(rows)} rows, {kept} kept, {failed} failed, {len(flipped)} flipped by op.run"
            )
    with open(os.path.join(HERE, "expected", "executor_rounding.json"), "w", encoding="utf-8") as f:
        json.dump(rounding, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(HERE, "expected", "charsets.json"), "w", encoding="utf-8") as f:
        json.dump(charsets(), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
