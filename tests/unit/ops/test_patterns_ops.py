"""Every op argument that is a pattern compiles as Data-Juicer compiles it, and a
bad one is reported by ``dj-airflow validate`` as process[i].<op>.<arg> with the
pattern and the position, before any work (native and adapted ops alike)."""

from __future__ import annotations

import importlib.util
import sys

import pyarrow as pa
import pytest
import regex

from airflow_provider_dj.cli.main import main
from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.registry import create_op, get_op_class

NATIVE_PATTERN_ARGS = [
    ("clean_email_mapper", "pattern", {}),
    ("clean_ip_mapper", "pattern", {}),
    ("clean_links_mapper", "pattern", {}),
    ("document_minhash_deduplicator", "ignore_pattern", {}),
    ("document_simhash_deduplicator", "ignore_pattern", {}),
    ("llm_api_mapper", "answer_regex", {"model": "m", "base_url": "http://127.0.0.1:9/v1"}),
]
IDS = [f"{op}.{arg}" for op, arg, _ in NATIVE_PATTERN_ARGS]


@pytest.mark.parametrize("op,arg,extra", NATIVE_PATTERN_ARGS, ids=IDS)
@pytest.mark.parametrize("pattern", ["\\p{P}", "\\p{Han}++", "\\X", "(?<=\\p{L}+)\\d", "[[:punct:]]"])
def test_regex_only_syntax_is_accepted_everywhere(op: str, arg: str, extra: dict, pattern: str) -> None:
    get_op_class(op).validate_args({**extra, arg: pattern})
    create_op(op, {**extra, arg: pattern})


@pytest.mark.parametrize("op,arg,extra", NATIVE_PATTERN_ARGS, ids=IDS)
def test_bad_pattern_names_arg_pattern_and_position(op: str, arg: str, extra: dict) -> None:
    with pytest.raises(OpArgumentError) as info:
        get_op_class(op).validate_args({**extra, arg: "ab(\\p{L}"})
    assert info.value.key == arg
    assert f"{arg} 'ab(\\\\p{{L}}' does not compile at position 8 (end of pattern): missing )" in str(info.value)


def test_ignore_pattern_p_punct_strips_unicode_punctuation_like_regex() -> None:
    """DJ's shipped recipes' simhash step: with '\\p{P}' ignored, texts that differ
    only in (CJK, Latin, typographic) punctuation are one cluster; a symbol is not
    punctuation, so the text with '$' stays apart, as regex's \\p{P} decides."""
    texts = [
        "alpha beta gamma delta epsilon zeta eta theta iota kappa",
        "alpha, beta。 gamma 「delta」 epsilon… zeta — eta «theta» iota! kappa?",
        "alpha $ beta $ gamma $ delta $ epsilon $ zeta $ eta $ theta $ iota $ kappa",
    ]
    args = {
        "tokenization": "space",
        "window_size": 6,
        "lowercase": True,
        "ignore_pattern": "\\p{P}",
        "num_blocks": 6,
        "hamming_distance": 4,
    }
    op = create_op("document_simhash_deduplicator", args)
    table = pa.table({"text": texts})
    keep = list(op.resolve_global([op.compute_hash(table)]))
    assert keep == [True, False, True]
    assert op.shingler.ignore.sub("", texts[1]).split() == texts[0].split()
    assert op.shingler.ignore.sub("", texts[2]) == texts[2] == regex.sub("\\p{P}", "", texts[2])


def test_default_patterns_keep_the_vectorized_path() -> None:
    assert create_op("clean_email_mapper", {})._re2 is not None
    assert create_op("clean_links_mapper", {})._re2 is not None
    assert create_op("clean_ip_mapper", {})._re2 is not None
    assert create_op("clean_email_mapper", {"pattern": "[a-z]+@[a-z]+\\.com"})._re2 is not None
    assert create_op("clean_email_mapper", {"pattern": "\\p{L}+@\\p{L}+\\.com"})._re2 is None
    assert create_op("clean_email_mapper", {"pattern": "[a-z]+@[a-z]+\\.com", "repl": "\\g<0>!"})._re2 is None


def _recipe(tmp_path, process: str) -> str:
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    p = tmp_path / "r.yaml"
    p.write_text(
        f"project_name: pat\ndataset_path: {tmp_path}/in.jsonl\nexport_path: {tmp_path}/out.jsonl\nprocess:\n{process}"
    )
    return str(p)


def test_recipe_loader_reports_key_path_pattern_and_position(tmp_path) -> None:
    path = _recipe(
        tmp_path,
        "  - whitespace_normalization_mapper:\n  - document_simhash_deduplicator:\n      ignore_pattern: '[\\p{P}'\n",
    )
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    msg = str(info.value)
    assert "process[1].document_simhash_deduplicator.ignore_pattern" in msg
    assert "'[\\\\p{P}' does not compile at position 6 (end of pattern): unterminated character set" in msg


def test_recipe_with_p_punct_ignore_pattern_loads(tmp_path) -> None:
    """The exact step of DJ's shipped refine recipes, which used to be refused."""
    path = _recipe(
        tmp_path,
        "  - document_simhash_deduplicator:\n      tokenization: space\n      window_size: 6\n"
        "      lowercase: true\n      ignore_pattern: '\\p{P}'\n      num_blocks: 6\n"
        "      hamming_distance: 4\n",
    )
    recipe = load_recipe(path)
    assert recipe.process[0].args["ignore_pattern"] == "\\p{P}"


def test_cli_validate_prints_the_pattern_error(tmp_path, capsys) -> None:
    path = _recipe(tmp_path, "  - clean_email_mapper:\n      pattern: '[\\p{L}.]+@(\\p{L}+'\n")
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "process[0].clean_email_mapper.pattern" in err
    assert "'[\\\\p{L}.]+@(\\\\p{L}+'" in err and "at position 17 (end of pattern): missing )" in err
    good = _recipe(tmp_path, "  - clean_email_mapper:\n      pattern: '[\\p{L}.]+@\\p{L}+'\n")
    assert main(["validate", good]) == 0


def test_cli_validate_reports_a_bad_replacement(tmp_path, capsys) -> None:
    path = _recipe(tmp_path, "  - clean_links_mapper:\n      pattern: 'https?://(\\S+)'\n      repl: '<\\2>'\n")
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert "process[0].clean_links_mapper.repl" in err and "refers to group 2" in err


# --- adapted Data-Juicer ops -------------------------------------------------------
_real_find_spec = importlib.util.find_spec


@pytest.fixture
def dj_installed(monkeypatch):
    """find_spec says data_juicer exists (it cannot be installed here; importing it would
    fail): validation must not need it, so this is all the adapter gets to see."""
    marker = object()
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: marker if name == "data_juicer" else _real_find_spec(name, *a)
    )
    assert "data_juicer" not in sys.modules


@pytest.mark.parametrize(
    "op,args,key,needle",
    [
        (
            "replace_content_mapper",
            {"pattern": ["ok", "r'(\\p{L}'"]},
            "pattern",
            "pattern[1] '(\\\\p{L}' does not compile at position 6",
        ),
        ("text_chunk_mapper", {"split_pattern": "\\p{P}"}, "split_pattern", "Python's 're' module"),
        (
            "pii_redaction_mapper",
            {"extra_patterns": [["\\d{3}", "X"], ["(", "Y"]]},
            "extra_patterns",
            "extra_patterns[1] '(' does not compile at position 0",
        ),
        (
            "tool_success_tagger_mapper",
            {"success_patterns": ["[ok"]},
            "success_patterns",
            "success_patterns[0] '[ok' does not compile",
        ),
        ("extract_event_mapper", {"output_pattern": "(?P<x"}, "output_pattern", "does not compile"),
    ],
)
def test_adapted_op_pattern_checked_before_work(dj_installed, op, args, key, needle) -> None:
    with pytest.raises(OpArgumentError) as info:
        get_op_class(op).validate_args(args)
    assert info.value.key == key
    assert needle in str(info.value)
    assert "data_juicer" not in sys.modules


def test_adapted_op_regex_only_pattern_accepted_where_dj_uses_regex(dj_installed) -> None:
    get_op_class("replace_content_mapper").validate_args({"pattern": ["\\p{Han}++", "r'\\X'"], "repl": ""})
    get_op_class("text_chunk_mapper").validate_args({"split_pattern": "\\n\\n", "max_len": 10})


def test_adapted_op_pattern_error_in_recipe(dj_installed, tmp_path) -> None:
    path = _recipe(tmp_path, "  - replace_content_mapper:\n      pattern: '[\\p{Han}'\n      repl: ''\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert "process[0].replace_content_mapper.pattern" in str(info.value)
    assert "'[\\\\p{Han}' does not compile at position 8" in str(info.value)
