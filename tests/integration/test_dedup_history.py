"""The nightly delta drill (docs/nightly.md#deduplication-against-history): `dedup_history` on, each night's
input only, real Airflow (dag.test) and real local Ray.

Exact dedup: night 1's export followed by night 2's equals, row for row, one run over both nights' input.
A night 2 that fails after its export (before the history commit) leaves CURRENT unchanged, and its resume
commits once.  MinHash: no exported night-2 row shares an LSH band with a night-1 export row, and every row
removed as a history duplicate names the night-1 export row it shares a band with.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pyarrow.parquet as pq

from tests.integration.conftest import read_jsonl

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def _doc(rng: random.Random, n: int = 14, vocab: list[str] = WORDS) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


VOCAB = [f"w{i}" for i in range(400)]


def _write(path, texts: list[str]) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": os.path.basename(str(path)) + f"-{i}", "text": t}) + "\n")
    return str(path)


RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition:
  mode: manual
  num_of_partitions: 2
open_tracer: true
process:
  - text_length_filter:
      min_len: 20
{dedup}
{history}
"""
EXACT = "  - document_deduplicator:\n      lowercase: true"
MINHASH = (
    "  - document_minhash_deduplicator:\n      window_size: 2\n      num_permutations: 32\n"
    "      num_bands: 16\n      num_rows_per_band: 2"
)


def _recipe(tmp_path, name: str, data: str, dedup: str, history: str | None) -> str:
    path = tmp_path / f"{name}.yaml"
    hist = "" if history is None else f"dedup_history:\n  path: {history}\n  ops: [{dedup.split(':')[0][4:]}]\n"
    path.write_text(
        RECIPE.format(
            name=name,
            data=data,
            export=tmp_path / f"{name}_out.jsonl",
            work=tmp_path / "work",
            dedup=dedup,
            history=hist,
        )
    )
    return str(path)


def _state(dr) -> str:
    return str(dr.state).split(".")[-1].lower()


def _current(history: str) -> int:
    with open(os.path.join(history, "CURRENT")) as fh:
        return json.load(fh)["version"]


def test_exact_delta_drill_equals_one_run_over_both_nights_and_a_failed_night_commits_once(tmp_path, run_dag):
    rng = random.Random(5)
    night1 = [_doc(rng) for _ in range(60)] + ["short"]
    night1 += [night1[3], night1[10].upper()]  # in-night duplicates (lowercase: true)
    night2 = [_doc(rng) for _ in range(40)]
    night2 += [night1[0], night1[20].upper(), night1[59], night2[5]]  # history duplicates, one in-night
    rng.shuffle(night2)
    d1, d2 = _write(tmp_path / "n1.jsonl", night1), _write(tmp_path / "n2.jsonl", night2)
    both = tmp_path / "both.jsonl"
    both.write_bytes(open(d1, "rb").read() + open(d2, "rb").read())
    history = str(tmp_path / "history")

    scratch = _recipe(tmp_path, "scratch", str(both), EXACT, None)
    assert _state(run_dag(scratch, {"job_id": "scratch"})) == "success"

    r1 = _recipe(tmp_path, "night1", d1, EXACT, history)
    assert _state(run_dag(r1, {"job_id": "night1"})) == "success"
    assert _current(history) == 1

    r2 = _recipe(tmp_path, "night2", d2, EXACT, history)
    job2 = tmp_path / "work" / "night2"
    job2.mkdir(parents=True)
    (job2 / "_fault_injection.json").write_text(json.dumps([{"point": "history_commit", "times": 1}]))
    assert _state(run_dag(r2, {"job_id": "night2"}, retries=0)) == "failed"
    assert _current(history) == 1  # the export was written, but the failed night left the index as it was
    assert _state(run_dag(r2, {"resume": "night2"}, retries=0)) == "success"
    assert _current(history) == 2

    e1, e2 = read_jsonl(tmp_path / "night1_out.jsonl"), read_jsonl(tmp_path / "night2_out.jsonl")
    assert e1 + e2 == read_jsonl(tmp_path / "scratch_out.jsonl")
    manifest = json.load(open(os.path.join(history, "versions", "v000002", "manifest.json")))
    assert [j["job_id"] for j in manifest["jobs"]] == ["night1", "night2"]  # committed once
    assert manifest["ops"]["document_deduplicator"]["entries"] == len(e1) + len(e2)

    summary = json.load(open(job2 / "job_summary.json"))
    split = summary["dedup_history"]["ops"][0]
    assert (split["history_duplicates"], split["in_night_duplicates"]) == (3, 1)
    assert summary["dedup_history"]["commit"]["version"] == 2
    dups = pq.read_table(job2 / "dedup_history" / "op_001_document_deduplicator.parquet").to_pylist()
    inputs = read_jsonl(d2)
    for d in dups:  # each names the night-1 export row with the same (lowercased) text
        assert d["history_job_id"] == "night1"
        assert e1[d["history_export_row"]]["text"].lower() == inputs[d["__dj__input_row__"]]["text"].lower()
    # `why` on each history duplicate: its lineage names the earlier job and export row (recorded with the
    # mask), and that row of night 1's export really holds the same text.
    from airflow_provider_dj.engine.observe.lineage_query import why

    for d in dups:
        [path] = why(str(job2), input_row=d["__dj__input_row__"])
        [step] = [s for s in path.steps if s.fate == "duplicate"]
        assert (path.fate, step.op_name) == ("duplicate", "document_deduplicator")
        assert (step.history["job_id"], step.history["export_row"]) == ("night1", d["history_export_row"])
        assert f"duplicate of export row {d['history_export_row']} of earlier job night1" in step.reason
        assert e1[step.history["export_row"]]["text"].lower() == inputs[path.input_row]["text"].lower()
    # Night 2 is in CURRENT now; its global step run again (a UI clear) still reads its pinned version 1,
    # so its own exported rows never become its own history duplicates.
    import shutil

    from airflow_provider_dj.engine.execution.global_ops import resolve_global_op

    shutil.rmtree(job2 / "checkpoints" / "dedup_mask_op_001_document_deduplicator")
    again = resolve_global_op(str(job2), 1)
    assert (again.history_duplicates, again.history_version) == (3, 1)
    traced = [
        e for e in read_jsonl(job2 / "trace" / "duplicate-document_deduplicator.jsonl") if e.get("history_duplicate")
    ]
    assert len(traced) == 3
    for e in traced:  # the tracer names the same history row
        assert e["dup1"]["history_job_id"] == "night1"
        assert e1[e["dup1"]["history_export_row"]]["text"].lower() == e["dup2"]["text"].lower()


def _bands(op, texts: list[str]) -> np.ndarray:
    import pyarrow as pa

    t = op.compute_hash(pa.table({"text": texts}))
    return np.stack([t.column(c).to_numpy() for c in op.band_columns], axis=1)


def test_minhash_delta_drill_leaves_no_cross_night_band_and_names_each_history_row(tmp_path, run_dag):
    from airflow_provider_dj.ops.registry import create_op

    rng = random.Random(8)
    night1 = [_doc(rng, 20, VOCAB) for _ in range(50)]
    near = [t.split(" ") for t in night1[:6]]
    for w in near:
        w[-1] = "omega"  # one word changed: near duplicates of night-1 rows
    night2 = [_doc(rng, 20, VOCAB) for _ in range(30)] + [" ".join(w) for w in near]
    night2.append(night2[0].replace(night2[0].split(" ")[0], "omega", 1))  # an in-night near duplicate
    rng.shuffle(night2)
    d1, d2 = _write(tmp_path / "m1.jsonl", night1), _write(tmp_path / "m2.jsonl", night2)
    history = str(tmp_path / "mh_history")
    assert _state(run_dag(_recipe(tmp_path, "mh1", d1, MINHASH, history), {"job_id": "mh1"})) == "success"
    assert _state(run_dag(_recipe(tmp_path, "mh2", d2, MINHASH, history), {"job_id": "mh2"})) == "success"
    e1, e2 = read_jsonl(tmp_path / "mh1_out.jsonl"), read_jsonl(tmp_path / "mh2_out.jsonl")
    op = create_op(
        "document_minhash_deduplicator",
        {"window_size": 2, "num_permutations": 32, "num_bands": 16, "num_rows_per_band": 2},
        "text",
    )
    b1, b2 = _bands(op, [r["text"] for r in e1]), _bands(op, [r["text"] for r in e2])
    assert not (b1[:, None, :] == b2[None, :, :]).any()  # no pair across the exports shares a band
    dups = pq.read_table(
        tmp_path / "work" / "mh2" / "dedup_history" / "op_001_document_minhash_deduplicator.parquet"
    ).to_pylist()
    split = json.load(open(tmp_path / "work" / "mh2" / "job_summary.json"))["dedup_history"]["ops"][0]
    assert split["history_duplicates"] == len(dups) >= 6 and len(e2) == 37 - split["duplicates"]
    inputs = read_jsonl(d2)
    for d in dups:
        assert d["history_job_id"] == "mh1"
        mine = _bands(op, [inputs[d["__dj__input_row__"]]["text"]])[0]
        theirs = b1[d["history_export_row"]]
        assert mine[d["band"]] == theirs[d["band"]]  # the named row shares the named band
    # `why` on every duplicate of night 2: a history duplicate names mh1, its export row and the band the
    # op's own hashing says the two texts share; an in-night one names the kept row of night 2 it
    # shares a named band with.
    from airflow_provider_dj.engine.observe.lineage_query import why

    in_night = 0
    for row in range(len(inputs)):
        [path] = why(str(tmp_path / "work" / "mh2"), input_row=row)
        steps = [s for s in path.steps if s.fate == "duplicate"]
        if not steps:
            continue
        [step] = steps
        mine = _bands(op, [inputs[row]["text"]])[0]
        if step.history is not None:
            assert step.history["job_id"] == "mh1" and step.band is not None
            assert mine[step.band] == b1[step.history["export_row"]][step.band]
            assert f"of earlier job mh1 (LSH band {step.band})" in step.reason
        else:
            in_night += 1
            [kept] = why(str(tmp_path / "work" / "mh2"), input_row=step.duplicate_of)
            assert kept.fate == "kept" and step.band is not None
            assert mine[step.band] == _bands(op, [inputs[step.duplicate_of]["text"]])[0][step.band]
    assert in_night == split["in_night_duplicates"] >= 1
