"""Crash matrix: ``kill -9`` of a whole run at many points, then ``--resume``.

Each case injects one ``kill_run`` fault (SIGKILL to the run's whole session:
the driver, Ray and its workers), checks what the dead run left behind — no
export, no summary, a stale runner lock, and for a kill inside a checkpoint
write a data file without its commit marker — then resumes the job with
``--resume`` and requires the export to be byte-identical to a clean
reference run, with the same row accounting.  The resume must take over the
dead run's lock at once and redo only the work that was not committed.

The kill points are the engine's, so most cases kill the engine's own driver
(``python -m airflow_provider_dj.engine.runner``: the same steps the DAG's
tasks call, no Airflow); the cases marked ``via="cli"`` kill a whole
``dj-airflow run --airflow`` (Airflow's ``dag.test()``, Ray, the parallel
export's Ray workers) to show the DAG's tasks resume the same way.  The clean
reference is a run of the engine's driver, so every "cli" case also shows
that the DAG's tasks export the engine's bytes.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field

import pytest

from tests.helpers_compare import assert_same_bytes
from tests.integration.conftest import RECIPE
from tests.integration.crash_helpers import (
    events_since,
    fired,
    live_session_members,
    run_cli,
    run_engine,
    tail,
    write_faults,
)

pytestmark = pytest.mark.integration

CLI_ENV = {"DJ_TASK_RETRIES": "0"}  # nothing retries: a kill is a kill, a failed resume fails the test
#: A whole DAG run in dag.test(): the "cli" cases are Airflow-level.
RUN_FLAGS = ["--airflow", "--num-cpus", "1"]
ENGINE_FLAGS = ["--workers", "1"]
SEG0, SEG1 = "partitions_seg0", "partitions_seg1"
GLOBAL_TASK = "global_op4_document_deduplicator"
OP_DIRS = {
    0: "checkpoint_op_000_clean_email_mapper",
    1: "checkpoint_op_001_whitespace_normalization_mapper",
    2: "checkpoint_op_002_words_num_filter",
    3: "checkpoint_op_003_text_length_filter",
    4: "checkpoint_op_004_document_deduplicator",
}
KEYS_DIR = "dedup_keys_op_004_document_deduplicator"
MASK_DIR = "dedup_mask_op_004_document_deduplicator"
EVERY_N_OPS_2 = ["--set", "checkpoint.strategy=every_n_ops", "--set", "checkpoint.n_ops=2"]


@dataclass
class Env:
    recipe: str
    work: str
    root: str
    ref_export: bytes
    ref_summary: dict

    def job_dir(self, job_id: str) -> str:
        return os.path.join(self.work, job_id)

    def export_path(self, case: str) -> str:
        return os.path.join(self.root, "exports", case, "out.jsonl")


def _accounting(summary: dict) -> dict:
    """What a resumed job must reproduce exactly (timings excluded)."""
    keys = ("op_index", "op_name", "rows_in", "rows_out", "filtered", "duplicates", "failed")
    return {
        "ops": [{k: o.get(k) for k in keys} for o in summary["ops"]],
        "partitions": [
            {
                "partition_id": p["partition_id"],
                "input_rows": p["input_rows"],
                "output_rows": p["output_rows"],
                "accounting": [{k: a.get(k) for k in keys} for a in p["accounting"]],
            }
            for p in summary["partitions"]
        ],
        "input_rows": summary["input"]["total_rows"],
        "partitions_n": summary["input"]["partitions"],
        "export": {k: summary["export"][k] for k in ("rows", "bytes", "checksum_xxh3_128")},
        "failed_samples": summary["failed_samples"],
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory, corpus, airflow_home) -> Env:
    root = tmp_path_factory.mktemp("crash_matrix")
    work = root / "work"
    recipe = root / "crash_matrix.yaml"
    recipe.write_text(
        RECIPE.format(
            name="crash_matrix", data=corpus, export=root / "ref_out.jsonl", work=work, parts=4, strategy="every_op"
        )
    )
    run = run_engine([str(recipe), "--job-id", "ref", *ENGINE_FLAGS], str(root / "ref.log"), env_extra=CLI_ENV)
    assert run.rc == 0, tail(run.output)
    with open(work / "ref" / "job_summary.json") as fh:
        summary = json.load(fh)
    assert summary["input"] == dict(summary["input"], total_rows=400, partitions=4)
    assert 0 < summary["export"]["rows"] < 400  # the filters and the deduplicator both removed rows
    return Env(str(recipe), str(work), str(root), (root / "ref_out.jsonl").read_bytes(), summary)


def _assert_resumed_like_reference(env: Env, job_id: str, export_path: str) -> dict:
    with open(export_path, "rb") as fh:
        assert_same_bytes(fh.read(), env.ref_export, f"{job_id}: resumed export differs from the clean run's")
    with open(os.path.join(env.job_dir(job_id), "job_summary.json")) as fh:
        summary = json.load(fh)
    assert summary["status"] == "completed"
    assert _accounting(summary) == _accounting(env.ref_summary)
    assert not os.path.exists(os.path.join(env.job_dir(job_id), "metadata", "runner.lock"))  # released at export
    return summary


def _committed(job_dir: str, sub: str, pid: int) -> bool:
    return os.path.exists(os.path.join(job_dir, "checkpoints", sub, f"partition_{pid:05d}.commit.json"))


def _data_files(job_dir: str, sub: str, pid: int) -> list[str]:
    return [
        p
        for p in glob.glob(os.path.join(job_dir, "checkpoints", sub, f"partition_{pid:05d}.*"))
        if not p.endswith(".commit.json")
    ]


# --------------------------------------------------------------------------------------------------------------------
# the matrix
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    fault: dict
    flags: list[str] = field(default_factory=list)
    # partition killed in segment 0 -> (op index of the checkpoint the resume loads or None, ops the resume runs)
    seg0: dict[int, tuple[int | None, list[int]]] = field(default_factory=dict)
    # every segment-0 partition was complete before the kill (so the resume must skip them all)
    seg0_all_done: bool = False
    global_status: str | None = None  # the resume's global_op_complete status, where it is deterministic
    seg1_skipped: tuple[int, ...] = ()  # segment-1 partitions the resume must find already complete
    env: dict = field(default_factory=dict)  # extra environment for both runs
    via: str = "engine"  # "engine": the engine's driver; "cli": a whole dj-airflow run


def _run(case: Case, recipe: str, job_flags: list[str], flags: list[str], log_path: str, env_extra: dict):
    """The killed run or the resume, by the case's driver."""
    if case.via == "cli":
        return run_cli(["run", recipe, *job_flags, *RUN_FLAGS, *flags], log_path, env_extra=env_extra)
    return run_engine([recipe, *job_flags, *ENGINE_FLAGS, *flags], log_path, env_extra=env_extra)


def _by_step(case: Case, task_id: str) -> dict:
    """Events of one DAG task's step: Airflow's tasks name it airflow_task_id, the engine's driver step."""
    return {"airflow_task_id": task_id} if case.via == "cli" else {"step": task_id}


def _kill(point: str, **kw) -> dict:
    return {"point": point, **kw, "times": 1, "kind": "kill_run"}


CASES = [
    # mid-op: the middle op of partition 1 starts, then the run dies; ops 0 and 1 are committed
    Case("op_start-p1-op2", _kill("op_start", partition_id=1, op_index=2), seg0={1: (1, [2, 3])}),
    # the same through Airflow: a dj-airflow run killed mid-op resumes through the DAG's tasks
    Case("cli-op_start-p1-op2", _kill("op_start", partition_id=1, op_index=2), seg0={1: (1, [2, 3])}, via="cli"),
    # the very first op of the first partition: nothing committed for it, it starts over from the input
    Case("op_start-p0-op0", _kill("op_start", partition_id=0, op_index=0), seg0={0: (None, [0, 1, 2, 3])}),
    # between ops: op 2 of partition 1 committed, the run dies before op 3
    Case("after_op-p1-op2", _kill("after_op", partition_id=1, op_index=2), seg0={1: (2, [3])}),
    # last partition, after the last op of segment 0 but before its dedup keys are written
    Case("after_op-p3-op3", _kill("after_op", partition_id=3, op_index=3), seg0={3: (3, [])}),
    # segment 1: op 4's keep mask applied and its output committed for partition 2 (the last op)
    Case(
        "after_op-p2-op4-seg1",
        _kill("after_op", partition_id=2, op_index=4),
        seg0_all_done=True,
        global_status="already_complete",
        seg1_skipped=(2,),
    ),
    # a checkpoint's data file is written, its commit marker is not
    Case(
        "checkpoint_mid_write-p2-op1",
        _kill("checkpoint_mid_write", partition_id=2, op_index=1),
        seg0={2: (0, [1, 2, 3])},
    ),
    # the dedup's key phase at the end of segment 0: keys written, marker not (same commit protocol)
    Case(
        "checkpoint_mid_write-p3-op4-keys", _kill("checkpoint_mid_write", partition_id=3, op_index=4), seg0={3: (3, [])}
    ),
    # the global op committed the first partition's keep mask only
    Case("global_mid", _kill("global_mid"), seg0_all_done=True, global_status="success"),
    # the export wrote its first partition into its temp file
    Case(
        "export_mid",
        _kill("export_mid"),
        seg0_all_done=True,
        global_status="already_complete",
        seg1_skipped=(0, 1, 2, 3),
    ),
    # the same with the partitions serialized by Ray workers into part files (engine/output/parts.py)
    Case(
        "export_mid-parallel",
        _kill("export_mid"),
        seg0_all_done=True,
        global_status="already_complete",
        seg1_skipped=(0, 1, 2, 3),
        env={"DJ_PARALLEL_EXPORT_MIN_ROWS": "0"},
        via="cli",
    ),
    # every_n_ops n=2 checkpoints ops 1, 3 (and the final 4): a kill after op 2 goes back to op 1
    Case(
        "every_n_ops2-after_op-p1-op2",
        _kill("after_op", partition_id=1, op_index=2),
        flags=EVERY_N_OPS_2,
        seg0={1: (1, [2, 3])},
    ),
]


def _check_left_behind(env: Env, case: Case, job_dir: str) -> None:
    """What the kill must (not) have left, per case."""
    if case.id.startswith("checkpoint_mid_write"):
        pid, op = case.fault["partition_id"], case.fault["op_index"]
        sub = KEYS_DIR if case.id.endswith("keys") else OP_DIRS[op]
        assert _data_files(job_dir, sub, pid), f"the kill should have left {sub} data of partition {pid}"
        assert not _committed(job_dir, sub, pid), "the commit marker must not exist: the kill came before it"
        if case.id.endswith("keys"):
            assert _committed(job_dir, OP_DIRS[3], pid)  # the op output before the key phase is committed
    if case.id == "global_mid":
        assert _committed(job_dir, MASK_DIR, 0)
        assert not any(_committed(job_dir, MASK_DIR, p) for p in (1, 2, 3))
    if case.id.startswith("every_n_ops2"):
        assert not os.path.exists(os.path.join(job_dir, "checkpoints", OP_DIRS[2]))  # op 2 is not checkpointed
        assert _committed(job_dir, OP_DIRS[1], 1)
    for pid, (loaded, _ran) in case.seg0.items():
        if loaded is not None:
            assert _committed(job_dir, OP_DIRS[loaded], pid)


def _check_resume_work(case: Case, job_dir: str, since: float) -> None:
    """The resume redid only what was not committed."""
    seg0, seg1 = _by_step(case, SEG0), _by_step(case, SEG1)
    for pid, (loaded, ran) in case.seg0.items():
        loads = [e["op_index"] for e in events_since(job_dir, since, "checkpoint_load", partition_id=pid, **seg0)]
        assert loads == ([] if loaded is None else [loaded]), f"partition {pid}: resumed from {loads}"
        started = [e["op_index"] for e in events_since(job_dir, since, "op_start", partition_id=pid, **seg0)]
        assert started == ran, f"partition {pid}: the resume ran ops {started}, expected {ran}"
    if case.seg0_all_done:
        done = events_since(job_dir, since, "partition_complete", **seg0)
        assert sorted(e["partition_id"] for e in done) == [0, 1, 2, 3]
        assert {e["status"] for e in done} == {"already_complete"}
        assert events_since(job_dir, since, "op_start", **seg0) == []
    if case.global_status:
        statuses = [e["status"] for e in events_since(job_dir, since, "global_op_complete")]
        assert statuses == [case.global_status]
    for pid in case.seg1_skipped:
        done = events_since(job_dir, since, "partition_complete", partition_id=pid, **seg1)
        assert [e["status"] for e in done] == ["already_complete"]
        assert events_since(job_dir, since, "op_start", partition_id=pid, **seg1) == []
    if case.id.startswith("checkpoint_mid_write"):
        pid, op = case.fault["partition_id"], case.fault["op_index"]
        saves = events_since(job_dir, since, "checkpoint_save", partition_id=pid, op_index=op, **seg0)
        assert len(saves) == 1, f"the torn checkpoint of op {op} partition {pid} should be recomputed once: {saves}"
        assert ("note" in saves[0]) == case.id.endswith("keys")
        sub = KEYS_DIR if case.id.endswith("keys") else OP_DIRS[op]
        assert _committed(job_dir, sub, pid)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kill_then_resume_matches_clean_run(env: Env, case: Case):
    job_id = "kill_" + case.id.replace("-", "_")
    job_dir = env.job_dir(job_id)
    export = env.export_path(case.id)
    os.makedirs(os.path.dirname(export))
    sentinel = b'{"text": "previous export, must survive a crashed run"}\n'
    if case.id.startswith("export_mid"):
        with open(export, "wb") as fh:  # an earlier export at the same path: a crash must not replace it
            fh.write(sentinel)
    write_faults(job_dir, [case.fault])
    flags = ["--set", f"export_path={export}", *case.flags]
    run_env = {**CLI_ENV, **case.env}

    run = _run(case, env.recipe, ["--job-id", job_id], flags, os.path.join(env.root, f"{job_id}.log"), run_env)
    assert run.killed, f"expected the run to be SIGKILLed, got rc={run.rc}:\n{tail(run.output)}"
    assert live_session_members(run.pid) == []
    assert fired(job_dir) == ["fault0_0"]
    assert f"Resume token: {job_id}." in run.output
    assert not os.path.exists(os.path.join(job_dir, "job_summary.json"))
    if case.id.startswith("export_mid"):
        with open(export, "rb") as fh:
            assert_same_bytes(
                fh.read(), sentinel, "the crashed export replaced the previous file: export is not atomic"
            )
        partial = glob.glob(os.path.join(os.path.dirname(export), ".out.jsonl.tmp-*"))
        assert len(partial) == 1 and 0 < os.path.getsize(partial[0]) < len(env.ref_export)  # killed mid-write
        if case.env:  # Ray workers had written part files, which the kill left behind
            assert glob.glob(os.path.join(job_dir, "export_parts", "part_*.jsonl"))
    else:
        assert os.listdir(os.path.dirname(export)) == [], "a crashed run left an export (or a partial one)"
    with open(os.path.join(job_dir, "metadata", "runner.lock")) as fh:
        lock = json.load(fh)
    assert lock["pid"] == run.pid and lock["pid_is_run"], lock  # the dead run still "holds" the job
    _check_left_behind(env, case, job_dir)

    resume = _run(
        case, env.recipe, ["--resume", job_id], flags, os.path.join(env.root, f"{job_id}.resume.log"), run_env
    )
    assert resume.rc == 0, tail(resume.output)
    if case.env.get("DJ_PARALLEL_EXPORT_MIN_ROWS") == "0":  # parts left by the kill are rewritten, then removed
        assert not os.path.exists(os.path.join(job_dir, "export_parts"))
    assert f"took over a stale lock (holder pid {run.pid} on this host is gone" in resume.output
    _assert_resumed_like_reference(env, job_id, export)
    _check_resume_work(case, job_dir, resume.started_at)
    # no temp file of the crashed export is left next to the export
    assert glob.glob(os.path.join(os.path.dirname(export), ".out.jsonl.tmp-*")) == []
    assert fired(job_dir) == ["fault0_0"]  # the resume hit no fault


def test_kill_during_planning(env: Env):
    """Killed after indexing the input, before any metadata: the token was printed, but there is nothing to resume.

    ``--resume`` is refused without touching the job directory; a new run under the same job id plans afresh.
    The engine's driver runs it: planning is the engine's first step.
    """
    job_id = "kill_plan"
    job_dir = env.job_dir(job_id)
    export = env.export_path("plan")
    os.makedirs(os.path.dirname(export))
    write_faults(job_dir, [_kill("plan")])
    flags = [*ENGINE_FLAGS, "--set", f"export_path={export}"]

    run = run_engine([env.recipe, "--job-id", job_id, *flags], os.path.join(env.root, "plan.log"))
    assert run.killed, f"rc={run.rc}:\n{tail(run.output)}"
    assert live_session_members(run.pid) == []
    assert f"Resume token: {job_id}." in run.output  # printed before anything ran
    assert fired(job_dir) == ["fault0_0"]
    # only the test's own fault files: no metadata, no partitioning info, no lock, no checkpoints
    assert sorted(os.listdir(job_dir)) == ["_fault_injection.fired", "_fault_injection.json"]
    assert os.listdir(os.path.dirname(export)) == []

    def snapshot() -> dict:
        out = {}
        for root, _dirs, files in os.walk(job_dir):
            for name in files:
                p = os.path.join(root, name)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, job_dir)] = fh.read()
        return out

    before = snapshot()
    refused = run_engine([env.recipe, "--resume", job_id, *flags], os.path.join(env.root, "plan.resume.log"))
    # refused before any work (exit 2, like any bad input)
    assert refused.rc == 2, f"resuming a job that was never planned must fail: rc={refused.rc}\n{tail(refused.output)}"
    assert "no job directory" in refused.output or "lacks" in refused.output, tail(refused.output)
    assert "metadata_missing" in refused.output
    assert snapshot() == before, "a refused resume modified the job directory"
    assert os.listdir(os.path.dirname(export)) == []

    rerun = run_engine([env.recipe, "--job-id", job_id, *flags], os.path.join(env.root, "plan.rerun.log"))
    assert rerun.rc == 0, tail(rerun.output)
    _assert_resumed_like_reference(env, job_id, export)
    assert [e["status"] for e in events_since(job_dir, rerun.started_at, "job_start")] == ["new"]
