"""``tokenization: true``: where SentencePiece models and Hugging Face tokenizers are found, offline,
and what the three filters compute with them (real models, trained/built here by tests/helpers_models.py).

The conformance suite (tests/conformance/words_filters) compares the stats
with Data-Juicer's own; these tests pin the look-up order, the refusals,
both Hugging Face loading paths and the rare rows counted in Python.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import STATS_COLUMN, OpArgumentError
from airflow_provider_dj.ops.filters import text as filters_text
from airflow_provider_dj.ops.kernels import tokenizers
from airflow_provider_dj.ops.kernels.text import SPECIAL_CHARACTERS
from airflow_provider_dj.ops.registry import create_op, get_op_class

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helpers_models import build_hf_tokenizer, train_sentencepiece

PYTHIA = "EleutherAI/pythia-6.9b-deduped"
TEXTS = ["The quick brown fox, the lazy dog!", "", None, "我们今天去公园散步", "42 -- 🙂", "a a a a a a"]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "dj-models"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)
    tokenizers.load_hf_token_counter.cache_clear()
    tokenizers.load_sentencepiece.cache_clear()


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return train_sentencepiece(str(tmp_path_factory.mktemp("sp") / "en.sp.model"))


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_hf_tokenizer(str(tmp_path_factory.mktemp("hf") / PYTHIA))


def stats(op_name: str, args: dict, texts: list) -> list:
    get_op_class(op_name).validate_args(args)
    op = create_op(op_name, args)
    out = op.compute_stats(pa.table({"text": pa.array(texts, pa.string())}))
    return [next(iter(s.values())) for s in out.column(STATS_COLUMN).to_pylist()]


def dj_strip(word: str) -> str:
    """Data-Juicer's character-wise strip of SPECIAL_CHARACTERS, written out plainly."""
    i, j = 0, len(word)
    while i < j and word[i] in SPECIAL_CHARACTERS:
        i += 1
    while j > i and word[j - 1] in SPECIAL_CHARACTERS:
        j -= 1
    return word[i:j]


# --- SentencePiece --------------------------------------------------------------------
def test_sentencepiece_model_found_in_external_home_then_models_cache(
    sp_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(OpArgumentError) as err:
        get_op_class("words_num_filter").validate_args({"tokenization": True})
    assert str(tmp_path / "dj-models" / "en.sp.model") in str(err.value) and "never downloads" in str(err.value)
    cache = tmp_path / "dj-models"
    cache.mkdir()
    (cache / "en.sp.model").write_bytes(Path(sp_model).read_bytes())
    assert tokenizers.require_sentencepiece("en", op="x") == str(cache / "en.sp.model")
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(Path(sp_model).parent))
    assert tokenizers.require_sentencepiece("en", op="x") == sp_model  # the external home comes first


def test_a_file_that_is_not_a_sentencepiece_model_fails_on_first_use_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "en.sp.model").write_text("not a model")
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(tmp_path / "ext"))
    get_op_class("word_repetition_filter").validate_args({"tokenization": True})  # found: validation only looks
    op = create_op("word_repetition_filter", {"tokenization": True})
    with pytest.raises(OpArgumentError, match="is not a SentencePiece model") as err:
        op.compute_stats(pa.table({"text": ["some text"]}))
    assert str(tmp_path / "ext" / "en.sp.model") in str(err.value)


def test_validation_and_construction_never_import_the_tokenizer_libraries(
    sp_model: str, hf_folder: str, tmp_path: Path
) -> None:
    """DAG parsing validates recipes: sentencepiece, tokenizers and transformers load on the first batch."""
    import json
    import os
    import subprocess

    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "stopwords.json").write_text(json.dumps({"en": ["the"]}))
    code = (
        "import sys\n"
        "from airflow_provider_dj.ops.registry import create_op, get_op_class\n"
        f"for name, args in [('words_num_filter', {{}}), ('word_repetition_filter', {{}}), ('alphanumeric_filter', {{}}),"
        f" ('stopwords_filter', {{'stopwords_dir': {str(lists)!r}}})]:\n"
        "    args = dict(args, tokenization=True)\n"
        "    get_op_class(name).validate_args(args); create_op(name, args)\n"
        "heavy = {'sentencepiece', 'tokenizers', 'transformers', 'huggingface_hub'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ, DATA_JUICER_EXTERNAL_MODELS_HOME=f"{Path(sp_model).parent}:{Path(hf_folder).parents[1]}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]


def test_words_num_counts_stripped_pieces(sp_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import sentencepiece as spm

    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(Path(sp_model).parent))
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    expected = [sum(1 for p in sp.encode_as_pieces(t or "") if dj_strip(p)) for t in TEXTS]
    assert stats("words_num_filter", {"tokenization": True}, TEXTS) == expected
    assert expected[0] > 7  # pieces, not the 7 whitespace words
    assert stats("words_num_filter", {"tokenization": False}, TEXTS[:1]) == [7]


def test_word_repetition_over_lowercased_pieces(sp_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import sentencepiece as spm

    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(Path(sp_model).parent))
    sp = spm.SentencePieceProcessor(model_file=sp_model)

    def dj(text: str, n: int) -> float:
        words = [w for w in (dj_strip(p.lower()) for p in sp.encode_as_pieces(text)) if w]
        grams = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
        return sum(c for g in set(grams) if (c := grams.count(g)) > 1) / len(grams) if grams else 0.0

    texts = ["The dog THE DOG the dog", "a b c d", "", "x"]
    for n in (1, 2, 3):
        assert stats("word_repetition_filter", {"tokenization": True, "rep_len": n}, texts) == [dj(t, n) for t in texts]


def test_pieces_holding_a_space_are_counted_by_joined_strings(sp_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DJ keys n-grams by ' '.join(words): ['a b', 'c'] and ['a', 'b c'] are the same 2-gram there.

    Mocked model: sentencepiece refuses to train a model whose pieces keep
    spaces (escape_whitespaces=false), so one cannot be made here; such
    models exist only hand-edited."""
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(Path(sp_model).parent))

    class SpacedPieces:
        def encode(self, texts, out_type=str, num_threads=1):
            return [["a b", "c", "a", "b c"] if t == "spaced" else t.split() for t in texts]

    monkeypatch.setattr(filters_text, "load_sentencepiece", lambda path: SpacedPieces())
    # 2-grams: 'a b c', 'c a', 'a b c' -> 'a b c' twice: 2 / 3 (distinct ids would give 0.0)
    assert stats("word_repetition_filter", {"tokenization": True, "rep_len": 2}, ["spaced", "x y x y"]) == [
        2 / 3,
        2 / 3,
    ]


# --- Hugging Face ---------------------------------------------------------------------
def _fill_hf_cache(cache: Path, folder: str) -> Path:
    snap = cache / ("models--" + PYTHIA.replace("/", "--")) / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    for f in Path(folder).iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (cache / ("models--" + PYTHIA.replace("/", "--")) / "refs").mkdir()
    (cache / ("models--" + PYTHIA.replace("/", "--")) / "refs" / "main").write_text("0123abc")
    return snap


def test_hf_tokenizer_lookup_order_and_refusal(hf_folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OpArgumentError) as err:
        get_op_class("alphanumeric_filter").validate_args({"tokenization": True})
    msg = str(err.value)
    assert err.value.key == "tokenization" and "never downloads" in msg and PYTHIA in msg
    assert str(tmp_path / "hf-hub" / "models--EleutherAI--pythia-6.9b-deduped") in msg
    assert "DATA_JUICER_EXTERNAL_MODELS_HOME" in msg and "set tokenization to false" in msg
    snap = _fill_hf_cache(tmp_path / "hf-hub", hf_folder)
    assert tokenizers.locate_hf_tokenizer(PYTHIA, op="x") == str(snap)  # the local HF cache
    ext = str(Path(hf_folder).parents[1])
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", ext)
    assert tokenizers.locate_hf_tokenizer(PYTHIA, op="x") == hf_folder  # Data-Juicer's external home first
    assert tokenizers.locate_hf_tokenizer(hf_folder, op="x") == hf_folder  # a path is a path


def test_alpha_token_ratio_is_letters_per_token(hf_folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(Path(hf_folder).parents[1]))
    tok = AutoTokenizer.from_pretrained(hf_folder, local_files_only=True)
    expected = []
    for t in TEXTS:
        n = len(tok.tokenize(t or ""))
        expected.append(sum(c.isalpha() for c in (t or "")) / n if n else 0.0)
    op = create_op("alphanumeric_filter", {"tokenization": True, "min_ratio": 1.0})
    out = op.compute_stats(pa.table({"text": pa.array(TEXTS, pa.string())}))
    assert out.column(STATS_COLUMN).to_pylist() == [{"alpha_token_ratio": v} for v in expected]
    assert op.keep_mask(out).to_pylist() == [v >= 1.0 for v in expected]
    assert expected[4] == 0.0 and expected[0] > 1.0  # digits are not letters; tokens are sub-words


def test_counts_without_transformers_and_with_truncation_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both loading paths give tokenize()'s count, even for a tokenizer.json that truncates."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    folder = build_hf_tokenizer(str(tmp_path / "tok"))
    tok_file = Path(folder) / "tokenizer.json"
    raw = Tokenizer.from_file(str(tok_file))
    raw.enable_truncation(3)
    raw.save(str(tok_file))
    long_text = "The quick brown fox jumps over the lazy dog " * 20
    want = len(AutoTokenizer.from_pretrained(folder, local_files_only=True).tokenize(long_text))
    assert want > 100
    assert tokenizers.HFTokenCounter(folder).counts(pa.array([long_text, None])).tolist() == [want, 0]
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert tokenizers.HFTokenCounter(folder).counts(pa.array([long_text, ""])).tolist() == [want, 0]


def test_tokenization_finds_the_local_models(hf_folder: str, sp_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", f"{Path(hf_folder).parents[1]}:{Path(sp_model).parent}")
    op = create_op("alphanumeric_filter", {"tokenization": True})
    assert op.tokenizer_dir == hf_folder and op.stat_key == "alpha_token_ratio"
    assert create_op("words_num_filter", {"tokenization": True}).model_path == sp_model
    assert create_op("words_num_filter", {}).model_path is None


# --- DJ's whitespace words, cut from the buffer ---------------------------------------
def _dj_words(text: str | None, lower: bool) -> list[str]:
    """Data-Juicer's split_on_whitespace + words_refinement(strip SPECIAL_CHARACTERS), plainly."""
    import re

    words = [w for w in re.split(" |\n|\t", text or "") if w]
    if lower:
        words = [w.lower() for w in words]
    return [s for s in (dj_strip(w) for w in words) if s]


@pytest.mark.parametrize("lower", [True, False])
def test_whitespace_words_equal_data_juicers_split_and_strip(lower: bool) -> None:
    import random

    rng = random.Random(7)
    alphabet = [" ", " ", "\n", "\t", "\r", "\u3000", "a", "B", "Σ", "ß", "İ", "我", "🙂", ".", "-", "7", "x", "\u00a0"]
    texts = ["", None, " ", "\t\n", "a", "ΟΔΟΣ ΟΔΟΣ.", "end "] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(400)
    ]
    want = [_dj_words(t, lower) for t in texts]
    for arr in (pa.array(texts, pa.string()), pa.array(texts, pa.large_string()), pa.array(["pad"] + texts).slice(1)):
        words, starts = tokenizers.whitespace_words(arr, lower=lower)
        flat = words.to_pylist()
        assert [flat[starts[i] : starts[i + 1]] for i in range(len(texts))] == want
    chunked = pa.chunked_array([pa.array(texts[:100]), pa.array(texts[100:])])
    words, starts = tokenizers.whitespace_words(chunked, lower=lower)
    assert len(words) == starts[-1] == sum(map(len, want))


def test_hf_cache_copied_without_refs_is_found_when_it_has_one_snapshot(hf_folder: str, tmp_path: Path) -> None:
    snap = _fill_hf_cache(tmp_path / "hf-hub", hf_folder)
    (snap.parents[1] / "refs" / "main").unlink()
    assert tokenizers.locate_hf_tokenizer(PYTHIA, op="x") == str(snap)
    (snap.parent / "fedcba9").mkdir()  # two snapshots and no ref: which one is meant is unknown
    with pytest.raises(OpArgumentError, match="never downloads"):
        tokenizers.locate_hf_tokenizer(PYTHIA, op="x")
