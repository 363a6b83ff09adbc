"""``image_blur_mapper`` of Data-Juicer 1.6.1, native: the one op here that writes new image files.

Arguments as in DJ: ``p`` (the share of images blurred), ``blur_type`` (``gaussian``, ``box`` or
``mean``), ``radius`` (of the box and Gaussian kernels) and ``save_dir``.  The pixels are DJ's:
the image as DJ's ``load_image`` gives it (``ops/kernels/images.py``: decoded, EXIF-transposed,
RGB), filtered with Pillow's ``GaussianBlur(radius)``, ``BoxBlur(radius)`` or ``BLUR`` (mean),
and saved in the format of the source file's extension with Pillow's defaults, as DJ's
``Image.save(path)`` saves it.  A row's image field then names the new files; its
``__dj__source_file__`` field names the source files, set as DJ sets it.

Differences from DJ, on purpose:

* **Which images are blurred is decided by a hash, not by a random draw.**  DJ draws
  ``np.random.rand()`` per image and blurs when ``p`` is not below it; a retry or a resume would then
  blur other images and write other files.  Here an image is blurred when the hash of (its file's
  bytes digest, ``blur_type``, ``radius``) maps below ``p`` in [0, 1): the same file is always
  decided alike, a re-run writes the same bytes, and raising ``p`` only adds images.  With ``p=1``
  every image is blurred and with ``p=0`` none, as in DJ.
* **Where the files go.**  DJ writes next to the source file (or under ``save_dir`` or
  ``DJ_PRODUCED_DATA_DIR``) with a name hashed from the process id and the time.  Here the engine
  gives the op a folder in the job directory, beside the checkpoints of its op and partition
  (``bind_media_dir``), and each file is named by its content digest (``<stem>_<xxh3>.<ext>``), so
  rewriting it is idempotent.  The checkpoint that commits the rows lists every file with its size
  and checksum; the export copies them into a folder beside the export and names them there
  (docs/job_directory.md).  ``save_dir`` and ``DJ_PRODUCED_DATA_DIR`` are therefore not used.
* A file that cannot be read (missing, not an image, truncated) fails its row, as in the native
  image filters: set aside in ``failed/`` with the reason under ``skip_op_error``, else the op fails.
  A source whose extension Pillow cannot save to fails its row too (DJ's ``save`` raises there).

Images held as bytes (DJ's ``image_bytes_key``) are refused, as by the native image filters.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from typing import Any, ClassVar

import pyarrow as pa
import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.ops.base import Mapper, OpArgumentError
from airflow_provider_dj.ops.kernels.image_lists import input_row, op_image_lists
from airflow_provider_dj.ops.kernels.images import ImageReadError, ReadMemo, open_image, pil, pillow_missing
from airflow_provider_dj.ops.registry import register

#: Data-Juicer's ``Fields.source_file``: the source files of a row's changed images.
SOURCE_FILE_COLUMN = "__dj__source_file__"
BLUR_TYPES = ("mean", "box", "gaussian")
_STEM_LIMIT = 64
_MEMO_LIMIT = 1 << 14


class ImageWriteError(ImageReadError):
    """The blurred image cannot be saved in its source file's format (the row fails, as in DJ)."""

    def __reduce__(self) -> tuple:
        return (ImageWriteError, (self.path, self.problem, self.row))

    def at_row(self, row: int | None) -> ImageWriteError:
        return ImageWriteError(self.path, self.problem, row)


def decision_value(source_digest: str, blur_type: str, radius: float) -> float:
    """The number in [0, 1) an image is blurred below: a hash of its bytes' digest and the kernel."""
    key = json.dumps([source_digest, blur_type, float(radius)], separators=(",", ":")).encode()
    return xxhash.xxh3_64_intdigest(key) / 2.0**64


def blur_filter(blur_type: str, radius: float) -> Any:
    """Pillow's filter for ``blur_type``, as DJ builds it."""
    from PIL import ImageFilter

    if blur_type == "mean":
        return ImageFilter.BLUR
    if blur_type == "box":
        return ImageFilter.BoxBlur(radius)
    return ImageFilter.GaussianBlur(radius)


@register
class ImageBlurMapper(Mapper):
    """Blur a share ``p`` of the images (chosen by a hash of their bytes) and name the blurred copies."""

    name = "image_blur_mapper"
    writes_media: ClassVar[bool] = True

    def __init__(
        self,
        *,
        p: float = 0.2,
        blur_type: str = "gaussian",
        radius: float = 2,
        save_dir: str | None = None,
        image_key: str = "images",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        if blur_type not in BLUR_TYPES:
            raise OpArgumentError(
                "blur_type", f"{self.name}: blur_type must be one of {list(BLUR_TYPES)}, got {blur_type!r}"
            )
        if radius < 0:
            raise OpArgumentError("radius", f"{self.name}: radius must be >= 0, got {radius!r}")
        self.p = float(p)
        self.blur_type = blur_type
        self.radius = radius
        self.save_dir = save_dir  # accepted for DJ's recipes, not used (see the module docstring)
        self.image_key = image_key
        self._media_dir: str | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        #: file name -> seal ({"bytes", "xxh3_128"}) of every file written or confirmed in the bound folder.
        self._written: dict[str, dict] = {}
        self._memo = ReadMemo(_MEMO_LIMIT)  # source path -> its new path, or the error blurring it raised

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        blur_type = args.get("blur_type", "gaussian")
        if blur_type not in BLUR_TYPES:
            raise OpArgumentError(
                "blur_type", f"{cls.name}: blur_type must be one of {list(BLUR_TYPES)}, got {blur_type!r}"
            )
        radius = args.get("radius", 2)
        if radius < 0:
            raise OpArgumentError("radius", f"{cls.name}: radius must be >= 0, got {radius!r}")
        missing = pillow_missing(cls.name)
        if missing:
            raise OpArgumentError("image_key", missing)

    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """None required: a row without images is passed through, as in DJ."""
        return {}

    @classmethod
    def output_fields(cls, args: dict[str, Any]) -> tuple[str, ...]:
        return (SOURCE_FILE_COLUMN, *super().output_fields(args))

    # -- where the files go -------------------------------------------------------
    def bind_media_dir(self, path: str) -> None:
        """The folder this op writes its files into for the partition it runs on next (the engine
        names it; unbound, a temporary folder of this instance is used)."""
        if path != self._media_dir:
            self._media_dir = path
            self._written = {}
            self._memo.clear()

    def media_dir(self) -> str:
        if self._media_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="dj_image_blur_")
            self._media_dir = self._tmp.name
        return self._media_dir

    def media_named(self, table: pa.Table) -> dict[str, dict]:
        """The files of the bound folder that ``table``'s rows name, by file name, with their seals."""
        if self._media_dir is None or self.image_key not in table.column_names:
            return {}
        lists = op_image_lists(table, self.name, self.image_key, self.common_args.get("image_bytes_key"))
        out = {}
        for path in set(lists.paths):
            name = storage.basename(path)
            if name in self._written and path == storage.join(self._media_dir, name):
                out[name] = self._written[name]
        return out

    # -- the work -----------------------------------------------------------------
    def _blurred(self, path: str) -> str:
        """The path the image at ``path`` becomes (itself when not blurred), its file written."""
        return self._memo.read(path, self._blur_one)

    def _blur_one(self, path: str) -> str:
        try:
            source = storage.read_bytes(path)
        except FileNotFoundError:
            raise ImageReadError(path, "does not exist") from None
        except IsADirectoryError:
            raise ImageReadError(path, "is a directory, not an image file") from None
        except OSError as exc:
            raise ImageReadError(path, f"cannot be read ({exc.strerror or exc})") from None
        if not decision_value(xxhash.xxh3_128_hexdigest(source), self.blur_type, self.radius) < self.p:
            open_image(path)  # not blurred, but still an image: a broken file fails its row either way
            return path
        image = open_image(path).convert("RGB").filter(blur_filter(self.blur_type, self.radius))
        stem, ext = os.path.splitext(storage.basename(path))
        fmt = pil().registered_extensions().get(ext.lower())
        if fmt is None:
            raise ImageWriteError(path, f"has an extension ({ext or 'none'!r}) Pillow cannot save an image as")
        buf = io.BytesIO()
        try:
            image.save(buf, format=fmt)
        except (OSError, ValueError, KeyError) as exc:
            raise ImageWriteError(path, f"cannot be saved as {fmt} after blurring ({exc})") from None
        data = buf.getvalue()
        seal = {"bytes": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data)}
        name = f"{stem[:_STEM_LIMIT]}_{seal['xxh3_128']}{ext}"
        target = storage.join(self.media_dir(), name)
        if name not in self._written:
            storage.atomic_write_bytes(target, data, what=f"the blurred copy of {path}")
            self._written[name] = seal
        return target

    def process_table(self, table: pa.Table) -> pa.Table:
        n = table.num_rows
        lists = op_image_lists(table, self.name, self.image_key, self.common_args.get("image_bytes_key"))
        new_paths = []
        for k, path in enumerate(lists.paths):
            try:
                new_paths.append(self._blurred(path))
            except ImageReadError as exc:
                raise exc.at_row(input_row(table, int(lists.row_of[k]))) from None
        offsets = lists.offsets()
        old_sources = (
            table.column(SOURCE_FILE_COLUMN).to_pylist() if SOURCE_FILE_COLUMN in table.column_names else [None] * n
        )
        images = table.column(self.image_key).to_pylist() if self.image_key in table.column_names else [None] * n
        sources: list[list[str]] = []
        for r in range(n):
            lo, hi = int(offsets[r]), int(offsets[r + 1])
            if lo == hi:  # no image: DJ sets no source and leaves the field as it is
                sources.append([])
                continue
            old, new = lists.paths[lo:hi], new_paths[lo:hi]
            # DJ: the sources start as the images when the row has none yet; an image this op changed
            # whose source differs from its current path gets its current path as the source.
            src = list(old_sources[r]) if old_sources[r] else list(old)
            for j, (before, after) in enumerate(zip(old, new)):
                if j < len(src) and src[j] != before and after != before:
                    src[j] = before
            sources.append(src)
            images[r] = new
        out = table
        if self.image_key in table.column_names:
            col = pa.array(images, pa.list_(pa.string()))
            out = out.set_column(out.schema.get_field_index(self.image_key), self.image_key, col)
        source_col = pa.array(sources, pa.list_(pa.string()))
        if SOURCE_FILE_COLUMN in out.column_names:
            return out.set_column(out.schema.get_field_index(SOURCE_FILE_COLUMN), SOURCE_FILE_COLUMN, source_col)
        return out.append_column(SOURCE_FILE_COLUMN, source_col)
