"""Templated recipe values: ``export_path: /data/clean/{{ ds }}.jsonl`` in a nightly recipe.

Why here and not in the operators: which values may hold a template, how a
rendered value becomes a typed recipe value, and what the job directory
records are recipe rules, the same for the validate task, the GPU preflight
and ``dj-airflow``.  The rendering of the recipe file's templates is Airflow's
(its Jinja environment, its task context, its macros); the Airflow side passes
it in as a plain callable (``airflow_provider_dj/dag_builder/templating.py``),
so this module imports no Airflow and no Jinja.  A template in a value that
came from a trigger (``dag_run.conf``, ``--set``, ``overrides``) never reaches
that callable: engine/config/trigger_templates.py checks and renders it.

The rules:

* At DAG-parse time a templated value is kept as written.  The checks that
  need the real value (op argument types, a URL's driver, the input's
  existence) wait for the rendered recipe in the validate task.
* Only values the tasks read at run time may be templated: ``dataset_path``,
  ``export_path``, ``work_dir`` and an op's own arguments (strings at any
  depth).  Everything the DAG's shape or the parse-time plan depends on
  (``project_name`` names the DAG, ``schedule``, the op list, the sections,
  the engine-level op arguments such as ``num_gpus``) is refused at parse
  time, naming the key.
* A rendered op argument whose type is not a string is read as YAML, the way
  ``--set`` reads a value: ``min_num: "{{ 10 }}"`` becomes the integer 10.
* Rendering failures (an undefined variable: Airflow's environment is
  StrictUndefined) are ``RecipeError``\\ s naming the key path and the template.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.config.schema import DJ_IGNORED_KEYS, RecipeError

__all__ = [
    "TEMPLATABLE_TOP_LEVEL_KEYS",
    "TemplateNotPreviewable",
    "TemplateRenderError",
    "TemplateRenderer",
    "find_templates",
    "is_template",
    "refuse_untemplatable",
    "render_recipe_data",
    "static_text",
    "template_pattern",
]

#: Jinja's expression, statement and comment openers.
_MARKERS = ("{{", "{%", "{#")
_EXPRESSION = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)

#: Top-level keys whose value may be a template; the tasks read them at run time only.
TEMPLATABLE_TOP_LEVEL_KEYS = ("dataset_path", "export_path", "work_dir")

#: Why a key cannot be templated, for the keys a user is most likely to try.
_WHY_NOT = {
    "project_name": "it names the DAG, which Airflow fixes when it parses the file",
    "schedule": "it is the DAG's schedule, fixed when Airflow parses the file",
    "job_id": "the job id of a scheduled run is already derived from the DAG run",
    "resume": "it names an existing job; pass the job id itself",
    "process": "the op list shapes the DAG's tasks",
}


class TemplateRenderError(DJError, ValueError):
    """Raised by a renderer for a template it cannot render; the message says why."""


class TemplateNotPreviewable(TemplateRenderError):
    """A preview (before the run exists) cannot render this template: it uses a name only the task's
    context has (``ti``, ``var``).  Not the recipe's error; ``key`` is set to the key path."""

    def __init__(self, name: str, key: str | None = None) -> None:
        super().__init__(f"{name!r} exists only in the task's context")
        self.name, self.key = name, key


@dataclass(frozen=True)
class TemplateRenderer:
    """How one run renders templates: ``render(template) -> str`` and what the job records about it.

    ``logical_date`` (ISO text or None) is recorded in the effective config next to the values, so
    a resume can tell which day a job rendered.  ``context_note`` is appended to rendering errors
    (e.g. "this run has no logical date").  ``date_values`` are the run's dates as plain strings
    (``ds``, ``ds_nodash``, ``logical_date``, ``data_interval_start``, ``data_interval_end``): the
    whole context a trigger's own templates get (engine/config/trigger_templates.py); ``render`` is
    for the recipe file's templates only.
    """

    render: Callable[[str], str]
    logical_date: str | None = None
    run_id: str | None = None
    context_note: str = ""
    date_values: Mapping[str, str] = field(default_factory=dict)


def is_template(value: Any) -> bool:
    return isinstance(value, str) and any(m in value for m in _MARKERS)


def template_pattern(value: str) -> str:
    """The template with every Jinja expression replaced by ``*``: the set of paths it can render to.

    ``/data/clean/{{ ds }}.jsonl`` -> ``/data/clean/*.jsonl``; used to name the Asset of a templated
    export (an Asset URI is fixed at parse time, so it cannot be the rendered path)."""
    return re.sub(r"\*+", "*", _EXPRESSION.sub("*", value))


def static_text(value: str) -> str:
    """The template's text outside its Jinja expressions (what parse-time checks can look at)."""
    return _EXPRESSION.sub("", value)


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if is_template(value):
            yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def find_templates(data: Mapping) -> dict[str, str]:
    """Every templated string of a recipe (overrides merged), by dotted key path, in recipe order.

    Keys Data-Juicer reads but this provider ignores are skipped: they are never used."""
    found: dict[str, str] = {}
    for key, value in data.items():
        if key in DJ_IGNORED_KEYS:
            continue
        if key == "process" and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping) and len(item) == 1:
                    ((name, args),) = item.items()
                    found.update(_walk(args, f"process[{i}].{name}"))
                else:
                    found.update(_walk(item, f"process[{i}]"))
            continue
        found.update(_walk(value, str(key)))
    return found


def op_arg_of(path: str) -> tuple[int, str, str] | None:
    """``process[2].words_num_filter.min_num[0]`` -> (2, 'words_num_filter', 'min_num'); None for others."""
    m = re.match(r"^process\[(\d+)\]\.([^.\[]+)\.([^.\[]+)", path)
    return (int(m.group(1)), m.group(2), m.group(3)) if m else None


def refuse_untemplatable(found: Mapping[str, str], file: str | None, common_op_args: Any = ()) -> None:
    """Raise RecipeError for the first templated value outside the templatable keys."""
    for path, template in found.items():
        top = re.split(r"[.\[]", path, maxsplit=1)[0]
        if top in TEMPLATABLE_TOP_LEVEL_KEYS and path == top:
            continue
        op = op_arg_of(path)
        if op is not None and op[2] not in common_op_args:
            continue
        if op is not None:
            why = f"{op[2]!r} is an engine-level op argument that planning reads when the DAG is parsed"
        elif top == "process":
            why = _WHY_NOT["process"]
        else:
            why = _WHY_NOT.get(top, "it is read when the DAG is parsed, or shapes planning")
        raise RecipeError(
            file,
            path,
            f"{template!r} is a template, but this key cannot be templated: {why}. Templates may be used in "
            f"{', '.join(TEMPLATABLE_TOP_LEVEL_KEYS)} and in an op's own arguments; to change this value per "
            f"run, use dag_run.conf (or --set) if the key is overridable",
        )


def _set(data: Any, path: str, value: Any) -> None:
    """Set the value at a dotted/indexed key path as produced by ``find_templates``."""
    tokens = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node = data
    for tok in tokens[:-1]:
        node = node[int(tok[1:-1])] if tok.startswith("[") else node[tok]
    last = tokens[-1]
    node[int(last[1:-1]) if last.startswith("[") else last] = value


def _coerce(rendered: str, expected_str: bool) -> Any:
    """A rendered op argument whose type is not a string is read as YAML, as ``--set`` reads a value."""
    if expected_str:
        return rendered
    try:
        return yaml.safe_load(rendered)
    except yaml.YAMLError:
        return rendered


def render_recipe_data(
    data: dict,
    found: Mapping[str, str],
    renderer: TemplateRenderer,
    *,
    file: str | None,
    wants_str: Callable[[str], bool],
    render_trigger: Callable[[str, str], str] | None = None,
    trigger_paths: frozenset[str] = frozenset(),
) -> tuple[dict, dict]:
    """Render every templated value of ``data`` (mutated copy's owner: the caller) and the record.

    ``wants_str(path)``: whether the key takes a string as is (paths, string op arguments, nested
    list items); other rendered values are read as YAML.  A value at one of ``trigger_paths`` came
    from a trigger and is rendered by ``render_trigger(path, template)`` instead of the renderer,
    so it never reaches Airflow's context.  Returns (rendered data, record) where the record is
    what the effective config stores under ``templates``."""
    values: dict[str, dict] = {}
    for path, template in found.items():
        if path in trigger_paths:
            if render_trigger is None:
                raise ValueError(f"{path} came from a trigger, but no trigger renderer was given")
            rendered = render_trigger(path, template)
            values[path] = {"template": template, "rendered": rendered, "from_trigger": True}
            _set(data, path, _coerce(rendered, wants_str(path)))
            continue
        try:
            rendered = renderer.render(template)
        except TemplateNotPreviewable as exc:
            exc.key = path
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to render is the recipe's error
            note = f" ({renderer.context_note})" if renderer.context_note else ""
            raise RecipeError(
                file,
                path,
                f"template {template!r} does not render: {type(exc).__name__}: {exc}{note}. Nothing was run",
            ) from None
        if not isinstance(rendered, str):
            rendered = str(rendered)
        values[path] = {"template": template, "rendered": rendered}
        _set(data, path, _coerce(rendered, wants_str(path)))
    record = {"logical_date": renderer.logical_date, "run_id": renderer.run_id, "values": values}
    return data, record


def parse_time_record(found: Mapping[str, str]) -> dict:
    """What a recipe loaded at parse time (templates kept) carries: the templates, nothing rendered."""
    return {"logical_date": None, "run_id": None, "values": {p: {"template": t} for p, t in found.items()}}


def rendered_differences(old_record: Mapping | None, new_record: Mapping | None, keys: tuple[str, ...]) -> list[str]:
    """Lines naming each of ``keys`` that both records rendered from the same template to different
    values: a resume from a run of another day would read or write another day's data."""
    if not old_record or not new_record:
        return []
    old_values, new_values = old_record.get("values") or {}, new_record.get("values") or {}
    lines = []
    for key in keys:
        a, b = old_values.get(key), new_values.get(key)
        if not a or not b or a.get("template") != b.get("template") or "rendered" not in b:
            continue
        if a.get("rendered") != b.get("rendered"):
            lines.append(
                f"  {key}: {a['template']!r} rendered {a.get('rendered')!r}, this run renders {b['rendered']!r}"
            )
    return lines
