"""Recipes used by the benchmark: one op list, two executors.

The same five ops with the same arguments go to ``dj-airflow run`` (our
partitioned, checkpointed Airflow + Ray executor) and to Data-Juicer 1.6.1's
``dj-process`` with ``executor_type: default``.
"""

from __future__ import annotations

import os

import yaml

# The demo recipe's ops (dags/recipes/demo.yaml), with the arguments spelled out.
OPS: list[dict] = [
    {"clean_email_mapper": None},
    {"whitespace_normalization_mapper": None},
    {"words_num_filter": {"min_num": 5, "max_num": 2000}},
    {"text_length_filter": {"min_len": 20, "max_len": 20000}},
    {"document_deduplicator": {"lowercase": True}},
]


def spine_process_yaml(max_words: int = 100_000) -> str:
    """The spine recipe's ``process:`` section as YAML text, for a section that writes its recipe as a
    template: the demo's five ops with a words ceiling no synthetic row reaches (``max_words``) and no
    length ceiling, so only short rows and duplicates are removed."""
    return (
        "process:\n"
        "  - clean_email_mapper:\n"
        "  - whitespace_normalization_mapper:\n"
        f"  - words_num_filter:\n      min_num: 5\n      max_num: {max_words}\n"
        "  - text_length_filter:\n      min_len: 20\n"
        "  - document_deduplicator:\n      lowercase: true\n"
    )


def _partition_section(partitions: str) -> dict:
    if partitions == "auto":
        return {"mode": "auto"}
    return {"mode": "manual", "num_of_partitions": int(partitions)}


def ours_recipe(
    *, name: str, dataset_path: str, export_path: str, work_dir: str, partitions: str = "4", np_: int = 2
) -> dict:
    return {
        "project_name": name,
        "dataset_path": os.path.abspath(dataset_path),
        "export_path": os.path.abspath(export_path),
        "work_dir": os.path.abspath(work_dir),
        "text_keys": "text",
        "np": np_,
        "executor_type": "ray_partitioned",
        "partition": _partition_section(partitions),
        "checkpoint": {"enabled": True, "strategy": "every_op"},
        "intermediate_storage": {"format": "parquet", "compression": "snappy", "retention_policy": "keep_all"},
        "process": OPS,
    }


def dj_recipe(*, name: str, dataset_path: str, export_path: str, work_dir: str, np_: int = 2) -> dict:
    return {
        "project_name": name,
        "dataset_path": os.path.abspath(dataset_path),
        "export_path": os.path.abspath(export_path),
        "work_dir": os.path.abspath(work_dir),
        "text_keys": "text",
        "np": np_,
        "executor_type": "default",
        # No HF-datasets cache files: every run computes from the JSONL (a
        # cache hit from an earlier run would not measure anything), and each
        # run also gets an empty HF cache directory (see run_bench.py).
        "use_cache": False,
        "open_tracer": False,
        "process": OPS,
    }


def write_yaml(path: str, data: dict) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return path
