"""``airflow_provider_dj.exceptions`` is the one place a user imports errors from, and refusals share a base.

Every ``DJError`` subclass the package defines (read from the source, so a new one cannot be missed) is
exported by ``exceptions.py`` or listed in ``INTERNAL`` with the reason no caller meets it.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys

import pytest

import airflow_provider_dj.exceptions as exc_module
from airflow_provider_dj.core.errors import DJError, RefusedError
from tests.unit.architecture.import_graph import ROOT, module_files

#: DJError subclasses not exported, each with why a caller never catches it.
INTERNAL = {
    "AirflowEnvError": "dj-airflow's own (cli/airflow_env.py); the CLI prints it and exits",
    "GroupJobRefusedError": "a Ray Job driver's refusal; the driver prints it and exits, the operator reads that",
    "ProbeFailure": "one GPU probe's failure, recorded in gpu_probe_results.json, never raised to a caller",
    "StopRequested": "the stop signal inside a job; the engine raises JobStopped to its callers",
    "TemplateNotPreviewable": "the CLI's template preview; a TemplateRenderError, which is exported",
}

#: Refusals (raised before any work): what the CLI exits 2 for and the DAG fails without retry.
REFUSALS = (
    "GlobalStepTooLargeError",
    "HistoryIndexError",
    "InputError",
    "JobIdError",
    "JobLockedError",
    "PartitionTooLargeError",
    "PathOutsideRootsError",
    "RecipeError",
    "ResumeRefusedError",
    "WriteOutsideRootsError",
)


def _dj_error_classes() -> dict[str, str]:
    """name -> module of every class in the package whose bases lead to DJError (by name, from the AST)."""
    bases: dict[str, set[str]] = {}
    where: dict[str, str] = {}
    for module, path in module_files().items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert node.name not in where, f"two classes named {node.name}: {where[node.name]}, {module}"
                where[node.name] = module
                bases[node.name] = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
    found = {"DJError"}
    grew = True
    while grew:
        new = {name for name, bs in bases.items() if bs & found} - found
        found |= new
        grew = bool(new)
    return {name: where[name] for name in found}


def test_every_dj_error_is_exported_or_listed_as_internal():
    defined = _dj_error_classes()
    exported = set(exc_module.__all__)
    missing = sorted(n for n in defined if n not in exported and n not in INTERNAL)
    assert missing == [], f"export these from airflow_provider_dj/exceptions.py, or list them in INTERNAL: {missing}"
    stale = sorted((exported | set(INTERNAL)) - set(defined))
    assert stale == [], f"exported or listed but no longer DJError subclasses in the package: {stale}"
    both = sorted(exported & set(INTERNAL))
    assert both == [], f"both exported and listed as internal: {both}"


def test_each_export_is_the_class_its_module_defines():
    defined = _dj_error_classes()
    for name in exc_module.__all__:
        cls = getattr(exc_module, name)
        assert issubclass(cls, DJError), name
        assert cls.__module__ == defined[name], f"{name}: exported from {cls.__module__}, defined in {defined[name]}"
    with pytest.raises(AttributeError):
        exc_module.NotAnError  # noqa: B018 - the lazy module's getattr must refuse unknown names


def test_importing_the_exceptions_module_imports_neither_the_engine_nor_airflow():
    code = (
        "import sys, airflow_provider_dj.exceptions as e; "
        "bad = [m for m in sys.modules if m == 'airflow' or m.startswith(('airflow.', 'airflow_provider_dj.engine'))]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", REFUSALS)
def test_refusals_derive_from_refused_error(name):
    assert issubclass(getattr(exc_module, name), RefusedError)


@pytest.mark.parametrize(
    "name",
    ["FailureRateExceededError", "PartitionFailedError", "JobStopped", "ReviewRejectedError", "TemplateRenderError"],
)
def test_failures_after_work_began_are_not_refusals(name):
    assert not issubclass(getattr(exc_module, name), RefusedError)


def _instances() -> list[BaseException]:
    e = exc_module
    return [
        e.RecipeError("r.yaml", "process[0]", "bad value"),
        e.PathOutsideRootsError("r.yaml", "export_path", "outside"),
        e.ResumeRefusedError("input_changed", "the input changed"),
        e.WriteOutsideRootsError("/a/b", "/elsewhere/b", "/a"),
        e.HistoryIndexError("index refused"),
        e.JobIdError("bad id"),
        e.JobLockedError("held"),
        e.GlobalStepTooLargeError("too large"),
    ]


@pytest.mark.parametrize("error", _instances(), ids=lambda e: type(e).__name__)
def test_refusals_survive_pickling(error):
    """Errors cross process boundaries (Ray tasks, the local process pool): class, message and fields
    come back."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
