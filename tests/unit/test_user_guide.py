"""docs/user_guide.md stays true to the code it describes.

Three hand-written parts of the guide are checked against the real objects
(nothing mocked): the Mermaid diagram against the DAG that
``dag_factory.build_dag`` builds for the demo recipe, the operator parameter
tables against each class's ``__init__``, and the troubleshooting section
against every exception class the package defines.  Links to other docs
must point at files that exist.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = os.path.join(ROOT, "docs", "user_guide.md")
DEMO = os.path.join(ROOT, "dags", "recipes", "demo.yaml")


@pytest.fixture(scope="module")
def guide() -> str:
    with open(GUIDE, encoding="utf-8") as fh:
        return fh.read()


def _mermaid_edges(text: str) -> set[tuple[str, str]]:
    block = text.split("```mermaid", 1)[1].split("```", 1)[0]
    edges = set()
    for line in block.splitlines():
        m = re.match(r"^\s*(\w+)\s*(?:-->|-\.[^.]*\.->)\s*(\w+)\s*$", line)
        if m:
            edges.add((m.group(1), m.group(2)))
    return edges


def test_diagram_edges_are_the_demo_dags_edges(guide):
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(DEMO)
    real = {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}
    drawn = _mermaid_edges(guide)
    assert drawn == real
    mapped = {t.task_id for t in dag.tasks if type(t).__name__ == "MappedOperator"}
    for task_id in mapped:  # drawn as mapped
        assert re.search(rf'{task_id}\[\["{task_id}<br/>PartitionGroupOperator, mapped"\]\]', guide)


def _operator_classes():
    from airflow_provider_dj.hooks.ray import RayHook
    from airflow_provider_dj.operators.export import ExportOperator
    from airflow_provider_dj.operators.global_op import GlobalOpOperator
    from airflow_provider_dj.operators.gpu_preflight import GpuPreflightOperator
    from airflow_provider_dj.operators.partition_group import PartitionGroupOperator
    from airflow_provider_dj.operators.resume_validator import ResumeValidatorOperator
    from airflow_provider_dj.sensors.checkpoint import CheckpointSensor

    return [
        GpuPreflightOperator,
        ResumeValidatorOperator,
        PartitionGroupOperator,
        GlobalOpOperator,
        ExportOperator,
        CheckpointSensor,
        RayHook,
    ]


def _fmt_default(p: inspect.Parameter) -> str:
    if p.default is inspect.Parameter.empty:
        return "required"
    return f"`{p.default!r}`" if not isinstance(p.default, str) else f"`{p.default}`"


@pytest.mark.parametrize("cls", _operator_classes(), ids=lambda c: c.__name__)
def test_operator_tables_match_signatures(guide, cls):
    section = guide.split(f"\n#### {cls.__name__}\n", 1)[1].split("\n#### ", 1)[0].split("\n## ", 1)[0]
    assert f"`{cls.__module__}`" in section
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, re.M))
    params = {
        n: p
        for n, p in inspect.signature(cls.__init__).parameters.items()
        if n != "self" and p.kind is not p.VAR_KEYWORD
    }
    assert set(rows) == set(params)
    for name, p in params.items():
        assert rows[name] == _fmt_default(p), (cls.__name__, name)


def _exception_classes() -> set[str]:
    import airflow_provider_dj

    names = set()
    for info in pkgutil.walk_packages(airflow_provider_dj.__path__, "airflow_provider_dj."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == mod.__name__
                and not name.startswith("_")
            ):
                names.add(name)
    return names


def test_troubleshooting_names_every_exception_class(guide):
    trouble = guide.split("## 13. Troubleshooting", 1)[1]
    names = _exception_classes()
    assert {"RecipeError", "ResumeRefusedError", "JobLockedError", "PlanningError"} <= names
    undocumented = sorted(n for n in names - {"ChatError"} if f"`{n}" not in trouble)
    assert undocumented == [], f"add these errors to the troubleshooting section of docs/user_guide.md: {undocumented}"


def test_resume_refusal_reasons_are_all_documented(guide):
    with open(os.path.join(ROOT, "airflow_provider_dj", "engine", "job", "resume.py"), encoding="utf-8") as fh:
        reasons = set(re.findall(r'ResumeRefusedError\(\s*"(\w+)"', fh.read()))
    assert len(reasons) >= 6
    trouble = guide.split("## 13. Troubleshooting", 1)[1]
    assert sorted(r for r in reasons if f"`{r}`" not in trouble) == []


def test_relative_links_point_at_existing_files(guide):
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", guide):
        assert os.path.exists(os.path.join(ROOT, "docs", target)), target
