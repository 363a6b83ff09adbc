"""``export_layout: partition_shards`` with the part files written by real Ray workers, and with the
export on an object store (moto_server on loopback), where the parts are copied, not linked.

tests/unit/engine/test_partition_shards_parallel.py covers the same export with the workers' function
called in-process (faults, the copy fallback, nightly reuse); here the parts come from Ray tasks
(``parts_on_ray``, as the export task and the Ray Jobs driver make them) and the export's bytes are
compared with the same job's serial export.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.output.parts import PARTS_DIR, parts_on_ray, write_part
from tests.helpers_compare import assert_same_bytes
from tests.integration.moto_s3 import s3_env, s3_server  # noqa: F401 - fixtures
from tests.unit.engine.test_partition_shards_parallel import EMPTY, PARTS, _corpus

pytestmark = pytest.mark.integration


def _computed_job(tmp_path: Path, export: str) -> str:
    """Four partitions (one exported empty) computed, not exported; the job directory."""
    _corpus(tmp_path / "in.jsonl")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"project_name: pshards\ndataset_path: {tmp_path / 'in.jsonl'}\nexport_path: {export}\n"
        f"work_dir: {tmp_path / 'work'}\nexport_layout: partition_shards\n"
        f"partition: {{mode: manual, num_of_partitions: {PARTS}}}\n"
        "process:\n  - whitespace_normalization_mapper:\n  - words_num_filter: {min_num: 5}\n",
        encoding="utf-8",
    )
    job_dir = prepare_job(load_recipe(str(recipe)), job_id="pj").job_dir
    for pid in range(PARTS):
        run_segment(job_dir, 0, pid)
    return job_dir


def test_ray_workers_parts_are_linked_as_the_shards(tmp_path: Path, ray_cluster) -> None:
    out = tmp_path / "out"
    job_dir = _computed_job(tmp_path, str(out / "result.jsonl"))
    serial = export_job(job_dir)
    files = {n: (out / n).read_bytes() for n in os.listdir(out)}
    on_ray = parts_on_ray(ray_cluster, job_dir, list(range(PARTS)), max_in_flight=2)
    seen: dict[int, tuple[int, int]] = {}

    def source():
        for part in on_ray():
            st = os.stat(part["path"])
            seen[part["partition_id"]] = (st.st_dev, st.st_ino)
            yield part

    summary = export_job(job_dir, part_source=source)
    assert sorted(os.listdir(out)) == sorted(files)
    for name, data in files.items():
        assert_same_bytes((out / name).read_bytes(), data)
    assert summary["export"]["checksum_xxh3_128"] == serial["export"]["checksum_xxh3_128"]
    manifest = json.loads(files["result.manifest.json"])
    assert [s["partition_id"] for s in manifest["shards"]] == [p for p in range(PARTS) if p != EMPTY]
    for shard in manifest["shards"]:  # each shard is the file a Ray worker wrote
        st = os.stat(out / shard["file"])
        assert (st.st_dev, st.st_ino) == seen[shard["partition_id"]]
    assert not (Path(job_dir) / PARTS_DIR).exists()
    assert read_events(job_dir, "export_complete")[-1]["parts_linked_as_shards"] == PARTS - 1


def test_an_export_on_an_object_store_copies_the_parts(tmp_path: Path, s3_env) -> None:
    """A link cannot reach an object store: each local part is copied into the set, with the same result."""
    prefix = f"pshards/{os.urandom(4).hex()}"
    job_dir = _computed_job(tmp_path, s3_env.url(f"{prefix}/result.jsonl"))
    serial = export_job(job_dir)
    files = {k: s3_env.get(k) for k in s3_env.keys(prefix)}
    assert f"{prefix}/result.manifest.json" in files and len(files) == PARTS  # 3 shards and the manifest
    summary = export_job(job_dir, part_source=lambda: (write_part(job_dir, pid) for pid in range(PARTS)))
    assert s3_env.keys(prefix) == sorted(files)
    for key, data in files.items():
        assert_same_bytes(s3_env.get(key), data)
    assert summary["export"]["checksum_xxh3_128"] == serial["export"]["checksum_xxh3_128"]
    assert read_events(job_dir, "export_complete")[-1]["parts_linked_as_shards"] == 0
    assert not (Path(job_dir) / PARTS_DIR).exists()
