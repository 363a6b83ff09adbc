"""The Airflow UI job view: a read-only FastAPI app plus "Data-Juicer job" tabs (``job_view_plugin.py``)."""
