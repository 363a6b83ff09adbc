"""MinHash / SimHash near-dedup against fixtures from the reference Data-Juicer 1.6.1.

Fixtures come from tests/conformance/near_dedup/regenerate.sh (run in DJ's
venv); this module only uses our package.  The kept rows must be exactly
DJ's, whether the signatures are computed in one table or in chunks and
resolved from several tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.dedup import near as nd
from airflow_provider_dj.ops.registry import create_op, get_op_class

FIX = Path(__file__).parent
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
CASES = [(op, variant, args) for op, by_name in VARIANTS.items() for variant, args in by_name.items()]


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


ROWS = read_jsonl(FIX / "inputs" / "near_dup.jsonl")


def kept_rows(op, rows: list[dict], parts: int) -> list[dict]:
    table = pa.Table.from_pylist(rows)
    bounds = np.linspace(0, len(rows), parts + 1).astype(int)
    sigs = [op.compute_hash(table.slice(a, b - a)) for a, b in zip(bounds[:-1], bounds[1:])]
    mask = op.resolve_global(sigs)
    return [r for r, k in zip(rows, mask) if k]


@pytest.mark.parametrize("parts", [1, 5])
@pytest.mark.parametrize("op_name,variant,args", CASES, ids=[f"{o}__{v}" for o, v, _ in CASES])
def test_near_dedup_matches_data_juicer(op_name: str, variant: str, args: dict, parts: int) -> None:
    get_op_class(op_name).validate_args(args)
    expected = read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl")
    got = kept_rows(create_op(op_name, args), ROWS, parts)
    assert [r["id"] for r in got] == [r["id"] for r in expected]


def test_fixture_has_near_duplicates() -> None:
    for op_name, variant, _ in CASES:
        n = len(read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl"))
        assert 100 < n < len(ROWS), (op_name, variant, n)


def test_fixtures_are_small() -> None:
    assert sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file() and "__pycache__" not in p.parts) < 400_000


def test_optimal_param_matches_data_juicer() -> None:
    grid = json.loads((FIX / "expected" / "optimal_param.json").read_text())
    for key, want in grid.items():
        th, perm = key.split("/")
        assert list(nd.optimal_param(float(th), int(perm))) == want, key
