"""Image filters of Data-Juicer 1.6.1, native: ``image_shape_filter``, ``image_size_filter`` and
``image_aspect_ratio_filter``.

Each op has DJ's name, arguments, defaults, stat keys and decision:

* a row's images are the list under ``image_key`` (default ``images``); a row without any (the
  field absent, null or empty) gets empty stats and is kept, whatever the bounds;
* every image gets a value (width and height, file size in bytes, width / height) and a keep flag,
  DJ's ``get_keep_boolean``: closed bounds by default, ``reversed_range`` flipping both closedness
  flags and then negating the test; ``image_shape_filter`` tests width and height separately, so
  when reversed it keeps an image whose width *and* height are both outside their ranges;
* ``any_or_all`` then keeps a row when any (default) or all of its images pass.

Stats (in ``__dj__stats__``, reused when already there, as DJ does): ``image_width`` and
``image_height`` (lists of int64), ``image_sizes`` (list of int64), ``aspect_ratios`` (list of
float64, the correctly rounded quotient, as Python's ``/`` gives it).

The per-image work is vectorised over the batch: the image lists are flattened once, each distinct
path is read once (``ops/kernels/images.py``: the header's size, EXIF orientation applied, the
pixels decoded at reduced scale to prove the file is whole), and the per-row decision is one
``bincount``.  A file that cannot be read raises ``ImageReadError`` naming it and the first input
row that names it: under ``skip_op_error`` the engine narrows the batch down to that row and sets it
aside in ``failed/`` with the reason; otherwise the op fails.  Values read are remembered per op
instance, so narrowing reads no file twice.  Differences from DJ, on purpose: a truncated image fails its row (DJ's import makes
Pillow fill the missing part in; see the kernel's docstring), and a field that is not a list of
paths fails its row with a message naming the field (DJ fails on it with whatever the value's type
raises, or reads a string's characters as paths); and a batch without the image field at all keeps
its rows in every op (DJ's ``image_aspect_ratio_filter`` raises ``KeyError`` on such a batch, its
other two keep the rows).

Not supported: DJ's ``image_bytes_key`` (images stored in the row, as lists of bytes under
``image_bytes``).  A table holding such bytes fails the op with a message saying so, rather than
reading the paths where DJ would read the bytes.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Filter, OpArgumentError
from airflow_provider_dj.ops.kernels.image_lists import ImageLists, input_row, op_image_lists
from airflow_provider_dj.ops.kernels.images import (
    ImageReadError,
    ReadMemo,
    file_size,
    image_size,
    pillow_missing,
)
from airflow_provider_dj.ops.registry import register
from airflow_provider_dj.ops.stats import get_stat, set_stat

#: Data-Juicer's default ``image_bytes_key``: a column of that name holds images as bytes.
#: How many read results an op instance remembers (a path's size or its error).
_MEMO_LIMIT = 1 << 16
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def _in_range(values: np.ndarray, lo: Any, hi: Any, min_closed: bool, max_closed: bool, reverse: bool) -> np.ndarray:
    """DJ's ``Filter.get_keep_boolean`` per value; the closedness flags are the ones DJ's Filter base
    holds (already flipped when ``reverse``)."""
    keep = (values >= lo) if min_closed else (values > lo)
    keep &= (values <= hi) if max_closed else (values < hi)
    return ~keep if reverse else keep


class _ImageFilter(Filter):
    """What the three ops share: image lists, remembered reads, interval flags and ``any_or_all``."""

    #: The stat keys this op writes, in order; the op's stats count as computed when all are there.
    stat_keys: ClassVar[tuple[str, ...]]
    #: The Arrow type of each stat key's list elements.
    stat_types: ClassVar[tuple[pa.DataType, ...]]
    #: Whether the op opens images (Pillow); the size filter reads file sizes only.
    opens_images: ClassVar[bool] = True

    def __init__(
        self,
        *,
        any_or_all: str,
        min_closed_interval: bool,
        max_closed_interval: bool,
        reversed_range: bool,
        image_key: str,
        text_key: str,
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        if any_or_all not in ("any", "all"):
            raise OpArgumentError("any_or_all", f"{self.name}: any_or_all must be 'any' or 'all', got {any_or_all!r}")
        self.any = any_or_all == "any"
        self.image_key = image_key
        self.reversed_range = reversed_range
        # As DJ's Filter base stores them: flipped when the range is reversed.
        self.min_closed = min_closed_interval != reversed_range
        self.max_closed = max_closed_interval != reversed_range
        self._memo = ReadMemo(_MEMO_LIMIT)

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        value = args.get("any_or_all", "any")
        if value not in ("any", "all"):
            raise OpArgumentError("any_or_all", f"{cls.name}: any_or_all must be 'any' or 'all', got {value!r}")
        missing = pillow_missing(cls.name) if cls.opens_images else None
        if missing:
            raise OpArgumentError("image_key", missing)

    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """None required: a row (or a whole partition) without the image field has no images and is
        kept, as in DJ, so the field's absence must not fail rows up front."""
        return {}

    # -- reading --------------------------------------------------------------
    def _read(self, path: str, reader: Callable[[str], Any]) -> Any:
        """``reader(path)``, remembered (its error too) so that narrowing a failed batch re-reads nothing."""
        return self._memo.read(path, reader)

    def _lists(self, table: pa.Table) -> ImageLists:
        return op_image_lists(table, self.name, self.image_key, self.common_args.get("image_bytes_key"))

    # -- stats and decision ---------------------------------------------------
    def compute_stats(self, table: pa.Table) -> pa.Table:
        """The stats of every row that lacks one of them (DJ recomputes a row's stats unless all its
        keys are there); rows that have them all keep theirs."""
        existing = [get_stat(table, k) for k in self.stat_keys]
        missing = np.zeros(table.num_rows, bool)
        for old in existing:
            missing |= True if old is None else pc.is_null(old).to_numpy(zero_copy_only=False)
        if not missing.any():
            return table
        every = bool(missing.all())
        todo = table if every else table.filter(pa.array(missing))
        lists = self._lists(todo)
        try:
            columns = self.per_image(lists)
        except ImageReadError as exc:  # name the first row that names the file
            at = lists.paths.index(exc.path) if exc.path in lists.paths else None
            raise exc.at_row(None if at is None else input_row(todo, int(lists.row_of[at]))) from None
        for key, type_, values, old in zip(self.stat_keys, self.stat_types, columns, existing):
            new = lists.as_lists(values, type_)
            if not every:
                new = pc.if_else(pa.array(missing), _scatter(new, missing), old.cast(pa.list_(type_)))
            table = set_stat(table, key, new)
        return table

    def keep_mask(self, table: pa.Table) -> pa.BooleanArray:
        existing = [get_stat(table, k) for k in self.stat_keys]
        if any(e is None or e.null_count for e in existing):
            table = self.compute_stats(table)
            existing = [get_stat(table, k) for k in self.stat_keys]
        flat = [np.asarray(pc.list_flatten(e).to_numpy(zero_copy_only=False)) for e in existing]
        lengths = pc.list_value_length(existing[0]).to_numpy(zero_copy_only=False).astype(np.int64)
        row_of = np.repeat(np.arange(table.num_rows, dtype=np.int64), lengths)
        passed = np.bincount(row_of, weights=self.image_keep(*flat), minlength=table.num_rows)
        keep = (passed > 0) if self.any else (passed == lengths)
        return pa.array(keep | (lengths == 0), pa.bool_())

    # -- what each op computes ------------------------------------------------
    def per_image(self, lists: ImageLists) -> list[np.ndarray]:
        """One array per stat key, one value per image of ``lists``."""
        raise NotImplementedError

    def image_keep(self, *values: np.ndarray) -> np.ndarray:
        """One keep flag per image, from its stat values."""
        raise NotImplementedError


def _scatter(values: pa.ListArray, where: np.ndarray) -> pa.Array:
    """``values`` (one per True of ``where``) placed at those rows, null elsewhere."""
    index = np.zeros(len(where), np.int64)
    index[where] = np.arange(int(where.sum()))
    return values.take(pa.array(index, mask=~where))


def _clamp(bound: int) -> int:
    """An integer bound within int64 (file sizes and pixel counts are far inside it, so the
    comparisons come out as with Python's unbounded ints)."""
    return max(_INT64_MIN, min(_INT64_MAX, bound))


@register
class ImageShapeFilter(_ImageFilter):
    """Keep rows whose images' width and height lie within the bounds (any or all images)."""

    name = "image_shape_filter"
    stat_keys = ("image_width", "image_height")
    stat_types = (pa.int64(), pa.int64())

    def __init__(
        self,
        *,
        min_width: int = 1,
        max_width: int = sys.maxsize,
        min_height: int = 1,
        max_height: int = sys.maxsize,
        any_or_all: str = "any",
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        image_key: str = "images",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(
            any_or_all=any_or_all,
            min_closed_interval=min_closed_interval,
            max_closed_interval=max_closed_interval,
            reversed_range=reversed_range,
            image_key=image_key,
            text_key=text_key,
            **common,
        )
        self.width_bounds = (_clamp(min_width), _clamp(max_width))
        self.height_bounds = (_clamp(min_height), _clamp(max_height))

    def per_image(self, lists: ImageLists) -> list[np.ndarray]:
        sizes = [self._read(p, image_size) for p in lists.paths]
        return [np.array([s[0] for s in sizes], np.int64), np.array([s[1] for s in sizes], np.int64)]

    def image_keep(self, widths: np.ndarray, heights: np.ndarray) -> np.ndarray:
        flags = (self.min_closed, self.max_closed, self.reversed_range)
        return _in_range(widths, *self.width_bounds, *flags) & _in_range(heights, *self.height_bounds, *flags)


def size_to_bytes(size: str) -> int:
    """Data-Juicer's ``size_to_bytes``, reproduced with its quirks: the digits of ``size`` make the
    number (so "1.5MB" is 15 MB and "-1" is 1) and its letters the unit, case-insensitive, KB and KiB
    both 1024 bytes; no letters means bytes.  ``ValueError`` for no digits or an unknown unit."""
    digits = "".join(c for c in size if c.isdigit())
    letters = "".join(c for c in size if c.isalpha()).lower()
    if not digits:
        raise ValueError(f"Your input `size` does not contain numbers: {size}")
    number = int(float(digits))
    if not letters:
        return number
    units = ("kb", "mb", "gb", "tb", "pb", "eb", "zb", "yb")
    for power, unit in enumerate(units, start=1):
        if letters in (unit, unit[0] + "ib"):
            return number << (10 * power)
    raise ValueError(
        f"unknown size unit {letters!r} in {size!r}: use one of KB, MB, GB, TB, PB, EB, ZB, YB or "
        f"KiB ... YiB (case-insensitive, 1024-based), or a number of bytes"
    )


@register
class ImageSizeFilter(_ImageFilter):
    """Keep rows whose image files' sizes in bytes lie within the bounds (any or all images).

    The bounds are strings as in Data-Juicer ("0", "1KB", "1MiB", "1TB"), parsed by its rules
    (``size_to_bytes``).  Only the file size is read, as DJ reads it: a file that is not an image
    passes on its size.
    """

    name = "image_size_filter"
    stat_keys = ("image_sizes",)
    stat_types = (pa.int64(),)
    opens_images = False

    def __init__(
        self,
        *,
        min_size: str = "0",
        max_size: str = "1TB",
        any_or_all: str = "any",
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        image_key: str = "images",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(
            any_or_all=any_or_all,
            min_closed_interval=min_closed_interval,
            max_closed_interval=max_closed_interval,
            reversed_range=reversed_range,
            image_key=image_key,
            text_key=text_key,
            **common,
        )
        self.bounds = (_clamp(size_to_bytes(min_size)), _clamp(size_to_bytes(max_size)))

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        super().check_values(args)
        for key in ("min_size", "max_size"):
            if key in args:
                try:
                    size_to_bytes(args[key])
                except ValueError as exc:
                    raise OpArgumentError(key, f"{cls.name}: {key}={args[key]!r}: {exc}") from None

    def per_image(self, lists: ImageLists) -> list[np.ndarray]:
        return [np.array([self._read(p, file_size) for p in lists.paths], np.int64)]

    def image_keep(self, sizes: np.ndarray) -> np.ndarray:
        return _in_range(sizes, *self.bounds, self.min_closed, self.max_closed, self.reversed_range)


@register
class ImageAspectRatioFilter(_ImageFilter):
    """Keep rows whose images' aspect ratio (width / height) lies within the bounds (any or all images)."""

    name = "image_aspect_ratio_filter"
    stat_keys = ("aspect_ratios",)
    stat_types = (pa.float64(),)

    def __init__(
        self,
        *,
        min_ratio: float = 0.333,
        max_ratio: float = 3.0,
        any_or_all: str = "any",
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        image_key: str = "images",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(
            any_or_all=any_or_all,
            min_closed_interval=min_closed_interval,
            max_closed_interval=max_closed_interval,
            reversed_range=reversed_range,
            image_key=image_key,
            text_key=text_key,
            **common,
        )
        self.bounds = (min_ratio, max_ratio)

    def per_image(self, lists: ImageLists) -> list[np.ndarray]:
        sizes = [self._read(p, image_size) for p in lists.paths]
        widths = np.array([s[0] for s in sizes], np.int64)
        heights = np.array([s[1] for s in sizes], np.int64)
        # int64 -> float64 is exact below 2**53 and the quotient correctly rounded: Python's w / h.
        return [widths / heights if len(sizes) else np.zeros(0, np.float64)]

    def image_keep(self, ratios: np.ndarray) -> np.ndarray:
        return _in_range(ratios, *self.bounds, self.min_closed, self.max_closed, self.reversed_range)
