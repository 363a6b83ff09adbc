"""Provider metadata read by Airflow's providers manager (entry point ``apache_airflow_provider``).

The ``ray`` connection's extra fields are declared as ``conn-fields`` (the
Airflow 3.2+ declarative form) so the UI renders them without importing the
hook, and so only these keys are offered: the hook allowlists them again
before anything reaches ``ray.init``.
"""

from __future__ import annotations

from airflow_provider_dj import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-dj",
        "name": "Data-Juicer on Ray (airflow-provider-dj)",
        "description": "Runs Data-Juicer-style recipes as fault-tolerant, partitioned, checkpointed jobs on Ray.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": "Data-Juicer recipes on Ray", "tags": ["software"]},
        ],
        "operators": [
            {
                "integration-name": "Data-Juicer recipes on Ray",
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
                "integration-name": "Data-Juicer recipes on Ray",
                "python-modules": ["airflow_provider_dj.sensors.checkpoint"],
            }
        ],
        "hooks": [
            {"integration-name": "Data-Juicer recipes on Ray", "python-modules": ["airflow_provider_dj.hooks.ray"]}
        ],
        "connection-types": [
            {
                "connection-type": "ray",
                "hook-class-name": "airflow_provider_dj.hooks.ray.RayHook",
                "hook-name": "Ray",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password"],
                    "relabeling": {"host": "Ray address"},
                    "placeholders": {"host": "ray://ray-head:10001 or ray-head:6379"},
                },
                "conn-fields": {
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
                },
            }
        ],
    }
