"""One small cleaning job run in-process by the engine, the shared body of the overhead benches.

``lineage_bench.py`` and ``tracer_bench.py`` each time the same job with one feature off and on: no
Airflow, no Ray; ``prepare_job``, ``run_segment`` per partition, the global dedup step and
``export_job``.  The job lives here so that both measure exactly the same work, and a change to it
changes both.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job

PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 5000}
  - text_length_filter: {min_len: 20}
  - document_deduplicator: {lowercase: true}
"""
DEDUP_OP_INDEX = 4  # the global step between the two segments
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
    """Plan, run both segments of every partition, deduplicate and export; returns the job directory."""
    job = prepare_job(load_recipe(recipe), job_id=tag)
    for p in range(parts):
        run_segment(job.job_dir, 0, p)
    resolve_global_op(job.job_dir, DEDUP_OP_INDEX)
    for p in range(parts):
        run_segment(job.job_dir, 1, p)
    export_job(job.job_dir)
    return job.job_dir
