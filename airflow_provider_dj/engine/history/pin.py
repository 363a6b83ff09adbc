"""The history version a job deduplicates against, pinned once by the validate task of a new job.

A retry, a resume or a clear of the same job reads this file and never the index's newer CURRENT: the
job's own export may have been committed by an earlier try, and its rows must not become its own history.
"""

from __future__ import annotations

import os

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.history.index import HistoryIndex, HistoryIndexError
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
    _refuse_an_exported_path(index, version, recipe.export_path)
    ops = {}
    for spec in recipe.process:
        if spec.name in cfg.ops:
            args = key_args(create_op(spec.name, spec.args, recipe.text_key))
            index.check_key_args(version, spec.name, args)
            ops[spec.name] = args
    return {"path": cfg.path, "version": version, "ops": ops}


def _same_file(a: str, b: str) -> bool:
    if storage.is_url(a) or storage.is_url(b):
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def _refuse_an_exported_path(index: HistoryIndex, version: int, export_path: str) -> None:
    """A new job may not write to an export file whose rows the history already holds.

    Its rows would all be removed as history duplicates of that very file, which the new, nearly empty
    export then overwrites: the earlier night's rows are lost and the index names export rows that are
    gone.  Found running a shipped recipe as a nightly job and starting one night again under a new job
    id (docs/nightly.md#one-export-file-per-night)."""
    same = [j for j in index.manifest(version)["jobs"] if _same_file(j["export_path"], export_path)]
    if same:
        job = same[-1]["job_id"]
        raise HistoryIndexError(
            f"dedup_history: export_path {export_path!r} holds the export of job {job}, whose rows are in the "
            f"history index at {index.path} (version {version}): a new job writing there would remove them all "
            f"as history duplicates and overwrite that export with what is left. Give this job its own "
            f"export_path (it then exports only rows the history does not hold yet) or a new dedup_history.path; "
            f"a nightly recipe templates export_path on the date (/data/clean/{{{{ ds }}}}.jsonl) so each night "
            f"writes its own file. Nothing was run"
        )


def write_pin(job_dir: str, pin: dict) -> None:
    write_json(storage.join(job_dir, *DEDUP_HISTORY_PIN.split("/")), pin)


def read_pin(job_dir: str) -> dict:
    return read_json(storage.join(job_dir, *DEDUP_HISTORY_PIN.split("/")))
