"""OpenLineage for recipe DAGs: what a task reports about its job, and the run facet it reports it in.

``job_facts`` reads the job directory (through the engine's readers) into plain values;
``run_facet`` and ``lineage`` wrap them into OpenLineage objects and import the OpenLineage
client, so only ``operators/openlineage.py`` imports them, and only when Airflow's OpenLineage
provider is installed and enabled.  ``schema`` names the run facet's JSON schema shipped here.
"""
