"""Choosing the probe executor must not import Ray.

Regression: ``resolve_executor("auto")`` once did ``import ray`` to see if
Ray was there.  Ray reads its auth mode at import, before RayHook sets
RAY_AUTH_MODE, so under ``dj-airflow run`` the in-process cluster the hook
started refused its own driver (InvalidAuthToken) and the preflight failed.
"""

from __future__ import annotations

import subprocess
import sys


def test_auto_executor_is_ray_without_importing_it():
    code = (
        "import sys\n"
        "from airflow_provider_dj.engine.preflight.executors import resolve_executor\n"
        "print(resolve_executor('auto'))\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["ray", "False"], out.stdout + out.stderr
