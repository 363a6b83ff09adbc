"""MinHash / SimHash dedup through the generated DAG: Data-Juicer 1.6.1's kept
rows, for 1, 3 and 8 partitions.

Expected rows come from tests/conformance/near_dedup (DJ's
whitespace_normalization_mapper followed by the dedup, default arguments).
"""

from __future__ import annotations

import os

import pytest

from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "near_dedup")

RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition:
  mode: manual
  num_of_partitions: {parts}
process:
  - whitespace_normalization_mapper:
  - {op}:
"""


@pytest.mark.parametrize("parts", [1, 3, 8])
@pytest.mark.parametrize("op", ["document_minhash_deduplicator", "document_simhash_deduplicator"])
def test_near_dedup_matches_data_juicer_for_any_partition_count(tmp_path, run_dag, op, parts):
    short = "minhash" if "minhash" in op else "simhash"
    recipe = tmp_path / "near.yaml"
    recipe.write_text(
        RECIPE.format(
            name=f"near_{short}_{parts}",
            data=os.path.join(FIX, "inputs", "near_dup.jsonl"),
            export=tmp_path / "out.jsonl",
            work=tmp_path / "work",
            parts=parts,
            op=op,
        )
    )
    dr = run_dag(str(recipe), {"job_id": f"{short}{parts}"})
    assert str(dr.state).endswith("success")
    got = [(r["id"], r["text"]) for r in read_jsonl(tmp_path / "out.jsonl")]
    want = [(r["id"], r["text"]) for r in read_jsonl(os.path.join(FIX, "expected", f"pipeline__{op}.jsonl"))]
    assert got == want
