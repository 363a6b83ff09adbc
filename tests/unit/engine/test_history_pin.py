"""The pin a new job takes of the history (engine/history/pin.py): refusals before any work."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.history.index import HistoryIndex, HistoryIndexError, OpAdditions
from airflow_provider_dj.engine.history.pin import current_pin

RECIPE = """\
project_name: pin
dataset_path: {data}
export_path: {export}
work_dir: {work}
process:
  - document_deduplicator:
      lowercase: true
dedup_history:
  path: {history}
  ops: [document_deduplicator]
"""


def _recipe(tmp_path, export: str):
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    path = tmp_path / "r.yaml"
    path.write_text(
        RECIPE.format(data=tmp_path / "in.jsonl", export=export, work=tmp_path / "w", history=tmp_path / "h")
    )
    return load_recipe(str(path))


def test_a_new_job_writing_over_an_export_the_history_holds_is_refused(tmp_path):
    """Found running a shipped recipe as a nightly job: night 2 started again under a new job id would
    remove all of night 2's rows as history duplicates of its own export, then overwrite that export."""
    recipe = _recipe(tmp_path, str(tmp_path / "out" / "2026-11-30.jsonl"))
    args = current_pin(recipe)["ops"]["document_deduplicator"]
    HistoryIndex(str(tmp_path / "h")).commit(
        job_id="night2",
        pinned=0,
        export_path=str(tmp_path / "out" / "." / "2026-11-30.jsonl"),  # the same file, spelled otherwise
        additions={
            "document_deduplicator": OpAdditions(
                args, np.arange(3, dtype=np.uint64), np.zeros(3, np.uint64), np.arange(3)
            )
        },
    )
    with pytest.raises(HistoryIndexError) as err:
        current_pin(recipe)
    message = str(err.value)
    assert "holds the export of job night2" in message and "2026-11-30.jsonl" in message
    assert "its own export_path" in message and "Nothing was run" in message
    other = _recipe(tmp_path, str(tmp_path / "out" / "2026-12-01.jsonl"))
    assert current_pin(other)["version"] == 1
