"""jobdir/layout.py owns the job directory's names: each is declared once, and the modules use those."""

from __future__ import annotations

from airflow_provider_dj.engine.jobdir import layout, lock, stop_control
from airflow_provider_dj.engine.observe import tracer
from airflow_provider_dj.engine.output import parts
from airflow_provider_dj.ops.llm import call_record


def _names() -> dict[str, str]:
    return {k: v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)}


def test_every_path_of_the_layout_is_distinct():
    names = _names()
    assert len(names) >= 20
    clashes = {v: [k for k, w in names.items() if w == v] for v in names.values()}
    # one value, two names, is allowed only for the relative-part names inside different parents
    assert {v: ks for v, ks in clashes.items() if len(ks) > 1} == {}


def test_the_modules_use_the_layout_names():
    assert lock.LOCK_REL == layout.RUNNER_LOCK == "metadata/runner.lock"
    assert "/".join(stop_control.STOP_FILE) == layout.STOP_REQUEST
    assert parts.PARTS_DIR == layout.EXPORT_PARTS_DIR == "export_parts"
    assert (tracer.TRACE_DIR, tracer.PARTS_DIR, tracer.REPORT_FILE) == ("trace", "parts", "trace_report.json")


def test_the_llm_call_record_directory_is_the_one_the_layout_names():
    """ops/ may not import the engine, so the op keeps its own constant: this keeps the two equal."""
    assert call_record.RECORD_DIR == layout.LLM_CALLS_DIR


def _spelled_names() -> set[str]:
    """The layout's names that cannot be mistaken for another word: file names, relative paths, prefixes and
    the checkpoint stores (``logs`` or ``trace`` are also keys of the summary, so they are not looked for)."""
    values = set(_names().values()) | set(layout.STATE_DIR_PREFIXES)
    stores = {layout.CHECKPOINT_STORE, layout.DEDUP_KEYS_STORE, layout.DEDUP_MASK_STORE}
    return {v for v in values if "." in v or "/" in v or v.endswith("_") or v in stores}


def test_no_module_outside_the_layout_spells_a_job_dir_name():
    """A job-dir name written as a literal (or an f-string's text) outside layout.py drifts apart from it.

    ops/llm/call_record.py keeps its own copy (ops/ may not import the engine; the test above pins it)."""
    import ast
    import pathlib

    root = pathlib.Path(layout.__file__).resolve().parents[3]
    spelled = _spelled_names()
    skip = {pathlib.Path(layout.__file__).resolve(), pathlib.Path(call_record.__file__).resolve()}
    hits = []
    for base in ("airflow_provider_dj", "dags", "scripts"):
        for path in sorted((root / base).rglob("*.py")):
            if path.resolve() in skip:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in spelled:
                    hits.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert hits == [], "use the name from engine/jobdir/layout.py:\n" + "\n".join(hits)
