"""Templates in values that come from a trigger: ``dag_run.conf``, ``dj-airflow run --set``, ``overrides``.

Why a rule of their own: the recipe file is written by the DAG's authors, and its templates get
Airflow's whole context (``var``, ``conn``, ``macros``, ``ti``, the template loader's files).  A
trigger's values come from whoever may trigger the DAG, who on a shared deployment may not read
Variables, Connections or DAG files; rendered with Airflow's context, ``{{ conn.x.password }}`` in
``export_path`` would write a secret into a file name, a log line and the job's effective config.

So a trigger's value is data.  Its only templates are the run's date values, named whole:
``{{ ds }}``, ``{{ ds_nodash }}``, ``{{ logical_date }}``, ``{{ data_interval_start }}``,
``{{ data_interval_end }}``, each a plain string the Airflow side computed (ISO text for the
datetimes).  Anything else (another name, an attribute, a call, a filter, a statement such as
``{% include %}`` or ``{% import %}``, a literal) is refused before any work, naming the key and
what is allowed.  The check is on Jinja's parse tree, so a template is judged as Airflow's Jinja
would read it, and nothing is ever evaluated: an allowed template is rendered by substituting its
names, in Jinja's sandbox with no loader, over a context of those strings and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_provider_dj.engine.config.schema import RecipeError

__all__ = ["TRIGGER_TEMPLATE_NAMES", "check_trigger_template", "render_trigger_template"]

#: The only names a trigger's template may use: the run's date values, as plain strings.
TRIGGER_TEMPLATE_NAMES = ("ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end")

_MARKERS = ("{{", "{%", "{#")


def _allowed_text() -> str:
    return ", ".join("{{ " + name + " }}" for name in TRIGGER_TEMPLATE_NAMES)


def _refusal(file: str | None, key: str, source: str, template: str, what: str) -> RecipeError:
    return RecipeError(
        file,
        key,
        f"the value from {source} is a template ({template!r}) that {what}. A value from a trigger is data: "
        f"its templates may only name the run's dates, each whole: {_allowed_text()} (no other names, "
        f"attributes, calls, filters, literals or statements such as include/import; Variables, Connections, "
        f"macros, ti and dag_run are not available). Pass the literal value, or ask the DAG's authors to put "
        f"the template in the recipe file. Nothing was run",
    )


def _environment():
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)


def _describe(node) -> str:
    """What a refused parse-tree node does, in the user's words."""
    from jinja2 import nodes

    kinds = {
        nodes.Include: "includes a file",
        nodes.Import: "imports a template",
        nodes.FromImport: "imports from a template",
        nodes.Extends: "extends a template",
        nodes.Getattr: "reads an attribute",
        nodes.Getitem: "reads an item",
        nodes.Call: "calls a function",
        nodes.Filter: "applies a filter",
        nodes.Test: "applies a test",
        nodes.Const: "holds a literal",
    }
    for kind, text in kinds.items():
        if isinstance(node, kind):
            return text
    if isinstance(node, nodes.Name):
        return f"uses the name {node.name!r}"
    if isinstance(node, nodes.Stmt):
        return f"holds a {{% {type(node).__name__.lower()} %}} statement"
    return f"holds a {type(node).__name__} expression"


def check_trigger_template(template: str, *, key: str, source: str, file: str | None) -> None:
    """Raise ``RecipeError`` naming ``key`` unless ``template`` is text and whole allowed names only.

    Parsing evaluates nothing, so this runs wherever the value is seen first (the DAG's parse keeps
    templates, ``dj-airflow`` before it starts anything, the first task of a run)."""
    from jinja2 import TemplateSyntaxError, nodes

    try:
        tree = _environment().parse(template)
    except TemplateSyntaxError as exc:
        raise _refusal(file, key, source, template, f"is not valid Jinja ({exc.message})") from None
    for statement in tree.body:
        if not isinstance(statement, nodes.Output):
            raise _refusal(file, key, source, template, _describe(statement))
        for part in statement.nodes:
            if isinstance(part, nodes.TemplateData):
                if any(marker in part.data for marker in _MARKERS):  # a {% raw %} block
                    raise _refusal(file, key, source, template, "holds template text in a raw block")
                continue
            if not (isinstance(part, nodes.Name) and part.ctx == "load" and part.name in TRIGGER_TEMPLATE_NAMES):
                raise _refusal(file, key, source, template, _describe(part))


def render_trigger_template(
    template: str, date_values: Mapping[str, str], *, key: str, source: str, file: str | None, note: str = ""
) -> str:
    """``template`` with its date names replaced by ``date_values`` (checked first, as above).

    A name the run lacks (a run triggered without a logical date has none of them) is refused,
    naming the key; ``note`` says why the run lacks it."""
    check_trigger_template(template, key=key, source=source, file=file)
    context = {name: str(date_values[name]) for name in TRIGGER_TEMPLATE_NAMES if date_values.get(name) is not None}
    from jinja2 import UndefinedError

    try:
        rendered = _environment().from_string(template).render(context)
    except UndefinedError as exc:
        why = f" ({note})" if note else ""
        raise RecipeError(
            file,
            key,
            f"the value from {source}, {template!r}, does not render: {exc}{why}. Nothing was run",
        ) from None
    if any(marker in rendered for marker in _MARKERS):
        raise _refusal(file, key, source, template, "renders to text that is a template again")
    return rendered
