"""The Airflow classes read as Airflow's own providers write them (issue 37, point 4).

Every operator, sensor, trigger and hook class of the package documents its arguments with ``:param``
in its class docstring, and every ``context`` parameter of the package is typed as Airflow's
``Context``, never ``Any``.  Checked on the source's syntax trees, so a new class or method that slips
fails here."""

from __future__ import annotations

import ast
import os

PACKAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))), "airflow_provider_dj"
)
AIRFLOW_KINDS = ("Operator", "Sensor", "Trigger", "Hook")


def _trees() -> list[tuple[str, ast.Module]]:
    found = []
    for folder, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    found.append((os.path.relpath(path, PACKAGE), ast.parse(fh.read())))
    return found


def _airflow_classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(kind in ast.unparse(base) for base in node.bases for kind in AIRFLOW_KINDS)
    ]


def test_every_airflow_class_documents_its_arguments_with_param():
    trees = _trees()
    classes = [(path, cls) for path, tree in trees for cls in _airflow_classes(tree)]
    assert len(classes) >= 10, [c.name for _p, c in classes]  # the walk found the operators at all
    missing = [f"{path}:{cls.name}" for path, cls in classes if ":param" not in (ast.get_docstring(cls) or "")]
    assert not missing, f"Airflow classes without a :param class docstring: {missing}"


def _untyped_contexts(path: str, tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in node.args.args + node.args.kwonlyargs:
                if arg.arg == "context" and arg.annotation is not None and "Any" in ast.unparse(arg.annotation):
                    found.append(f"{path}:{node.lineno} {node.name}")
    return found


def test_no_context_parameter_is_typed_any():
    untyped = [hit for path, tree in _trees() for hit in _untyped_contexts(path, tree)]
    assert not untyped, f"context parameters typed Any (use airflow.sdk's Context): {untyped}"


def test_the_checks_find_a_planted_class_and_context():
    planted = ast.parse(
        "class PlantedOperator(BaseOperator):\n"
        '    """No arguments documented."""\n'
        "    def execute(self, context: Any) -> None: ...\n"
        "    async def run(self, *, context: dict[str, Any]) -> None: ...\n"
    )
    assert [c.name for c in _airflow_classes(planted)] == ["PlantedOperator"]
    assert ":param" not in (ast.get_docstring(_airflow_classes(planted)[0]) or "")
    assert _untyped_contexts("planted.py", planted) == ["planted.py:3 execute", "planted.py:4 run"]
