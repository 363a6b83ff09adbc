"""docs/python_api.md's example runs as written: the local executor exports, and a resume of the
completed job verifies the export without rewriting it."""

from __future__ import annotations

import os
import re
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "python_api.md")


def _python_blocks() -> list[str]:
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _first_python_block() -> str:
    return _python_blocks()[0]


def test_the_documented_example_runs(tmp_path, monkeypatch):
    shutil.copytree(os.path.join(ROOT, "dags", "recipes"), tmp_path / "dags" / "recipes")
    monkeypatch.chdir(tmp_path)  # the example's relative paths land in the test's own folder
    scope: dict = {}
    exec(compile(_first_python_block(), DOC, "exec"), scope)
    result = scope["result"]
    assert result.rows == 874  # the demo corpus's rows kept by the demo recipe (as dj-airflow run exports)
    with open(tmp_path / "demo_output" / "api_clean.jsonl", encoding="utf-8") as fh:
        assert sum(1 for _ in fh) == 874
    job_dir = tmp_path / "demo_output" / "api_jobs" / result.job_id
    assert (job_dir / "job_summary.json").exists()
    assert scope["again"].already_complete


def test_the_documented_planned_job_example_runs(tmp_path, monkeypatch):
    shutil.copytree(os.path.join(ROOT, "dags", "recipes"), tmp_path / "dags" / "recipes")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_python_blocks()[1], DOC, "exec"), scope)
    planned = scope["planned"]
    assert planned.job_id == "planned-001" and planned.rows == 874
    with open(tmp_path / "demo_output" / "planned.jsonl", encoding="utf-8") as fh:
        assert sum(1 for _ in fh) == 874
    assert not (tmp_path / "demo_output" / "api_jobs" / "planned-001" / "metadata" / "runner.lock").exists()


def test_the_doc_imports_only_the_public_face():
    """The doc's examples and its prose import from ``airflow_provider_dj.engine`` (names in its
    ``__all__``) and ``airflow_provider_dj.exceptions`` only: nothing deeper is the API."""
    import airflow_provider_dj.engine as engine
    import airflow_provider_dj.exceptions as exceptions

    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    public = {"airflow_provider_dj.engine": engine, "airflow_provider_dj.exceptions": exceptions}
    imports = re.findall(r"from\s+(airflow_provider_dj[\w.]*)\s+import\s+([\w ,]+)", text)
    assert imports, "the doc imports nothing?"
    for module, names in imports:
        assert module in public, f"docs/python_api.md imports from {module}: export the name from the engine"
        for name in (n.strip() for n in names.split(",")):
            assert name in public[module].__all__, f"{name} is not in {module}.__all__"
            getattr(public[module], name)


def test_every_engine_export_resolves():
    import airflow_provider_dj.engine as engine

    assert sorted(dir(engine)) == sorted(engine.__all__)
    for name in engine.__all__:
        assert getattr(engine, name) is not None
