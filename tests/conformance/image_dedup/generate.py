"""Generate the image-dedup conformance fixtures with the reference Data-Juicer 1.6.1.

Run in DJ's own venv by ``regenerate.sh`` (with imagededup installed there); our package never
imports DJ or imagededup.  Arguments: the source image files (``media_corpus.shipped_images()`` of
our venv, which ``regenerate.sh`` lists).  Writes, under ``expected/``:

* ``images.json``: per corpus file, the SHA-256 of its bytes and imagededup's four hashes of it, as
  DJ computes them (``np.array(load_image(path))`` into ``encode_image(image_array=...)``);
* ``rows.jsonl``: the rows (paths relative to the dataset's folder);
* ``image_deduplicator__<variant>.jsonl``: DJ's op with the arguments ``variants.json`` (beside this
  file) gives that variant, on the rows with their paths made absolute (as DJ's loader makes them):
  one line per row, its ``id``, DJ's ``imagehash`` of it and whether DJ ``kept`` it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

#: Argument sets of DJ's image_deduplicator; lowercase reaches DJ's text hash through its kwargs.
VARIANTS = {
    "phash": {},
    "dhash": {"method": "dhash"},
    "whash": {"method": "whash"},
    "ahash": {"method": "ahash"},
    "phash_text": {"consider_text": True},
    "ahash_text_lowercase": {"method": "ahash", "consider_text": True, "lowercase": True, "ignore_non_character": True},
}


def _without_cnn_models() -> None:
    """imagededup imports its CNN models (torchvision) on import; the hashing methods never use them,
    and a CPU-only torch may lack torchvision's compiled ops, so an inert module stands in."""
    stub = types.ModuleType("imagededup.utils.models")
    stub.CustomModel = stub.MobilenetV3 = type("Unavailable", (), {})
    stub.DEFAULT_MODEL_NAME = "default_model"
    sys.modules["imagededup.utils.models"] = stub


def image_hashes(folder: Path, files: dict[str, str]) -> dict[str, dict]:
    import numpy as np
    from data_juicer.utils.mm_utils import load_image
    from imagededup.methods import AHash, DHash, PHash, WHash

    hashers = {"phash": PHash(verbose=False), "dhash": DHash(verbose=False)}
    hashers.update(whash=WHash(verbose=False), ahash=AHash(verbose=False))
    out = {}
    for name, sha in files.items():
        arr = np.array(load_image(str(folder / name)))
        out[name] = {"sha256": sha, **{m: h.encode_image(image_array=arr) for m, h in hashers.items()}}
    return out


def run_dedup(args: dict, rows: list[dict], root: Path) -> list[dict]:
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.load import load_ops
    from data_juicer.utils.constant import HashKeys
    from datasets import Dataset

    absolute = [
        {**r, "images": [str(root / p) for p in r["images"]]} if r.get("images") else {"images": None, **r}
        for r in rows
    ]
    (op,) = load_ops([{"image_deduplicator": dict(args, num_proc=1)}])
    ds = NestedDataset(Dataset.from_list(absolute))
    hashed = ds.map(op.compute_hash, num_proc=1, load_from_cache_file=False)
    kept, _ = op.process(hashed)
    kept_ids = {r["id"] for r in kept.to_list()}
    return [
        {"id": r["id"], "imagehash": h, "kept": r["id"] in kept_ids} for r, h in zip(rows, hashed[HashKeys.imagehash])
    ]


def main(sources: list[str]) -> None:
    _without_cnn_models()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = corpus.build_images(root / "images", [Path(s) for s in sources])
        rows = corpus.build_rows(files)
        expected = HERE / "expected"
        expected.mkdir(exist_ok=True)
        hashes = image_hashes(root / "images", files)
        (expected / "images.json").write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        with (expected / "rows.jsonl").open("w") as fh:
            fh.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        (HERE / "variants.json").write_text(json.dumps(VARIANTS, indent=1, sort_keys=True) + "\n")
        for name, args in VARIANTS.items():
            result = run_dedup(args, rows, root)
            with (expected / f"image_deduplicator__{name}.jsonl").open("w") as fh:
                fh.writelines(json.dumps(r, sort_keys=True) + "\n" for r in result)
            print(name, f"{sum(r['kept'] for r in result)} of {len(rows)} rows kept", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    main(sys.argv[1:])
