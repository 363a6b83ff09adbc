"""The native image filters against fixtures produced by the reference Data-Juicer 1.6.1.

Fixtures live in ``filters_image/`` and come from its ``regenerate.sh`` (DJ run in its own venv on
the corpus ``filters_image/corpus.py`` builds from images installed packages ship); this module
builds the same corpus and uses only our package.  The rows go through what a job runs: the
partition is planned and read (``read_partition``: relative image paths made absolute, as DJ's
loader makes them), then ``apply_op`` with ``skip_op_error``.  Per row, the image paths, the stats
(compared as JSON text: an int where DJ has a float fails), the keep decision and the failure must
equal DJ's, on the whole table and in chunks of 5.

The one difference, on purpose: a truncated image fails its row here (with the reason), where DJ,
whose import makes Pillow fill a truncated image in, keeps or drops the row on its header's size.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import STATS_COLUMN
from airflow_provider_dj.ops.registry import create_op, get_op_class
from tests.conformance.filters_image import corpus
from tests.conformance.image_tables import job_tables, read_jsonl

FIX = Path(__file__).parent / "filters_image"
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
SETS = {"rows": "", "bad": "bad_"}
CASES = [(s, op, v, args) for s in SETS for op, by_name in VARIANTS.items() for v, args in by_name.items()]
#: Files DJ decodes and we refuse (see the module docstring), in the ops that decode images.
REFUSED_ON_PURPOSE = ("truncated.jpg",)
DECODING_OPS = ("image_shape_filter", "image_aspect_ratio_filter")

pytestmark = pytest.mark.skipif(
    bool(corpus.missing_sources()), reason=f"the shipped images are not installed: {corpus.missing_sources()}"
)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, pa.Table]]:
    """Each set's rows as a job reads them (tests/conformance/image_tables.py)."""
    return job_tables(tmp_path_factory.mktemp("image_corpus"))


def _placeholder(value: object, folder: Path) -> object:
    return json.loads(json.dumps(value).replace(corpus.PLACEHOLDER, str(folder)))


def test_relative_paths_are_read_as_data_juicer_loads_them(tables) -> None:
    folder, table = tables["rows"]
    loaded = read_jsonl(FIX / "expected" / "loaded-rows.jsonl")
    assert table.column("images").to_pylist() == [_placeholder(r["images"], folder) for r in loaded]


def test_dot_dot_paths_are_read_normalised_as_data_juicers_ray_loader_gives_them(tables) -> None:
    """DJ's default loader joins without normalising (``bad/../media/x``); its Ray loader, which the
    partitioned executor uses, makes an existing file's path absolute and normal, as we do."""
    folder, table = tables["bad"]
    loaded = read_jsonl(FIX / "expected" / "loaded-bad.jsonl")
    expected = [[os.path.normpath(p) for p in _placeholder(r["images"], folder)] for r in loaded]
    assert table.column("images").to_pylist() == expected


def _ours(op_name: str, args: dict, table: pa.Table, chunk: int | None) -> list[dict]:
    """Per row (by id): our stats, keep flag and failure, as ``apply_op`` decides them."""
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    get_op_class(op_name).validate_args(args)
    outcome = apply_op(create_op(op_name, args), 0, table, skip_op_error=True)
    failed = {}
    if outcome.failed_rows is not None:
        failed = dict(zip(outcome.failed_rows.column("id").to_pylist(), outcome.failed_reasons))
    kept = set(outcome.table.column("id").to_pylist())
    # The stats of the rows that did not fail, from the op's own pass over them.
    good = table.filter(pa.array([i not in failed for i in table.column("id").to_pylist()]))
    stats = dict(
        zip(good.column("id").to_pylist(), create_op(op_name, args).compute_stats(good)[STATS_COLUMN].to_pylist())
    )
    return [
        {"id": i, "stats": stats.get(i), "kept": i in kept, "error": failed.get(i)}
        for i in table.column("id").to_pylist()
    ]


@pytest.mark.parametrize("chunk", [None, 5], ids=["one_chunk", "chunks_of_5"])
@pytest.mark.parametrize("set_name,op_name,variant,args", CASES, ids=[f"{o}__{SETS[s]}{v}" for s, o, v, _ in CASES])
def test_filter_matches_data_juicer(tables, set_name, op_name, variant, args, chunk) -> None:
    folder, table = tables[set_name]
    expected = read_jsonl(FIX / "expected" / f"{op_name}__{SETS[set_name]}{variant}.jsonl")
    got = _ours(op_name, args, table, chunk)
    images = dict(zip(table.column("id").to_pylist(), table.column("images").to_pylist()))
    for exp, ours in zip(expected, got, strict=True):
        assert exp["id"] == ours["id"]
        names = [os.path.basename(p) for p in images[ours["id"]] or []]
        refused = [n for n in names if n in REFUSED_ON_PURPOSE and op_name in DECODING_OPS]
        if refused and exp["error"] is None:
            # DJ decoded the truncated file; we set the row aside naming it (an image that can be read, if
            # the row has one, is not enough under any_or_all="any": the row fails as a whole).
            assert ours["error"] and "is truncated" in ours["error"] and refused[0] in ours["error"], ours
            continue
        if exp["error"] is not None:
            assert ours["error"] is not None and ours["kept"] is False, (exp, ours)
            assert "ImageReadError" in ours["error"], ours["error"]
            continue
        assert ours["error"] is None, ours
        assert json.dumps(ours["stats"], sort_keys=True) == json.dumps(exp["stats"], sort_keys=True), (exp, ours)
        assert ours["kept"] == exp["kept"], (exp, ours)


def test_fixtures_cover_each_op_and_the_bad_inputs() -> None:
    for op_name in VARIANTS:
        errors = {
            r["error"] for r in read_jsonl(FIX / "expected" / f"{op_name}__bad_default.jsonl") if r["error"] is not None
        }
        # DJ fails on a missing file in every op, and on a non-image where it decodes the image.
        assert "FileNotFoundError" in errors
        assert ("UnidentifiedImageError" in errors) == (op_name != "image_size_filter")
    rounding = json.loads((FIX / "expected" / "executor_rounding.json").read_text())
    assert set(rounding) <= {f"{o}__{v}" for o in VARIANTS for v in VARIANTS[o]}
