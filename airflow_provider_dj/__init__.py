"""Apache Airflow 3 provider running Data-Juicer-style recipes on Ray."""

__version__ = "0.1.0"
