"""The operators' OpenLineage methods: they report only with the provider installed and enabled.

The cases run in fresh interpreters, so that "nothing imported" means what it says: enabled (a console
transport) in one; in another, in turn, disabled by ``[openlineage] disabled``, not configured (no
transport: the provider counts that as disabled; its cached configuration is read again between the
two), and not installed (an import hook hides it once Airflow has started, as a missing package fails
to import).  Disabled or absent, every method returns None and nothing of OpenLineage's is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is not installed")

ROWS = [{"id": i, "text": f"row number {i} has a few words in it"} for i in range(12)]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from airflow_provider_dj.operators.export import ExportOperator
    from airflow_provider_dj.operators.global_op import GlobalOpOperator
    from airflow_provider_dj.operators.gpu_preflight import GpuPreflightOperator
    from airflow_provider_dj.operators.partition_group import PartitionGroupOperator

    job_dir = sys.argv[1]
    ops = {
        "export": ExportOperator(task_id="export", job_dir=job_dir),
        "global": GlobalOpOperator(task_id="global_op1", job_dir=job_dir, op_index=1),
        "partitions": PartitionGroupOperator(
            task_id="partitions_seg0", job_dir=job_dir, segment_index=0,
            execution_group={"group_id": 0, "partition_ids": [0], "label": "p0"},
        ),
        "gpu_preflight": GpuPreflightOperator(task_id="gpu_preflight", recipe_path="/nowhere.yaml"),
    }
    HIDDEN = ("openlineage", "airflow.providers.openlineage")


    def hide_the_provider():  # as if the packages were not installed: importing them fails
        class _Hide:
            def find_spec(self, name, path=None, target=None):
                if name in HIDDEN or name.startswith(tuple(h + "." for h in HIDDEN)):
                    raise ModuleNotFoundError(f"No module named {name!r}")

        for m in [m for m in sys.modules if m in HIDDEN or m.startswith(tuple(h + "." for h in HIDDEN))]:
            del sys.modules[m]
        sys.meta_path.insert(0, _Hide())


    def configure(env):  # the provider reads its configuration once per process: read it again
        for k in [k for k in os.environ if k.startswith(("AIRFLOW__OPENLINEAGE__", "OPENLINEAGE_"))]:
            del os.environ[k]
        os.environ.update(env)
        conf = sys.modules.get("airflow.providers.openlineage.conf")
        for f in vars(conf).values() if conf else ():
            if callable(getattr(f, "cache_clear", None)):
                f.cache_clear()


    out = {}
    for mode, env in json.loads(sys.argv[2]):
        configure(env)
        if mode == "absent":
            hide_the_provider()
        out[mode] = {}
        for name, op in ops.items():
            got = [
                op.get_openlineage_facets_on_start(),
                op.get_openlineage_facets_on_complete(None),
                op.get_openlineage_facets_on_failure(None),
            ]
            out[mode][name] = [
                None if g is None else {"inputs": len(g.inputs), "outputs": len(g.outputs), "run": sorted(g.run_facets)}
                for g in got
            ]
        out[mode]["imported"] = sorted(m for m in sys.modules if m == "openlineage" or m.startswith("openlineage."))[:3]
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    from airflow_provider_dj.engine import run_job

    root = tmp_path_factory.mktemp("ol_ops")
    data = root / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = root / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {root / 'out.jsonl'}\nwork_dir: {root / 'work'}\n"
        "partition: {mode: manual, num_of_partitions: 2}\nprocess:\n  - clean_email_mapper:\n"
        "  - document_deduplicator:\n"
    )
    return run_job(str(recipe), job_id="ol_ops", workers=1).job_dir


CONSOLE = json.dumps({"type": "console"})
#: (mode, its OpenLineage environment); the modes that must import nothing share one interpreter, absent last.
ENABLED = [("enabled", {"AIRFLOW__OPENLINEAGE__TRANSPORT": CONSOLE})]
OFF = [
    ("disabled", {"AIRFLOW__OPENLINEAGE__TRANSPORT": CONSOLE, "AIRFLOW__OPENLINEAGE__DISABLED": "True"}),
    ("not configured", {}),
    ("absent", {"AIRFLOW__OPENLINEAGE__TRANSPORT": CONSOLE}),
]


def _run(job_dir: str, modes: list) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__OPENLINEAGE__", "OPENLINEAGE_"))}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, job_dir, json.dumps(modes)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_enabled_the_steps_report_their_datasets_and_the_job(job_dir):
    out = _run(job_dir, ENABLED)["enabled"]
    run = ["dataJuicerJob"]
    assert out["export"] == [{"inputs": 1, "outputs": 1, "run": run}] * 3
    assert out["partitions"] == [{"inputs": 1, "outputs": 0, "run": run}] * 3  # segment 0 reads the input
    assert out["global"] == [{"inputs": 0, "outputs": 0, "run": run}] * 3
    assert out["gpu_preflight"] == [None] * 3  # no lineage of its own
    assert out["imported"]


def test_without_an_enabled_provider_nothing_is_reported_or_imported(job_dir):
    """Disabled, not configured (no transport) and not installed, in that order in one interpreter."""
    out = _run(job_dir, OFF)
    assert list(out) == [mode for mode, _env in OFF]
    for mode, got in out.items():
        for name in ("export", "global", "partitions", "gpu_preflight"):
            assert got[name] == [None] * 3, (mode, name)
        assert got["imported"] == [], mode
