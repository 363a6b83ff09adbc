"""Inputs and recipes for the job view's tests: a job whose partition failed after a crash.

Shared by tests/unit/plugins (in-process engine runs), the e2e API and browser
tests (``airflow standalone``) and bench/job_view_bench.py (1,000 partitions).

The input holds real corpus rows plus rows whose ``text`` is null: every op
reading ``text`` sets those aside into ``failed/`` with a reason, so the view
has failed samples to page through.  The recipe turns the tracer on, so a row
``words_num_filter`` removed can be looked up with "why".  The crash is the
engine's own fault injection: ``raise`` as op 1 starts in one partition, once.
"""

from __future__ import annotations

import json
import os

from airflow_provider_dj.testing.sample_corpus import write_corpus

#: Every NULL_EVERY-th input row has a null text (a failed sample).
NULL_EVERY = 9

OPS = """\
process:
  - whitespace_normalization_mapper:
  - words_num_filter:
      min_num: 12
  - document_deduplicator:
"""


def write_view_input(path: str, rows: int, seed: int = 5) -> tuple[str, list[int]]:
    """The corpus with every NULL_EVERY-th row's text nulled; returns (path, null row numbers)."""
    raw = write_corpus(path + ".raw", rows, seed=seed)
    nulls = []
    with open(raw, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            row = json.loads(line)
            if i % NULL_EVERY == NULL_EVERY - 1:
                row["text"] = None
                nulls.append(i)
            dst.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.remove(raw)
    return path, nulls


def view_recipe(name: str, data: str, export: str, work: str, parts: int, *, ops: str = OPS) -> str:
    return (
        f"project_name: {name}\ndataset_path: {data}\nexport_path: {export}\nwork_dir: {work}\n"
        f"text_keys: text\npartition: {{mode: manual, num_of_partitions: {parts}}}\n"
        "checkpoint: {enabled: true, strategy: every_op}\n"
        "open_tracer: true\ntrace_num: 1000\nmax_failed_ratio: 0.9\n" + ops
    )


def crash_fault(partition_id: int, op_index: int = 1) -> list[dict]:
    """The partition crashes as op ``op_index`` starts, once: the op before it is committed, the retry resumes."""
    return [{"point": "op_start", "partition_id": partition_id, "op_index": op_index, "times": 1, "kind": "raise"}]


def filtered_rows(job_dir: str, op_index: int = 1, op_name: str = "words_num_filter") -> list[int]:
    """Input rows the filter removed, from the tracer's per-partition candidates (what 'why' reads)."""
    d = os.path.join(job_dir, "trace", "parts", f"op_{op_index:03d}_{op_name}")
    rows = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, name), encoding="utf-8") as fh:
            rows += [e["__dj__input_row__"] for e in json.load(fh)["entries"]]
    return sorted(rows)
