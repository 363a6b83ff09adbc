"""Base classes for the operator library.

Ops follow Data-Juicer's names, arguments and semantics but work on whole
Arrow tables (one partition, or one batch of it) so that vectorized kernels
(pyarrow.compute, RE2) do the per-row work instead of Python loops.

Three kinds exist, mirroring Data-Juicer; each is an abstract class whose
abstract methods are all a new op has to write:

* ``Mapper.process_table(table) -> table``: same row count, same order.
* ``Filter.compute_stats(table) -> table`` adds this op's statistic to the
  ``__dj__stats__`` struct column; ``Filter.keep_mask(table)`` then returns
  one boolean per row (True = keep).  The engine drops the rows.  A filter
  that keeps a statistic within bounds writes neither: it derives from
  ``ops/filters/stat_range.py``'s ``StatRangeFilter``.
* ``Deduplicator.compute_hash(table) -> pa.Array``: one fixed-size binary key
  per row.  Duplicate resolution is *global* (the engine sees all
  partitions' keys in input order and keeps the first occurrence), which is
  what makes the result independent of the partition count.
  ``SignatureDeduplicator`` is the other global shape: per-row signatures,
  and its own ``resolve_global`` over all partitions' signatures.

Argument validation happens in ``validate_args`` at recipe-validation time,
before any task runs, so a typo in a recipe never surfaces mid-run.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from airflow_provider_dj.core.errors import DJError

# The reserved column names are defined in ops/columns.py; the two an op's code names most are
# importable from here too.
from airflow_provider_dj.ops.columns import ROW_ERROR_COLUMN as ROW_ERROR_COLUMN
from airflow_provider_dj.ops.columns import STATS_COLUMN as STATS_COLUMN

if TYPE_CHECKING:
    import numpy as np


# Arguments Data-Juicer's base OP accepts for every op.  They are accepted
# here so existing recipes validate unchanged; the ones that matter to this
# engine (text_key) are used, the rest are scheduling hints we ignore.
COMMON_OP_ARGS: dict[str, Any] = {
    "text_key": str,
    "image_key": str,
    "audio_key": str,
    "video_key": str,
    "query_key": str,
    "response_key": str,
    "history_key": str,
    "batch_size": int,
    "num_proc": (int, type(None)),
    "accelerator": (str, type(None)),
    "cpu_required": (int, float),
    "mem_required": (int, float, str),
    "turbo": bool,
    "skip_op_error": bool,
    "work_dir": (str, type(None)),
    "index_key": (str, type(None)),
    "num_cpus": (int, float, type(None)),
    "num_gpus": (int, float, type(None)),
    "memory": (int, float, str, type(None)),
    # Field contracts for the GPU preflight (engine/preflight/contracts.py): which fields an op reads and
    # writes; dotted paths, wildcards allowed.  Absent = unknown.
    "input_columns": (list, str, type(None)),
    "output_columns": (list, str, type(None)),
    # The failure-rate guard's limit for this op (engine/execution/failure_guard.py); the
    # recipe's top-level max_failed_ratio applies when absent.
    "max_failed_ratio": (int, float, type(None)),
}

#: Common arguments the engine reads and the op never sees in its behaviour:
#: they are left out of checkpoint fingerprints and of the resume config
#: check, so raising a limit and resuming reuses every checkpoint.
ENGINE_OP_ARGS = frozenset({"max_failed_ratio"})


class OpFatalError(DJError, RuntimeError):
    """An op error that no row-by-row retry can fix (an endpoint that stays
    down, a refused API key, a template naming a missing field): the op fails
    even under ``skip_op_error``, instead of sending every sample to
    ``failed/`` — and, for a paid API, instead of retrying each row again."""


class OpArgumentError(DJError, ValueError):
    """A recipe gave an op an argument it does not accept or a bad value.

    ``key`` is the argument name so the recipe loader can build the full key
    path (``process[2].words_num_filter.min_num``).
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def type_ok(value: Any, expected: Any) -> bool:
    """Loose isinstance over annotation-like specs (tuples, Optional, int-for-float)."""
    if expected is Any or expected is None:
        return True
    if isinstance(expected, tuple):
        return any(type_ok(value, e) for e in expected)
    origin = typing.get_origin(expected)
    if origin is typing.Union or str(origin) == "types.UnionType":
        return any(type_ok(value, e) for e in typing.get_args(expected))
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(expected, type):
        return isinstance(value, expected)
    return True


def _ratio_ok(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1)


def _type_name(expected: Any) -> str:
    if isinstance(expected, tuple):
        return " or ".join(_type_name(e) for e in expected)
    if expected is type(None):
        return "null"
    return getattr(expected, "__name__", str(expected))


class Op(ABC):  # noqa: B024 - abstract so each kind below can declare its abstract methods
    """One recipe operator.  Subclasses set ``name``; the kind's base class sets ``kind``
    and declares, as abstract methods, what the op must implement."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    #: True for ops whose result depends on the whole dataset (deduplicators):
    #: the DAG factory puts a barrier and a global step at them.
    is_global: ClassVar[bool] = False
    #: Raise when a change to the op alters what it outputs for the same arguments: checkpoints that
    #: other jobs reuse (nightly reuse, engine/storage/reuse_index.py) are matched on it.
    implementation_version: ClassVar[int] = 1
    #: True for ops that need a GPU (used by the GPU preflight).
    uses_cuda: ClassVar[bool] = False
    #: A CUDA op's GPU share per replica when the recipe gives no ``num_gpus`` (None: planned by
    #: the preflight).  Read by the GPU preflight and the actor pools.
    gpu_num_gpus: ClassVar[float | None] = None
    #: A Ray runtime_env the op's probe worker needs (None: the cluster's).
    runtime_env: ClassVar[dict | None] = None
    #: The arguments that name a file or folder the op reads or writes (a model, a word list):
    #: a deployment's ``allowed_roots`` confines them (engine/config/path_confinement.py).
    path_args: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        self.text_key = text_key
        self.common_args = common

    # -- validation -----------------------------------------------------
    @classmethod
    def own_args(cls) -> dict[str, inspect.Parameter]:
        """The keyword arguments this op's ``__init__`` declares (not common ones)."""
        sig = inspect.signature(cls.__init__)
        return {
            name: p
            for name, p in sig.parameters.items()
            if name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        }

    @classmethod
    def arg_types(cls) -> dict[str, Any]:
        """The declared type of each own argument (``validate_args`` checks recipe values against it).

        Why a hook: ``own_args`` may list arguments a base class declares for
        its subclasses (a range filter's bounds), which no ``__init__``
        annotation names; such a class adds their types here.
        """
        try:
            return typing.get_type_hints(cls.__init__)
        except Exception:  # noqa: BLE001 - annotations that don't resolve  # pragma: no cover
            return {}

    @classmethod
    def validate_args(cls, args: dict[str, Any]) -> None:
        """Raise OpArgumentError for an unknown argument or a value of the wrong type."""
        own = cls.own_args()
        hints = cls.arg_types()
        for key, value in args.items():
            if key in own:
                expected = hints.get(key, Any)
                if not type_ok(value, expected):
                    raise OpArgumentError(
                        key,
                        f"argument {key!r} of {cls.name} must be {_type_name(expected)}, "
                        f"got {value!r} ({type(value).__name__})",
                    )
                continue
            if key in COMMON_OP_ARGS:
                if not type_ok(value, COMMON_OP_ARGS[key]) or (key == "max_failed_ratio" and not _ratio_ok(value)):
                    expected = (
                        "a number from 0 to 1 (a fraction of the op's input rows)"
                        if key == "max_failed_ratio"
                        else _type_name(COMMON_OP_ARGS[key])
                    )
                    raise OpArgumentError(key, f"argument {key!r} must be {expected}, got {value!r}")
                continue
            allowed = sorted(set(own) | set(COMMON_OP_ARGS))
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise OpArgumentError(
                key,
                f"{cls.name} has no argument {key!r}.{hint} Its arguments: {', '.join(sorted(own)) or '(none)'}",
            )
        cls.check_values(args)

    @classmethod
    def path_arg_names(cls) -> tuple[str, ...]:
        """The arguments whose values are paths (``path_args``); a hook for ops that derive them."""
        return cls.path_args

    @classmethod  # noqa: B027 - optional hook, empty by default
    def check_values(cls, args: dict[str, Any]) -> None:
        """Hook for value checks beyond types (ranges, regex compiles). Raise OpArgumentError."""

    # -- the fields an op reads and writes (engine/input/schema.py) ---------
    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """The input fields this op reads, each mapped to the argument that names it.

        Why: the validate task refuses, before any partition runs, an input
        in which a field the recipe needs exists in no row (a corpus whose
        text is in ``body`` while ``text_keys`` says ``text``), naming the key
        to change.  Fields are dotted paths into nested objects
        (``meta.source``).  The default, the text key (the op's own
        ``text_key`` argument, else the recipe's ``text_keys``), is right for
        every text op; ops that read other fields, or no text, override it.
        """
        own = args.get("text_key")
        return {own if isinstance(own, str) and own else text_key: "text_key"}

    @classmethod
    def output_fields(cls, args: dict[str, Any]) -> tuple[str, ...]:
        """Fields this op adds to the samples, which later ops may read although the input lacks them.

        The default follows the library's convention: an ``output_key``
        argument (its declared default when the recipe leaves it out), plus
        the ``output_columns`` a recipe declares for the GPU preflight.
        """
        out: list[str] = []
        key = args.get("output_key")
        if key is None:
            param = cls.own_args().get("output_key")
            key = getattr(param, "default", None)
        if isinstance(key, str) and key:
            out.append(key)
        declared = args.get("output_columns")
        out.extend([declared] if isinstance(declared, str) else [c for c in declared or () if isinstance(c, str)])
        return tuple(out)

    #: True for ops whose per-row work is costly (model inference, API calls):
    #: the engine runs them in batches of ``batch_size`` rows and commits each
    #: batch durably with a cursor, so a crash or stop loses at most one batch.
    expensive: ClassVar[bool] = False
    #: Default batch size for expensive ops (a recipe's ``batch_size`` wins).
    default_batch_size: ClassVar[int] = 1000
    #: True for ops whose start-up is costly (a model to load): a segment that
    #: holds one runs its partitions on a pool of Ray actors that keep the op
    #: instance (and its model) alive across partitions, so start-up is paid
    #: once per actor, not per partition (engine/execution/actor_pool.py).
    stateful: ClassVar[bool] = False

    def setup(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Pay the op's start-up now (load a model).  Called once per kept
        instance by the actor pool, so the cost is measured and recorded as
        ``op_init``; ops without start-up leave it empty."""

    def bind_run_context(self, *, job_dir: str, op_index: int, partition_id: int) -> None:
        """Called by the engine before an op processes a partition's rows.

        Ops that keep durable state of their own (an LLM op's record of paid
        calls) key it by these; most ops ignore them.
        """
        self.job_dir = job_dir
        self.op_index = op_index
        self.partition_id = partition_id

    #: True for ops that write new media files (``image_blur_mapper``).  The engine then gives the op
    #: its folder for each partition (``bind_media_dir``: in the job directory, beside the op's
    #: checkpoints; ops never spell job-directory names), commits the files the op's output rows name
    #: (``media_named``) with the checkpoint, removes the rest, and exports them beside the export.
    writes_media: ClassVar[bool] = False

    def bind_media_dir(self, path: str) -> None:  # noqa: B027 - optional hook, empty by default
        """Where this op writes its files for the partition it runs on next (``writes_media`` ops)."""

    def media_named(self, table: pa.Table) -> dict[str, dict]:
        """The files of the bound folder that ``table`` (this op's output) names: file name -> seal
        (``{"bytes": size, "xxh3_128": digest}``).  Empty for ops that write none."""
        return {}


class Mapper(Op):
    """Rewrites samples: the same rows, in the same order, with changed (or added) fields."""

    kind: ClassVar[str] = "mapper"

    @abstractmethod
    def process_table(self, table: pa.Table) -> pa.Table:
        """The table with this op applied to every row; same row count and order."""


class Filter(Op):
    """Drops samples in two steps, so the statistic is kept (``keep_stats_in_res_ds``)
    and reused by a later filter or a re-run, as in Data-Juicer."""

    kind: ClassVar[str] = "filter"

    @abstractmethod
    def compute_stats(self, table: pa.Table) -> pa.Table:
        """The table with this op's statistic in ``__dj__stats__`` (existing values reused)."""

    @abstractmethod
    def keep_mask(self, table: pa.Table) -> pa.Array:
        """One boolean per row, True = keep; computes the statistic if the table lacks it."""


class Deduplicator(Op):
    """Global op in three phases.  ``compute_hash`` runs per partition and returns
    one fixed-size key per row; after the barrier the engine keeps each key's
    first occurrence in input order (exact duplicates, whatever the
    partitioning).  Ops whose duplicates are not key equality derive from
    ``SignatureDeduplicator`` instead."""

    kind: ClassVar[str] = "deduplicator"
    is_global: ClassVar[bool] = True

    @abstractmethod
    def compute_hash(self, table: pa.Table) -> pa.Array | pa.Table:
        """Per partition: one fixed-size binary key per row (a signature table for a
        ``SignatureDeduplicator``)."""


class SignatureDeduplicator(Deduplicator):
    """A deduplicator that resolves its global phase itself.

    ``compute_hash`` returns a ``pa.Table`` of per-row signatures (e.g.
    MinHash bands); ``resolve_global`` gets every partition's signature
    table in input order and returns one keep flag per row (near-duplicates:
    cluster, keep the lowest row of each cluster).  The engine tells the two
    shapes apart by this class, never by probing for methods.
    """

    @abstractmethod
    def compute_hash(self, table: pa.Table) -> pa.Table:
        """Per partition: a table with one row of signatures per input row."""

    @abstractmethod
    def resolve_global(self, tables: list[pa.Table]) -> np.ndarray:
        """All partitions' signature tables, in input order -> one keep flag per row."""

    def duplicate_representatives(self, tables: list[pa.Table]) -> np.ndarray | None:
        """For the tracer: per row, the row it duplicates (itself when kept); None when
        the op cannot tell, and the trace then names no kept partner (``dup1`` null)."""
        return None

    def keep_and_representatives(self, tables: list[pa.Table]) -> tuple[np.ndarray, np.ndarray | None]:
        """The keep flags and, per row, the row it was kept against (``duplicate_representatives``), for
        lineage.  The default asks both methods; an op whose keep flags derive from its representatives
        (MinHash, SimHash, the Data-Juicer adapter) overrides it to compute them once."""
        return np.asarray(self.resolve_global(tables), dtype=bool), self.duplicate_representatives(tables)

    def matching_band(self, tables: list[pa.Table], rows: np.ndarray, partners: np.ndarray) -> np.ndarray | None:
        """For lineage: per pair ``(rows[i], partners[i])`` (global positions), the first LSH band the two
        share (-1: none; they are in one cluster through other rows); None for an op without bands."""
        return None

    def signature_schema(self) -> pa.Schema | None:
        """The schema of ``compute_hash``'s table when the op accepts an *unkeyed* row in it: a row of
        nulls, for a row its key phase could not compute (under ``skip_op_error``, engine/execution/
        key_rows.py), which ``resolve_global`` and ``duplicate_representatives`` keep and match with
        nothing, as an exact deduplicator's null key.  None (the default): the op cannot tell such a row
        apart, and one row whose signature cannot be computed fails the partition."""
        return None


def suggest(name: str, choices: list[str] | set[str]) -> str:
    """' Did you mean X?' or '' — shared by the registry and the recipe loader."""
    close = difflib.get_close_matches(name, sorted(choices), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""
