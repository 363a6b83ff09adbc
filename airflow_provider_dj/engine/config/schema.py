"""The recipe data model: ``RecipeError`` and the frozen dataclasses a validated recipe is made of.

Import from ``airflow_provider_dj.engine.config.recipe``, which re-exports all of it;
the split only keeps the validating parser (recipe.py) short.  Each field is a key's one declaration
(``key``): its default, which the parsers read through ``default_of``, and how ``to_dict``/``from_dict``
(derived, ``Serialized``) write and read it; a new key is a field here plus its parsing.  The key tables (which keys exist,
enums, defaults) live in ``recipe_keys.py``; they are re-exported here, so ``schema.X`` still works.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, NamedTuple, Self

from airflow_provider_dj.core.errors import RefusedError

# The key tables, re-exported: recipe.py, section_parsers.py, gen_docs and the tests read them as schema.X.
from airflow_provider_dj.engine.config.recipe_keys import *  # noqa: F403
from airflow_provider_dj.engine.config.recipe_keys import (
    DEFAULT_DEDUP_HISTORY_MEMORY_MB,
    DEFAULT_MEDIA_KEYS,
    DEFAULT_NP,
    DEFAULT_REVIEW_SAMPLE_ROWS,
    DEFAULT_SKIP_OP_ERROR,
    DEFAULT_TEXT_KEYS,
    EXECUTOR_TYPE,
)


class RecipeError(RefusedError, ValueError):
    """A recipe (or an override of it) is invalid.

    ``file`` is the recipe file (None when parsing a dict), ``key`` the dotted
    key path of the offending value (``process[2].words_num_filter.min_num``),
    ``message`` what is wrong and what to change.  ``str(e)`` joins the parts
    that are present with ``": "`` so the UI and the CLI show one line that
    points at the exact spot.
    """

    def __init__(self, file: str | None, key: str | None, message: str) -> None:
        self.file = file
        self.key = key
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        return ": ".join(p for p in (self.file, self.key, self.message) if p is not None)

    def __str__(self) -> str:
        return self._render()

    def __reduce__(self):  # errors cross process boundaries (Ray, Airflow task runner)
        return (type(self), (self.file, self.key, self.message))

    def with_file(self, file: str | None) -> RecipeError:
        """A copy naming ``file`` (used when an override error surfaces while loading a file)."""
        return RecipeError(file if self.file is None else self.file, self.key, self.message)


# --------------------------------------------------------------------------
# One declaration per key
# --------------------------------------------------------------------------
class Codec(NamedTuple):
    """How a field's value becomes plain JSON (``dump``) and back (``load``)."""

    dump: Callable[[Any], Any]
    load: Callable[[Any], Any]


#: Scalars, None, and mappings copied so the model and its JSON never share a dict.
PLAIN = Codec(copy.deepcopy, copy.deepcopy)
#: ``tuple[str, ...]`` in the model, a list in JSON.
STRS = Codec(list, tuple)
#: ``to_dict`` writes the field only when its value is not the declared default.
NON_DEFAULT = "non-default"


def key(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | Any = MISSING,
    codec: Codec = PLAIN,
    written: Callable[[Any], bool] | str | None = None,
) -> Any:
    """A recipe key's one declaration: its default (what the parser fills in when the recipe omits the key,
    and what ``from_dict`` reads when a serialized recipe lacks it), its ``codec``, and ``written``: when
    ``to_dict`` writes it (None: always; ``NON_DEFAULT``; or a predicate on the value).

    Keys written only when not the default are those added after jobs existed: the effective config of
    a job started before them must compare equal on resume (engine/job/resume.py refuses a changed key)."""
    return field(default=default, default_factory=factory, metadata={"codec": codec, "written": written})


def default_of(cls: type, name: str) -> Any:
    """The default declared for ``cls``'s field ``name`` (a fresh value for a factory); the parsers read
    every default from here, so each is spelled once."""
    f = next((f for f in fields(cls) if f.name == name), None)
    if f is None:
        raise AttributeError(f"{cls.__name__} has no field {name!r}")
    if f.default is MISSING and f.default_factory is MISSING:
        raise AttributeError(f"{cls.__name__}.{name} has no default: the recipe must give it")
    return _default(f)


def _written(f: Field, value: Any) -> bool:
    rule = f.metadata.get("written")
    if rule is None:
        return True
    if rule == NON_DEFAULT:
        return value != _default(f)
    return rule(value)


def _default(f: Field) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


class Serialized:
    """``to_dict``/``from_dict`` derived from the fields' declarations (``key``), in field order."""

    def to_dict(self) -> dict:
        """Plain JSON types, in field order; a field is left out where its ``written`` rule says so."""
        out = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if _written(f, value):
                out[f.name] = f.metadata.get("codec", PLAIN).dump(value)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        """Inverse of ``to_dict``; a key that is absent reads as its declared default (KeyError without one)."""
        kwargs = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name in d:
                kwargs[f.name] = f.metadata.get("codec", PLAIN).load(d[f.name])
            elif f.default is MISSING and f.default_factory is MISSING:
                raise KeyError(f.name)
        return cls(**kwargs)


def section(cls: type[Serialized], *, optional: bool = False) -> Codec:
    """A section (its own config class) in the model, a mapping in JSON; ``optional``: None when absent."""
    if optional:
        return Codec(lambda v: None if v is None else v.to_dict(), lambda v: cls.from_dict(v) if v else None)
    return Codec(lambda v: v.to_dict(), cls.from_dict)


# --------------------------------------------------------------------------
# The typed model
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    """One ``process`` entry; ``index`` is its position, which names it in errors and checkpoints."""

    index: int
    name: str
    args: dict  # as written in the recipe (may be {})


#: ``process``: a list of ``{op name: args}`` in JSON.
PROCESS = Codec(
    lambda ops: [{op.name: copy.deepcopy(op.args)} for op in ops],
    lambda items: tuple(
        OpSpec(i, name, dict(args or {})) for i, item in enumerate(items) for name, args in item.items()
    ),
)


@dataclass(frozen=True)
class PartitionConfig(Serialized):
    """How the input is split.  ``extra`` keeps Data-Juicer's GPU-planning keys for the GPU preflight.

    In JSON ``extra``'s keys sit beside the others, as in the recipe."""

    mode: str = "auto"
    num_of_partitions: int | None = None  # None = let the planner decide
    size: int | None = None
    target_size_mb: int = 256
    max_size_mb: int | None = None
    max_concurrent_partitions: int | None = None  # None = auto
    extra: dict = field(default_factory=dict)  # Data-Juicer GPU-planning keys, defaults filled

    def to_dict(self) -> dict:
        out = super().to_dict()
        extra = out.pop("extra")
        return {**out, **extra}

    @classmethod
    def from_dict(cls, d: dict) -> PartitionConfig:
        rest = copy.deepcopy(dict(d))
        own = {f.name: rest.pop(f.name) for f in fields(cls) if f.name != "extra" and f.name in rest}
        return cls(**own, extra=rest)


@dataclass(frozen=True)
class CheckpointConfig(Serialized):
    """When op outputs are persisted.  ``enabled=False`` is always normalized to ``strategy="disabled"``."""

    enabled: bool = True
    strategy: str = "every_n_ops"
    n_ops: int = 5
    op_names: tuple[str, ...] = key((), codec=STRS)


@dataclass(frozen=True)
class IntermediateStorageConfig(Serialized):
    """Format of checkpointed partitions; the format/compression pair is checked at load time."""

    format: str = "parquet"
    compression: str = "snappy"
    preserve_intermediate_data: bool = False
    retention_policy: str = "keep_all"
    #: Reuse the committed checkpoints of earlier jobs in the same work_dir whose partition content
    #: and op chain match (engine/storage/reuse_index.py, docs/nightly.md "Reuse across nights").
    reuse_across_jobs: bool = False


@dataclass(frozen=True)
class TracerConfig(Serialized):
    """Data-Juicer's tracer keys (top-level in a recipe), grouped."""

    open_tracer: bool = False
    op_list_to_trace: tuple[str, ...] = key((), codec=STRS)
    trace_num: int = 10
    trace_keys: tuple[str, ...] = key((), codec=STRS)


@dataclass(frozen=True)
class DedupHistoryConfig(Serialized):
    """``dedup_history:``: the listed deduplicators also remove rows exported by earlier jobs of the corpus
    whose history index lives at ``path`` (engine/history/)."""

    path: str
    ops: tuple[str, ...] = key(codec=STRS)
    memory_mb: int = DEFAULT_DEDUP_HISTORY_MEMORY_MB


@dataclass(frozen=True)
class ReviewConfig(Serialized):
    """``review:``: bounds on what one job may remove before its export waits for a person
    (engine/job/review.py, docs/review_gate.md).

    ``max_removed_fraction``: an op removing more than this fraction of its input rows crosses it.
    ``max_removed_change``: an op whose removed fraction differs from the previous successful job's
    (same recipe, same work dir) by more than this, in fraction points, crosses it.  ``timeout_s``:
    how long the review waits (None: until answered); ``on_timeout``: the answer a timeout gives.
    ``sample_rows``: removed rows shown per crossed op."""

    max_removed_fraction: float | None = None
    max_removed_change: float | None = None
    timeout_s: float | None = None
    on_timeout: str = "reject"
    sample_rows: int = DEFAULT_REVIEW_SAMPLE_ROWS


@dataclass(frozen=True, kw_only=True)
class Recipe(Serialized):
    """A validated recipe: paths absolute (or URLs), defaults filled, overrides applied.

    Only ``parse_recipe``/``load_recipe`` (validating) and ``recipe_from_dict``
    (trusted JSON) should build one.  Each field is one key's declaration (``key``): its default,
    how the effective config (``to_dict``, in field order) writes it and ``from_dict`` reads it back.
    """

    source_file: str | None = None
    project_name: str
    dataset_path: str
    export_path: str
    work_dir: str
    text_keys: tuple[str, ...] = key(DEFAULT_TEXT_KEYS, codec=STRS)
    np: int = DEFAULT_NP
    executor_type: str = EXECUTOR_TYPE
    process: tuple[OpSpec, ...] = key(codec=PROCESS)
    partition: PartitionConfig = key(factory=PartitionConfig, codec=section(PartitionConfig))
    checkpoint: CheckpointConfig = key(factory=CheckpointConfig, codec=section(CheckpointConfig))
    intermediate_storage: IntermediateStorageConfig = key(
        factory=IntermediateStorageConfig, codec=section(IntermediateStorageConfig)
    )
    tracer: TracerConfig = key(factory=TracerConfig, codec=section(TracerConfig))
    skip_op_error: bool = DEFAULT_SKIP_OP_ERROR
    keep_stats_in_res_ds: bool = False
    job_id: str | None = None
    resume: str | None = None
    schedule: str | None = None
    ignored_keys: tuple[str, ...] = key((), codec=STRS)
    #: Failure-rate guard limit for every op (None: the default, engine/execution/failure_guard.py).
    max_failed_ratio: float | None = None
    #: Data-Juicer's export keys (engine/output/fields.py).
    keep_hashes_in_res_ds: bool = key(False, written=NON_DEFAULT)
    export_in_parallel: bool = key(True, written=NON_DEFAULT)
    export_shard_size: int = key(0, written=NON_DEFAULT)
    #: ``file`` or ``partition_shards`` (engine/config/export_keys.py).
    export_layout: str = key("file", written=NON_DEFAULT)
    #: Deduplication against history (None: off).
    dedup_history: DedupHistoryConfig | None = key(
        None, codec=section(DedupHistoryConfig, optional=True), written=NON_DEFAULT
    )
    #: The review gate before export (None: no gate).
    review: ReviewConfig | None = key(None, codec=section(ReviewConfig, optional=True), written=NON_DEFAULT)
    #: Data-Juicer's image_key, audio_key and video_key: the fields whose files are part of the job
    #: (engine/input/media.py) and from which auto partitioning detects the modality.
    image_key: str = key(DEFAULT_MEDIA_KEYS["image_key"], written=NON_DEFAULT)
    audio_key: str = key(DEFAULT_MEDIA_KEYS["audio_key"], written=NON_DEFAULT)
    video_key: str = key(DEFAULT_MEDIA_KEYS["video_key"], written=NON_DEFAULT)
    #: Templated values (engine/config/templates.py): {"logical_date", "run_id", "values": {key path:
    #: {"template", "rendered"}}}; empty when the recipe has none.  "rendered" is absent at parse time.
    templates: dict = key(factory=dict, written=lambda t: bool(t.get("values")))

    @property
    def media_keys(self) -> dict[str, str]:
        """{"image": image_key, "audio": audio_key, "video": video_key} (engine/input/media.py's MediaKeys)."""
        return {"image": self.image_key, "audio": self.audio_key, "video": self.video_key}

    @property
    def text_key(self) -> str:
        """The field ops read; Data-Juicer also uses only the first of text_keys."""
        return self.text_keys[0]


def recipe_from_dict(d: dict) -> Recipe:
    """Rebuild a Recipe from ``Recipe.to_dict()`` output (no re-validation, no path resolution).

    Used where an already-validated config travels as JSON (XCom, task args)."""
    try:
        return Recipe.from_dict(d)
    except (KeyError, TypeError) as exc:
        raise RecipeError(
            d.get("source_file") if isinstance(d, dict) else None,
            None,
            f"not a serialized recipe (from Recipe.to_dict): {exc!r}",
        ) from None
