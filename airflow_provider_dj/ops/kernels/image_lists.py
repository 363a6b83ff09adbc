"""A batch's image lists: the paths each row names under the op's image key, flattened for the image
ops, and the refusal of rows that carry images as bytes (Data-Juicer's ``image_bytes_key``), which the
native ops do not read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import OpFatalError
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.kernels.images import ImageFieldError, row_image_paths

#: Data-Juicer's default ``image_bytes_key``.
DEFAULT_IMAGE_BYTES_KEY = "image_bytes"


class ImageLists:
    """A batch's image lists, flattened: ``paths`` (every image of every row, in order) and
    ``row_of`` (the row each path belongs to); ``counts`` per row."""

    def __init__(self, paths: list[str], row_of: np.ndarray, num_rows: int) -> None:
        self.paths = paths
        self.row_of = row_of
        self.num_rows = num_rows
        self.counts = np.bincount(row_of, minlength=num_rows).astype(np.int64)

    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int32)

    def as_lists(self, values: np.ndarray, type_: pa.DataType) -> pa.ListArray:
        """``values`` (one per path) regrouped into one list per row."""
        return pa.ListArray.from_arrays(pa.array(self.offsets()), pa.array(values, type_))


def image_lists(table: pa.Table, key: str) -> ImageLists:
    """The image lists of ``table``'s rows under ``key`` (a row without the field names none).

    A ``list<string>`` column is flattened by Arrow; a row holding a null or empty path, or a column
    of another type, is read row by row so that ``ImageFieldError`` names the field and the value.
    """
    n = table.num_rows
    if key not in table.column_names:
        return ImageLists([], np.zeros(0, np.int64), n)
    col = table.column(key)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) and (
        pa.types.is_string(col.type.value_type) or pa.types.is_large_string(col.type.value_type)
    ):
        flat = pc.list_flatten(col)
        if flat.null_count == 0 and not pc.any(pc.equal(pc.utf8_length(flat), 0)).as_py():
            lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
            row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
            return ImageLists(flat.to_pylist(), row_of, n)
    paths: list[str] = []
    rows: list[int] = []
    for i, value in enumerate(col.to_pylist()):
        try:
            found = row_image_paths(value, key)
        except ImageFieldError as exc:
            row = input_row(table, i)
            raise ImageFieldError(f"input row {row}: {exc}" if row is not None else str(exc)) from None
        paths.extend(found)
        rows.extend([i] * len(found))
    return ImageLists(paths, np.asarray(rows, np.int64), n)


def input_row(table: pa.Table, i: int) -> int | None:
    """The input row number of ``table``'s row ``i`` (None when the engine has not set it), for messages."""
    if INPUT_ROW_COLUMN not in table.column_names:
        return None
    return table.column(INPUT_ROW_COLUMN)[i].as_py()


def holds_image_bytes(col: pa.ChunkedArray) -> bool:
    """Whether a column holds lists of bytes with at least one element (DJ reads images from it;
    it ignores a column of any other type, e.g. base64 strings)."""
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    if not (pa.types.is_binary(t.value_type) or pa.types.is_large_binary(t.value_type)):
        return False
    return bool(pc.sum(pc.fill_null(pc.list_value_length(col), 0)).as_py() or 0)


def op_image_lists(table: pa.Table, op_name: str, image_key: str, bytes_key: str | None) -> ImageLists:
    """The image lists an op reads from ``table``; ``OpFatalError`` when the rows hold their images as
    bytes under ``bytes_key`` (default ``image_bytes``), which the native ops do not read."""
    bytes_key = bytes_key or DEFAULT_IMAGE_BYTES_KEY
    if bytes_key in table.column_names and holds_image_bytes(table.column(bytes_key)):
        raise OpFatalError(
            f"{op_name}: the rows hold images as bytes in {bytes_key!r}, which the native op does not "
            f"read (it reads the files named in {image_key!r}); drop that column or rename it"
        )
    return image_lists(table, image_key)
