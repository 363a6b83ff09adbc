"""Typed, validated recipe model: Data-Juicer-style YAML in, frozen dataclasses out.

Why validate everything up front: a recipe is turned into a DAG at parse time
and then runs for hours on a cluster.  A typo in an op argument, an enum, or a
path suffix must fail when the DAG is parsed (or when the CLI loads the
file), with the file, the dotted key path, the bad value and what to write
instead, never as a stack trace in task 37.

This module is Airflow-free and never touches the data: parsing a recipe must
not list buckets or stat files (the scheduler parses DAGs constantly).  The
one function that looks at the input, ``check_input_exists``, is called by
tasks, not by the parser.
"""

from __future__ import annotations

import copy
import glob as globmod
import os
import posixpath
import re
from typing import Any

import yaml

from airflow_provider_dj.engine.config import schema as S
from airflow_provider_dj.engine.config import templates as T
from airflow_provider_dj.engine.config import trigger_templates as TT
from airflow_provider_dj.engine.config.overrides import deep_merge, normalize_overrides
from airflow_provider_dj.engine.config.path_confinement import AllowedRoots, PathOutsideRootsError, allowed_roots
from airflow_provider_dj.engine.config.schema import (
    CheckpointConfig,
    IntermediateStorageConfig,
    OpSpec,
    PartitionConfig,
    Recipe,
    RecipeError,
    TracerConfig,
    recipe_from_dict,
)
from airflow_provider_dj.engine.config.section_parsers import SectionParser, get_or_default
from airflow_provider_dj.ops.base import COMMON_OP_ARGS, OpArgumentError, suggest, type_ok
from airflow_provider_dj.ops.registry import UnknownOpError, get_op_class, op_names

__all__ = [
    "CheckpointConfig",
    "IntermediateStorageConfig",
    "OpSpec",
    "PartitionConfig",
    "PathOutsideRootsError",
    "Recipe",
    "RecipeError",
    "TracerConfig",
    "check_input_exists",
    "load_recipe",
    "parse_recipe",
    "recipe_from_dict",
    "sanitize_dag_id",
]


def sanitize_dag_id(project_name: str) -> str:
    """Airflow dag ids allow letters, digits, ``_``, ``-`` and ``.``; everything else becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", project_name)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------
class _RecipeYamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads exponent numbers without a dot (``2e5``, ``1e-3``).

    YAML 1.1 (PyYAML) reads ``max_len: 2e5`` as the *string* '2e5'; Data-Juicer's
    config parser (jsonargparse) reads it as the number, and its shipped recipes
    use it (pile-philpaper-refine: ``max_len: 5e5``).  A whole value (``5e5``)
    becomes an int so that it passes as an op's int argument; others stay float.
    """


_EXP_NUMBER = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")


def _construct_exp_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float:
    text = loader.construct_scalar(node)
    value = float(text)
    return int(value) if "." not in text and value.is_integer() else value


_RecipeYamlLoader.add_implicit_resolver("tag:dj-airflow:exp-number", _EXP_NUMBER, list("-+0123456789."))
_RecipeYamlLoader.add_constructor("tag:dj-airflow:exp-number", _construct_exp_number)


def load_recipe(
    path: str | os.PathLike,
    overrides: dict | None = None,
    *,
    override_source: str = "dag_run.conf",
    renderer: T.TemplateRenderer | None = None,
    confine_paths: bool = True,
) -> Recipe:
    """Read a recipe file (``yaml.safe_load``) and validate it; every error names the file.

    Without ``renderer`` (DAG parsing) templated values are kept as written; with it (the tasks,
    ``dj-airflow``) they are rendered first and the rendered recipe is validated in full.
    ``confine_paths``: see ``parse_recipe``."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_RecipeYamlLoader)
    except FileNotFoundError:
        raise RecipeError(path, None, "recipe file not found") from None
    except yaml.YAMLError as exc:
        raise RecipeError(path, None, f"invalid YAML: {exc}") from None
    return parse_recipe(
        data,
        source_file=path,
        base_dir=os.path.dirname(path),
        overrides=overrides,
        override_source=override_source,
        renderer=renderer,
        confine_paths=confine_paths,
    )


def parse_recipe(
    data: dict,
    *,
    source_file: str | None = None,
    base_dir: str | None = None,
    overrides: dict | None = None,
    override_source: str = "dag_run.conf",
    renderer: T.TemplateRenderer | None = None,
    confine_paths: bool = True,
) -> Recipe:
    """Validate recipe data (overrides merged in first) and build a Recipe.

    Templated values (engine/config/templates.py) are refused outside the templatable keys, kept
    as written without ``renderer``, and rendered with it before validation.

    ``confine_paths``: refuse, with ``PathOutsideRootsError``, a path outside the deployment's
    ``allowed_roots`` (engine/config/path_confinement.py; nothing when the setting is unset).  Every
    loader of a run's recipe confines; only the DAG's parse opts out, because resolving a path
    touches the file system and the parse must not (the validate task confines the same recipe).
    An op's path arguments are confined before the op checks them (a check may read the file).

    ``base_dir`` anchors relative paths; it defaults to the file's directory,
    else the current directory."""
    if data is None:
        raise RecipeError(source_file, None, "recipe is empty; it needs at least dataset_path, export_path and process")
    if not isinstance(data, dict):
        raise RecipeError(source_file, None, f"a recipe must be a mapping of keys, got {type(data).__name__}")
    try:
        norm = normalize_overrides(overrides, source=override_source)
    except RecipeError as exc:
        raise exc.with_file(source_file) from None
    if base_dir is None:
        base_dir = os.path.dirname(source_file) if source_file else os.getcwd()
    merged = deep_merge(data, norm)
    found = T.find_templates(merged)
    T.refuse_untemplatable(found, source_file, COMMON_OP_ARGS)
    from_trigger = frozenset(T.find_templates(norm))
    for key in from_trigger:
        TT.check_trigger_template(found[key], key=key, source=override_source, file=source_file)
    parser = _Parser(source_file, base_dir, _leaves(norm), override_source)
    parser.roots = allowed_roots() if confine_paths else None
    if not found:
        return parser.parse(merged)
    if renderer is None:
        parser.templated = found
        return parser.parse(merged, templates=T.parse_time_record(found))

    def render_trigger(key: str, template: str) -> str:
        note = renderer.context_note if not renderer.date_values else ""
        return TT.render_trigger_template(
            template, renderer.date_values, key=key, source=override_source, file=source_file, note=note
        )

    rendered, record = T.render_recipe_data(
        merged,
        found,
        renderer,
        file=source_file,
        wants_str=_wants_str,
        render_trigger=render_trigger,
        trigger_paths=from_trigger,
    )
    parser.rendered = found
    return parser.parse(rendered, templates=record)


def _wants_str(path: str) -> bool:
    """Whether a templated key takes its rendered text as is: paths, nested items, string op arguments
    (the op's own type check, ``ops.base.type_ok``, says whether a string is one of its values)."""
    op = T.op_arg_of(path)
    if op is None or path != f"process[{op[0]}].{op[1]}.{op[2]}":
        return True  # a path, or an item nested in an argument's list or mapping
    try:
        expected = get_op_class(op[1]).arg_types().get(op[2], Any)
    except UnknownOpError:
        return True  # the parser reports the op
    return type_ok("text", expected)


def _leaves(nested: dict, prefix: str = "") -> frozenset[str]:
    out: set[str] = set()
    for k, v in nested.items():
        path = f"{prefix}.{k}" if prefix else k
        out |= _leaves(v, path) if isinstance(v, dict) and path in S.SECTIONS else {path}
    return frozenset(out)


def _is_number(text: str) -> bool:
    return re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text) is not None


class _Parser(SectionParser):
    """The whole recipe: top-level keys, ops, paths (sections and value checks: section_parsers.py)."""

    #: The deployment's allowed roots when this parse confines paths (None: it does not).
    roots: AllowedRoots | None = None

    # -- whole recipe -----------------------------------------------------
    def parse(self, data: dict, templates: dict | None = None) -> Recipe:
        allowed = set(S.OWN_TOP_LEVEL_KEYS) | S.DJ_IGNORED_KEYS
        for k in data:
            if k not in allowed:
                raise self.err(
                    str(k),
                    f"unknown recipe key {k!r}.{suggest(str(k), allowed)} Keys this provider "
                    f"uses: {', '.join(sorted(set(S.OWN_TOP_LEVEL_KEYS) - {'partition_size'}))}",
                )
        executor = get_or_default(data, "executor_type", S.EXECUTOR_TYPE)
        if executor != S.EXECUTOR_TYPE:
            raise self.err(
                "executor_type",
                f"got {executor!r}, but this provider runs recipes only with the "
                f"partitioned, checkpointed executor; set executor_type: {S.EXECUTOR_TYPE} "
                f"(or remove the key)",
            )
        process = self.process(get_or_default(data, "process"))
        names = [op.name for op in process]
        dataset_path = self.dataset_path(get_or_default(data, "dataset_path"))
        export_path = self.export_path(get_or_default(data, "export_path"), dataset_path)
        work_dir = get_or_default(data, "work_dir")
        if work_dir is None:
            work_dir = posixpath.dirname(export_path) if "://" in export_path else os.path.dirname(export_path)
        else:
            work_dir = self.path(self.str_(work_dir, "work_dir"), "work_dir")
        for key, url in (("dataset_path", dataset_path), ("export_path", export_path), ("work_dir", work_dir)):
            self.url_driver(key, url)
        text_keys = self.str_list(get_or_default(data, "text_keys", S.default_of(Recipe, "text_keys")), "text_keys")
        if not text_keys:
            raise self.err("text_keys", "must name at least one field, e.g. text_keys: text")
        job_id = self.safe_id(get_or_default(data, "job_id"), "job_id")
        resume = self.safe_id(get_or_default(data, "resume"), "resume")
        if job_id and resume and job_id != resume:
            raise self.err(
                "resume",
                f"resume {resume!r} and job_id {job_id!r} differ; resuming continues that job, "
                f"so set only resume (or make both the same id)",
                "job_id",
            )
        export_opts = self.export_options(data, export_path, process)
        project = get_or_default(data, "project_name")
        if project is None:
            project = os.path.splitext(os.path.basename(self.file))[0] if self.file else S.DEFAULT_PROJECT_NAME
        recipe = Recipe(
            source_file=self.file,
            project_name=self.str_(project, "project_name"),
            dataset_path=dataset_path,
            export_path=export_path,
            work_dir=work_dir,
            text_keys=text_keys,
            np=self.int_(get_or_default(data, "np", S.default_of(Recipe, "np")), "np"),
            process=process,
            executor_type=S.EXECUTOR_TYPE,
            partition=self.partition(data),
            checkpoint=self.checkpoint(self.section(data, "checkpoint"), names),
            intermediate_storage=self.storage(self.section(data, "intermediate_storage")),
            tracer=TracerConfig(
                open_tracer=self.bool_(
                    get_or_default(data, "open_tracer", S.default_of(TracerConfig, "open_tracer")), "open_tracer"
                ),
                op_list_to_trace=self.op_refs(get_or_default(data, "op_list_to_trace"), "op_list_to_trace", names),
                trace_num=self.int_(
                    get_or_default(data, "trace_num", S.default_of(TracerConfig, "trace_num")), "trace_num"
                ),
                trace_keys=self.str_list(get_or_default(data, "trace_keys"), "trace_keys"),
            ),
            skip_op_error=self.bool_(
                get_or_default(data, "skip_op_error", S.default_of(Recipe, "skip_op_error")), "skip_op_error"
            ),
            keep_stats_in_res_ds=self.bool_(
                get_or_default(data, "keep_stats_in_res_ds", S.default_of(Recipe, "keep_stats_in_res_ds")),
                "keep_stats_in_res_ds",
            ),
            job_id=job_id or resume,  # resuming a job means running under its id (as Data-Juicer does)
            resume=resume,
            schedule=self.schedule(get_or_default(data, "schedule")),
            ignored_keys=tuple(sorted(k for k in data if k in S.DJ_IGNORED_KEYS)),
            max_failed_ratio=self.ratio(get_or_default(data, "max_failed_ratio"), "max_failed_ratio"),
            keep_hashes_in_res_ds=export_opts.keep_hashes_in_res_ds,
            export_in_parallel=export_opts.export_in_parallel,
            export_shard_size=export_opts.export_shard_size,
            export_layout=export_opts.export_layout,
            dedup_history=self.dedup_history(self.section(data, "dedup_history"), process),
            review=self.review(self.section(data, "review")),
            templates=templates or {},
            **{k: self.media_key(get_or_default(data, k, S.default_of(Recipe, k)), k) for k in S.DEFAULT_MEDIA_KEYS},
        )
        self.confine_recipe_paths(recipe)
        return recipe

    def media_key(self, raw: Any, key: str) -> str:
        """Data-Juicer's image_key / audio_key / video_key: one field name (engine/input/media.py)."""
        value = self.str_(raw, key)
        if not value.strip():
            raise self.err(key, f"must name a field, e.g. {key}: {S.default_of(Recipe, key)}")
        return value

    def export_options(self, data: dict, export_path: str, process: tuple[OpSpec, ...]):
        """Data-Juicer's export keys: honoured as it honours them, or refused with the reason."""
        from airflow_provider_dj.engine.config.export_keys import check_export_keys

        dedups = [op.name for op in process if get_op_class(op.name).kind == "deduplicator"]
        return check_export_keys(data, export_path, dedups, err=self.err)

    def process(self, raw: Any) -> tuple[OpSpec, ...]:
        if raw is None or raw == []:
            raise self.err(
                "process",
                "the recipe needs a non-empty process list of ops, e.g. "
                "process: [whitespace_normalization_mapper, {words_num_filter: {min_num: 10}}]",
            )
        if not isinstance(raw, list):
            raise self.err("process", f"must be a list of ops (- op_name: {{args}}), got {raw!r}")
        specs = []
        for i, item in enumerate(raw):
            key = f"process[{i}]"
            if isinstance(item, str):
                name, args = item, {}
            elif isinstance(item, dict) and len(item) == 1:
                name, args = next(iter(item.items()))
            else:
                raise self.err(
                    key,
                    f"each process entry must be one op as '- op_name: {{args}}' (a single-key "
                    f"mapping) or '- op_name', got {item!r}",
                )
            if not isinstance(name, str):
                raise self.err(key, f"op name must be a string, got {name!r}")
            args = {} if args is None else args
            if not isinstance(args, dict) or not all(isinstance(a, str) for a in args):
                raise self.err(f"{key}.{name}", f"op arguments must be a mapping (arg: value), got {args!r}")
            try:
                cls = get_op_class(name)
            except UnknownOpError as exc:
                known = op_names()
                listing = f" Available ops: {', '.join(known)}" if len(known) <= 40 else ""
                raise self.err(key, f"{exc.message}{listing}") from None
            checkable = self.checkable_args(cls, key, name, args)
            self.confine_op_paths(cls, f"{key}.{name}", checkable)
            try:
                cls.validate_args(checkable)
            except OpArgumentError as exc:
                raise self.err(f"{key}.{name}.{exc.key}", str(exc)) from None
            specs.append(OpSpec(i, name, copy.deepcopy(args)))
        return tuple(specs)

    def checkable_args(self, cls, key: str, name: str, args: dict) -> dict:
        """The op's arguments that can be checked now: at parse time a templated one is checked for
        its name only (its type and range once rendered, by the validate task)."""
        kept = {a for a in args if f"{key}.{name}.{a}" in self.templated}
        for a in kept:
            if a not in cls.own_args():
                raise self.err(
                    f"{key}.{name}.{a}",
                    f"{name} has no argument {a!r}; its arguments: {', '.join(sorted(cls.own_args())) or '(none)'}",
                )
        return {a: v for a, v in args.items() if a not in kept}

    def op_refs(self, raw: Any, key: str, names: list[str]) -> tuple[str, ...]:
        refs = self.str_list(raw, key)
        for j, ref in enumerate(refs):
            if ref not in names:
                raise self.err(
                    f"{key}[{j}]",
                    f"{ref!r} is not an op in process.{suggest(ref, names)} "
                    f"Ops in process: {', '.join(dict.fromkeys(names))}",
                )
        return refs

    def schedule(self, raw: Any) -> str | None:
        value = self.str_(raw, "schedule", none=True)
        if value is None or value in S.SCHEDULE_PRESETS:
            return value
        if value.startswith("@"):
            raise self.err(
                "schedule",
                f"unknown preset {value!r}.{suggest(value, S.SCHEDULE_PRESETS)} "
                f"Presets: {', '.join(S.SCHEDULE_PRESETS)}",
            )
        try:
            from croniter import croniter
        except ImportError:  # pragma: no cover - airflow always ships croniter
            return value
        if not croniter.is_valid(value):
            raise self.err(
                "schedule",
                f"{value!r} is not a valid cron expression (minute hour day month weekday, "
                f"e.g. '0 3 * * *') or preset ({', '.join(S.SCHEDULE_PRESETS)})",
            )
        return value

    def safe_id(self, raw: Any, key: str) -> str | None:
        value = self.str_(raw, key, none=True)
        if value is not None and (not S.SAFE_ID_RE.match(value) or ".." in value):
            raise self.err(
                key,
                f"{value!r} is not a safe id: use 1-128 characters of letters, digits, '_', '-', '.', "
                f"not starting with '.' and without '..' or path separators (it names a directory)",
            )
        return value

    # -- paths ------------------------------------------------------------
    def confine(self, key: str, path: str) -> None:
        """Refuse ``path`` (the value of ``key``) when it lies outside the allowed roots.

        A value still holding a template (a parse without a renderer) is confined once rendered:
        the validate task parses the rendered recipe with the same check."""
        if self.roots is None or (self.templated and (key in self.templated or T.is_template(path))):
            return
        message = self.roots.refusal(path)
        if message:
            error = self.err(key, message)
            raise PathOutsideRootsError(error.file, error.key, error.message)

    def confine_recipe_paths(self, recipe: Recipe) -> None:
        """Every top-level path the run reads or writes: the input, the export, the job directories, the
        history index.  The files a directory or glob holds are confined when listed (engine/input/sources.py)."""
        for key, path in (
            ("dataset_path", recipe.dataset_path),
            ("export_path", recipe.export_path),
            ("work_dir", recipe.work_dir),
            ("dedup_history.path", recipe.dedup_history.path if recipe.dedup_history else None),
        ):
            if path is not None:
                self.confine(key, path)

    def confine_op_paths(self, cls, key: str, args: dict) -> None:
        """An op's path arguments (``Op.path_arg_names``), before the op's own checks may read them.

        A bare name (no folder separator) is not a path the recipe chooses: the op looks it up in the
        deployment's model folders (ops/dj_compat/model_files.py), so it is left to them."""
        if self.roots is None:
            return
        for arg in cls.path_arg_names():
            value = args.get(arg)
            values = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else []
            for item in values:
                if isinstance(item, str) and item and ("/" in item or item.startswith("~") or "://" in item):
                    self.confine(f"{key}.{arg}", item)

    def url_driver(self, key: str, value: str) -> None:
        """A URL's fsspec driver must be importable here, or the job would fail mid-run (docs/object_store.md)."""
        if "://" not in value:
            return
        protocol = value.split("://", 1)[0]
        if key in self.templated and T.is_template(protocol):
            return  # checked once rendered
        try:
            from fsspec.registry import get_filesystem_class

            get_filesystem_class(protocol)
        except ImportError as exc:
            hint = " (pip install 'airflow-provider-dj[s3]')" if protocol in ("s3", "s3a") else ""
            raise self.err(
                key, f"{value!r}: the {protocol}:// file system driver is not installed here{hint}: {exc}"
            ) from None
        except ValueError:
            raise self.err(
                key,
                f"{value!r}: unknown URL protocol {protocol!r}; use a local path or an fsspec "
                f"URL such as s3://bucket/prefix",
            ) from None

    def path(self, value: str, key: str | None = None) -> str:
        if "://" in value:
            return value
        if key in self.templated and value.startswith(("{{", "{%")):
            return value  # "{{ var.value.root }}/x": where it points is known once rendered
        value = os.path.expanduser(value)
        return os.path.normpath(os.path.join(self.base_dir, value))

    def dataset_path(self, raw: Any) -> str:
        if raw is None:
            raise self.err(
                "dataset_path",
                "is required: a .jsonl/.json/.parquet file (optionally .gz/.zst for "
                "JSON Lines), a directory, or a glob such as /data/*.jsonl",
            )
        value = self.str_(raw, "dataset_path")
        tokens = [] if "dataset_path" in self.templated else value.split()
        if len(tokens) > 1 and (
            any(_is_number(t) for t in tokens) or sum(t.lower().endswith(S.DATASET_SUFFIXES) for t in tokens) > 1
        ):
            raise self.err(
                "dataset_path",
                f"{value!r} looks like a Data-Juicer weighted mixture ('<weight> <path> "
                f"...'); mixtures are not supported. Put the files in one directory and point dataset_path "
                f"at it, or use a glob such as '/data/*.jsonl'",
            )
        name = value.rstrip("/").rsplit("/", 1)[-1].lower()
        ext = name.rsplit(".", 1)[-1] if "." in name else ""
        if not name.endswith(S.DATASET_SUFFIXES) and ext in S.UNSUPPORTED_DATA_EXTENSIONS:
            raise self.err(
                "dataset_path",
                f"{value!r}: unsupported file type .{ext}; use "
                f"{', '.join(S.DATASET_SUFFIXES)} files, a directory of them, or a glob",
            )
        return self.path(value, "dataset_path")

    def export_path(self, raw: Any, dataset_path: str) -> str:
        if raw is None:
            raise self.err("export_path", "is required: the result file, ending in .jsonl, .json or .parquet")
        value = self.str_(raw, "export_path")
        static = T.static_text(value) if "export_path" in self.templated else value
        if not value.lower().endswith(S.EXPORT_SUFFIXES) or any(c in static for c in S.GLOB_CHARS):
            raise self.err(
                "export_path",
                f"{value!r} must be one file path ending in .jsonl, .json (written as "
                f"JSON Lines) or .parquet, e.g. /data/out/result.jsonl",
            )
        resolved = self.path(value, "export_path")
        if resolved == dataset_path:
            raise self.err(
                "export_path", f"{value!r} is the input dataset_path; write the result elsewhere", "dataset_path"
            )
        return resolved


# --------------------------------------------------------------------------
# Run-time check (tasks call this; DAG parsing must not)
# --------------------------------------------------------------------------
def check_input_exists(recipe: Recipe) -> None:
    """Raise RecipeError if ``dataset_path`` matches no readable input file.

    Local paths: the file, any readable file under the directory, or any glob
    match.  URLs are checked through fsspec when it and the protocol's driver
    are importable; otherwise the check is skipped and the reader reports.
    """
    path = recipe.dataset_path
    missing = RecipeError(
        recipe.source_file,
        "dataset_path",
        f"{path!r} matches no input files; check the path, or give a directory or glob holding "
        f"{', '.join(S.DATASET_SUFFIXES)} files",
    )
    is_glob = any(c in path for c in S.GLOB_CHARS)
    if "://" in path:
        try:
            from airflow_provider_dj.core.fs import get_fs  # credentials/endpoint for s3:// URLs

            fs, inner = get_fs(path)
        except (ImportError, ValueError):  # no fsspec, or no driver for this protocol here
            return
        if not (fs.glob(inner) if is_glob else fs.exists(inner)):
            raise missing
        return
    if is_glob:
        candidates = (p for p in globmod.iglob(path, recursive=True) if os.path.isfile(p))
    elif os.path.isdir(path):
        candidates = (
            os.path.join(root, n)
            for root, _d, files in os.walk(path)
            for n in files
            if not n.startswith(".") and n.lower().endswith(S.DATASET_SUFFIXES)
        )
    else:
        candidates = iter([path] if os.path.isfile(path) else [])
    if next(candidates, None) is None:
        raise missing
