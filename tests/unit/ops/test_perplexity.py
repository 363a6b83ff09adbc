"""perplexity_filter and the test models of tests/helpers_lm: lookup, validation before work, loading, values.

Real SentencePiece and KenLM on models the helper trains and writes here
(nothing mocked); the Data-Juicer comparison is tests/conformance/model_filters.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import STATS_COLUMN, OpArgumentError, OpFatalError
from airflow_provider_dj.ops.filters import perplexity as ppl
from airflow_provider_dj.ops.registry import create_op, get_op_class
from tests import helpers_lm

OP = "perplexity_filter"


@pytest.fixture(autouse=True)
def _isolated_lookup(monkeypatch, tmp_path):
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    return helpers_lm.write_lm_models(tmp_path_factory.mktemp("lm"), lang="en")


def _ppl(table: pa.Table) -> list[float]:
    return [s["perplexity"] for s in table.column(STATS_COLUMN).to_pylist()]


def test_helper_models_are_deterministic_and_normalized(models, tmp_path):
    again = helpers_lm.write_lm_models(tmp_path / "again", lang="en")
    for key in ("sp_model", "kenlm_model"):
        with open(models[key], "rb") as a, open(again[key], "rb") as b:
            assert a.read() == b.read(), key
    with open(models["kenlm_model"], encoding="utf-8") as f:
        mass = helpers_lm.arpa_mass(f.read())
    assert len(mass) > 300  # the unigram distribution and one per history
    assert all(abs(m - 1.0) < 1e-5 for m in mass.values()), {h: m for h, m in mass.items() if abs(m - 1) >= 1e-5}


def test_bigram_arpa_by_hand():
    """Two sentences, worked out on paper: a and b both follow <s>; the rest backs off."""
    text = helpers_lm.bigram_arpa([["a", "b"], ["a"]], vocab=["a", "b", "c"])
    mass = helpers_lm.arpa_mass(text)
    assert all(abs(m - 1.0) < 1e-6 for m in mass.values())
    lines = dict(line.split("\t")[:2][::-1] for line in text.splitlines() if "\t" in line)
    # c(<s>, a) = 2 of c(<s>) = 2 -> (2 - 0.5) / 2
    assert float(lines["<s> a"]) == pytest.approx(math.log10(0.75), abs=1e-6)
    # unigrams: counts + 1 over a b c </s> <unk> = (3, 2, 1, 3, 2) / 11
    assert float(lines["c"]) == pytest.approx(math.log10(1 / 11), abs=1e-6)


def test_dj_lookup_by_lang(models, monkeypatch):
    import os

    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", os.path.dirname(models["sp_model"]))
    op = create_op(OP, {"lang": "en"})
    assert op.resolved_model_paths() == (models["sp_model"], models["kenlm_model"])


def test_missing_models_refused_at_validation_naming_file_and_place(tmp_path):
    with pytest.raises(OpArgumentError) as err:
        get_op_class(OP).validate_args({"lang": "de"})
    msg = str(err.value)
    assert err.value.key == "lang"
    assert "'de.sp.model'" in msg and str(tmp_path / "cache" / "de.sp.model") in msg and "never downloads" in msg
    assert "'de.arpa.bin' is missing too" in msg


def test_only_the_missing_file_is_named(models, tmp_path):
    with pytest.raises(OpArgumentError) as err:
        get_op_class(OP).validate_args(
            {"sp_model_path": models["sp_model"], "kenlm_model_path": str(tmp_path / "x" / "en.arpa.bin")}
        )
    assert err.value.key == "kenlm_model_path"
    assert "en.arpa.bin" in str(err.value) and "en.sp.model" not in str(err.value)


def test_empty_lang_without_paths_is_refused():
    with pytest.raises(OpArgumentError, match="lang must name the models' language"):
        get_op_class(OP).validate_args({"lang": ""})


def test_min_above_max_is_refused(models):
    with pytest.raises(OpArgumentError, match="min_ppl"):
        get_op_class(OP).validate_args(
            {
                "min_ppl": 10,
                "max_ppl": 5,
                "sp_model_path": models["sp_model"],
                "kenlm_model_path": models["kenlm_model"],
            }
        )


def _op(models, **args):
    full = {"sp_model_path": models["sp_model"], "kenlm_model_path": models["kenlm_model"], **args}
    get_op_class(OP).validate_args(full)
    return create_op(OP, full)


def test_nothing_loads_before_first_use(models):
    ppl.load_kenlm.cache_clear()
    ppl.load_sentencepiece.cache_clear()
    op = _op(models)
    assert ppl.load_kenlm.cache_info().currsize == 0 and ppl.load_sentencepiece.cache_info().currsize == 0
    op.setup()
    assert ppl.load_kenlm.cache_info().currsize == 1 and ppl.load_sentencepiece.cache_info().currsize == 1


def test_values_order_and_keep(models):
    texts = [
        "Return a new list containing all the items of the iterable.",
        "zxqv jjjj kkkk qqqq wwww",
        "",
        None,
        "first line\nsecond line",
    ]
    op = _op(models, max_ppl=300)
    out = op.compute_stats(pa.table({"text": texts}))
    values = _ppl(out)
    assert values[0] < values[1]  # the training text's kind of English beats gibberish
    assert values[2] == 0.0 and values[3] == 0.0  # no pieces: 0.0 as in DJ; null counts as ''
    assert all(v == round(v, 1) for v in values)
    assert op.keep_mask(out).to_pylist() == [v <= 300 for v in values]


def test_value_is_dj_formula_over_kenlm_scores(models):
    """The statistic, worked out from the library calls by hand for one two-line text."""
    import kenlm
    import sentencepiece

    text = "first line\nsecond line"
    sp = sentencepiece.SentencePieceProcessor(model_file=models["sp_model"])
    lm = kenlm.Model(models["kenlm_model"])
    joined = " ".join(sp.encode_as_pieces(text))
    lines = joined.splitlines()
    logits = sum(lm.score(line) for line in lines)
    words = sum(len(line.split()) + 1 for line in lines)
    assert _ppl(_op(models).compute_stats(pa.table({"text": [text]}))) == [round(10 ** (-logits / words), 1)]


def test_existing_perplexity_is_kept(models):
    stats = pa.array([{"perplexity": 12.5}, {"perplexity": None}], pa.struct([("perplexity", pa.float64())]))
    table = pa.table({"text": ["zxqv jjjj", "zxqv jjjj"], STATS_COLUMN: stats})
    values = _ppl(_op(models).compute_stats(table))
    assert values[0] == 12.5 and values[1] > 100


def test_a_broken_model_file_fails_with_its_path(models, tmp_path):
    bad = tmp_path / "en.arpa.bin"
    bad.write_text("\\data\\\nngram 1=oops\n")
    op = create_op(OP, {"sp_model_path": models["sp_model"], "kenlm_model_path": str(bad)})
    with pytest.raises(OpFatalError, match=str(bad)):
        op.compute_stats(pa.table({"text": ["hello"]}))


def test_unusable_model_fails_the_op_even_with_skip_op_error(models, tmp_path):
    """Every row would fail the same way: the engine must stop, not move the whole batch to failed/."""
    from airflow_provider_dj.engine.execution.op_runner import apply_op

    bad = tmp_path / "en.arpa.bin"
    bad.write_text("not a language model\n")
    op = create_op(OP, {"sp_model_path": models["sp_model"], "kenlm_model_path": str(bad)})
    with pytest.raises(OpFatalError, match="cannot load the KenLM"):
        apply_op(op, 0, pa.table({"text": ["one", "two"]}), skip_op_error=True)


def test_model_gone_after_validation_is_fatal_and_named(models, tmp_path):
    import shutil

    lm = tmp_path / "en.arpa.bin"
    shutil.copyfile(models["kenlm_model"], lm)
    op = _op({"sp_model": models["sp_model"], "kenlm_model": str(lm)})
    lm.unlink()  # e.g. a worker node without the file
    with pytest.raises(OpFatalError, match="does not exist"):
        op.compute_stats(pa.table({"text": ["hello"]}))
