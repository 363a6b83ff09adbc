"""Thumbnails of the images a removed row names, for the job view's "why" answer.

Why a separate route with no path in it: the browser asks for ``/thumbnail?row=N&image=K``, two
integers.  The file is the ``K``-th image of input row ``N`` as the job recorded it (the sample the
"why" look-up answers with, under the job's ``image_key``), so a caller can only see images the job's
own rows name.  Before it is opened it must also be

* a local file that planning resolved and digested for that row's partition (partitioning_info's
  digests, engine/input/media_digests.py): not a URL, not a path the sample record was edited to name;
* under ``[dj] allowed_roots`` when the api-server has it set (``AllowedRoots.admits`` follows
  symlinks and ``..``, so a link swapped in after planning cannot point outside them).

The image is decoded with Pillow, imported here lazily (the api-server needs it only for this),
turned upright (EXIF orientation, as Data-Juicer's loader does) and scaled to fit ``size`` pixels.
When Pillow is not installed, or the file is gone or is not a readable image, the answer is a small
SVG placeholder saying so (status 200, so the page's ``<img>`` shows it), with the reason also in the
``X-DJ-Thumbnail`` header.  Which rows and which DAGs a caller may see is decided by the route
(``app.py``), exactly as for the other routes of a job.
"""

from __future__ import annotations

import html
import io
import os

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.config.path_confinement import allowed_roots
from airflow_provider_dj.engine.input.media import MediaKeys
from airflow_provider_dj.engine.input.media_digests import read_file_digests
from airflow_provider_dj.engine.observe import why
from airflow_provider_dj.engine.storage.context import JobContext

#: The fates whose "why" answer carries the row's sample (and so its images).
REMOVED_FATES = ("filtered", "duplicate", "failed")
DEFAULT_SIZE = 160
MIN_SIZE, MAX_SIZE = 32, 512
#: Images larger than this many pixels are not decoded (Pillow's own bomb guard is a warning below 2x).
MAX_PIXELS = 64_000_000


def image_key(job_dir: str) -> str:
    """The job's ``image_key`` as planning recorded it (Data-Juicer's default ``images`` otherwise)."""
    return MediaKeys.from_dict(JobContext(job_dir).partitioning_info.get("media_keys")).image


def answer_images(job_dir: str, answer: dict) -> list[str]:
    """The image paths of a "why" answer's sample: a removed row's, under the job's image key."""
    sample = answer.get("sample")
    if answer.get("fate") not in REMOVED_FATES or not isinstance(sample, dict):
        return []
    value = sample.get(image_key(job_dir))
    return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []


def thumbnail_paths(job_dir: str, answer: dict) -> list[dict]:
    """For each image of the answer's sample: its file name and the API path of its thumbnail
    (relative to the job's API root), which the page's ``<img>`` loads."""
    row = answer.get("input_row")
    return [
        {"name": os.path.basename(p), "path": f"/thumbnail?row={row}&image={i}"}
        for i, p in enumerate(answer_images(job_dir, answer))
    ]


def _planned_files(job_dir: str, partition_id: int) -> set[str]:
    for p in JobContext(job_dir).partitioning_info.get("partitions", []):
        if p.get("partition_id") == partition_id:
            return {os.path.abspath(f) for f in (read_file_digests(job_dir, p) or {})}
    return set()


def image_file(job_dir: str, input_row: int, index: int) -> tuple[str | None, str | None]:
    """(the local file of the row's ``index``-th image, None) when it passes the checks the module
    docstring lists, else (None, why it is refused: HTTP 403).

    Raises ``LookupError`` (HTTP 404, the message naming what is missing) when the row is not in the
    job's input (``why.RowOutOfRangeError``), was not removed, or names no image ``index``."""
    answer = why.why_row(job_dir, input_row)
    images = answer_images(job_dir, answer)
    if not images:
        raise LookupError(
            f"input row {input_row} has no image to show: thumbnails are shown for rows an op removed "
            f"(this one is {answer.get('fate')})"
        )
    if not 0 <= index < len(images):
        raise LookupError(f"input row {input_row} names {len(images)} image(s); there is no image {index}")
    path = images[index]
    what = f"image {index} of input row {input_row}"
    if storage.is_url(path) or "://" in path or not os.path.isabs(path):
        # A URL, or a relative path of a job planned before media paths were resolved at read time.
        return None, f"{what} is not an absolute local file path ({path!r}); no thumbnail"
    path = os.path.abspath(path)
    if path not in _planned_files(job_dir, answer["partition_id"]):
        return None, f"{what} is not a file this job planned for the row's partition"
    roots = allowed_roots()
    if roots is not None and not roots.admits(path):
        return None, f"{what} is outside the allowed roots"
    return path, None


def render(path: str, size: int = DEFAULT_SIZE) -> tuple[bytes, str, str | None]:
    """(bytes, media type, placeholder reason or None): ``path`` scaled to fit ``size`` x ``size``,
    as PNG (images with transparency) or JPEG; a placeholder SVG when it cannot be shown."""
    try:
        from PIL import Image, ImageOps
    except ImportError:
        return placeholder("Pillow is not installed on the api-server", size)
    if not os.path.isfile(path):  # gone, or no longer a regular file (a FIFO would block the read)
        return placeholder("the image file is missing", size)
    try:
        with Image.open(path) as opened:
            if opened.width * opened.height > MAX_PIXELS:
                return placeholder(f"image too large to preview ({opened.width}x{opened.height})", size)
            opened.draft("RGB", (size, size))  # JPEG: decode at a reduced scale
            img = ImageOps.exif_transpose(opened)
            img.thumbnail((size, size))
            alpha = img.mode in ("RGBA", "LA", "P", "PA") and (img.mode != "P" or "transparency" in img.info)
            out = io.BytesIO()
            if alpha:
                img.convert("RGBA").save(out, "PNG", optimize=True)
                return out.getvalue(), "image/png", None
            img.convert("RGB").save(out, "JPEG", quality=80)
            return out.getvalue(), "image/jpeg", None
    except FileNotFoundError:
        return placeholder("the image file is missing", size)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        return placeholder(f"not a readable image ({type(exc).__name__})", size)


def placeholder(reason: str, size: int = DEFAULT_SIZE) -> tuple[bytes, str, str]:
    """A grey square SVG that says ``reason`` (escaped text only: no script, no external reference)."""
    words, lines = reason.split(), [""]
    for w in words:
        if len(lines[-1]) + len(w) > 24 and lines[-1]:
            lines.append("")
        lines[-1] = f"{lines[-1]} {w}".strip()
    spans = "".join(
        f"<tspan x='80' dy='{0 if i == 0 else 14}'>{html.escape(line, quote=True)}</tspan>"
        for i, line in enumerate(lines[:5])
    )
    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{size}' height='{size}' viewBox='0 0 160 160'>"
        "<rect x='0.5' y='0.5' width='159' height='159' fill='#eeeeee' stroke='#bdbdbd'/>"
        "<text x='80' y='50' font-size='18' font-family='sans-serif' text-anchor='middle' fill='#9e9e9e'>"
        "no preview</text>"
        f"<text x='80' y='78' font-size='11' font-family='sans-serif' text-anchor='middle' fill='#616161'>{spans}</text>"
        "</svg>"
    )
    return svg.encode(), "image/svg+xml", reason
