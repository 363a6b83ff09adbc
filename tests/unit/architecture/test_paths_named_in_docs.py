"""Every package path the docs and comments name (``engine/jobdir/layout.py``, ``ops/filters``) exists.

A restructuring moves files; prose that still points at the old place sends a reader nowhere.
"""

from __future__ import annotations

import os
import re
import subprocess

import import_graph as graph

_PATH = re.compile(
    r"(?<![\w/.])((?:airflow_provider_dj/)?(?:engine|ops|core|client|cli|dag_builder|plugins|testing|operators|hooks|sensors|triggers)/[\w/]+(?:\.py)?)"
)
#: prose that names a topic with a slash, not a path
_NOT_PATHS = {"monitor/summary"}


def test_package_paths_named_in_docs_and_code_exist():
    files = subprocess.run(
        ["git", "ls-files", "*.md", "*.py"], cwd=graph.ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    missing = []
    for rel in files:
        if rel.startswith("tests/dj_recipes/expected") or rel == "CHANGELOG.md":
            continue  # recorded outputs; the changelog names the old paths of moved modules on purpose
        try:
            with open(os.path.join(graph.ROOT, rel), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except FileNotFoundError:  # deleted in the work tree, not yet in git
            continue
        for m in _PATH.finditer(text):
            named = m.group(1).rstrip("/")
            if named in _NOT_PATHS:
                continue
            full = os.path.join(graph.ROOT, named if named.startswith(graph.PACKAGE) else f"{graph.PACKAGE}/{named}")
            if not (os.path.exists(full) or os.path.exists(full + ".py")):
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{rel}:{line}: {named}")
    assert missing == [], "these paths do not exist (moved?):\n" + "\n".join(missing)
