"""flagged_words_filter / stopwords_filter: word-list look-up, validation errors, and the ratio itself.

The conformance suite (tests/conformance/words_filters) proves the stats
equal Data-Juicer's on many inputs; these tests pin what it cannot: where
lists are looked for, what a bad list or a missing one says, that nothing is
created or downloaded, and hand-computed ratios for the augmentation runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, parse_recipe
from airflow_provider_dj.ops.base import STATS_COLUMN, OpArgumentError
from airflow_provider_dj.ops.dj_compat.word_lists import load_word_lists
from airflow_provider_dj.ops.registry import create_op, get_op_class

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helpers_models import train_sentencepiece


@pytest.fixture(autouse=True)
def _isolated_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Data-Juicer's caches point at empty folders: nothing on this machine leaks in."""
    monkeypatch.setenv("DATA_JUICER_ASSETS_CACHE", str(tmp_path / "assets-cache"))
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "models-cache"))
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)


def write(folder: Path, name: str, data: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data, ensure_ascii=False) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def ratios(op_name: str, args: dict, texts: list) -> list[float]:
    get_op_class(op_name).validate_args(args)
    op = create_op(op_name, args)
    out = op.compute_stats(pa.table({"text": pa.array(texts, pa.string())}))
    return [s[op.stat_key] for s in out.column(STATS_COLUMN).to_pylist()]


# --- where lists come from ------------------------------------------------------------
def test_every_matching_json_file_is_merged_by_language(tmp_path: Path) -> None:
    d = tmp_path / "lists"
    write(d, "flagged_words.json", {"en": ["bad"], "zh": ["坏"]})
    write(d, "more_flagged_words_v2.json", {"en": ["worse"], "de": ["schlecht"]})
    write(d, "flagged_words.txt", "ignored")  # not .json
    write(d, "notes.json", {"en": ["the"]})  # name lacks 'flagged_words'
    write(d, "stopwords.json", {"en": ["of"]})  # the other list type
    lists = load_word_lists(str(d), "flagged_words", op="flagged_words_filter", arg="flagged_words_dir")
    assert [os.path.basename(f) for f in lists.files] == ["flagged_words.json", "more_flagged_words_v2.json"]
    assert lists.for_lang("en", op="x") == {"bad", "worse"}
    assert lists.for_lang("all", op="x") == {"bad", "worse", "坏", "schlecht"}
    assert ratios("flagged_words_filter", {"flagged_words_dir": str(d)}, ["bad worse the of x"]) == [0.4]


def test_an_all_key_in_a_file_is_used_as_is_not_the_union(tmp_path: Path) -> None:
    d = tmp_path / "lists"
    write(d, "stopwords.json", {"all": ["the"], "en": ["a", "of"]})
    assert ratios("stopwords_filter", {"stopwords_dir": str(d), "lang": "all"}, ["the a of x"]) == [0.25]
    assert ratios("stopwords_filter", {"stopwords_dir": str(d), "lang": "en"}, ["the a of x"]) == [0.5]


def test_default_folder_is_data_juicers_assets_cache(tmp_path: Path) -> None:
    write(tmp_path / "assets-cache", "stopwords.json", {"en": ["the", "a"]})
    assert ratios("stopwords_filter", {}, ["The cat and a dog", ""]) == [0.4, 0.0]


# --- refusals -------------------------------------------------------------------------
def test_no_list_anywhere_names_the_file_and_where_to_put_it_and_creates_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "assets-cache"
    with pytest.raises(OpArgumentError) as err:
        get_op_class("flagged_words_filter").validate_args({})
    msg = str(err.value)
    assert err.value.key == "flagged_words_dir"
    assert str(cache / "flagged_words.json") in msg and "never downloads" in msg
    assert "DATA_JUICER_ASSETS_CACHE" in msg and "flagged_words_dir" in msg
    assert not cache.exists()  # Data-Juicer would create it (and download into it); we do neither


def test_a_folder_without_a_matching_file_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "lists"
    write(d, "flagged_words.json", {"en": ["bad"]})
    with pytest.raises(OpArgumentError, match=r"holds no \*\.json file with 'stopwords'") as err:
        get_op_class("stopwords_filter").validate_args({"stopwords_dir": str(d)})
    assert err.value.key == "stopwords_dir" and str(d / "stopwords.json") in str(err.value)


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{not json", "is not valid UTF-8 JSON"),
        (["bad"], "must hold a JSON object mapping language codes"),
        ({"en": "bad"}, "key 'en' must map to a list of words, not a str"),
        ({"en": ["bad", 3]}, "en[1] is 3, not a string"),
        ({}, "define no language"),
    ],
)
def test_malformed_lists_name_the_file_and_key(tmp_path: Path, content: object, needle: str) -> None:
    path = write(tmp_path / "lists", "flagged_words.json", content)
    with pytest.raises(OpArgumentError) as err:
        get_op_class("flagged_words_filter").validate_args({"flagged_words_dir": str(tmp_path / "lists")})
    assert needle in str(err.value) and str(path if content != {} else tmp_path / "lists") in str(err.value)


def test_unknown_lang_lists_the_languages_there(tmp_path: Path) -> None:
    write(tmp_path / "lists", "stopwords.json", {"en": ["the"], "zh": ["的"]})
    with pytest.raises(OpArgumentError) as err:
        get_op_class("stopwords_filter").validate_args({"stopwords_dir": str(tmp_path / "lists"), "lang": "fr"})
    assert err.value.key == "lang" and "languages there: en, zh" in str(err.value)


@pytest.mark.parametrize("sizes", [[0], [2, -1], [True], "2", [2.0]])
def test_group_sizes_must_be_positive_integers(tmp_path: Path, sizes: object) -> None:
    write(tmp_path / "lists", "flagged_words.json", {"en": ["bad"]})
    with pytest.raises(OpArgumentError) as err:
        get_op_class("flagged_words_filter").validate_args(
            {"flagged_words_dir": str(tmp_path / "lists"), "use_words_aug": True, "words_aug_group_sizes": sizes}
        )
    assert err.value.key == "words_aug_group_sizes"


def test_recipe_validation_reports_the_key_path_before_any_work(tmp_path: Path) -> None:
    recipe = {
        "dataset_path": str(tmp_path / "in.jsonl"),
        "export_path": str(tmp_path / "out.jsonl"),
        "process": [{"stopwords_filter": {"stopwords_dir": str(tmp_path / "nowhere")}}],
    }
    with pytest.raises(RecipeError) as err:
        parse_recipe(recipe, base_dir=str(tmp_path))
    assert "process[0].stopwords_filter.stopwords_dir" in str(err.value)
    assert str(tmp_path / "nowhere" / "stopwords.json") in str(err.value)
    assert not (tmp_path / "nowhere").exists()


def test_tokenization_without_a_model_says_where_to_put_it(tmp_path: Path) -> None:
    write(tmp_path / "lists", "flagged_words.json", {"zh": ["坏"]})
    with pytest.raises(OpArgumentError) as err:
        get_op_class("flagged_words_filter").validate_args(
            {"flagged_words_dir": str(tmp_path / "lists"), "lang": "zh", "tokenization": True}
        )
    assert err.value.key == "tokenization"
    assert str(tmp_path / "models-cache" / "zh.sp.model") in str(err.value)
    assert "set tokenization to false" in str(err.value)


# --- the ratio --------------------------------------------------------------------------
def test_words_are_lowercased_stripped_and_split_on_space_newline_tab(tmp_path: Path) -> None:
    write(tmp_path / "lists", "flagged_words.json", {"en": ["bad", "straße"]})
    args = {"flagged_words_dir": str(tmp_path / "lists")}
    texts = ["--BAD--\tok\nStraße", "42 ... 🙂", "", None, "bad,bad"]
    # '42', '...', '🙂' strip to nothing: no words, ratio 0.0; 'bad,bad' is one word (no split on ',')
    assert ratios("flagged_words_filter", args, texts) == [2 / 3, 0.0, 0.0, 0.0, 0.0]


def test_augmentation_appends_joined_runs_to_numerator_and_denominator(tmp_path: Path) -> None:
    write(tmp_path / "lists", "flagged_words.json", {"vi": ["việt nam", "hà nội", "việt nam là"], "zh": ["坏人"]})
    d = str(tmp_path / "lists")
    vi = {"flagged_words_dir": d, "lang": "vi", "use_words_aug": True, "words_aug_join_char": " "}
    # words: việt nam là hà nội (5); pairs: 4, of which 'việt nam' and 'hà nội' match -> 2 / 9
    assert ratios("flagged_words_filter", vi, ["Việt Nam là Hà Nội"]) == [2 / 9]
    # with sizes [2, 3]: + 3 triples, 'việt nam là' matches -> 3 / 12
    assert ratios("flagged_words_filter", {**vi, "words_aug_group_sizes": [2, 3]}, ["Việt Nam là Hà Nội"]) == [0.25]
    # a row shorter than the group gets no runs; runs never cross rows
    zh = {"flagged_words_dir": d, "lang": "zh", "use_words_aug": True}
    assert ratios("flagged_words_filter", zh, ["坏", "人", "坏 人"]) == [0.0, 0.0, 1 / 3]
    # without use_words_aug, nothing is joined
    assert ratios("flagged_words_filter", {**zh, "use_words_aug": False}, ["坏 人"]) == [0.0]


def test_range_decisions_and_existing_stats_are_reused(tmp_path: Path) -> None:
    write(tmp_path / "lists", "stopwords.json", {"en": ["the", "a"]})
    op = create_op("stopwords_filter", {"stopwords_dir": str(tmp_path / "lists"), "min_ratio": 0.5})
    table = pa.table({"text": ["the a cat", "cat dog", "the cat"]})
    out = op.compute_stats(table)
    assert op.keep_mask(out).to_pylist() == [True, False, True]
    seeded = out.set_column(
        out.column_names.index(STATS_COLUMN),
        STATS_COLUMN,
        pa.array([{"stopwords_ratio": 0.0}] * 3),
    )
    assert op.keep_mask(op.compute_stats(seeded)).to_pylist() == [False, False, False]  # DJ reuses a stat


def test_a_changed_list_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path / "lists", "flagged_words.json", {"en": ["bad"]})
    args = {"flagged_words_dir": str(tmp_path / "lists")}
    before = create_op("flagged_words_filter", args)
    assert before.compute_stats(pa.table({"text": ["bad worse"]})).column(STATS_COLUMN).to_pylist() == [
        {"flagged_words_ratio": 0.5}
    ]
    path.write_text(json.dumps({"en": ["bad", "worse"]}), encoding="utf-8")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    after = create_op("flagged_words_filter", args)
    assert after.compute_stats(pa.table({"text": ["bad worse"]})).column(STATS_COLUMN).to_pylist() == [
        {"flagged_words_ratio": 1.0}
    ]


def test_tokenized_words_are_sentencepiece_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sentencepiece as spm

    models = tmp_path / "ext"
    model = train_sentencepiece(str(models / "en.sp.model"))
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(models))
    sp = spm.SentencePieceProcessor(model_file=model)
    text = "The quick brown fox jumps over the lazy dog"
    pieces = sp.encode_as_pieces(text)  # none is all special characters: each one is a word
    target = next(p for p in pieces if p.startswith("▁") and len(p) > 2)  # e.g. '▁the'
    write(tmp_path / "lists", "flagged_words.json", {"en": [target.lower()]})
    args = {"flagged_words_dir": str(tmp_path / "lists"), "tokenization": True}
    hits = sum(p.lower() == target.lower() for p in sp.encode_as_pieces(text))
    assert ratios("flagged_words_filter", args, [text]) == [hits / len(pieces)]
    # the whitespace split would never see '▁'-prefixed words
    assert ratios("flagged_words_filter", {**args, "tokenization": False}, [text]) == [0.0]
