"""Provider metadata read by Airflow's providers manager (entry point ``apache_airflow_provider``).

The ``ray`` connection's extra fields are declared as ``conn-fields`` (the
Airflow 3.2+ declarative form) so the UI renders them without importing the
hook.  ``RAY_CONN_FIELDS`` is the one list of extras: the hook's allowlist
(``hooks.ray.ALLOWED_EXTRAS``) is built from it, so the form can never offer
a key the hook drops, nor the hook accept a key the form hides (they had
drifted: three declared, five allowed).  This module imports nothing from
Airflow, so the hook may import it.  tests/unit/test_provider_info.py checks
the fields against the hook's behaviour and the ``triggers`` section against
the trigger classes in ``airflow_provider_dj.triggers``.
"""

from __future__ import annotations

import copy

from airflow_provider_dj import __version__
from airflow_provider_dj.settings import provider_config

INTEGRATION = "Data-Juicer recipes on Ray"

# Every extra of a `ray` connection that reaches Ray: name -> its form field.
RAY_CONN_FIELDS: dict[str, dict] = {
    "address": {
        "label": "Address (overrides host)",
        "description": "Ray address, e.g. ray://ray-head:10001 or ray-head:6379; wins over host and port",
        "schema": {"type": ["string", "null"]},
    },
    "dashboard_address": {
        "label": "Ray Jobs dashboard address",
        "description": "Ray Jobs mode: the head's dashboard, e.g. http://ray-head:8265; each partition group "
        "then runs as one Ray Job whose driver lives on the cluster (an http(s):// host does the same)",
        "schema": {"type": ["string", "null"]},
    },
    "entrypoint_python": {
        "label": "Ray Jobs driver's Python",
        "description": "Ray Jobs mode: the Python a group's driver runs with on the cluster (the one with this "
        "provider installed), e.g. /opt/venv/bin/python; default: python on the head's PATH",
        "schema": {"type": ["string", "null"]},
    },
    "namespace": {
        "label": "Namespace",
        "description": "Ray namespace for the job's tasks and actors",
        "schema": {"type": ["string", "null"]},
    },
    "runtime_env": {
        "label": "Runtime environment",
        "description": "Ray runtime_env (JSON), e.g. pip packages or env_vars for remote workers",
        "schema": {"type": ["object", "null"], "format": "json"},
    },
    "num_cpus": {
        "label": "CPUs (embedded Ray only)",
        "description": "CPUs for the embedded local head when no address is set",
        "schema": {"type": ["integer", "null"], "minimum": 1},
    },
    "object_store_memory": {
        "label": "Object store bytes (embedded Ray only)",
        "description": "Object store size in bytes for the embedded local head when no address is set",
        "schema": {"type": ["integer", "null"], "minimum": 1},
    },
}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-dj",
        "name": "Data-Juicer on Ray (airflow-provider-dj)",
        "description": "Runs Data-Juicer-style recipes as fault-tolerant, partitioned, checkpointed jobs on Ray.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": INTEGRATION, "tags": ["software"]},
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_dj.operators.gpu_preflight",
                    "airflow_provider_dj.operators.resume_validator",
                    "airflow_provider_dj.operators.partition_group",
                    "airflow_provider_dj.operators.global_op",
                    "airflow_provider_dj.operators.export",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_dj.sensors.checkpoint"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_dj.triggers.checkpoint", "airflow_provider_dj.triggers.ray_job"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_dj.hooks.ray", "airflow_provider_dj.hooks.ray_jobs"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "ray",
                "hook-class-name": "airflow_provider_dj.hooks.ray.RayHook",
                "hook-name": "Ray",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password"],
                    "relabeling": {"host": "Ray address"},
                    "placeholders": {"host": "http://ray-head:8265 (Ray Jobs), ray-head:6379 or ray://ray-head:10001"},
                },
                "conn-fields": copy.deepcopy(RAY_CONN_FIELDS),
            }
        ],
        # The [dj] section (airflow_provider_dj/settings.py): `airflow config list` shows it.
        "config": provider_config(),
    }
