"""Runs inside the Data-Juicer side environment (not collected by pytest).

``test_dj_adapter_side_venv.py`` starts this file with that environment's
Python and this repository on PYTHONPATH; it prints one JSON document with
what the adapter produced and what Data-Juicer itself produced on the same
fixture, and the test compares them.  Kept apart because Data-Juicer is not
installed in the main test environment (and must not be: it pins dill).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa


def fixture_rows() -> list[dict]:
    rows = []
    for i in range(40):
        mark = "◆" if i % 2 else "●"
        text = f"Doc {i % 11} {mark} about topic {i % 11 % 3}"  # repeats every 11 rows
        if i % 9 == 0:
            text = text.upper()  # a duplicate once lowercased and stripped of the marks
        rows.append({"id": i, "n": i, "text": text + ("  " if i % 4 == 0 else "")})
    return rows


def direct_checks(rows: list[dict]) -> dict:
    """Adapter on Arrow tables vs the Data-Juicer op called on its own batch format."""
    from data_juicer.ops.base_op import OPERATORS

    from airflow_provider_dj.ops.dj_compat.adapter import adapter_class
    from airflow_provider_dj.ops.registry import create_op

    table = pa.Table.from_pylist(rows).append_column("__dj__input_row__", pa.array(range(len(rows)), pa.int64()))
    out: dict = {}

    mapper = create_op("remove_specific_chars_mapper", {"chars_to_remove": "◆●"}, "text")
    adapted = mapper.process_table(table)
    dj = OPERATORS.modules["remove_specific_chars_mapper"](chars_to_remove="◆●")
    out["mapper"] = {
        "adapter": adapted.column("text").to_pylist(),
        "dj": dj.process_batched({"text": [r["text"] for r in rows]})["text"],
        "columns": adapted.column_names,
        "input_rows": adapted.column("__dj__input_row__").to_pylist(),
    }

    lam = create_op("python_lambda_mapper", {"lambda_str": "lambda s: dict(s, text=s['text'] + '!')"}, "text")
    out["lambda_mapper"] = lam.process_table(table.slice(0, 3)).column("text").to_pylist()

    flt = create_op("general_field_filter", {"filter_condition": "n >= 30 or n < 3"}, "text")
    with_stats = flt.compute_stats(table)
    dj_f = OPERATORS.modules["general_field_filter"](filter_condition="n >= 30 or n < 3")
    dj_keep = []
    for r in rows:
        s = dj_f.compute_stats_single({**r, "__dj__stats__": {}})
        dj_keep.append(bool(dj_f.process_single(s)))
    out["filter"] = {
        "adapter": flt.keep_mask(with_stats).to_pylist(),
        "dj": dj_keep,
        "stats": [s["general_field_filter_condition"] for s in with_stats.column("__dj__stats__").to_pylist()],
    }

    ded = adapter_class("document_deduplicator")(text_key="text", lowercase=True)
    keys = ded.compute_hash(table)
    halves = [keys.slice(0, 17), keys.slice(17)]  # two partitions' keys
    from data_juicer.core.data import NestedDataset

    dj_d = OPERATORS.modules["document_deduplicator"](lowercase=True)
    kept = dj_d.run(NestedDataset.from_list(rows))
    out["dedup"] = {"adapter_mask": ded.resolve_global(halves).tolist(), "dj_kept_ids": list(kept["id"])}

    chunk = create_op("text_chunk_mapper", {"split_pattern": " "}, "text")
    try:
        chunk.process_table(table.slice(0, 2))
        out["row_count_error"] = None
    except Exception as exc:  # noqa: BLE001 - the message is the result
        out["row_count_error"] = f"{type(exc).__name__}: {exc}"
    return out


PROCESS = """process:
  - remove_specific_chars_mapper: {chars_to_remove: "◆●"}
  - general_field_filter: {filter_condition: "n >= 2"}
  - whitespace_normalization_mapper:
  - document_deduplicator: {lowercase: true}
  - specified_numeric_field_filter: {field_key: n, min_value: 0, max_value: 36}
"""


def engine_run(work: str, data: str, parts: int) -> list[dict]:
    """The full engine, in-process (no Airflow, no Ray), with document_deduplicator
    forced through the adapter so the global phase runs on Data-Juicer's hashes."""
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.config.adapted_ops import check_adapted_ops
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.ops import registry
    from airflow_provider_dj.ops.dj_compat.adapter import DJDeduplicator

    registry.load_builtin_ops()
    registry._REGISTRY.pop("document_deduplicator", None)  # test hook: adapter instead of the native op
    name = f"p{parts}"
    recipe = os.path.join(work, f"{name}.yaml")
    with open(recipe, "w", encoding="utf-8") as fh:
        fh.write(
            f"dataset_path: {data}\nexport_path: {work}/{name}.jsonl\nwork_dir: {work}/jobs\n"
            f"partition: {{mode: manual, num_of_partitions: {parts}}}\n{PROCESS}"
        )
    r = load_recipe(recipe)
    assert issubclass(registry.get_op_class("document_deduplicator"), DJDeduplicator)
    check_adapted_ops(r)
    result = run_job(recipe, job_id=name, workers=1)  # partitions in this process: the test hook holds there
    with open(result.export_path) as fh:
        return [json.loads(line) for line in fh]


def dj_process_run(work: str, data: str) -> list[dict]:
    """Data-Juicer's own executor (dj-process) on the same recipe."""
    cfg = os.path.join(work, "dj.yaml")
    with open(cfg, "w", encoding="utf-8") as fh:
        fh.write(
            f"project_name: adapter_parity\ndataset_path: {data}\nexport_path: {work}/dj_out/out.jsonl\n"
            f"work_dir: {work}/dj_work\nnp: 1\nopen_tracer: false\n{PROCESS}"
        )
    exe = os.path.join(os.path.dirname(sys.executable), "dj-process")
    subprocess.run([exe, "--config", cfg], check=True, capture_output=True, cwd=work)
    with open(os.path.join(work, "dj_out", "out.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def main() -> int:
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    rows = fixture_rows()
    data = os.path.join(work, "in.jsonl")
    with open(data, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    result = {"rows": rows, "direct": direct_checks(rows)}
    result["engine"] = {str(p): engine_run(work, data, p) for p in (1, 3)}
    result["dj_process"] = dj_process_run(work, data)
    print("@@RESULT@@" + json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
