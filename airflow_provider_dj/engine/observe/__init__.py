"""What the ops did to which rows: per-row lineage (``lineage``), the queries over it
(``lineage_query``), lineage carried over for reused checkpoints (``lineage_reuse``) and the
tracer.  The event log and progress logs sit lower, in ``engine/jobdir/``."""
