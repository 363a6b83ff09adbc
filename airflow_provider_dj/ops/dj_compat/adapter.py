"""Run Data-Juicer's own ops (the ones not implemented natively) inside this engine.

Why a lazy bridge: Data-Juicer (``py-data-juicer``) is an optional extra
that lives in its own environment -- it installs op packages at run time and
pins ``dill`` -- and importing it takes seconds.  Recipe validation happens
at DAG-parse time, constantly, in the scheduler's DAG processor.  So:

* At parse / validation time this module only asks ``importlib`` whether
  ``data_juicer`` is installed (``find_spec``, no import) and reads the
  generated catalog ``dj_op_catalog`` (op names, kinds, argument names and
  simple types of Data-Juicer 1.6.1).  Argument *names* and simple types are
  checked there, with the same rule Data-Juicer's own preflight applies.
* Pattern arguments are compiled here, with the engine and flags Data-Juicer
  uses for each (``ADAPTED_PATTERN_ARGS``), since Data-Juicer compiles most
  of them only on the first sample.
* Other argument *values* are checked by Data-Juicer itself when it builds the op:
  once in the ``validate`` task (``engine/config/adapted_ops.py``, before any partition
  runs) and again in every task that uses the op.
* Data is processed by ``ops.dj_compat.batches``, which imports Data-Juicer on the
  first batch.

What runs: mappers (Data-Juicer's ``process``, batched or per sample, as its
own executor calls it), filters (``compute_stats`` then ``process``; stats land
in ``__dj__stats__`` like native filters') and exact-hash deduplicators
(per-partition ``compute_hash`` -> 16-byte keys -> the engine's global
first-occurrence phase).  What is refused, at validation, with the reason:
dataset-level kinds (selectors, groupers, aggregators, pipelines), Ray-mode
ops (``ray_*``: they keep their own cross-worker state), and deduplicators
without a sound mapping onto per-row keys (MinHash with uid, line-level
dedup, ...).  Native ops always win: the adapter only sees names the
registry does not know.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from airflow_provider_dj.ops.base import (
    COMMON_OP_ARGS,
    Deduplicator,
    Filter,
    Mapper,
    Op,
    OpArgumentError,
    SignatureDeduplicator,
    suggest,
)
from airflow_provider_dj.ops.dj_compat import op_catalog as catalog
from airflow_provider_dj.ops.kernels.patterns import compile_user_pattern, strip_raw_prefix

EXTRA = "airflow-provider-dj[data-juicer]"
INSTALL_HINT = (
    f"install the extra `pip install {EXTRA}` in its own environment (py-data-juicer "
    f"{catalog.DJ_VERSION} installs op packages at run time and pins dill, so keep it apart from "
    f"other Python environments) and run the Airflow DAG processor and workers from it"
)

#: Deduplicators whose global phase is "keep the first row of each hash value".
#: Per op: the hash fields Data-Juicer's compute_hash writes (the text hash is
#: added when the op was built with consider_text), and whether an empty hash
#: means "never a duplicate" (Data-Juicer keeps samples without images/videos).
EXACT_HASH_DEDUPS: dict[str, tuple[str, bool]] = {
    "document_deduplicator": ("__dj__hash", False),  # native op wins; kept for parity tests
    "image_deduplicator": ("__dj__imagehash", True),
    "video_deduplicator": ("__dj__videohash", True),
}
TEXT_HASH_FIELD = "__dj__hash"

_VD = 64 | 16  # re.VERBOSE | re.DOTALL (the same values in ``regex``)
#: Arguments of adapted Data-Juicer ops that are regular expressions, with the
#: engine and flags Data-Juicer 1.6.1 compiles each with (read from its source:
#: its cleaners use the ``regex`` package, its LLM-output parsers Python's
#: ``re``) and the value's shape: "one" (a pattern; None = the op's default),
#: "one_or_list" (a pattern or a list; ``r'...'`` wrappers stripped, as DJ
#: does), "list" (a list of patterns), "pairs" (a list of [pattern, repl]).
#: Data-Juicer compiles most of these only when the first sample arrives (and
#: pii_redaction_mapper silently skips an extra pattern that fails, which
#: would leave that PII in the export), so they are checked at validation.
#: Format templates (``*_pattern_template``) are filled before compiling and
#: are not checked here.
ADAPTED_PATTERN_ARGS: dict[str, dict[str, tuple[str, int, str]]] = {
    **{
        op: {"output_pattern": ("re", 0, "one")}
        for op in ("calibrate_qa_mapper", "calibrate_query_mapper", "calibrate_response_mapper")
    },
    **{
        op: {"analysis_pattern": ("re", 0, "one"), "labels_pattern": ("re", 0, "one")}
        for op in (
            "dialog_intent_detection_mapper",
            "dialog_sentiment_detection_mapper",
            "dialog_topic_detection_mapper",
        )
    },
    "dialog_sentiment_intensity_mapper": {"analysis_pattern": ("re", 0, "one"), "intensity_pattern": ("re", 0, "one")},
    "extract_entity_attribute_mapper": {"demo_pattern": ("re", _VD, "one")},
    "extract_entity_relation_mapper": {"entity_pattern": ("re", _VD, "one"), "relation_pattern": ("re", _VD, "one")},
    **{
        op: {"output_pattern": ("re", _VD, "one")}
        for op in ("extract_event_mapper", "extract_keyword_mapper", "extract_nickname_mapper")
    },
    **{
        op: {"output_pattern": ("re", 16, "one")}
        for op in (
            "generate_qa_from_examples_mapper",
            "generate_qa_from_text_mapper",
            "optimize_prompt_mapper",
            "optimize_qa_mapper",
            "optimize_query_mapper",
            "optimize_response_mapper",
            "pair_preference_mapper",
        )
    },
    "pii_redaction_mapper": {"extra_patterns": ("re", 0, "pairs")},
    "replace_content_mapper": {"pattern": ("regex", 16, "one_or_list")},
    "text_chunk_mapper": {"split_pattern": ("re", 0, "one")},
    "tool_success_tagger_mapper": {"success_patterns": ("re", 0, "list"), "error_patterns": ("re", 0, "list")},
}


def check_pattern_args(name: str, args: dict[str, Any]) -> None:
    """Compile an adapted op's pattern arguments as Data-Juicer will, before any work.

    Raises OpArgumentError naming the argument (and the list item), the
    pattern and the error position."""
    for arg, (engine, flags, shape) in ADAPTED_PATTERN_ARGS.get(name, {}).items():
        value = args.get(arg)
        if value is None:
            continue
        if shape == "one" or (shape == "one_or_list" and isinstance(value, str)):
            items = [(arg, value)]
        elif shape in ("list", "one_or_list"):
            if not isinstance(value, (list, tuple)):
                raise OpArgumentError(arg, f"{name}: {arg} must be a list of patterns, got {value!r}")
            items = [(f"{arg}[{i}]", v) for i, v in enumerate(value)]
        else:  # pairs
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(v, (list, tuple)) and len(v) == 2 for v in value
            ):
                raise OpArgumentError(
                    arg, f"{name}: {arg} must be a list of [pattern, replacement] pairs, got {value!r}"
                )
            items = [(f"{arg}[{i}]", v[0]) for i, v in enumerate(value)]
        for label, pattern in items:
            if shape == "one_or_list" and isinstance(pattern, str):
                pattern = strip_raw_prefix(pattern)
            try:
                compile_user_pattern(pattern, op=name, arg=label, flags=flags, engine=engine)
            except OpArgumentError as exc:
                raise OpArgumentError(arg, str(exc)) from None


_KINDS = {"mapper": Mapper, "filter": Filter, "deduplicator": Deduplicator}
_classes: dict[str, type[Op]] = {}


def dj_available() -> bool:
    """True when ``data_juicer`` can be imported here.  Never imports it."""
    try:
        return importlib.util.find_spec("data_juicer") is not None
    except (ImportError, ValueError):  # a broken half-installed package counts as absent
        return False


def refusal(name: str) -> str | None:
    """Why a Data-Juicer op cannot run in this engine, or None when it can."""
    kind = catalog.OPS[name][0]
    if name.startswith("ray_"):
        return (
            "it is a Ray-mode op that keeps its own cross-worker state (a shared hash set or "
            "union-find), which would not survive a retried or resumed partition; use the native "
            "document_deduplicator / document_minhash_deduplicator instead"
        )
    if kind not in _KINDS:
        return (
            f"it is a {kind}, which reshapes the whole dataset at once; the engine runs Data-Juicer "
            f"mappers, filters and exact-hash deduplicators only"
        )
    if kind == "deduplicator" and name not in EXACT_HASH_DEDUPS:
        return (
            "only exact-hash deduplicators (keep the first sample of each hash) map onto the engine's "
            "global phase; this one clusters or rewrites samples in a way that has no sound per-row key "
            "(native near-duplicate ops: document_minhash_deduplicator, document_simhash_deduplicator)"
        )
    return None


def unknown_op_message(name: str, native: Any) -> str:
    """The error for an op name the native registry does not know."""
    entry = catalog.OPS.get(name)
    if entry is not None:
        why = refusal(name)
        if why:
            return f"op {name!r} is a Data-Juicer {entry[0]} that this engine cannot run: {why}."
        return (
            f"op {name!r} is a Data-Juicer op not implemented natively; {INSTALL_HINT}. "
            f"It then runs through the Data-Juicer adapter (docs/dj_adapter.md)."
        )
    names = set(native) | set(catalog.OPS)
    return f"unknown op {name!r}.{suggest(name, names)}"


def adapted_op_class(name: str) -> type[Op] | None:
    """The adapter class for a Data-Juicer op, or None (not in the catalog, refused, or DJ absent)."""
    if name not in catalog.OPS or refusal(name) or not dj_available():
        return None
    return adapter_class(name)


def adapter_class(name: str) -> type[Op]:
    """Build (once) the adapter class of a catalogued op, without checking availability."""
    cls = _classes.get(name)
    if cls is None:
        kind = catalog.OPS[name][0]
        mixin = {"mapper": DJMapper, "filter": DJFilter, "deduplicator": DJDeduplicator}[kind]
        cls = type(f"DJ[{name}]", (mixin,), {"name": name, "__module__": __name__})
        _classes[name] = cls
    return cls


def create_adapted_op(name: str, args: dict, text_key: str) -> Op:
    """Rebuilds an adapter op (used for pickling: the classes are made at run time)."""
    return adapter_class(name)(text_key=text_key, **args)


def _simple_type_ok(value: Any, tag: str | None) -> bool:
    # Data-Juicer's preflight leniency: None is always allowed; an int
    # argument takes an integral float; a float argument takes an int.
    if tag is None or value is None:
        return True
    if tag == "bool":
        return isinstance(value, bool)
    if tag == "str":
        return isinstance(value, str)
    if isinstance(value, bool):
        return False
    if tag == "int":
        return isinstance(value, int) or (isinstance(value, float) and value == int(value))
    return isinstance(value, (int, float))


#: Data-Juicer's arguments that name a file or folder, by its naming habit (``model_path``, ``save_dir``,
#: ``score_file``, ``model_dir_ASR``, its base ``work_dir``), less the ones that name a field or a JSON path.
_DJ_PATH_ARG = re.compile(r"(?:_path|_paths|_dir|_file|_files)$|^model_dir_")
_DJ_NOT_PATH_ARGS = frozenset({"response_path", "tag_field_name_human_track_path"})


class _DJAdapted(Op):
    """Shared part of the three adapter kinds: arguments, lazy DJ op, pickling."""

    name: ClassVar[str] = ""

    def __init__(self, *, text_key: str = "text", **args: Any) -> None:
        super().__init__(text_key=text_key)
        self.dj_args = dict(args)
        self._dj_op = None

    @classmethod
    def catalog_params(cls) -> dict[str, str | None]:
        kind, _b, _t, _n, _a, own = catalog.OPS[cls.name]
        return {**catalog.BASE_PARAMS[kind], **own}

    @classmethod
    def path_arg_names(cls) -> tuple[str, ...]:
        """Data-Juicer declares no path arguments: they are known by name (``_DJ_PATH_ARG``)."""
        return tuple(k for k in cls.catalog_params() if _DJ_PATH_ARG.search(k) and k not in _DJ_NOT_PATH_ARGS)

    @classmethod
    def own_args(cls):  # for tools that list an op's arguments
        return {k: None for k in catalog.OPS[cls.name][5]}

    @classmethod
    def validate_args(cls, args: dict[str, Any]) -> None:
        params = cls.catalog_params()
        for key, value in args.items():
            if key not in params and key not in COMMON_OP_ARGS:
                hint = suggest(key, params)
                own = ", ".join(sorted(catalog.OPS[cls.name][5])) or "(none)"
                raise OpArgumentError(
                    key, f"Data-Juicer op {cls.name} has no argument {key!r}.{hint} Its own arguments: {own}"
                )
            tag = params.get(key)
            if not _simple_type_ok(value, tag):
                raise OpArgumentError(
                    key,
                    f"argument {key!r} of Data-Juicer op {cls.name} must be {tag}, "
                    f"got {value!r} ({type(value).__name__})",
                )
        check_pattern_args(cls.name, args)

    @property
    def dj_op(self):
        """The Data-Juicer op instance, built (and Data-Juicer imported) on first use."""
        if self._dj_op is None:
            from airflow_provider_dj.ops.dj_compat import batches as dj_batches

            self._dj_op = dj_batches.build_dj_op(self.name, self.dj_args, self.text_key)
        return self._dj_op

    def __reduce__(self):
        return create_adapted_op, (self.name, self.dj_args, self.text_key)


class DJMapper(_DJAdapted, Mapper):
    def process_table(self, table: pa.Table) -> pa.Table:
        from airflow_provider_dj.ops.dj_compat import batches as dj_batches

        return dj_batches.run_mapper(self.dj_op, self.name, table, tagging=catalog.OPS[self.name][2])


class DJFilter(_DJAdapted, Filter):
    def compute_stats(self, table: pa.Table) -> pa.Table:
        from airflow_provider_dj.ops.dj_compat import batches as dj_batches

        return dj_batches.compute_stats(self.dj_op, self.name, table, non_stats=catalog.OPS[self.name][3])

    def keep_mask(self, table: pa.Table) -> pa.Array:
        from airflow_provider_dj.ops.dj_compat import batches as dj_batches

        return dj_batches.keep_flags(self.dj_op, self.name, table)


KEY_FIELD, KEEP_ALWAYS_FIELD = "key", "keep_always"


class DJDeduplicator(_DJAdapted, SignatureDeduplicator):
    """Per partition: Data-Juicer's hash -> 16-byte key (+ a keep-always flag for
    samples Data-Juicer never treats as duplicates).  Global phase: first row of
    each key in input order, exactly Data-Juicer's single-process loop."""

    def compute_hash(self, table: pa.Table) -> pa.Table:
        from airflow_provider_dj.ops.dj_compat import batches as dj_batches

        field, empty_keeps = EXACT_HASH_DEDUPS[self.name]
        fields = [field]
        if field != TEXT_HASH_FIELD and getattr(self.dj_op, "consider_text", False):
            fields.append(TEXT_HASH_FIELD)
        return dj_batches.dedup_keys(self.dj_op, self.name, table, fields, empty_keeps)

    @staticmethod
    def _concat(tables: list[pa.Table]) -> tuple[pa.Array, np.ndarray]:
        if not tables:
            return pa.array([], pa.binary(16)), np.zeros(0, dtype=bool)
        keys = pa.chunked_array([t.column(KEY_FIELD).combine_chunks() for t in tables], pa.binary(16)).combine_chunks()
        keep = np.concatenate([t.column(KEEP_ALWAYS_FIELD).to_numpy(zero_copy_only=False) for t in tables]).astype(bool)
        return keys, keep

    def resolve_global(self, tables: list[pa.Table]) -> np.ndarray:
        from airflow_provider_dj.ops.kernels.keys import first_occurrence_mask

        keys, keep_always = self._concat(tables)
        mask = np.ones(len(keys), dtype=bool)
        keyed = np.flatnonzero(~keep_always)
        if len(keyed):
            mask[keyed] = first_occurrence_mask(keys.take(pa.array(keyed)))
        return mask

    def keep_and_representatives(self, tables: list[pa.Table]) -> tuple[np.ndarray, np.ndarray]:
        rep = self.duplicate_representatives(tables)
        return rep == np.arange(len(rep)), rep  # resolve_global's flags: the first row of each key, keep-always rows

    def duplicate_representatives(self, tables: list[pa.Table]) -> np.ndarray:
        """For the tracer: the row each row duplicates (itself when kept)."""
        keys, keep_always = self._concat(tables)
        first: dict[bytes, int] = {}
        rep = np.arange(len(keys))
        for i, k in enumerate(keys.to_pylist()):
            if not keep_always[i]:
                rep[i] = first.setdefault(k, i)
        return rep


def is_adapted(cls: type) -> bool:
    """True for an op class that runs a Data-Juicer op through this adapter."""
    return isinstance(cls, type) and issubclass(cls, _DJAdapted)
