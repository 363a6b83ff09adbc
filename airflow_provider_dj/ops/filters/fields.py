"""Filters on sample fields rather than text: ``suffix_filter`` and ``specified_field_filter``.

Both follow Data-Juicer 1.6.1, including what they do *not* do:

* ``suffix_filter`` writes no statistic (DJ lists it among its
  NON_STATS_FILTERS) and reads the ``__dj__suffix__`` column, which DJ's
  formatter adds (the source file's extension with its dot, e.g. ".jsonl")
  when a dataset is loaded with ``add_suffix``.  Matching is exact string
  membership, so ``suffixes: [jsonl]`` never matches ".jsonl".
* ``specified_field_filter`` copies the field's value into
  ``__dj__stats__`` under the dotted path itself (``{"meta.source": "web"}``)
  and keeps a row when its value -- or every element, for a list -- is ``in``
  ``target_value`` with Python's equality (so ``1``, ``1.0`` and ``True``
  match each other, and an empty list always matches).

Neither op applies a range: ``reversed_range`` only negates the decision, and
only when the op filters at all (no suffixes / no target values keep every
row even when reversed, as in DJ).  DJ also accepts ``min_closed_interval``
and ``max_closed_interval`` on every filter; they are accepted and ignored.
"""

from __future__ import annotations

from typing import Any, List, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Filter, OpArgumentError
from airflow_provider_dj.ops.registry import register
from airflow_provider_dj.ops.stats import ensure_stat, get_stat

SUFFIX_COLUMN = "__dj__suffix__"


def _all_true(table: pa.Table) -> pa.BooleanArray:
    return pa.array(np.ones(table.num_rows, bool), pa.bool_())


def _one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


@register
class SuffixFilter(Filter):
    """Keep samples whose ``__dj__suffix__`` is one of ``suffixes`` (all samples when none given)."""

    name = "suffix_filter"

    def __init__(
        self,
        *,
        suffixes: Optional[Union[str, List[str]]] = None,
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.suffixes = [] if suffixes is None else [suffixes] if isinstance(suffixes, str) else list(suffixes)
        self.reversed_range = reversed_range
        self.closed_intervals = (min_closed_interval, max_closed_interval)

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        suffixes = args.get("suffixes")
        if isinstance(suffixes, (list, tuple)):
            for s in suffixes:
                if not isinstance(s, str):
                    raise OpArgumentError("suffixes", f"suffix_filter: every suffix must be a string, got {s!r}")

    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """No text; ``__dj__suffix__`` only when there are suffixes to match (none keeps every row unread)."""
        return {SUFFIX_COLUMN: "suffixes"} if args.get("suffixes") else {}

    def compute_stats(self, table: pa.Table) -> pa.Table:
        return table  # DJ's suffix_filter has no statistic

    def keep_mask(self, table: pa.Table) -> pa.BooleanArray:
        if not self.suffixes:
            return _all_true(table)
        if SUFFIX_COLUMN not in table.column_names:
            raise KeyError(
                f"suffix_filter needs the {SUFFIX_COLUMN!r} column (each sample's source-file extension, "
                f"which Data-Juicer adds when loading with add_suffix); the dataset has no such column"
            )
        col = _one_array(table.column(SUFFIX_COLUMN))
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = col.cast(pa.string())
        keep = pc.fill_null(pc.is_in(col, value_set=pa.array(self.suffixes, pa.string())), False)
        return pc.invert(keep) if self.reversed_range else keep


def _membership(values: pa.Array, targets: list) -> np.ndarray:
    """``value in targets`` per element, with Python's ``in`` (identity, then ==).

    Primitive and string values are compared once per distinct value and
    broadcast back; nested values (structs, lists of lists) have no Arrow
    hash kernel, so they are compared row by row in Python.
    """
    if not pa.types.is_nested(values.type):
        try:
            distinct = pc.unique(values)
            where = pc.index_in(values, value_set=distinct, skip_nulls=False).to_numpy(zero_copy_only=False)
            hit = np.fromiter((v in targets for v in distinct.to_pylist()), bool, len(distinct))
            return hit[where.astype(np.int64)]
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    return np.fromiter((v in targets for v in values.to_pylist()), bool, len(values))


@register
class SpecifiedFieldFilter(Filter):
    """Keep samples whose field ``field_key`` (dotted path into nested structs, e.g.
    ``meta.source``) holds a value in ``target_value``; for a list, every element must be.

    The value is copied into ``__dj__stats__`` under ``field_key``, as DJ does.
    As in DJ, a path through a missing key fails every row, and a row whose
    path crosses a null struct (``meta`` is null for ``meta.source``) fails;
    with ``skip_op_error`` the engine sets exactly those rows aside.  A key
    present in the schema but null in a row gives the value None.  DJ fails
    every row for an empty ``field_key``; here that is a validation error.
    """

    name = "specified_field_filter"

    def __init__(
        self,
        *,
        field_key: str = "",
        target_value: Optional[list] = None,
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.check_values({"field_key": field_key})
        self.field_key = field_key
        self.target_value = list(target_value or [])
        self.reversed_range = reversed_range
        self.closed_intervals = (min_closed_interval, max_closed_interval)

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        if not args.get("field_key"):
            raise OpArgumentError(
                "field_key",
                "specified_field_filter: field_key is empty; name the field to test, e.g. 'meta.source' "
                "(Data-Juicer would fail on every sample)",
            )

    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """No text; the ``field_key`` path, which the stats step reads even without target values."""
        key = args.get("field_key")
        return {key: "field_key"} if isinstance(key, str) and key else {}

    def _field_values(self, table: pa.Table) -> pa.Array:
        path = self.field_key.split(".")
        if path[0] not in table.column_names:
            raise KeyError(f"specified_field_filter: {path[0]!r} is not a field of the samples ({table.column_names})")
        col = _one_array(table.column(path[0]))
        for depth, key in enumerate(path[1:], 1):
            where = ".".join(path[:depth])
            if not pa.types.is_struct(col.type):
                raise KeyError(f"specified_field_filter: {where!r} is {col.type}, not a mapping with key {key!r}")
            if col.type.get_field_index(key) < 0:
                names = [col.type.field(i).name for i in range(col.type.num_fields)]
                raise KeyError(f"specified_field_filter: {key!r} not in {where!r} (its keys: {names})")
            if col.null_count:
                raise KeyError(f"specified_field_filter: {where!r} is null in {col.null_count} sample(s)")
            col = pc.struct_field(col, key)
        return col

    def compute_stats(self, table: pa.Table) -> pa.Table:
        if table.num_rows == 0:
            return table
        values = self._field_values(table)
        return ensure_stat(table, self.field_key, lambda: values, values.type)

    def keep_mask(self, table: pa.Table) -> pa.BooleanArray:
        if not (self.field_key and self.target_value):
            return _all_true(table)
        values = get_stat(table, self.field_key)
        if values is None:
            values = get_stat(self.compute_stats(table), self.field_key)
            if values is None:  # no rows
                return _all_true(table)
        if (
            pa.types.is_list(values.type)
            or pa.types.is_large_list(values.type)
            or pa.types.is_fixed_size_list(values.type)
        ):
            # A list keeps the row when every element is a target (an empty one always does);
            # a null list is the value None.
            elements = pc.list_flatten(values)
            parent = pc.list_parent_indices(values).to_numpy(zero_copy_only=False)
            misses = np.bincount(parent[~_membership(elements, self.target_value)], minlength=len(values))
            keep = misses == 0
            nulls = np.asarray(values.is_null())
            keep[nulls] = None in self.target_value
        else:
            keep = _membership(values, self.target_value)
        if self.reversed_range:
            keep = ~keep
        return pa.array(keep, pa.bool_())
