"""Images named by rows, opened and measured as Data-Juicer 1.6.1 opens them.

Data-Juicer's image ops read a sample's images with ``data_juicer.utils.mm_utils.load_image``: a
Hugging Face ``datasets`` ``Image`` feature decodes the path (``PIL.Image.open``, a full ``load()``,
then ``PIL.ImageOps.exif_transpose`` when the file has an EXIF Orientation tag) and the result is
converted to RGB.  So the width and height a DJ op sees are the file's, swapped for the EXIF
orientations that rotate by 90 degrees (5 to 8).  This module gives the native ops the same images
and the same numbers, and turns every way a file can be unreadable into one ``ImageReadError``
naming the path and what is wrong, never a bare PIL exception.

One deliberate difference: importing ``data_juicer`` sets PIL's process-wide
``ImageFile.LOAD_TRUNCATED_IMAGES``, so Data-Juicer decodes a truncated file (the missing part grey)
and keeps or drops its row on the header's size.  Here a truncated file is an error whatever that
flag says (it is held off while a decode of ours runs): the row goes to ``failed/`` with the
reason instead of exporting a broken image.

Pillow is the ``image`` extra's dependency, imported on first use: importing this module (the op
registry does, at DAG-parse time) costs nothing.
"""

from __future__ import annotations

import importlib.util
import io
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError

if TYPE_CHECKING:
    from PIL import Image as PILImage

#: The extra that installs Pillow.
EXTRA = "airflow-provider-dj[image]"
#: EXIF Orientation values whose transpose swaps width and height (PIL.ImageOps.exif_transpose).
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
_EXIF_ORIENTATION = 0x0112
_truncation_lock = threading.Lock()


class ImageSupportMissingError(DJError, ImportError):
    """Pillow is not installed; the message names the extra that installs it."""


class ImageReadError(DJError, ValueError):
    """An image file a row names cannot be used: missing, not an image, truncated or corrupt.

    ``path`` is the path as opened, ``problem`` what is wrong with it, ``row`` the input row that
    names it when the caller knows it (``at_row``).
    """

    def __init__(self, path: str, problem: str, row: int | None = None) -> None:
        where = f"input row {row}: " if row is not None else ""
        super().__init__(f"{where}image {path!r} {problem}")
        self.path = path
        self.problem = problem
        self.row = row

    def __reduce__(self) -> tuple:
        # Ray carries a task's exception back by pickling it: rebuild it from its fields, not its message.
        return (ImageReadError, (self.path, self.problem, self.row))

    def at_row(self, row: int | None) -> ImageReadError:
        """The same error, naming the input row that names the file."""
        return ImageReadError(self.path, self.problem, row)


class ImageFieldError(DJError, ValueError):
    """A row's image field holds something other than a list of paths."""


class ReadMemo:
    """What reading each path gave (its value, or the error it raised), remembered for up to ``limit``
    paths, so that narrowing a failed batch down to its bad row (``skip_op_error``) reads no file twice.
    A ``MemoryError`` is about the batch, not the file: it is never remembered."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._hits: dict[str, tuple[bool, Any]] = {}

    def read(self, path: str, reader: Callable[[str], Any]) -> Any:
        """``reader(path)``, or what it gave the last time (raised again when it was an error)."""
        hit = self._hits.get(path)
        if hit is None:
            try:
                hit = (True, reader(path))
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - remembered and raised again, unchanged
                hit = (False, exc.with_traceback(None))  # without the frames it would keep alive
            if len(self._hits) >= self.limit:
                self._hits.clear()
            self._hits[path] = hit
        if not hit[0]:
            raise hit[1]
        return hit[1]

    def clear(self) -> None:
        self._hits.clear()


def pillow_missing(op_name: str) -> str | None:
    """Why ``op_name`` cannot run here when Pillow is not installed (None when it is): checked when the
    recipe is validated, so a missing extra stops the job before any partition runs."""
    if importlib.util.find_spec("PIL") is not None:
        return None
    return f"{op_name} needs Pillow, which is not installed: install the {EXTRA!r} extra (pip install '{EXTRA}')"


def pil() -> Any:
    """The ``PIL.Image`` module, imported now; a clear error naming the extra when Pillow is missing."""
    try:
        from PIL import Image, ImageFile, ImageOps  # noqa: F401 - ImageFile/ImageOps load the submodules
    except ImportError as exc:
        raise ImageSupportMissingError(
            f"the native image ops need Pillow, which is not installed: install the {EXTRA!r} extra "
            f"(pip install '{EXTRA}')"
        ) from exc
    return Image


def row_image_paths(value: Any, field: str = "images") -> list[str]:
    """The paths a row's image field names: None, [] or "" name none (Data-Juicer skips a falsy
    value); anything else must be a list of non-empty strings, else ``ImageFieldError`` naming
    ``field`` and what it holds."""
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)) and all(isinstance(p, str) and p for p in value):
        return list(value)
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise ImageFieldError(
        f"field {field!r} must be a list of image file paths (as Data-Juicer reads image_key), got {shown}; "
        f'write it as ["path", ...], or null or [] for none'
    )


def _open(path: str) -> PILImage.Image:
    """``PIL.Image.open`` on a local path or an fsspec URL (read into memory), errors translated."""
    Image = pil()
    try:
        if storage.is_url(path):
            with storage.open_read(path) as fh:
                return Image.open(io.BytesIO(fh.read()))
        return Image.open(path)
    except FileNotFoundError:
        raise ImageReadError(path, "does not exist") from None
    except IsADirectoryError:
        raise ImageReadError(path, "is a directory, not an image file") from None
    except Image.UnidentifiedImageError:
        raise ImageReadError(path, "is not an image file Pillow can read (unknown or damaged header)") from None
    except Image.DecompressionBombError as exc:
        raise ImageReadError(path, f"is too large to decode safely ({exc})") from None
    except OSError as exc:
        raise ImageReadError(path, f"cannot be read ({exc.strerror or exc})") from None
    except MemoryError:
        raise  # about the machine, not the file: the engine retries on smaller slices
    except Exception as exc:  # noqa: BLE001 - a damaged header can trip any of Pillow's plugins
        raise ImageReadError(path, f"is not an image file Pillow can read ({type(exc).__name__}: {exc})") from None


class _StrictTruncation:
    """Pillow's process-wide ``LOAD_TRUNCATED_IMAGES`` held off while any decode of ours runs, and put
    back as it was when the last one ends.  Decodes of ours run in parallel (Pillow releases the GIL);
    another library decoding in another thread meanwhile is strict too."""

    def __init__(self) -> None:
        self.active = 0
        self.saved = False

    def __enter__(self) -> None:
        from PIL import ImageFile

        with _truncation_lock:
            if self.active == 0:
                self.saved = ImageFile.LOAD_TRUNCATED_IMAGES
                ImageFile.LOAD_TRUNCATED_IMAGES = False
            self.active += 1

    def __exit__(self, *exc: object) -> None:
        from PIL import ImageFile

        with _truncation_lock:
            self.active -= 1
            if self.active == 0:
                ImageFile.LOAD_TRUNCATED_IMAGES = self.saved


_strict_truncation = _StrictTruncation()


def _decode(path: str, img: PILImage.Image, *, draft: bool) -> None:
    """Decode ``img``'s pixels (a JPEG at 1/8 scale when ``draft``: every byte is still read, so a
    truncated or corrupt file fails all the same) with truncated files refused."""
    try:
        if draft:
            img.draft(None, (1, 1))  # a no-op for formats other than JPEG
        with _strict_truncation:
            img.load()
    except MemoryError:
        raise  # about the machine, not the file: the engine retries on smaller slices
    except Exception as exc:  # noqa: BLE001 - damaged data can trip any of Pillow's decoders
        why = str(exc) or type(exc).__name__
        problem = "is truncated" if "truncated" in why.lower() else "is corrupt"
        raise ImageReadError(path, f"{problem} (Pillow could not decode it: {why})") from None


def _orientation(path: str, img: PILImage.Image) -> Any:
    """The EXIF Orientation tag's value (None without one); a damaged EXIF block fails, as it does
    in the ``datasets`` decode."""
    try:
        return img.getexif().get(_EXIF_ORIENTATION)
    except Exception as exc:  # noqa: BLE001 - whatever PIL's EXIF parser raises
        raise ImageReadError(path, f"has an EXIF block Pillow cannot read ({exc})") from None


def open_image(path: str) -> PILImage.Image:
    """The image at ``path`` as Data-Juicer's ``load_image(path)`` returns it: decoded, EXIF-transposed
    when the file has an Orientation tag, in RGB.  ``ImageReadError`` when it cannot be."""
    img = _open(path)
    _decode(path, img, draft=False)
    from PIL import ImageOps

    try:
        if _orientation(path, img) is not None:
            img = ImageOps.exif_transpose(img)
        return img.convert("RGB")
    except (OSError, ValueError) as exc:
        raise ImageReadError(path, f"cannot be converted to RGB ({exc})") from None


def image_size(path: str) -> tuple[int, int]:
    """(width, height) of ``open_image(path)``, without building the full-size RGB image.

    The size comes from the header, swapped for a 90-degree EXIF orientation; the pixels are still
    decoded (a JPEG at 1/8 scale, several times cheaper), so a file ``open_image`` refuses is refused
    here too.
    """
    img = _open(path)
    try:
        width, height = img.size
        _decode(path, img, draft=True)
        swap = _orientation(path, img) in _SWAPPING_ORIENTATIONS
    finally:
        img.close()
    return (height, width) if swap else (width, height)


def image_sizes(paths: Sequence[str]) -> tuple[list[int], list[int]]:
    """``image_size`` of each path, in order, as (widths, heights); each distinct path is read once."""
    sizes: dict[str, tuple[int, int]] = {}
    for p in paths:
        if p not in sizes:
            sizes[p] = image_size(p)
    return [sizes[p][0] for p in paths], [sizes[p][1] for p in paths]


def file_size(path: str) -> int:
    """The file's size in bytes (Data-Juicer's ``get_file_size``: ``os.path.getsize``), or
    ``ImageReadError`` naming the path."""
    try:
        return storage.size(path)
    except FileNotFoundError:
        raise ImageReadError(path, "does not exist") from None
    except OSError as exc:
        raise ImageReadError(path, f"cannot be read ({exc.strerror or exc})") from None
