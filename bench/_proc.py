"""How a section starts a child Python process of this package.

A child runs ``python -m bench.<module>``, never a file path, so its imports
resolve as the parent's do.  Its cwd is often a scratch directory (Ray puts
the driver's cwd on its workers' path), so ``child_env`` appends the
repository root to ``PYTHONPATH``: appended, so a ``--snapshot`` copy of the
provider put first still wins.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where sections write results and cache corpora by default (git-ignored).
RESULTS_DIR = os.path.join(REPO, "bench", "results")


def module_cmd(module: str, *args: object) -> list[str]:
    """The command line running ``module`` (``bench.x``) with this interpreter."""
    return [sys.executable, "-m", module, *(str(a) for a in args)]


def child_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) with the repository root last on ``PYTHONPATH``."""
    env = dict(os.environ if env is None else env)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if REPO not in parts:
        parts.append(REPO)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env
