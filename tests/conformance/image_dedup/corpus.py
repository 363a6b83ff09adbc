"""The image-dedup conformance corpus: real images, near-duplicates derived from them, and rows.

Shared by ``generate.py`` (run in Data-Juicer's venv) and the tests (ours), so it needs only Pillow
and the standard library.  The sources are image files installed packages ship
(``tests/unit/engine/media_corpus.py`` finds them; the generator is handed their paths); each
derived file is a Pillow operation on a source's real pixels: an exact copy, a half-size resize, a
JPEG recompression, a crop, grayscale, a mirror image, a mirror-symmetric image and a flat image of
its mean colour (flat and symmetric images are where an FFT-based DCT gives exact zeros).
``expected/images.json`` records each file's SHA-256, so a Pillow whose encoders write other bytes
is noticed rather than compared against hashes of different pixels.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

#: Derived variants of every source, by suffix.
VARIANTS = ("copy", "half", "q40", "crop", "gray", "flip", "sym", "flat")


def _derive(img, kind: str):
    from PIL import Image, ImageOps

    w, h = img.size
    if kind == "half":
        return img.resize((max(8, w // 2), max(8, h // 2)), Image.Resampling.BICUBIC)
    if kind == "crop":
        return img.crop((w // 10, h // 10, w - w // 10, h - h // 10))
    if kind == "gray":
        return img.convert("L").convert("RGB")
    if kind == "flip":
        return ImageOps.mirror(img)
    if kind == "sym":
        left = img.crop((0, 0, w // 2, h))
        out = Image.new("RGB", (2 * (w // 2), h))
        out.paste(left, (0, 0))
        out.paste(ImageOps.mirror(left), (w // 2, 0))
        return out
    if kind == "flat":
        return img.resize((1, 1), Image.Resampling.BOX).resize((48, 32), Image.Resampling.NEAREST)
    raise ValueError(kind)


def build_images(folder: Path, sources: list[Path]) -> dict[str, str]:
    """Write every source (``s<i>``) and its variants (``s<i>_<variant>``) into ``folder``; returns
    file name -> SHA-256 of its bytes."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for i, src in enumerate(sources):
        tag, ext = f"s{i}", src.suffix.lower()
        for name in (f"{tag}{ext}", f"{tag}_copy{ext}"):
            shutil.copyfile(src, folder / name)
            names.append(name)
        with Image.open(src) as opened:
            img = opened.convert("RGB")
        for kind in VARIANTS[1:]:
            name = f"{tag}_{kind}.jpg" if kind == "q40" else f"{tag}_{kind}.png"
            out = img if kind == "q40" else _derive(img, kind)
            out.save(folder / name, **({"quality": 40} if kind == "q40" else {"compress_level": 1}))
            names.append(name)
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


def _img(files: dict[str, str], tag: str) -> str:
    """``images/<file>`` of the file named ``tag`` plus any extension."""
    for name in files:
        if name.rsplit(".", 1)[0] == tag:
            return f"images/{name}"
    raise KeyError(tag)


def build_rows(files: dict[str, str]) -> list[dict]:
    """Rows naming the images by paths relative to the dataset's folder: exact and near duplicates,
    several images per row (order, a path named twice, two copies of one image), rows without images
    (field absent, null, empty) and text that does or does not repeat."""
    i = lambda tag: _img(files, tag)  # noqa: E731 - a short local spelling for the table below
    spec: list[tuple[str, list[str] | None]] = [
        ("a photo", [i("s2")]),
        ("a photo", [i("s2_copy")]),
        ("a photo", [i("s2_half")]),
        ("a photo", [i("s2_q40")]),
        ("a photo", [i("s2_crop")]),
        ("a photo", [i("s2_gray")]),
        ("a photo", [i("s2_flip")]),
        ("another photo", [i("s3")]),
        ("another photo", [i("s3_q40")]),
        ("two photos", [i("s2"), i("s3")]),
        ("two photos", [i("s2_copy"), i("s3_copy")]),
        ("two photos", [i("s3"), i("s2")]),
        ("a photo", [i("s2"), i("s2")]),
        ("a photo", [i("s2"), i("s2_copy")]),
        ("a photo", [i("s2_copy"), i("s2")]),
        ("no image", None),
        ("no image", []),
        ("No Image!", []),
        ("no image", None),
        ("an icon", [i("s0")]),
        ("an icon", [i("s0_half")]),
        ("an icon", [i("s1")]),
        ("flat", [i("s0_flat")]),
        ("flat", [i("s1_flat")]),
        ("flat", [i("s2_flat")]),
        ("flat", [i("s3_flat")]),
        ("symmetric", [i("s2_sym")]),
        ("symmetric", [i("s3_sym")]),
        ("an icon", [i("s0_gray")]),
        ("an icon", [i("s0_crop")]),
        ("another photo", [i("s3_half")]),
        ("another photo", [i("s3_crop")]),
        ("another photo", [i("s3_gray")]),
        ("another photo", [i("s3_flip")]),
        ("a different text", [i("s2")]),
        ("A PHOTO", [i("s2_copy")]),
        ("all four", [i("s0"), i("s1"), i("s2"), i("s3")]),
        ("all four", [i("s0_copy"), i("s1_copy"), i("s2_copy"), i("s3_copy")]),
        ("icons", [i("s1_half"), i("s1_q40"), i("s1_sym")]),
        ("icons", [i("s1_copy"), i("s1_crop"), i("s1_flip"), i("s1_gray")]),
    ]
    rows = []
    for n, (text, images) in enumerate(spec):
        row: dict = {"id": n, "text": text}
        if images is not None or n % 2 == 0:  # some rows without images have no field at all
            row["images"] = images
        rows.append(row)
    return rows
