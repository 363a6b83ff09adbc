"""The ``dj-airflow`` command: its parser and commands (``main.py``, ``jobs.py``), and what a run
through Airflow's ``dag.test()`` needs on a machine with no Airflow set up: the CLI's own Airflow home
and metadata DB (``airflow_env.py``), the in-process execution API (``in_process_api.py``) and the
template preview (``template_preview.py``)."""

from __future__ import annotations

from airflow_provider_dj.cli.main import console_main

# Only the console script's entry point: a re-exported ``main`` function would shadow the ``main``
# submodule (``import airflow_provider_dj.cli.main`` would then give the function).
__all__ = ["console_main"]
