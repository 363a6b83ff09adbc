"""The tracer (open_tracer): per-partition candidates + merge give the same trace files for
1, 3 and 8 partitions, equal to a single pass over the whole input in order.

Real engine, real files: jobs are prepared and run in-process (``run_prepared_job``,
or step by step where a test resumes) with no Airflow and no Ray.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.runner.local import run_prepared_job
from airflow_provider_dj.ops.registry import create_op
from airflow_provider_dj.testing.sample_corpus import write_corpus

PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
  - document_deduplicator: {lowercase: true}
  - text_length_filter: {min_len: 300}
"""
FILES = [
    "duplicate-document_deduplicator.jsonl",
    "sample_trace-clean_email_mapper.jsonl",
    "sample_trace-text_length_filter.jsonl",
    "sample_trace-whitespace_normalization_mapper.jsonl",
    "sample_trace-words_num_filter.jsonl",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(str(tmp_path_factory.mktemp("data") / "in.jsonl"), 400, seed=11)


def run_job(
    tmp_path,
    corpus,
    parts,
    *,
    tracer="open_tracer: true\ntrace_num: 4\ntrace_keys: [id, meta]\n",
    job_id=None,
    strategy="every_op",
):
    name = job_id or f"p{parts}"
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"dataset_path: {corpus}\nexport_path: {tmp_path / name}.jsonl\nwork_dir: {tmp_path / 'work'}\n"
        f"{tracer}partition: {{mode: manual, num_of_partitions: {parts}}}\n"
        f"checkpoint: {{strategy: {strategy}}}\n{PROCESS}"
    )
    job = prepare_job(load_recipe(str(recipe)), job_id=name)
    return job.job_dir, run_prepared_job(job).summary


def read_jsonl(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, corpus):
    tmp = tmp_path_factory.mktemp("tracer")
    return {n: run_job(tmp, corpus, n) for n in (1, 3, 8)}


def test_trace_files_identical_for_1_3_8_partitions(jobs):
    contents = {}
    for n, (job_dir, _) in jobs.items():
        d = os.path.join(job_dir, "trace")
        assert sorted(f for f in os.listdir(d) if f.endswith(".jsonl")) == FILES
        contents[n] = {f: open(os.path.join(d, f), "rb").read() for f in FILES}
    assert contents[1] == contents[3] == contents[8]
    assert all(contents[1][f] for f in FILES)  # every op has entries with this corpus


def test_mapper_trace_is_first_changed_rows_in_input_order(jobs, corpus):
    job_dir, _ = jobs[8]
    entries = read_jsonl(os.path.join(job_dir, "trace", "sample_trace-clean_email_mapper.jsonl"))
    # Independent expectation: the op over the whole input in one pass.
    import pyarrow.json as pj

    table = pj.read_json(corpus)
    out = create_op("clean_email_mapper", {}, "text").process_table(table)
    changed = pc.indices_nonzero(pc.not_equal(table.column("text"), out.column("text")).combine_chunks())
    first = changed.to_pylist()[:4]
    assert [e["__dj__input_row__"] for e in entries] == first
    assert [e["original_text"] for e in entries] == table.column("text").take(pa.array(first)).to_pylist()
    assert [e["processed_text"] for e in entries] == out.column("text").take(pa.array(first)).to_pylist()
    assert [e["id"] for e in entries] == table.column("id").take(pa.array(first)).to_pylist()
    assert list(entries[0])[:2] == ["id", "meta"]  # trace_keys first, as Data-Juicer writes them
    assert all(e["original_text"] != e["processed_text"] for e in entries)


def test_filter_trace_holds_removed_samples_with_stats(jobs):
    job_dir, summary = jobs[3]
    entries = read_jsonl(os.path.join(job_dir, "trace", "sample_trace-words_num_filter.jsonl"))
    assert len(entries) == 4
    rows = [e["__dj__input_row__"] for e in entries]
    assert rows == sorted(rows)
    for e in entries:
        assert e["__dj__stats__"]["num_words"] < 5  # the reason it was removed
    exported = {r["id"] for r in read_jsonl(summary["export"]["path"])}
    assert not exported & {e["id"] for e in entries}


def test_duplicate_trace_pairs_kept_first_and_removed_later(jobs):
    job_dir, summary = jobs[8]
    pairs = read_jsonl(os.path.join(job_dir, "trace", "duplicate-document_deduplicator.jsonl"))
    assert len(pairs) == 4
    exported = {r["id"] for r in read_jsonl(summary["export"]["path"])}
    dup2_rows = [p["dup2"]["__dj__input_row__"] for p in pairs]
    assert dup2_rows == sorted(dup2_rows)
    for p in pairs:
        a, b = p["dup1"], p["dup2"]
        assert a["__dj__input_row__"] < b["__dj__input_row__"]
        assert a["text"].lower().strip() == b["text"].lower().strip()
        assert a["id"] in exported or a["id"] not in exported  # may be filtered later by text_length_filter
        assert b["id"] not in exported
    assert len({p["dup1"]["text"].lower() for p in pairs}) == 4  # one pair per distinct duplicate


def test_trace_report_in_summary(jobs):
    _, summary = jobs[3]
    ops = {o["op_name"]: o for o in summary["trace"]["ops"]}
    assert ops["clean_email_mapper"]["complete"] and ops["clean_email_mapper"]["entries"] == 4
    assert ops["document_deduplicator"]["written"]


def test_tracing_off_writes_nothing(tmp_path, corpus):
    job_dir, summary = run_job(tmp_path, corpus, 2, tracer="")
    assert not os.path.exists(os.path.join(job_dir, "trace"))
    assert "trace" not in summary


def test_op_list_to_trace_limits_files(tmp_path, corpus):
    job_dir, _ = run_job(
        tmp_path, corpus, 2, tracer="open_tracer: true\nop_list_to_trace: [words_num_filter, document_deduplicator]\n"
    )
    files = sorted(f for f in os.listdir(os.path.join(job_dir, "trace")) if f.endswith(".jsonl"))
    assert files == ["duplicate-document_deduplicator.jsonl", "sample_trace-words_num_filter.jsonl"]
    assert len(read_jsonl(os.path.join(job_dir, "trace", "sample_trace-words_num_filter.jsonl"))) == 10  # default


def test_missing_candidates_are_reported_not_hidden(tmp_path, corpus):
    """Candidates of partition 0 lost (e.g. tracing switched on only at a resume that loaded
    the op from a checkpoint): the merge says the file is incomplete and which partition."""
    from airflow_provider_dj.engine.observe.tracer import merge_traces

    job_dir, _ = run_job(tmp_path, corpus, 3, job_id="lost")
    os.remove(os.path.join(job_dir, "trace", "parts", "op_000_clean_email_mapper", "partition_00000.json"))
    report = merge_traces(job_dir)
    ops = {o["op_name"]: o for o in report["ops"]}
    assert ops["clean_email_mapper"]["partitions_without_candidates"] == [0]
    assert ops["clean_email_mapper"]["complete"] is False
    assert ops["whitespace_normalization_mapper"]["complete"] is True
    rows = [
        e["__dj__input_row__"]
        for e in read_jsonl(os.path.join(job_dir, "trace", "sample_trace-clean_email_mapper.jsonl"))
    ]
    assert rows and min(rows) >= 134  # only partitions 1-2 (rows 134..) contributed


def test_resume_after_crash_keeps_trace_identical(tmp_path, corpus, jobs):
    """Checkpoints after ops 3-4 removed (as if the job crashed after op 2): the resumed job's
    trace files equal the clean run's, byte for byte, because ops 0-2's candidates were durable."""
    import shutil

    job_dir, _ = run_job(tmp_path, corpus, 3, job_id="crashy")
    os.remove(os.path.join(job_dir, "job_summary.json"))
    for f in FILES:
        os.remove(os.path.join(job_dir, "trace", f))
    for d in os.listdir(os.path.join(job_dir, "checkpoints")):
        if d.startswith(("checkpoint_op_003", "checkpoint_op_004", "dedup_")):
            shutil.rmtree(os.path.join(job_dir, "checkpoints", d))
    for p in range(3):
        assert run_segment(job_dir, 0, p).ops_run == []  # resumed from the op-2 checkpoint
    resolve_global_op(job_dir, 3)
    for p in range(3):
        run_segment(job_dir, 1, p)
    export_job(job_dir)
    clean_dir, _ = jobs[3]
    for f in FILES:
        assert (
            open(os.path.join(job_dir, "trace", f), "rb").read()
            == open(os.path.join(clean_dir, "trace", f), "rb").read()
        )


def test_op_list_to_trace_typo_names_the_key_and_suggests(tmp_path, corpus):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(
        f"dataset_path: {corpus}\nexport_path: {tmp_path}/o.jsonl\nopen_tracer: true\n"
        f"op_list_to_trace: [words_num_filtr]\n{PROCESS}"
    )
    with pytest.raises(RecipeError) as e:
        load_recipe(str(recipe))
    assert e.value.key == "op_list_to_trace[0]"
    assert "Did you mean 'words_num_filter'?" in e.value.message
