"""Generate the image-dedup conformance fixtures with the reference Data-Juicer 1.6.1.

Run in DJ's own venv by ``regenerate.sh`` (with imagededup installed there); our package never
imports DJ or imagededup.  Arguments: the source image files (``media_corpus.shipped_images()`` of
our venv, which ``regenerate.sh`` lists).  Writes, under ``expected/``:

* ``images.json``: per corpus file, the SHA-256 of its bytes and imagededup's four hashes of it, as
  DJ computes them (``np.array(load_image(path))`` into ``encode_image(image_array=...)``);
* ``rows.jsonl``: the rows (paths relative to the dataset's folder);
* ``<variant>.json``: DJ's ``image_deduplicator`` with that variant's arguments on the rows (paths
  made absolute, as DJ's loader makes them): each row's ``imagehash`` and the ids of the kept rows.
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


def run_dedup(args: dict, rows: list[dict], root: Path) -> dict:
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
    return {"imagehash": list(hashed[HashKeys.imagehash]), "kept": [r["id"] for r in kept.to_list()]}


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
        for name, args in VARIANTS.items():
            result = run_dedup(args, rows, root)
            (expected / f"{name}.json").write_text(json.dumps({"args": args, **result}, indent=1) + "\n")
            print(name, f"{len(result['kept'])} of {len(rows)} rows kept", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    main(sys.argv[1:])
