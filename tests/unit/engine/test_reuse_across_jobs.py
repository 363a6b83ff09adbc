"""Reuse across jobs (intermediate_storage.reuse_across_jobs): night 2 over night 1's files plus new files
with exact and near duplicates of night-1 rows exports the same bytes as a from-scratch run, says what it
reused, never trusts a damaged source checkpoint, and recomputes past a deduplicator whose mask moved.

Real engine, real files: jobs run in-process (``run_prepared_job``), no Airflow, no Ray.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.reuse import reuse_line
from airflow_provider_dj.engine.input import index_cache
from airflow_provider_dj.engine.job.gc import collect
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.runner.local import run_prepared_job
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.engine.storage.reuse_index import ReuseIndex, pinned_sources
from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file
from tests.helpers_compare import assert_same_bytes

PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
  - document_deduplicator: {lowercase: true}
  - text_length_filter: {min_len: 50}
  - document_minhash_deduplicator: {}
  - words_num_filter: {min_num: 6}
"""
OLD_FILES, ROWS, SIZE = 3, 200, 100  # 6 partitions on night 1


def run_job(tmp, data, name, work, reuse=True):
    recipe = tmp / f"{name}.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp / name}.jsonl\nwork_dir: {work}\n"
        f"partition: {{mode: manual, size: {SIZE}, align: file}}\n"
        f"intermediate_storage: {{reuse_across_jobs: {str(reuse).lower()}}}\n"
        f"checkpoint: {{strategy: every_n_ops, n_ops: 2}}\n{PROCESS}"
    )
    job = prepare_job(load_recipe(str(recipe)), job_id=name)
    return job.job_dir, run_prepared_job(job).summary


def _bytes(path):
    with open(path, "rb") as fh:
        return fh.read()


def _copy_inputs(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reuse")
    data = tmp / "in"
    for i in range(OLD_FILES):
        write_corpus(str(data / f"part_{i}.jsonl"), ROWS, seed=i)
    texts = [json.loads(line)["text"] for i in range(OLD_FILES) for line in open(data / f"part_{i}.jsonl")]
    with pytest.MonkeyPatch.context() as mp:  # the files are settled: night 2 plans them from night 1's index
        mp.setattr(index_cache, "RACY_MARGIN_NS", 0)
        night1_dir, s1 = run_job(tmp, data, "night1", tmp / "work")
        write_growth_file(str(data / f"part_{OLD_FILES}.jsonl"), texts, 30, seed=99)  # 5 % new rows, ~30 % dups
        night2_dir, s2 = run_job(tmp, data, "night2", tmp / "work")
    _, s3 = run_job(tmp, data, "scratch", tmp / "scratch_work", reuse=False)
    return {
        "tmp": tmp,
        "data": data,
        "texts": texts,
        "night1": night1_dir,
        "night2": night2_dir,
        "s1": s1,
        "s2": s2,
        "s3": s3,
    }


def test_night2_reuses_night1_and_exports_the_same_bytes_as_a_scratch_run(nights):
    s2, tmp = nights["s2"], nights["tmp"]
    assert_same_bytes(_bytes(tmp / "night2.jsonl"), _bytes(tmp / "scratch.jsonl"))
    assert s2["export"]["rows"] == nights["s3"]["export"]["rows"] > nights["s1"]["export"]["rows"]
    reuse = s2["reuse"]
    assert reuse["partitions_reused"] == OLD_FILES * ROWS // SIZE  # every old partition, through both dedups
    assert reuse["computed_partitions"] == 1 and reuse["source_jobs"] == ["night1"]
    assert reuse["bytes_reused"] > 0 and reuse["checkpoints_reused"] >= 2 * reuse["partitions_reused"]
    # the reused partitions' JSONL bytes were copied from night 1's export (checked by their xxh3)
    assert reuse["export_parts_reused"] == reuse["partitions_reused"]
    assert 0 < reuse["export_bytes_reused"] < os.path.getsize(tmp / "night2.jsonl")
    assert reuse_line(reuse).startswith(
        f"reused from night1: {reuse['partitions_reused']} of {reuse['partitions_reused'] + 1} partitions, "
        f"{reuse['checkpoints_reused']} checkpoints ("
    )
    assert reuse_line(reuse).endswith("; 1 computed")
    assert nights["s1"]["reuse"]["partitions_reused"] == 0 and nights["s1"]["reuse"]["published_entries"] > 0
    assert pinned_sources(nights["night2"]) == {"night1"}
    # read in place: night 2 holds reuse markers, not copies of night 1's data files
    final = JobContext(nights["night2"]).plan.final_op_index
    op_dir = os.path.join(nights["night2"], "checkpoints", f"checkpoint_op_{final:03d}_words_num_filter")
    marker = json.load(open(os.path.join(op_dir, "partition_00000.commit.json")))
    assert marker["reference"] == {"job_id": "night1", "partition_id": 0}
    assert not os.path.exists(os.path.join(op_dir, "partition_00000.parquet"))
    reused_events = [e for e in read_events(nights["night2"]) if e["event_type"] == "checkpoint_reused"]
    assert {e["partition_id"] for e in reused_events} == set(range(reuse["partitions_reused"]))
    # the planner packed the reused partitions into one execution group: one task for them, one for the new
    with open(os.path.join(nights["night2"], "dag_execution_plan.json")) as fh:
        groups = [g["partition_ids"] for g in json.load(fh)["execution_groups"]]
    old = list(range(reuse["partitions_reused"]))
    assert groups == [old, [len(old)]]
    with open(os.path.join(nights["night1"], "dag_execution_plan.json")) as fh:
        assert len(json.load(fh)["execution_groups"]) == len(old)  # night 1: nothing to reuse, one a group
    # planning read only the new file: the old files' offsets and hashes came from night 1's plan
    timing = JobContext(nights["night2"]).partitioning_info["timing"]
    assert timing["index_cache"]["files_from_cache"] == OLD_FILES
    assert timing["hashed_bytes"] == os.path.getsize(nights["data"] / f"part_{OLD_FILES}.jsonl")


def test_a_flipped_byte_in_a_reused_checkpoint_is_never_trusted(nights, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(os.path.dirname(nights["night1"]), work, ignore=shutil.ignore_patterns("night2"))
    night1 = work / "night1"
    final = JobContext(str(night1)).plan.final_op_index
    op_dir = night1 / "checkpoints" / f"checkpoint_op_{final:03d}_words_num_filter"
    victim = op_dir / "partition_00002.parquet"
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    # ... and one byte of the last export of these checkpoints (night 2's, which published the latest
    # entries), inside the last old partition's rows: that part is serialized again
    last_old = OLD_FILES * ROWS // SIZE - 1
    entry_path = ReuseIndex(str(work)).entries()
    export1 = nights["tmp"] / "night2.jsonl"
    original = export1.read_bytes()
    part = next(
        e
        for _, e in entry_path
        if e.get("store") == "export_part_jsonl" and (e["source_job"], e["source_partition_id"]) == ("night1", last_old)
    )
    assert part["job_id"] == "night2"
    at = part["offset"] + part["length"] // 2
    export1.write_bytes(original[:at] + bytes([original[at] ^ 0x01]) + original[at + 1 :])
    try:
        _, s = run_job(tmp_path, nights["data"], "night2b", work)
    finally:
        export1.write_bytes(original)
    assert_same_bytes(_bytes(tmp_path / "night2b.jsonl"), _bytes(nights["tmp"] / "scratch.jsonl"))
    assert s["reuse"]["partitions_reused"] == OLD_FILES * ROWS // SIZE - 1
    assert s["reuse"]["export_parts_reused"] == OLD_FILES * ROWS // SIZE - 2
    rejected = [e for e in read_events(str(night1)) if e["event_type"] == "checkpoint_rejected"]
    assert [e["partition_id"] for e in rejected] == [2]


def test_a_moved_first_occurrence_recomputes_past_the_deduplicator(nights, tmp_path):
    data = _copy_inputs(nights["data"], tmp_path / "in")
    # Night 2's first file now ends with a copy of a night-1 row of the second file: that row's first
    # occurrence moves into partition 1, so partition 2's exact-dedup mask changes (its content does not).
    rows1 = [json.loads(line) for line in open(data / "part_1.jsonl")]
    first = data / "part_0.jsonl"
    lines = first.read_text().splitlines()
    last = json.loads(lines[-1])
    last["text"] = rows1[3]["text"]
    lines[-1] = json.dumps(last)
    first.write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    shutil.copytree(os.path.dirname(nights["night1"]), work, ignore=shutil.ignore_patterns("night2"))
    _, s = run_job(tmp_path, data, "night2c", work)
    _, scratch = run_job(tmp_path, data, "scratch_c", tmp_path / "scratch_work", reuse=False)
    assert_same_bytes(_bytes(tmp_path / "night2c.jsonl"), _bytes(tmp_path / "scratch_c.jsonl"))
    reused = {
        e["partition_id"]: e for e in read_events(str(work / "night2c")) if e["event_type"] == "checkpoint_reused"
    }
    assert 1 not in reused  # its content changed: computed
    segments_of_2 = {
        e["segment"]
        for e in read_events(str(work / "night2c"))
        if e["event_type"] == "checkpoint_reused" and e["partition_id"] == 2
    }
    assert segments_of_2 == {0}  # keys and ops before the dedup reused; its mask differs, so not past it
    assert s["reuse"]["partitions_partly_reused"] >= 1


def test_gc_keeps_running_resumable_and_referenced_jobs_and_removes_the_rest(nights, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(os.path.dirname(nights["night1"]), work)
    # an older completed job nothing references, and a failed (resumable) one
    for name, status, end in (("night0", "completed", 1.0), ("broken", "failed", 2.0)):
        shutil.copytree(work / "night1", work / name, ignore=shutil.ignore_patterns("reused_from"))
        summary = json.load(open(work / name / "job_summary.json"))
        summary.update(status=status, end_time=end, job_id=name)
        json.dump(summary, open(work / name / "job_summary.json", "w"))
    ReuseIndex(str(work)).publish("00deadbeef", {"job_id": "night0", "partition_id": 0})
    dry = collect(str(work), keep_last_n_jobs=1, dry_run=True)
    assert [d["job_id"] for d in dry.deleted] == ["night0"] and os.path.isdir(work / "night0" / "checkpoints")
    res = collect(str(work), keep_last_n_jobs=1)
    assert [d["job_id"] for d in res.deleted] == ["night0"] and res.freed_bytes == dry.freed_bytes > 0
    kept = {k["job_id"]: k["why"] for k in res.kept}
    assert kept == {"night2": "recent", "night1": "reused by night2", "broken": "resumable (failed)"}
    assert sorted(os.listdir(work / "night0" / "checkpoints")) == ["partitioning_info.json"]
    assert os.path.exists(work / "night0" / "job_summary.json")
    assert res.index_entries_removed == 1 and ReuseIndex(str(work)).lookup("00deadbeef") is None
    # a size budget drops old completed jobs nothing kept references, oldest first; never the referenced
    # night 1, nor the newest completed job
    tight = collect(str(work), keep_last_n_jobs=5, max_bytes=1)
    assert [d["job_id"] for d in tight.deleted] == []
    assert {k["job_id"] for k in tight.kept} == {"night2", "night1", "broken"}
    # a running job (its lock held by a live process) is never touched, even with nothing else kept
    job_lock.acquire(str(work / "night2"), job_lock.owner_identity("gc-test"))  # held by this (live) process
    none_kept = collect(str(work), keep_last_n_jobs=0)
    assert {k["job_id"]: k["why"] for k in none_kept.kept}["night2"] == "running"
    assert "night1" in {k["job_id"] for k in none_kept.kept}  # still referenced by the running job


def test_the_reuse_line_names_the_counts_sizes_and_source():
    reuse = {
        "partitions_reused": 20,
        "partitions_partly_reused": 0,
        "checkpoints_reused": 40,
        "bytes_reused": 64_172_851,
        "source_jobs": ["night1"],
        "computed_partitions": 1,
        "export_parts_reused": 20,
        "export_bytes_reused": 61_760_000,
    }
    assert reuse_line(reuse) == (
        "reused from night1: 20 of 21 partitions, 40 checkpoints (61.2 MiB), 20 export parts (58.9 MiB); 1 computed"
    )
    assert reuse_line({"off": "open_tracer is true"}) == "off: open_tracer is true"
    assert reuse_line(None) is None


def test_a_pin_waits_for_a_running_gc(tmp_path):
    """gc decides and deletes under the exclusive lock; a job's pin (shared lock) lands before or after,
    never in between, so gc never deletes a source that a pin written before it started protects."""
    import threading

    from airflow_provider_dj.engine.storage.reuse_index import gc_guard, pin_source

    job = tmp_path / "night2"
    job.mkdir()
    done = threading.Event()
    with gc_guard(str(tmp_path), exclusive=True):
        t = threading.Thread(target=lambda: (pin_source(str(job), "night1"), done.set()))
        t.start()
        assert not done.wait(0.5)  # blocked while gc holds the lock
        assert pinned_sources(str(job)) == set()
    t.join(60)  # returns as soon as the pin lands; the bound only ends a hung test
    assert done.is_set() and pinned_sources(str(job)) == {"night1"}


def test_reuse_with_open_tracer_is_said_to_be_off(tmp_path):
    """Most of Data-Juicer's shipped recipes set open_tracer: true; reuse is off then, and says why."""
    from airflow_provider_dj.engine.execution.reuse import reuse_enabled, reuse_off_reason

    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path / 'in.jsonl'}\nexport_path: {tmp_path / 'o.jsonl'}\nopen_tracer: true\n"
        "intermediate_storage: {reuse_across_jobs: true}\nprocess:\n  - clean_email_mapper:\n"
    )
    traced = load_recipe(str(recipe))
    assert not reuse_enabled(traced) and "open_tracer: false" in reuse_off_reason(traced)
    plain = load_recipe(str(recipe), {"open_tracer": False})
    assert reuse_enabled(plain) and reuse_off_reason(plain) is None


def test_reused_partitions_keep_their_lineage(nights):
    from airflow_provider_dj.engine.observe.lineage_query import JobLineage

    jl1, jl2 = JobLineage(nights["night1"]), JobLineage(nights["night2"])
    reused = nights["s2"]["reuse"]["partitions_reused"]
    assert reused == len(jl1.parts)
    fates = set()
    for row in range(jl1.parts[-1]["end_row"]):  # every row of the reused partitions: the same path in night 2
        p1, p2 = jl1.path(row, texts=False), jl2.path(row, texts=False)
        assert p2 == p1
        assert "not recorded" not in {s.fate for s in p2.steps}
        fates.add(p2.fate)
    assert {"kept", "filtered", "duplicate"} <= fates
    # copied into night 2's own lineage (gc of night 1 cannot take it), under night 2's partition ids
    assert os.path.isdir(os.path.join(nights["night2"], "lineage", "partition_00000"))


def test_a_reused_duplicate_names_the_row_of_the_new_job(nights, tmp_path):
    """A partition reused past the exact deduplicator keeps its mask, but the row its duplicate repeats
    moved (an earlier row of partition 0 now holds that text): lineage names night 2's row, not night 1's."""
    from airflow_provider_dj.engine.observe.lineage_query import JobLineage

    jl1 = JobLineage(nights["night1"])
    p0_end = jl1.parts[0]["end_row"]
    dups = [
        (int(r), int(d))
        for p in jl1.parts[1:]
        for r, d, o in zip(
            *(jl1.of(p["partition_id"]).table.column(c).to_pylist() for c in ("dup_of_row", "input_row", "op_index"))
        )
        if o == 3 and r is not None and r < p0_end
    ]
    assert dups, "night 1 has an exact duplicate of a partition-0 row in a later partition"
    r, d = dups[0]
    targets = {x for p in jl1.parts for x in jl1.of(p["partition_id"]).table.column("dup_of_row").to_pylist()}
    q = next(x for x in range(r) if jl1.path(x, texts=False).fate == "kept" and x not in targets)
    data = _copy_inputs(nights["data"], tmp_path / "in")
    first = data / "part_0.jsonl"
    lines = first.read_text().splitlines()
    row_q = json.loads(lines[q])
    row_q["text"] = json.loads(lines[r])["text"]  # row r's text now first appears at row q
    lines[q] = json.dumps(row_q)
    first.write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    shutil.copytree(os.path.dirname(nights["night1"]), work, ignore=shutil.ignore_patterns("night2"))
    job_dir, _ = run_job(tmp_path, data, "night2q", work)
    pid = jl1.partition_of(d)["partition_id"]
    reused = [e for e in read_events(job_dir) if e["event_type"] == "checkpoint_reused" and e["partition_id"] == pid]
    assert reused and max(e["op_index"] for e in reused) >= 3  # its state past the dedup came from night 1
    step1, step2 = jl1.path(d, texts=False).steps[3], JobLineage(job_dir).path(d, texts=False).steps[3]
    assert (step1.fate, step1.duplicate_of) == ("duplicate", r)
    assert (step2.fate, step2.duplicate_of, step2.duplicate_of_partition) == ("duplicate", q, 0)
