"""The GPU model that planning reads: ``report`` (the probe report's format, cache and num_gpus
rule), ``profiles`` (stage profiles from a report) and ``planner`` (the actor planner).  It sits
below ``planning``; the measuring that writes the report is ``engine/preflight/``.  Nothing here
imports Airflow or Ray."""
