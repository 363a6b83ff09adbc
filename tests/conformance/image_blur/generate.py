"""Produce ``image_blur_mapper``'s conformance fixtures by running Data-Juicer 1.6.1.

Run by ``regenerate.sh`` with the Data-Juicer venv's python, on a corpus folder that
``filters_image/corpus.py`` built (the same images, rows and bad files as the image filters'
fixtures).  Each sample goes through the op's ``process_single`` (one sample at a time, as DJ's
executor calls it under ``skip_op_error``), with ``save_dir`` a fresh folder.  Per row,
``expected/image_blur_mapper__<variant>.jsonl`` (set ``rows``) and
``expected/image_blur_mapper__bad_<variant>.jsonl`` (set ``bad``) hold:

* ``images``: each output image as ``{"same": true}`` (the op left the path as it was) or
  ``{"pixels": <sha256 of the decoded RGB pixels>, "size": [w, h], "ext": ".jpg"}`` (a file the
  op wrote, decoded with Pillow): DJ names files by process id and time, so only the pixels compare;
* ``source_file``: DJ's ``__dj__source_file__``, the corpus folder written ``{CORPUS}``;
* ``error``: the exception's type when DJ failed on the sample, else null.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "filters_image"))

import corpus  # noqa: E402 - the image filters' corpus builder
from generate import load  # noqa: E402 - the same loader the image filters' fixtures use

SETS = {"rows": "", "bad": "bad_"}
OP = "image_blur_mapper"


def pixels(path: str) -> dict:
    from PIL import Image

    with Image.open(path) as img:
        rgb = np.asarray(img.convert("RGB"))
    return {
        "pixels": hashlib.sha256(rgb.tobytes()).hexdigest(),
        "size": [rgb.shape[1], rgb.shape[0]],
        "ext": Path(path).suffix,
    }


def run_dj(args: dict, rows: list[dict], folder: Path) -> list[dict]:
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import Fields

    out = []
    with tempfile.TemporaryDirectory() as save_dir:
        (op,) = load_ops([{"image_blur_mapper": dict(args, save_dir=save_dir, num_proc=1)}])
        for sample in rows:
            before = list(sample.get("images") or [])
            try:
                res = op.process_single(json.loads(json.dumps(sample)))
            except Exception as exc:  # noqa: BLE001 - DJ's skip_op_error drops exactly these samples
                out.append({"id": sample["id"], "images": None, "source_file": None, "error": type(exc).__name__})
                continue
            after = res.get("images")
            images = (
                None
                if after is None
                else [{"same": True} if a == b else pixels(a) for a, b in zip(after, before, strict=True)]
            )
            out.append(
                {
                    "id": sample["id"],
                    "images": images,
                    "source_file": corpus.portable(res.get(Fields.source_file), folder),
                    "error": None,
                }
            )
    return out


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
    for set_name, prefix in SETS.items():
        rows = load(files[set_name])
        for vname, args in variants.items():
            out = run_dj(args, rows, folder)
            corpus.write_jsonl_plain(expected / f"{OP}__{prefix}{vname}.jsonl", out)
            written = sum(1 for r in out for i in r["images"] or () if "pixels" in i)
            print(
                f"{prefix}{vname}: {len(out)} rows, {written} images written, "
                f"{sum(r['error'] is not None for r in out)} failed"
            )


if __name__ == "__main__":
    main()
