"""Recipe -> Airflow DAG: the task wiring (``factory.py``: ``build_dag``, ``register_recipe_dags``),
the export and input as Airflow Assets (``assets.py``) and Airflow's template rendering for recipe
values (``templating.py``).  Wiring only: parsing a DAG reads no data."""
