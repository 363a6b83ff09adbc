"""The input is checked against the recipe before work starts (engine/input/schema.py, input_source.py).

Real files on disk, the real recipe loader and the real planner; nothing mocked.
Each bad input of issue 12 item 2 has its outcome pinned here: refused before
work (the message names the file, the line or field, and what to do) or
accepted, with rows lacking a field failing one by one at run time.
"""

from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dj.engine.config.recipe import PartitionConfig, RecipeError, check_input_exists, parse_recipe
from airflow_provider_dj.engine.input.partitioning import plan_partitions, read_partition
from airflow_provider_dj.engine.input.schema import (
    InputMismatchError,
    check_input_fields,
    file_mentions_key,
    required_fields,
)
from airflow_provider_dj.engine.input.sources import InputError, InputFile, list_input_files


def write_jsonl(path, rows) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


def recipe(tmp_path, dataset, process=None, **keys):
    data = {
        "dataset_path": str(dataset),
        "export_path": str(tmp_path / "out" / "result.jsonl"),
        "process": process or ["whitespace_normalization_mapper", {"words_num_filter": {"min_num": 1}}],
        **keys,
    }
    return parse_recipe(data, base_dir=str(tmp_path))


# -- the field check ------------------------------------------------------------


def test_text_key_missing_from_every_row_is_refused_with_the_fields_and_the_key(tmp_path):
    f = write_jsonl(tmp_path / "body.jsonl", [{"body": "hello world", "id": i} for i in range(5)])
    with pytest.raises(InputMismatchError) as e:
        check_input_fields(recipe(tmp_path, f))
    msg = str(e.value)
    assert f in msg and "'text'" in msg
    assert "body (string)" in msg and "id (int64)" in msg
    assert "text_keys: body" in msg  # what to change, with the field that holds the text
    assert "process[0] whitespace_normalization_mapper" in msg and "process[1] words_num_filter" in msg


def test_setting_text_keys_to_the_real_field_passes(tmp_path):
    f = write_jsonl(tmp_path / "body.jsonl", [{"body": "hello world"}])
    check = check_input_fields(recipe(tmp_path, f, text_keys="body"))
    assert check.fields == ["body"] and check.warnings == []


def test_parquet_schema_comes_from_the_footer(tmp_path):
    path = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"content": ["a b", "c"]}), path)
    with pytest.raises(InputMismatchError, match=r"no row has the field 'text' .*content \(string\)"):
        check_input_fields(recipe(tmp_path, path))
    assert check_input_fields(recipe(tmp_path, path, text_keys="content")).fields == ["content"]


def test_field_key_of_specified_field_filter_names_the_op_argument(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "x", "meta": {"source": "web"}}])
    r = recipe(tmp_path, f, [{"specified_field_filter": {"field_key": "meta.src", "target_value": ["web"]}}])
    with pytest.raises(InputMismatchError) as e:
        check_input_fields(r)
    msg = str(e.value)
    assert "'meta.src'" in msg and "process[0].specified_field_filter.field_key" in msg
    assert "meta (object: source)" in msg
    ok = recipe(tmp_path, f, [{"specified_field_filter": {"field_key": "meta.source", "target_value": ["web"]}}])
    assert check_input_fields(ok).fields == ["meta.source"]  # and not 'text': the op reads no text


def test_suffix_filter_needs_the_suffix_column_only_when_it_has_suffixes(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    with pytest.raises(InputMismatchError, match=r"__dj__suffix__.*process\[0\]\.suffix_filter\.suffixes"):
        check_input_fields(recipe(tmp_path, f, [{"suffix_filter": {"suffixes": [".jsonl"]}}]))
    assert check_input_fields(recipe(tmp_path, f, ["suffix_filter"])).fields == []


def test_a_field_an_earlier_op_adds_is_not_required_from_the_input(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    r = recipe(
        tmp_path,
        f,
        [
            {"text_embedding_mapper": {"output_key": "emb"}},  # adds 'emb'
            {"specified_field_filter": {"field_key": "emb", "target_value": [1]}},
        ],
    )
    assert [q.path for q in required_fields(r)] == ["text"]


def test_an_op_declares_its_own_text_key(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "x", "title": "y"}])
    r = recipe(tmp_path, f, [{"whitespace_normalization_mapper": {"text_key": "headline"}}])
    with pytest.raises(
        InputMismatchError, match=r"'headline'.*process\[0\]\.whitespace_normalization_mapper\.text_key"
    ):
        check_input_fields(r)


def test_llm_api_mapper_reads_its_template_fields_not_the_text_key(tmp_path):
    f = write_jsonl(tmp_path / "q.jsonl", [{"query": "why?", "id": 1}])
    op = {"llm_api_mapper": {"model": "m", "base_url": "http://127.0.0.1:9/v1", "prompt_template": "Answer: {query}"}}
    assert check_input_fields(recipe(tmp_path, f, [op])).fields == ["query"]
    op["llm_api_mapper"]["prompt_template"] = "Answer: {question}"
    with pytest.raises(InputMismatchError, match=r"'question'.*process\[0\]\.llm_api_mapper\.prompt_template"):
        check_input_fields(recipe(tmp_path, f, [op]))


def test_every_registered_op_declares_fields_without_error():
    """The default (the text key) must hold for ops added later without their help."""
    from airflow_provider_dj.ops.base import Op
    from airflow_provider_dj.ops.registry import get_op_class, op_names

    for name in op_names():
        cls = get_op_class(name)
        fields = cls.input_fields({}, "text")
        assert isinstance(fields, dict), name
        if cls.input_fields.__func__ is Op.input_fields.__func__:
            assert fields == {"text": "text_key"}, name


def test_field_in_later_rows_only_is_not_refused(tmp_path, monkeypatch):
    """The sample is the first rows; a field first seen past it is found by the byte search."""
    import airflow_provider_dj.engine.input.schema as mod

    monkeypatch.setattr(mod, "SAMPLE_BYTES", 64)  # the sample holds the first rows only
    rows = [{"body": f"row {i}"} for i in range(50)] + [{"text": "late"}]
    f = write_jsonl(tmp_path / "late.jsonl", rows)
    check = check_input_fields(recipe(tmp_path, f))
    assert check.fields[0] == "text" and check.warnings == []


def test_a_first_line_longer_than_the_sample_is_read_whole(tmp_path, monkeypatch):
    import airflow_provider_dj.engine.input.schema as mod

    monkeypatch.setattr(mod, "SAMPLE_BYTES", 64)
    f = write_jsonl(tmp_path / "long.jsonl", [{"text": "x" * 500}, {"text": "y"}])
    assert check_input_fields(recipe(tmp_path, f)).fields == ["text"]
    g = write_jsonl(tmp_path / "long_body.jsonl", [{"body": "x" * 500}, {"body": "y"}])
    with pytest.raises(InputMismatchError, match="no row has the field 'text'"):
        check_input_fields(recipe(tmp_path, g))


def test_key_search_tells_keys_from_values(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"body": 'he said "text": no', "n": "text"}])
    info = InputFile(f, "jsonl", None, os.path.getsize(f))
    assert not file_mentions_key(info, "text")  # inside values (quotes escaped), never a key
    assert file_mentions_key(info, "body")
    g = tmp_path / "b.jsonl.gz"
    with gzip.open(g, "wt") as fh:
        fh.write(json.dumps({"x": 1}) + "\n" + json.dumps({"text": "y"}) + "\n")
    assert file_mentions_key(InputFile(str(g), "jsonl", "gzip", os.path.getsize(g)), "text")


def test_a_file_lacking_the_field_among_files_that_have_it_is_a_warning_not_a_refusal(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [{"text": "one two"}])
    write_jsonl(d / "b.jsonl", [{"body": "three"}])
    check = check_input_fields(recipe(tmp_path, d))
    assert len(check.warnings) == 1
    assert str(d / "b.jsonl") in check.warnings[0] and "'text'" in check.warnings[0] and "failed/" in check.warnings[0]


def test_none_of_several_files_has_the_field(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [{"body": "one"}])
    write_jsonl(d / "b.jsonl", [{"content": "two"}])
    with pytest.raises(InputMismatchError, match=r"none of its 2 input files has the field 'text'.*body.*content"):
        check_input_fields(recipe(tmp_path, d))


# -- other bad inputs ---------------------------------------------------------------


def test_an_empty_file_among_several_is_a_warning_and_contributes_no_rows(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [{"text": "one"}, {"text": "two"}])
    (d / "b.jsonl").write_text("")
    write_jsonl(d / "c.jsonl", [{"text": "three"}])
    check = check_input_fields(recipe(tmp_path, d))
    assert check.empty_files == [str(d / "b.jsonl")]
    assert any("b.jsonl has no rows" in w for w in check.warnings)
    info = plan_partitions(str(d), PartitionConfig(mode="manual", num_of_partitions=3))
    rows = [read_partition(info, p).column("text").to_pylist() for p in range(3)]
    assert rows == [["one"], ["two"], ["three"]]


def test_an_input_with_no_rows_at_all_passes_the_check(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    check = check_input_fields(recipe(tmp_path, tmp_path / "empty.jsonl"))
    assert check.fields == [] and check.empty_files


def test_a_glob_that_matches_nothing_is_refused_naming_the_pattern(tmp_path):
    r = recipe(tmp_path, tmp_path / "nothing-*.jsonl")
    with pytest.raises(RecipeError, match=r"dataset_path: .*nothing-\*\.jsonl' matches no input files"):
        check_input_exists(r)
    with pytest.raises(InputError, match="matches no .jsonl or .parquet files"):
        list_input_files(str(tmp_path / "nothing-*.jsonl"))


def test_non_utf8_bytes_are_refused_at_planning_naming_line_and_byte(tmp_path):
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(b'{"text": "ok"}\n{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(InputError) as e:
        plan_partitions(str(f), PartitionConfig())
    msg = str(e.value)
    assert str(f) in msg and "line 3" in msg and "byte 43" in msg and "not valid UTF-8" in msg and "iconv" in msg


def test_non_utf8_in_a_later_block_of_a_big_file(tmp_path, monkeypatch):
    """The check runs per stream block, with the open line carried over: the line number stays exact."""
    import airflow_provider_dj.engine.input.indexing as indexing
    import airflow_provider_dj.engine.input.sources as src

    real = src.iter_stream
    for module in (src, indexing):
        monkeypatch.setattr(module, "iter_stream", lambda f, start=0, end=None, chunk=16 << 20: real(f, start, end, 7))
    f = tmp_path / "x.jsonl"
    f.write_bytes(b'{"text": "\xc3\xa9t\xc3\xa9"}\n' * 5 + b'{"text": "\xc3"}\n')
    with pytest.raises(InputError, match="line 6 "):
        plan_partitions(str(f), PartitionConfig())
    f.write_bytes(b'{"text": "\xc3\xa9t\xc3\xa9"}\n' * 6)  # multi-byte characters cut by blocks are fine
    assert plan_partitions(str(f), PartitionConfig())["total_rows"] == 6


@pytest.mark.parametrize("line, word", [("[1, 2]", "[1, 2]"), ('"just a string"', "just a string"), ("42", "42")])
def test_a_json_value_that_is_not_an_object_is_refused_at_planning(tmp_path, line, word):
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "ok"}, line, {"text": "ok"}])
    with pytest.raises(InputError) as e:
        plan_partitions(f, PartitionConfig())
    msg = str(e.value)
    assert "line 2" in msg and "not a JSON object" in msg and word in msg and "fix or remove that line" in msg


def test_mixed_types_in_the_sample_are_refused_before_work(tmp_path):
    rows = [{"text": f"row {i}"} for i in range(6)] + [{"text": 7}]
    f = write_jsonl(tmp_path / "a.jsonl", rows)
    with pytest.raises(InputError) as e:
        check_input_fields(recipe(tmp_path, f))
    msg = str(e.value)
    assert "line 7" in msg and "field 'text' is a number (7) but a string in an earlier row" in msg


def test_mixed_types_past_the_sample_fail_that_partition_naming_the_line(tmp_path):
    rows = [{"text": f"row {i}"} for i in range(6)] + [{"text": 7}, {"text": "fine"}]
    f = write_jsonl(tmp_path / "a.jsonl", rows)
    info = plan_partitions(f, PartitionConfig(mode="manual", num_of_partitions=2))
    assert read_partition(info, 0).num_rows == 4
    with pytest.raises(InputError) as e:
        read_partition(info, 1)
    assert "line 7" in str(e.value) and "field 'text' is a number" in str(e.value)


def test_a_truncated_line_names_its_line(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}, '{"text": "b"', {"text": "c"}])
    info = plan_partitions(f, PartitionConfig(mode="manual", num_of_partitions=1))
    with pytest.raises(InputError, match=r"line 2 \(byte 14\): not valid JSON"):
        read_partition(info, 0)


def test_a_settled_file_is_sampled_once_per_process_and_a_rewrite_is_seen(tmp_path):
    """``dj-airflow run`` checks the input, then planning checks it again: a file untouched for a while
    is read once.  A rewrite of the same size gives it a new modification time, so it is read again; a
    file written in the last two seconds is never remembered (modification times are coarse)."""
    from airflow_provider_dj.engine.input import schema

    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}])
    (f,) = list_input_files(path)
    os.utime(path, ns=(10**18, 10**18))  # settled: modified long before now
    first = schema.sample_schema(f)
    assert first.schema.names == ["text"]
    write_jsonl(tmp_path / "a.jsonl", [{"body": "one"}])  # the same size, other field
    os.utime(path, ns=(10**18, 10**18))  # the same time: only the cache can answer "text" now
    assert schema.sample_schema(f) is first
    os.utime(path, ns=(10**18 + 1, 10**18 + 1))  # what a rewrite does: a new modification time
    assert schema.sample_schema(f).schema.names == ["body"]
    fresh = write_jsonl(tmp_path / "b.jsonl", [{"text": "x"}])
    (g,) = list_input_files(fresh)
    assert schema.sample_schema(g) is not schema.sample_schema(g)  # just written: read each time
