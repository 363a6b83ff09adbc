"""Test and benchmark support that ships with the package: the synthetic corpus the demo, the tests
and the benchmarks generate (``sample_corpus.py``).  Airflow-free; imports only the standard library
and core/."""
