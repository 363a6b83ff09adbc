"""Produce the image filters' conformance fixtures by running Data-Juicer 1.6.1.

Run by ``regenerate.sh`` with the Data-Juicer venv's python, on a corpus folder that ``corpus.py``
built (with the provider's venv, where the images are installed).  Only the fixture generators
import ``data_juicer``; our package never does.

* ``expected/loaded-<set>.jsonl``: each row's image paths as Data-Juicer's loader hands them to the
  ops (``load_formatter(...).load_dataset(global_cfg=...)``: relative paths joined to the dataset
  file's folder), the corpus folder written ``{CORPUS}``.
* ``expected/<op>__<variant>.jsonl`` (set ``rows``) and ``expected/<op>__bad_<variant>.jsonl``
  (set ``bad``): per input row DJ's stats, whether DJ kept the row, and whether DJ failed on it
  (``error``, with the exception's type).  Each sample goes through the op's own methods as DJ's
  executor calls them (``compute_stats_batched`` then ``process_batched``, one sample per batch, as
  with ``skip_op_error``); ``op.run(dataset)`` must keep the same rows (checked here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402 - beside this file

SETS = {"rows": "", "bad": "bad_"}


def plain(value):
    """Stats as JSON types (DJ leaves numpy arrays for rows without images)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def load(dataset_file: Path) -> list[dict]:
    """The rows as Data-Juicer's loader gives them to the ops (relative media paths made absolute)."""
    from data_juicer.format.load import load_formatter

    cfg = {"dataset_path": str(dataset_file), "image_key": "images", "audio_key": "audios", "video_key": "videos"}
    formatter = load_formatter(str(dataset_file), text_keys=["text"])
    return formatter.load_dataset(num_proc=1, global_cfg=cfg).to_list()


def run_dj(name: str, args: dict, rows: list[dict]) -> tuple[list[dict], list[int]]:
    """(per-row results of the op's methods, ids whose keep flag ``op.run`` decides differently)."""
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import Fields
    from datasets import Dataset

    (op,) = load_ops([{name: dict(args, num_proc=1)}])
    out = []
    for sample in rows:
        sample = dict(sample, **{Fields.stats: {}})
        try:
            batch = op.compute_stats_batched({k: [v] for k, v in sample.items()})
            stats, kept = batch[Fields.stats][0], list(op.process_batched(batch))[0]
        except Exception as exc:  # noqa: BLE001 - DJ's skip_op_error drops exactly these samples
            out.append({"id": sample["id"], "stats": None, "kept": False, "error": type(exc).__name__})
            continue
        out.append({"id": sample["id"], "stats": plain(stats), "kept": bool(kept), "error": None})

    # DJ's executor path keeps the same rows, except where its stats column's JSON storage (pandas'
    # ujson, 10 decimals) moves a ratio across a bound: those rows are listed, not hidden.
    # Only where no sample fails: op.run fails on one (or, with skip_op_error, drops its whole batch).
    if any(r["error"] for r in out):
        return out, []
    ds = NestedDataset(Dataset.from_list([{k: v for k, v in r.items()} for r in rows]))
    run_kept = {r["id"] for r in op.run(ds).to_list()}
    ours = {r["id"] for r in out if r["kept"]}
    flipped = sorted(run_kept ^ ours)
    for i in flipped:
        ratios = next(r["stats"] for r in out if r["id"] == i).get("aspect_ratios", [])
        assert any(round(v, 10) != v for v in ratios), (name, args, i, "flipped without a rounded stat")
    return out, flipped


def main() -> None:
    import data_juicer

    if not data_juicer.__version__.startswith("1.6.1"):
        sys.exit(f"expected data_juicer 1.6.1, found {data_juicer.__version__}")
    folder = Path(sys.argv[1]).resolve()
    variants = json.loads((HERE / "variants.json").read_text(encoding="utf-8"))
    files = {"rows": folder / corpus.ROWS_FILE, "bad": folder / "bad" / corpus.ROWS_FILE}
    expected = HERE / "expected"
    expected.mkdir(exist_ok=True)
    for old in expected.glob("*.jsonl"):
        old.unlink()
    rounding: dict[str, list[int]] = {}
    for set_name, prefix in SETS.items():
        rows = load(files[set_name])
        loaded = [{"id": r["id"], "images": corpus.portable(r.get("images"), folder)} for r in rows]
        corpus.write_jsonl_plain(expected / f"loaded-{set_name}.jsonl", loaded)
        for op_name, by_variant in variants.items():
            for vname, args in by_variant.items():
                out, flipped = run_dj(op_name, args, rows)
                corpus.write_jsonl_plain(expected / f"{op_name}__{prefix}{vname}.jsonl", out)
                if flipped:
                    rounding[f"{op_name}__{prefix}{vname}"] = flipped
                kept = sum(r["kept"] for r in out)
                failed = sum(r["error"] is not None for r in out)
                print(f"{op_name}__{prefix}{vname}: {len(out)} rows, {kept} kept, {failed} failed")
    with (expected / "executor_rounding.json").open("w", encoding="utf-8") as f:
        json.dump(rounding, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
