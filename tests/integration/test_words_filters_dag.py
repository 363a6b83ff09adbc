"""Word-list filters and a tokenized filter through the generated DAG (real Airflow dag.test(), real
local Ray, 1 and 3 partitions) export exactly the rows, and stats, Data-Juicer 1.6.1 kept.

The expectations are the DJ-made fixtures of tests/conformance/words_filters
(same input rows, same word lists and SentencePiece model); the filters are
independent, so DJ keeps a row of the chain iff each op's fixture kept it.
The model is named by a path in ``lang`` (``{lang}.sp.model``, DJ's own
rule) because environment variables set here would not reach Ray workers.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "words_filters")
STEPS = [  # (op, fixture variant)
    ("stopwords_filter", "all"),
    ("flagged_words_filter", "zh_aug"),
    ("words_num_filter", "tokenized_en"),
]


def _args(op: str, variant: str) -> dict:
    with open(os.path.join(FIX, "variants.json"), encoding="utf-8") as f:
        args = json.load(f)[op][variant]
    args = {k: v.replace("{FIX}", FIX) if isinstance(v, str) else v for k, v in args.items()}
    if args.get("tokenization"):
        args["lang"] = os.path.join(FIX, "models", args.get("lang", "en"))
    return args


@pytest.mark.parametrize("parts", [1, 3])
def test_word_filters_export_data_juicers_rows(tmp_path, run_dag, parts):
    process = [{op: _args(op, v)} for op, v in STEPS]
    recipe = tmp_path / "words.yaml"
    recipe.write_text(
        json.dumps(
            {
                "project_name": f"words_filters_{parts}",
                "dataset_path": os.path.join(FIX, "inputs", "words.jsonl"),
                "export_path": str(tmp_path / "out.jsonl"),
                "work_dir": str(tmp_path / "work"),
                "partition": {"mode": "manual", "num_of_partitions": parts},
                "checkpoint": {"strategy": "every_op"},
                "keep_stats_in_res_ds": True,
                "process": process,
            }
        )
    )
    dr = run_dag(str(recipe), {"job_id": f"words{parts}"})
    assert str(dr.state).endswith("success")
    expected = {op: read_jsonl(os.path.join(FIX, "expected", f"{op}__{v}.jsonl")) for op, v in STEPS}
    kept_ids = [r["id"] for r in expected["stopwords_filter"] if all(expected[op][r["id"]]["kept"] for op, _ in STEPS)]
    ours = read_jsonl(tmp_path / "out.jsonl")
    assert [r["id"] for r in ours] == kept_ids
    assert 0 < len(kept_ids) < len(expected["stopwords_filter"])  # the chain keeps some rows, drops others
    for row in ours:
        want = {}
        for op, _ in STEPS:
            want.update(expected[op][row["id"]]["stats"])
        assert row["__dj__stats__"] == want
