"""Unit tests for ``ops/mappers/words.py`` (remove_words_with_incorrect_substrings_mapper).

Data-Juicer equivalence (both splitters, default and custom substrings) is
checked by tests/conformance/test_conformance_mappers_latex.py; here: exact
results on small texts, nulls, validation (including the missing
SentencePiece model, refused before any work, never downloaded) and a model
this test trains itself with the ``sentencepiece`` package.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.mappers import words as mw
from airflow_provider_dj.ops.registry import create_op, get_op_class

NAME = "remove_words_with_incorrect_substrings_mapper"


def run(texts: list, **args) -> list:
    get_op_class(NAME).validate_args(args)
    table = pa.table({"text": pa.array(texts, pa.string())})
    return create_op(NAME, args).process_table(table).column("text").to_pylist()


def test_default_substrings_drop_url_words_and_merge_like_data_juicer() -> None:
    texts = [
        "see http://a.com and (www.b.org) now",
        "HTTP:X.COM stays, x.com goes",
        "a  b\t\tc\n\n\nd //e",  # "//e" is tested as "e" ("/" is a special character): kept
        "",
        None,
        "中文 www.百度.com 结束",
    ]
    assert run(texts) == ["see and now", "HTTP:X.COM stays, goes", "a b\tc\nd //e", "", None, "中文 结束"]


def test_words_are_tested_stripped_and_kept_unstripped() -> None:
    # "«http»" stripped of special characters is "http": dropped; "…x…" stays as written.
    assert run(["«http» …x… ***"], substrings=["http", "x"]) == ["***"]
    assert run(["«http» …x… ***"], substrings=["zz"]) == ["«http» …x… ***"]


@pytest.mark.parametrize("substrings", [[""], ["ok", ""], [3]])
def test_bad_substrings_are_refused(substrings) -> None:
    with pytest.raises(OpArgumentError, match="substrings") as err:
        get_op_class(NAME).validate_args({"substrings": substrings})
    assert err.value.key == "substrings"


def test_substrings_must_be_a_list() -> None:
    with pytest.raises(OpArgumentError, match="substrings"):
        get_op_class(NAME).validate_args({"substrings": "http"})


def test_tokenization_without_model_is_refused_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(tmp_path / "ext"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OpArgumentError, match=r"'zz\.sp\.model' was not found") as err:
        get_op_class(NAME).validate_args({"tokenization": True, "lang": "zz"})
    assert err.value.key == "tokenization"
    assert str(tmp_path / "cache" / "zz.sp.model") in str(err.value)
    assert not (tmp_path / "cache").exists()  # nothing downloaded, nothing created


@pytest.fixture(scope="module")
def sp_dir(tmp_path_factory) -> Path:
    import sentencepiece

    folder = tmp_path_factory.mktemp("spm")
    lines = [
        "visit http://example.com for the model",
        "the model converges quickly",
        "www.example.org hosts it",
        "models and more models",
        "中文 文本 模型",
    ] * 20
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(folder / "en.sp"),
        vocab_size=60,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return folder


def test_tokenization_uses_the_model_and_joins_pieces_without_spaces(sp_dir: Path, monkeypatch) -> None:
    import sentencepiece

    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(sp_dir))
    model = sentencepiece.SentencePieceProcessor(model_file=str(sp_dir / "en.sp.model"))
    text = "visit http://example.com for the model"
    pieces = [p.replace("\u2581", "") for p in model.encode(text, out_type=str)]
    kept = [p for p in pieces if "mod" not in p.strip("".join(mw.SPECIAL_CHARACTERS))]
    assert len(kept) < len(pieces)  # the trained model does split "model" into a piece holding "mod"
    out = run([text, "the quick fox", "", None], tokenization=True, substrings=["mod"])
    # A changed text loses its spaces (Data-Juicer joins the pieces with ""); an unchanged one is kept as is.
    assert out == ["".join(kept), "the quick fox", "", None]


def test_tokenization_finds_the_local_model(sp_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(sp_dir))
    op = create_op(NAME, {"tokenization": True})
    assert op._sentencepiece_path() == os.path.join(sp_dir, "en.sp.model")
    assert op.substrings == tuple(mw.DEFAULT_SUBSTRINGS)


def test_keep_words_kernel_matches_python_split_merge() -> None:
    texts = ["a b", " lead\ttrail \n\n x  y ", "\t\t", "one", "", None, "é 中\t🙂"]
    got = mw.keep_words(pa.array(texts), lambda words: [w != "b" and w != "x" for w in words.to_pylist()])

    def reference(t):
        if t is None:
            return None
        drop = ("b", "x")
        lines = [[[w for w in f.split(" ") if w and w not in drop] for f in ln.split("\t")] for ln in t.split("\n")]
        lines = ["\t".join(" ".join(f) for f in line if f) for line in lines]
        return "\n".join(line for line in lines if line)

    assert got.to_pylist() == [reference(t) for t in texts]


def test_validation_and_fingerprint_do_not_import_sentencepiece(sp_dir: Path) -> None:
    """DAG parsing validates recipes: the model library loads on the op's first batch, not before."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_provider_dj.ops.registry import create_op, get_op_class\n"
        f"args = {{'tokenization': True, 'lang': 'en'}}\n"
        f"get_op_class({NAME!r}).validate_args(args); create_op({NAME!r}, args)\n"
        "assert 'sentencepiece' not in sys.modules\n"
    )
    env = dict(os.environ, DATA_JUICER_EXTERNAL_MODELS_HOME=str(sp_dir))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
