"""Data-Juicer's GPU-preflight example chain as runnable ops, and a small image corpus to run it on.

Data-Juicer documents its parallel probe with ``bucket_resize_mapper`` feeding
``image_quality_mapper`` and ``image_rotation_mapper``, the contracts declared
in the recipe ("independent image taggers sharing a CPU resize can opt into
the parallel path without changing their Python classes").  None of the three
is an op of Data-Juicer 1.6.1: they stand for a user's own ops.  These give
the chain a body, so the preflight can run it end to end:
``examples/gpu_preflight/image_chain.yaml``, ``scripts/gpu_check.sh`` and the
unit tests in ``tests/unit/gpu_probe/``.

Like Data-Juicer's example, the classes declare **no** field contract; the
recipe does.  They are not in the op library (a recipe naming them is refused
unless ``register_image_chain_ops()`` ran in that process: a DAG-folder file
or a plugin can call it).  They live here, with the preflight they
demonstrate, rather than in ``ops/``.

What they compute is deliberately small but real: the resize writes a
``bucket_size`` square RGB thumbnail (``_bucket_img``, raw bytes); the
quality "model" scores sharpness (variance of the Laplacian) and the
rotation "model" compares vertical with horizontal gradient energy.  On a
CUDA device (``device: auto`` with torch seeing a GPU, or ``cuda``) they run
in torch and hold ``model_mb`` of weights on the device, so the probe has a
model load and device memory to measure; elsewhere they use numpy.  Images
are read with Pillow when it is installed, else as binary PPM (what
``write_image_corpus`` writes without Pillow), so the GPU check needs no
imaging package.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Mapper

META_COLUMN = "__dj__meta__"
BUCKET_COLUMN = "_bucket_img"

#: The recipe contracts of Data-Juicer's example, op name -> (input_columns, output_columns).
EXAMPLE_CONTRACTS: dict[str, tuple[list[str], list[str]]] = {
    "bucket_resize_mapper": (["images"], [BUCKET_COLUMN]),
    "image_quality_mapper": (["images", BUCKET_COLUMN], [f"{META_COLUMN}.quality_score"]),
    "image_rotation_mapper": (["images", BUCKET_COLUMN], [f"{META_COLUMN}.rotation_*"]),
}


def read_image(path: str) -> np.ndarray:
    """An image file as an (H, W, 3) uint8 array: Pillow when installed, else binary PPM (P6)."""
    try:
        from PIL import Image
    except ImportError:
        return _read_ppm(path)
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _read_ppm(path: str) -> np.ndarray:
    with open(path, "rb") as fh:
        data = fh.read()
    fields, pos = [], 0
    while len(fields) < 4:  # magic, width, height, maxval; '#' comments skipped
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P6" or int(fields[3]) != 255:
        raise ValueError(f"{path}: not an 8-bit binary PPM and Pillow is not installed to read it")
    w, h = int(fields[1]), int(fields[2])
    return np.frombuffer(data, np.uint8, count=w * h * 3, offset=pos + 1).reshape(h, w, 3)


def _resize_nearest(img: np.ndarray, size: int) -> np.ndarray:
    rows = (np.arange(size) * img.shape[0] // size).clip(0, img.shape[0] - 1)
    cols = (np.arange(size) * img.shape[1] // size).clip(0, img.shape[1] - 1)
    return img[rows][:, cols]


def set_meta_fields(table: pa.Table, fields: dict[str, pa.Array]) -> pa.Table:
    """Add or overwrite fields of the ``__dj__meta__`` struct, keeping its other fields."""
    names, arrays = [], []
    if META_COLUMN in table.column_names:
        struct = table.column(META_COLUMN).combine_chunks()
        for f in struct.type:
            if f.name not in fields:
                names.append(f.name)
                arrays.append(pc.struct_field(struct, f.name))
    names += list(fields)
    arrays += list(fields.values())
    new = pa.StructArray.from_arrays(arrays, names=names)
    if META_COLUMN in table.column_names:
        return table.set_column(table.column_names.index(META_COLUMN), META_COLUMN, new)
    return table.append_column(META_COLUMN, new)


class BucketResizeMapper(Mapper):
    """CPU: the first image of each row, resized (nearest) to a ``bucket_size`` square RGB thumbnail."""

    name: ClassVar[str] = "bucket_resize_mapper"
    default_batch_size: ClassVar[int] = 32

    def __init__(self, bucket_size: int = 64, **common) -> None:
        super().__init__(**common)
        self.bucket_size = int(bucket_size)
        self.image_key = common.get("image_key", "images")

    def process_table(self, table: pa.Table) -> pa.Table:
        out = []
        for paths in table.column(self.image_key).to_pylist():
            if not paths:
                raise ValueError(f"row has no image in {self.image_key!r}")
            out.append(_resize_nearest(read_image(paths[0]), self.bucket_size).tobytes())
        if BUCKET_COLUMN in table.column_names:
            table = table.drop_columns([BUCKET_COLUMN])
        return table.append_column(BUCKET_COLUMN, pa.array(out, pa.binary()))


class _BucketModel(Mapper):
    """A GPU "model" over the bucket thumbnails: torch on CUDA (weights held on the device), numpy
    elsewhere.  ``device``: ``auto`` (CUDA when torch sees one), ``cuda`` or ``cpu``."""

    uses_cuda: ClassVar[bool] = True
    default_batch_size: ClassVar[int] = 32

    def __init__(self, device: str = "auto", model_mb: int = 16, init_s: float = 0.0, **common) -> None:
        super().__init__(**common)
        self.torch, self.weights, self.device = None, None, "cpu"
        if device != "cpu":
            try:
                import torch
            except ImportError:
                if device == "cuda":
                    raise
            else:
                if device == "cuda" or torch.cuda.is_available():
                    self.use_torch(torch, "cuda", model_mb)
        time.sleep(init_s)  # the rest of a model load (reading weights), for tests that need a slow one

    def use_torch(self, torch, device: str, model_mb: int) -> None:
        """Compute in torch on ``device``, holding ``model_mb`` MiB of weights there."""
        self.torch, self.device = torch, device
        self.weights = torch.zeros(int(model_mb) << 18, dtype=torch.float32, device=device)

    def _images(self, table: pa.Table) -> np.ndarray:
        raw = table.column(BUCKET_COLUMN).to_pylist()
        side = int(round((len(raw[0]) // 3) ** 0.5))
        return np.frombuffer(b"".join(raw), np.uint8).reshape(len(raw), side, side, 3)

    def _row_sums(self, x) -> np.ndarray:
        flat = x.reshape(x.shape[0], -1)
        return flat.sum(axis=1) if self.torch is None else flat.sum(dim=1).cpu().numpy()

    def _gray(self, imgs: np.ndarray):
        if self.torch is None:
            return imgs.astype(np.float32).mean(axis=3)
        t = self.torch.from_numpy(imgs.copy()).to(self.device).float()
        return t.mean(dim=3) + self.weights[0]  # the weights take part, as a model's would


class ImageQualityMapper(_BucketModel):
    """GPU: sharpness score in [0, 1) from the variance of the Laplacian -> ``__dj__meta__.quality_score``."""

    name: ClassVar[str] = "image_quality_mapper"

    def process_table(self, table: pa.Table) -> pa.Table:
        g = self._gray(self._images(table))
        lap = g[:, 1:-1, 1:-1] * 4 - g[:, :-2, 1:-1] - g[:, 2:, 1:-1] - g[:, 1:-1, :-2] - g[:, 1:-1, 2:]
        flat = lap.reshape(lap.shape[0], -1)
        var = flat.var(axis=1) if self.torch is None else flat.var(dim=1, correction=0).cpu().numpy()
        var = np.asarray(var, dtype=np.float64)
        return set_meta_fields(table, {"quality_score": pa.array(var / (var + 100.0), pa.float64())})


class ImageRotationMapper(_BucketModel):
    """GPU: ``__dj__meta__.rotation_angle`` (0 or 90: which way the image's edges mostly run) and
    ``__dj__meta__.rotation_confidence``."""

    name: ClassVar[str] = "image_rotation_mapper"

    def process_table(self, table: pa.Table) -> pa.Table:
        g = self._gray(self._images(table))
        dy = (g[:, 1:, :] - g[:, :-1, :]) ** 2
        dx = (g[:, :, 1:] - g[:, :, :-1]) ** 2
        ey, ex = (np.asarray(self._row_sums(d), np.float64) for d in (dy, dx))
        angle = np.where(ex > ey, 90, 0).astype(np.int32)  # strong horizontal change: vertical stripes
        conf = np.abs(ex - ey) / np.maximum(ex + ey, 1e-9)
        return set_meta_fields(
            table, {"rotation_angle": pa.array(angle, pa.int32()), "rotation_confidence": pa.array(conf, pa.float64())}
        )


IMAGE_CHAIN_OPS: tuple[type[Mapper], ...] = (BucketResizeMapper, ImageQualityMapper, ImageRotationMapper)


def register_image_chain_ops() -> None:
    """Make a recipe in this process able to name the three ops (idempotent)."""
    from airflow_provider_dj.ops.registry import register

    for cls in IMAGE_CHAIN_OPS:
        register(cls)


def write_image_corpus(folder: str, rows: int = 64, *, seed: int = 11) -> str:
    """``rows`` generated images (stripes of varied direction, frequency and blur; PNG with Pillow, else
    PPM) under ``folder/images`` and a JSONL naming them by absolute path; returns the JSONL's path."""
    rng = np.random.default_rng(seed)
    img_dir = os.path.join(os.path.abspath(folder), "images")
    os.makedirs(img_dir, exist_ok=True)
    try:
        from PIL import Image
    except ImportError:
        Image = None
    path = os.path.join(os.path.abspath(folder), "image_chain.jsonl")
    with open(path, "w", encoding="utf-8") as out:
        for i in range(rows):
            img = _stripes(rng, int(rng.integers(24, 97)), int(rng.integers(24, 97)))
            name = os.path.join(img_dir, f"img_{i:04d}.{'png' if Image else 'ppm'}")
            if Image is not None:
                Image.fromarray(img).save(name)
            else:
                with open(name, "wb") as fh:
                    fh.write(b"P6\n%d %d\n255\n" % (img.shape[1], img.shape[0]) + img.tobytes())
            out.write(json.dumps({"text": f"image {i}", "images": [name]}) + "\n")
    return path


def _stripes(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    period = float(rng.uniform(3, 16))
    axis = np.arange(w)[None, :] if rng.random() < 0.5 else np.arange(h)[:, None]
    wave = (np.sin(axis * 2 * np.pi / period) + 1) * 127.5 * np.ones((h, w))
    if rng.random() < 0.5:  # blur some: lower sharpness
        wave = (wave + np.roll(wave, 1, 0) + np.roll(wave, 1, 1) + np.roll(wave, -1, 0) + np.roll(wave, -1, 1)) / 5
    tint = rng.uniform(0.5, 1.0, size=3)
    return (wave[:, :, None] * tint).clip(0, 255).astype(np.uint8)


if __name__ == "__main__":  # python -m airflow_provider_dj.engine.preflight.image_chain FOLDER [ROWS]
    print(write_image_corpus(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 64))
