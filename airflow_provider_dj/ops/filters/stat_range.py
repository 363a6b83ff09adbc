"""Range filters: keep a sample when one statistic lies within recipe-given bounds.

Most Data-Juicer filters are this shape: a per-sample statistic, a
``min_*``/``max_*`` argument pair, and the three interval flags of DJ's
Filter base class (``min_closed_interval``, ``max_closed_interval``,
``reversed_range``).  Writing those five arguments, their checks and the
interval test in every op is how they drift apart, so an op declares its
bounds once, as a ``StatBounds`` class attribute, and ``RangeFilter`` builds
the rest from it:

* the arguments: ``own_args`` and ``arg_types`` list the bounds (after the
  op's argument named by ``after``, so the order stays Data-Juicer's) and
  the three flags (after the op's own arguments), with the declared names,
  types and defaults; recipe validation and the generated ops reference
  read them from there like any ``__init__`` argument;
* the validation: ``min > max`` is refused before any task runs;
* the keep mask: DJ's ``get_keep_boolean``.  Reversing first flips both
  closedness flags and then negates the test, so ``reversed_range`` with
  default flags keeps ``v <= min or v >= max`` (the bounds themselves are
  kept) -- reproduced as is.

``StatRangeFilter`` also writes the statistic: the op only supplies
``compute_stat(table)``, one value per row, and the base stores it in
``__dj__stats__`` (reusing values already there, as DJ does).
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from airflow_provider_dj.ops.base import Filter, OpArgumentError
from airflow_provider_dj.ops.stats import ensure_stat, get_stat

#: The interval flags of Data-Juicer's Filter base class, with its defaults.
INTERVAL_FLAGS: dict[str, bool] = {"min_closed_interval": True, "max_closed_interval": True, "reversed_range": False}


@dataclass(frozen=True)
class StatBounds:
    """Which statistic a range filter tests, and the recipe arguments that bound it.

    ``min``/``max`` are (argument name, default) as Data-Juicer declares them;
    ``max`` is None for a lower bound only.  ``arg_type`` is the bounds'
    declared type (int or float, as in Data-Juicer's signature), ``stat_type``
    the Arrow type the statistic is stored as.  ``after`` names the op's own
    argument the bounds follow in the argument list (None: they come first).
    """

    stat: str
    stat_type: pa.DataType
    arg_type: type
    min: tuple[str, Any]
    max: tuple[str, Any] | None = None
    after: str | None = None

    @property
    def min_arg(self) -> str:
        return self.min[0]

    @property
    def max_arg(self) -> str | None:
        return self.max[0] if self.max else None

    def defaults(self) -> dict[str, Any]:
        """Bound arguments -> their defaults, min first."""
        return dict([self.min] + ([self.max] if self.max else []))


def _keyword(name: str, default: Any, annotation: type) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation.__name__)


class RangeFilter(Filter):
    """A filter that keeps rows whose statistic ``bounds.stat`` is within the bounds.

    Subclasses set ``bounds`` and write ``compute_stats`` (see
    ``StatRangeFilter`` for the common case of one computed statistic);
    their ``__init__`` declares only their other arguments and passes the
    rest on: the bounds and flags arrive through ``**common`` and are taken
    here.
    """

    bounds: ClassVar[StatBounds]

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        b = type(self).bounds
        given = {k: common.pop(k, v) for k, v in (*b.defaults().items(), *INTERVAL_FLAGS.items())}
        super().__init__(text_key=text_key, **common)
        self.stat_key = b.stat
        self.lo = given[b.min_arg]
        self.hi = given[b.max_arg] if b.max_arg else None
        self.min_closed_interval = given["min_closed_interval"]
        self.max_closed_interval = given["max_closed_interval"]
        self.reversed_range = given["reversed_range"]

    @classmethod
    def _declared_args(cls) -> list[inspect.Parameter]:
        b = cls.bounds
        return [_keyword(k, v, b.arg_type) for k, v in b.defaults().items()]

    @classmethod
    def own_args(cls) -> dict[str, inspect.Parameter]:
        """The op's ``__init__`` arguments with the bounds placed after ``bounds.after``
        and the interval flags after the op's own (``text_key`` stays last)."""
        own = list(super().own_args().values())
        after = cls.bounds.after
        at = 0 if after is None else [p.name for p in own].index(after) + 1
        own[at:at] = cls._declared_args()
        flags = [_keyword(k, v, bool) for k, v in INTERVAL_FLAGS.items()]
        end = next((i for i, p in enumerate(own) if p.name == "text_key"), len(own))
        own[end:end] = flags
        return {p.name: p for p in own}

    @classmethod
    def arg_types(cls) -> dict[str, Any]:
        declared = {p.name: cls.bounds.arg_type for p in cls._declared_args()}
        return {**super().arg_types(), **declared, **dict.fromkeys(INTERVAL_FLAGS, bool)}

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        b = cls.bounds
        if b.max is None:
            return
        lo = args.get(b.min_arg, b.min[1])
        hi = args.get(b.max_arg, b.max[1])
        if lo > hi:
            raise OpArgumentError(
                b.min_arg,
                f"{cls.name}: {b.min_arg}={lo} is greater than {b.max_arg}={hi}, so every sample "
                f"would be dropped; lower {b.min_arg} or raise {b.max_arg}",
            )

    def in_bounds(self, values: np.ndarray) -> np.ndarray:
        """DJ's get_keep_boolean for every value: closedness flipped by ``reversed_range``, then negated."""
        min_closed = self.min_closed_interval != self.reversed_range
        keep = (values >= self.lo) if min_closed else (values > self.lo)
        if self.hi is not None:
            max_closed = self.max_closed_interval != self.reversed_range
            keep &= (values <= self.hi) if max_closed else (values < self.hi)
        if self.reversed_range:
            keep = ~keep
        return keep

    def keep_mask(self, table: pa.Table) -> pa.BooleanArray:
        values = get_stat(table, self.stat_key)
        if values is None or values.null_count:
            values = get_stat(self.compute_stats(table), self.stat_key)
        keep = self.in_bounds(values.to_numpy(zero_copy_only=False))
        return pa.array(np.asarray(keep, dtype=bool), pa.bool_())


class StatRangeFilter(RangeFilter):
    """A range filter whose statistic is one value per row, computed by ``compute_stat``."""

    @abstractmethod
    def compute_stat(self, table: pa.Table) -> pa.Array:
        """The statistic of every row of ``table``, in row order (null texts count as '')."""

    def compute_stats(self, table: pa.Table) -> pa.Table:
        return ensure_stat(table, self.stat_key, lambda: self.compute_stat(table), self.bounds.stat_type)
