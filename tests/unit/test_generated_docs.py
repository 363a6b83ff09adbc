"""The generated reference docs (docs/recipe_keys.md, docs/ops_reference.md) and the benchmark chart.

The committed files must equal a fresh generation, so a changed default, a
new key or a new op cannot leave the docs behind; and the generators must
refuse to produce a page with a key or op nobody has described.  Nothing is
mocked: the generator reads the real schema, parser and op registry.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.helpers_compare import assert_same_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(rel: str, name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, rel))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gen():
    return _load("scripts/gen_docs.py", "gen_docs_under_test")


@pytest.fixture(scope="module")
def plot():
    from bench.report import published

    return published


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize("rel", ["docs/recipe_keys.md", "docs/ops_reference.md"])
def test_committed_reference_equals_fresh_generation(gen, rel):
    render = gen.TARGETS[os.path.join(*rel.split("/"))]
    assert_same_bytes(_read(rel), render(), f"{rel} is stale: run .venv/bin/python scripts/gen_docs.py")


def test_check_mode_reports_no_stale_file(gen):
    assert gen.stale_files() == []
    assert gen.main(["--check"]) == 0


def test_recipe_keys_rows_carry_the_parsers_defaults(gen):
    from airflow_provider_dj.engine.config import schema as S

    text = gen.render_recipe_keys()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_.]+)` \|.*$", text, re.M)}
    expected = {f"{s}.{leaf}" for s in S.SECTIONS for leaf in S.SECTION_KEYS[s]}
    expected |= set(S.OWN_TOP_LEVEL_KEYS) - set(S.SECTIONS)
    assert set(rows) == expected
    # defaults come from the schema / parser, not from prose
    assert f"| `{S.CheckpointConfig.n_ops}` |" in rows["checkpoint.n_ops"]
    assert f"| `{S.DEFAULT_NP}` |" in rows["np"]
    assert "| `every_n_ops` |" in rows["checkpoint.strategy"]
    assert "| `42` |" in rows["partition.gpu_probe_sample_seed"]
    # resume refusal follows engine/job/resume.py's RESULT_KEYS
    assert "| refused |" in rows["dataset_path"] and "| accepted |" in rows["export_path"]
    assert "| accepted |" in rows["open_tracer"]  # tracer keys live under "tracer", a non-result key
    # every Data-Juicer key we ignore is listed
    for key in S.DJ_IGNORED_KEYS:
        assert f"`{key}`" in text


def test_ops_reference_lists_every_registered_op_with_its_arguments(gen):
    from airflow_provider_dj.ops.registry import get_op_class, op_names

    text = gen.render_ops_reference()
    package_ops = [n for n in op_names() if get_op_class(n).__module__.startswith("airflow_provider_dj.ops.")]
    assert len(package_ops) >= 26
    for name in package_ops:
        assert f"\n### {name}\n" in text
        section = text.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        for arg in get_op_class(name).own_args():
            if arg != "text_key":
                assert f"| `{arg}` |" in section, (name, arg)
    words = text.split("\n### words_num_filter\n", 1)[1].split("\n### ", 1)[0]
    assert "| `min_num` | int | `10` |" in words
    assert "| `max_num` | int | `sys.maxsize` |" in words
    n = gen._conformance_variants()["words_num_filter"]  # 4 in conformance/fixtures, 3 tokenized in words_filters
    assert n >= 7
    assert f"In Data-Juicer 1.6.1 as a filter; same argument names; {n} conformance fixture variants" in words
    lower = text.split("\n### lowercase_mapper\n", 1)[1].split("\n### ", 1)[0]
    assert "Not in Data-Juicer 1.6.1" in lower
    assert "| [`text_embedding_mapper`](#text_embedding_mapper) | mapper |  | yes | yes | no (ours) |" in text


def test_conformance_counts_come_from_fixture_files(gen):
    counts = gen._conformance_variants()
    on_disk = [
        n
        for n in os.listdir(os.path.join(ROOT, "tests/conformance/fixtures/expected"))
        if n.startswith("clean_email_mapper__")
    ]
    assert counts["clean_email_mapper"] == len(on_disk) > 0


def test_undescribed_recipe_key_fails_generation(gen, monkeypatch):
    from airflow_provider_dj.engine.config import schema as S

    monkeypatch.setitem(S.SECTION_KEYS, "checkpoint", S.SECTION_KEYS["checkpoint"] + ("brand_new_key",))
    with pytest.raises(gen.MissingProseError, match="checkpoint.brand_new_key"):
        gen.render_recipe_keys()


def test_undescribed_op_fails_generation(gen, monkeypatch):
    monkeypatch.delitem(gen.DJ_NOTES, "lowercase_mapper")
    with pytest.raises(gen.MissingProseError, match="lowercase_mapper"):
        gen.render_ops_reference()


# --------------------------------------------------------------------------
# Benchmark chart
# --------------------------------------------------------------------------
def test_chart_figures_parse_from_the_published_table(plot):
    fig = plot.figures_from_markdown(_read("docs/benchmarks.md"))
    by_rows = {p.rows: p for p in fig.points}
    assert sorted(by_rows) == [100_000, 200_000, 1_000_000]
    assert (by_rows[1_000_000].ours_s, by_rows[1_000_000].dj_s) == (56.6, 781.2)
    assert (by_rows[100_000].ours_pss_gib, by_rows[100_000].dj_pss_gib) == (1.13, 2.38)


def test_chart_bars_are_proportional_to_the_figures(plot):
    fig = plot.BenchFigures("t", (plot.SizePoint(10, 10.0, 40.0, 1.0, 2.0), plot.SizePoint(20, 20.0, 80.0, 1.5, 4.0)))
    root = ET.fromstring(plot.render_svg(fig))
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("data-value")]
    # bench.report.chart draws horizontal bars: a bar's length is its width
    assert [(r.get("class"), float(r.get("data-value"))) for r in bars] == [
        ("ours", 10.0),
        ("dj", 40.0),
        ("ours", 20.0),
        ("dj", 80.0),
        ("ours", 1.0),
        ("dj", 2.0),
        ("ours", 1.5),
        ("dj", 4.0),
    ]
    h = [float(r.get("width")) for r in bars]
    assert h[1] == pytest.approx(4 * h[0], rel=0.01) and h[3] == pytest.approx(2 * h[1], rel=0.01)
    assert h[7] == pytest.approx(4 * h[4], rel=0.01)


def test_chart_json_and_docs_sources_agree(plot):
    """An e2e result file's summary and the printed table of the same run draw the same chart."""
    data = {
        "timestamp": "2026-11-29T20:22:51",
        "summary": {
            "per_size": [
                {
                    "rows": 100000,
                    "ours_wall_s": 23.1994,
                    "dj_wall_s": 91.4166,
                    "ours_peak_tree_pss": 1213160448,
                    "dj_peak_tree_pss": 2555797504,
                },
                {"rows": 5, "ours_wall_s": 1.0, "dj_wall_s": None, "dj_error": "crashed"},
            ]
        },
    }
    fig = plot.figures_from_json(data, "x.json")
    assert fig.points == (plot.SizePoint(100000, 23.2, 91.4, 1.13, 2.38),)
    with pytest.raises(plot.NoFiguresError, match="x.json"):
        plot.figures_from_json({"summary": {"per_size": []}}, "x.json")


def test_committed_chart_matches_the_published_table(plot):
    fig = plot.figures_from_markdown(_read("docs/benchmarks.md"))
    assert_same_bytes(
        _read("docs/img/benchmarks.svg"),
        plot.render_svg(fig),
        "docs/img/benchmarks.svg is stale: run .venv/bin/python -m bench plot",
    )
