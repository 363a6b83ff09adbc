"""One small cleaning job run in-process by the engine, the shared body of the overhead benches.

``lineage_bench.py`` and ``tracer_bench.py`` each time the same job with one feature off and on: no
Airflow, no Ray; the engine's local executor (``engine.run_job``: the DAG's steps, partitions in this
process).  The job lives here so that both measure exactly the same work, and a change to it changes
both.
"""

from __future__ import annotations

import os

from airflow_provider_dj.engine import run_job as run_engine_job

PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 5000}
  - text_length_filter: {min_len: 20}
  - document_deduplicator: {lowercase: true}
"""
#: ``dedup=``: the deduplicator that ends PROCESS (the global step).
DEDUP_OPS = {
    "exact": "document_deduplicator: {lowercase: true}",
    "minhash": "document_minhash_deduplicator: {window_size: 3}",
    "simhash": "document_simhash_deduplicator: {}",
}


def write_recipe(
    tmp: str, data: str, tag: str, parts: int, strategy: str = "every_n_ops", extra: str = "", dedup: str = "exact"
) -> str:
    """The bench recipe over ``data``, exporting to ``{tmp}/{tag}.jsonl``; ``extra`` adds top-level keys,
    ``dedup`` names the deduplicator that ends it (a key of DEDUP_OPS)."""
    recipe = os.path.join(tmp, f"{tag}.yaml")
    with open(recipe, "w") as fh:
        fh.write(
            f"dataset_path: {data}\nexport_path: {tmp}/{tag}.jsonl\nwork_dir: {tmp}/work\n"
            + extra
            + f"partition: {{mode: manual, num_of_partitions: {parts}}}\ncheckpoint: {{strategy: {strategy}}}\n"
            + PROCESS.replace(DEDUP_OPS["exact"], DEDUP_OPS[dedup])
        )
    return recipe


def run_job(recipe: str, tag: str, parts: int) -> str:
    """Plan, run both segments of every partition, deduplicate and export; returns the job directory.

    ``parts`` is the recipe's partition count (write_recipe's); the steps read it from the plan."""
    return run_engine_job(recipe, job_id=tag, workers=1, say=lambda _msg: None).job_dir
