"""Real image files for the media tests, and corpora of rows that name them.

No downloads and no generated pixels: the images are photographs and icons that installed packages
ship (scikit-learn's sample photos, Airflow's UI icons), copied into the test's folder so that a test
may change their bytes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

#: (package, folder in it, glob) of image files installed packages ship.
SHIPPED_IMAGES = (
    ("sklearn", "datasets/images", "*.jpg"),
    ("airflow", "ui/dist", "*.png"),
    ("airflow", "providers/fab/www/static", "*.png"),
)
MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")


def shipped_images() -> list[Path]:
    """Image files on this machine, from installed packages (at least two: Airflow is a dependency)."""
    found: list[Path] = []
    for package, folder, pattern in SHIPPED_IMAGES:
        spec = importlib.util.find_spec(package)
        for base in (spec.submodule_search_locations or []) if spec else []:
            found += sorted(p for p in (Path(base) / folder).glob(pattern) if p.stat().st_size > 1024)
    unique = {p.read_bytes()[:4096] + str(p.stat().st_size).encode(): p for p in found}
    images = sorted(unique.values())
    assert len(images) >= 2, f"expected image files shipped by installed packages, found {images}"
    for p in images:
        assert p.read_bytes().startswith(MAGIC), f"{p} is not a JPEG or PNG file"
    return images


def copy_images(folder: Path, count: int = 3) -> list[Path]:
    """``count`` real image files in ``folder`` (cycling through the shipped ones, each copy its own bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    shipped = shipped_images()
    out = []
    for i in range(count):
        src = shipped[i % len(shipped)]
        dst = folder / f"img_{i:02d}{src.suffix}"
        shutil.copyfile(src, dst)
        out.append(dst)
    return out


def write_rows(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def image_text_rows(n: int, images: list[str], text: bool = True) -> list[dict]:
    """``n`` rows, row i naming ``images[i % len(images)]`` (as given: relative or absolute)."""
    return [
        {**({"text": f"caption number {i} of an image"} if text else {"id": i}), "images": [images[i % len(images)]]}
        for i in range(n)
    ]


def rel(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)
