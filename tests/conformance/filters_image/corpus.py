"""The image corpus of the image filters' conformance fixtures, built the same way for Data-Juicer
and for our tests.

Real images only, no downloads: two photographs scikit-learn ships and two icons Airflow's FAB
provider ships, copied under ``media/``; two copies of the photographs get an EXIF Orientation tag
(an APP1 segment inserted after the JPEG's start marker, pixels untouched), so the EXIF transpose
that Data-Juicer's decode applies is exercised.  The bad inputs are made from the same files: the
first half of a photograph, a text file named ``.jpg``, and a path to no file.

Standard library only (``regenerate.sh`` runs ``build`` with the provider's venv, where the images
are installed, and Data-Juicer's venv reads the folder it wrote).  Rows name images relative to the
dataset file (``media/...``) except one, which names an absolute path; ``{CORPUS}`` in the committed
rows stands for the corpus folder.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import sys
from pathlib import Path

#: name in media/ -> (package, path inside it) of the shipped image it copies.
SHIPPED = {
    "china.jpg": ("sklearn", "datasets/images/china.jpg"),
    "flower.jpg": ("sklearn", "datasets/images/flower.jpg"),
    "pin_100.png": ("airflow", "providers/fab/www/static/pin_100.png"),
    "pin_32.png": ("airflow", "providers/fab/www/static/pin_32.png"),
}
#: name in media/ -> (the copy it derives from, EXIF orientation).  6 rotates by 90 degrees
#: (width and height swap), 3 by 180 (they do not).
ROTATED = {"china_rot6.jpg": ("china.jpg", 6), "flower_rot3.jpg": ("flower.jpg", 3)}
#: The dataset file, at the corpus root.
ROWS_FILE = "rows.jsonl"
PLACEHOLDER = "{CORPUS}"


def shipped_file(package: str, inner: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    for base in (spec.submodule_search_locations or []) if spec else []:
        if (Path(base) / inner).is_file():
            return Path(base) / inner
    return None


def missing_sources() -> list[str]:
    """The shipped images this machine lacks (the fixtures need all four)."""
    return [f"{pkg}/{inner}" for pkg, inner in SHIPPED.values() if shipped_file(pkg, inner) is None]


def exif_orientation_segment(orientation: int) -> bytes:
    """A JPEG APP1 segment holding a little-endian TIFF with one IFD entry: Orientation (0x0112)."""
    entry = struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0)
    tiff = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 1) + entry + struct.pack("<I", 0)
    payload = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def with_orientation(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with an EXIF Orientation tag right after its SOI marker."""
    if not jpeg.startswith(b"\xff\xd8"):
        raise ValueError("not a JPEG file")
    return jpeg[:2] + exif_orientation_segment(orientation) + jpeg[2:]


def make_bad_files(media: Path) -> dict[str, Path]:
    """truncated.jpg (the first half of flower.jpg), not_image.jpg (text), and gone.jpg (absent)."""
    data = (media / "flower.jpg").read_bytes()
    (media / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (media / "not_image.jpg").write_text("this is a caption, not a JPEG file\n")
    return {"truncated": media / "truncated.jpg", "not_image": media / "not_image.jpg", "gone": media / "gone.jpg"}


def build_media(folder: Path) -> Path:
    """Copy the shipped images into ``folder/media`` and derive the rotated and bad ones; return it."""
    media = folder / "media"
    media.mkdir(parents=True, exist_ok=True)
    for name, (pkg, inner) in SHIPPED.items():
        src = shipped_file(pkg, inner)
        if src is None:
            raise FileNotFoundError(f"{pkg} does not ship {inner}: install it (see the module docstring)")
        shutil.copyfile(src, media / name)
    for name, (base, orientation) in ROTATED.items():
        (media / name).write_bytes(with_orientation((media / base).read_bytes(), orientation))
    make_bad_files(media)
    return media


def rows(folder: Path) -> list[dict]:
    """The good rows: one image, several, none (empty, null, absent), an absolute path, EXIF-rotated
    images and a repeated image.  Every row has text (Data-Juicer's loader drops empty ones)."""
    absolute = str(folder / "media" / "flower.jpg")
    return [
        {"text": "one photograph", "images": ["media/china.jpg"]},
        {"text": "an icon and a photograph", "images": ["media/pin_32.png", "media/china.jpg"]},
        {"text": "no image", "images": []},
        {"text": "null images", "images": None},
        {"text": "an absolute path", "images": [absolute]},
        {"text": "rotated by 90 degrees", "images": ["media/china_rot6.jpg"]},
        {"text": "rotated by 180 degrees and an icon", "images": ["media/flower_rot3.jpg", "media/pin_100.png"]},
        {"text": "the same icon twice", "images": ["media/pin_100.png", "media/pin_100.png"]},
        {"text": "a small icon", "images": ["media/pin_32.png"]},
        {"text": "two icons", "images": ["media/pin_32.png", "media/pin_100.png"]},
        {"text": "a rotated photograph and an icon", "images": ["media/china_rot6.jpg", "media/pin_32.png"]},
        {"text": "no images field"},
    ]


def bad_rows() -> list[dict]:
    """Rows naming a file that is truncated, not an image, or absent, next to a good one."""
    return [
        {"text": "good", "images": ["media/pin_100.png"]},
        {"text": "truncated", "images": ["media/truncated.jpg"]},
        {"text": "not an image", "images": ["media/not_image.jpg"]},
        {"text": "absent", "images": ["media/gone.jpg"]},
        {"text": "good and truncated", "images": ["media/pin_32.png", "media/truncated.jpg"]},
    ]


def write_jsonl(path: Path, items: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i, row in enumerate(items):
            f.write(json.dumps({**row, "id": i}, sort_keys=True) + "\n")


def write_jsonl_plain(path: Path, items: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in items:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def build(folder: Path) -> dict[str, Path]:
    """The whole corpus in ``folder``: media/, rows.jsonl and bad/rows.jsonl (its bad files are named
    ``../media/...`` from there: relative to that file's folder, as Data-Juicer resolves them)."""
    build_media(folder)
    write_jsonl(folder / ROWS_FILE, rows(folder))
    (folder / "bad").mkdir(exist_ok=True)
    bad = [{**r, "images": [f"../{p}" for p in r["images"]]} for r in bad_rows()]
    write_jsonl(folder / "bad" / ROWS_FILE, bad)
    return {"rows": folder / ROWS_FILE, "bad": folder / "bad" / ROWS_FILE}


def portable(value: object, folder: Path) -> object:
    """``value`` with the corpus folder replaced by ``{CORPUS}`` (expected files hold no machine path)."""
    text = json.dumps(value)
    return json.loads(text.replace(json.dumps(str(folder))[1:-1], PLACEHOLDER))


if __name__ == "__main__":
    target = Path(sys.argv[1])
    build(target)
    print(target)
