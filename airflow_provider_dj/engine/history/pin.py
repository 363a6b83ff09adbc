"""The history version a job deduplicates against, pinned once by the validate task of a new job.

A retry, a resume or a clear of the same job reads this file and never the index's newer CURRENT: the
job's own export may have been committed by an earlier try, and its rows must not become its own history.
"""

from __future__ import annotations

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.history.index import HistoryIndex
from airflow_provider_dj.engine.history.keys import key_args
from airflow_provider_dj.engine.jobdir.layout import DEDUP_HISTORY_PIN, read_json, write_json
from airflow_provider_dj.ops.registry import create_op


def current_pin(recipe) -> dict | None:
    """The pin a new job would record now (None without ``dedup_history``).

    Refuses, before any work, a recipe whose history ops would compute other keys than the index holds."""
    cfg = recipe.dedup_history
    if cfg is None:
        return None
    index = HistoryIndex(cfg.path)
    version = index.current_version()
    ops = {}
    for spec in recipe.process:
        if spec.name in cfg.ops:
            args = key_args(create_op(spec.name, spec.args, recipe.text_key))
            index.check_key_args(version, spec.name, args)
            ops[spec.name] = args
    return {"path": cfg.path, "version": version, "ops": ops}


def write_pin(job_dir: str, pin: dict) -> None:
    write_json(storage.join(job_dir, *DEDUP_HISTORY_PIN.split("/")), pin)


def read_pin(job_dir: str) -> dict:
    return read_json(storage.join(job_dir, *DEDUP_HISTORY_PIN.split("/")))
