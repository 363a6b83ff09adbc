"""The image conformance corpus (tests/conformance/filters_image/corpus.py) as a job reads its rows: the
good set planned as one partition and read back, the bad set (which planning refuses: it names a missing
file) given the same read-time rewrite of its media paths directly."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from airflow_provider_dj.engine.config.schema import PartitionConfig
from airflow_provider_dj.engine.input.media import MediaKeys
from airflow_provider_dj.engine.input.media_paths import resolve_media_columns
from airflow_provider_dj.engine.input.partitioning import plan_partitions, read_partition
from tests.conformance.filters_image import corpus


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def job_tables(folder: Path) -> dict[str, tuple[Path, pa.Table]]:
    """{"rows": (folder, table), "bad": (folder, table)} for the corpus built in ``folder``."""
    files = corpus.build(folder)
    info = plan_partitions(str(files["rows"]), PartitionConfig(mode="manual", num_of_partitions=1))
    bad = pa.Table.from_pylist(read_jsonl(files["bad"]))
    return {
        "rows": (folder, read_partition(info, 0)),
        "bad": (folder, resolve_media_columns(bad, str(files["bad"]), MediaKeys())),
    }
