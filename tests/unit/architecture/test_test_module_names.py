"""Every test module's file name is unique across tests/: pytest imports test modules by their base
name (rootdir-relative packages are not used for them), and two modules of one name in one run are a
collection error ("import file mismatch") that only a run collecting both shows, such as CI's."""

from __future__ import annotations

import os
from collections import defaultdict

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_no_two_test_modules_share_a_file_name():
    where: dict[str, list[str]] = defaultdict(list)
    for root, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                where[name].append(os.path.relpath(os.path.join(root, name), TESTS))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"test modules sharing a file name (rename one of each): {shared}"
