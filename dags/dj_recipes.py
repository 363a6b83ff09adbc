"""Airflow DAG file: one DAG per Data-Juicer recipe in the recipes folder.

Recipes live in ``dags/recipes/`` (override with the DJ_RECIPES_DIR
environment variable).  When Airflow runs a task it tells this file which
DAG it needs (the parsing context), and only that recipe is built.
"""

from __future__ import annotations

from airflow.sdk import get_parsing_context

from airflow_provider_dj.dag_builder.factory import register_recipe_dags

register_recipe_dags(globals(), only_dag_id=get_parsing_context().dag_id)
