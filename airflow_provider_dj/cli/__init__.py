"""The ``dj-airflow`` command: its parser and commands (``main.py``, ``jobs.py``), and what a run
through Airflow's ``dag.test()`` needs on a machine with no Airflow set up: the CLI's own Airflow home
and metadata DB (``airflow_env.py``), the in-process execution API (``in_process_api.py``) and the
template preview (``template_preview.py``)."""

from __future__ import annotations

from airflow_provider_dj.cli.main import console_main, main

__all__ = ["console_main", "main"]
