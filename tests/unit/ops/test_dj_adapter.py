"""The Data-Juicer adapter in the main environment, where Data-Juicer is NOT installed.

What must hold here: a Data-Juicer op name is recognised without importing
Data-Juicer (parse time), the error says which extra provides it, typos
still get a suggestion, refused op kinds say why, and nothing at parse or
validation time imports ``data_juicer``.  "Data-Juicer installed" is
simulated only by making ``importlib.util.find_spec`` answer for it (no such
package can exist in this environment); Data-Juicer's real behaviour is
tested in its own environment (tests/integration/test_dj_adapter_side_venv.py).
"""

from __future__ import annotations

import importlib.util
import pickle
import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.ops.dj_compat import adapter as dj_adapter
from airflow_provider_dj.ops.dj_compat import batches as dj_batches
from airflow_provider_dj.ops.dj_compat import op_catalog as dj_op_catalog
from airflow_provider_dj.ops.registry import UnknownOpError, get_op_class

_real_find_spec = importlib.util.find_spec


@pytest.fixture
def dj_installed(monkeypatch):
    """find_spec says data_juicer exists; importing it would still fail (it is not here)."""
    marker = object()
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: marker if name == "data_juicer" else _real_find_spec(name, *a)
    )
    assert "data_juicer" not in sys.modules


def _recipe(tmp_path, process: str) -> str:
    p = tmp_path / "r.yaml"
    p.write_text(
        f"project_name: djr\ndataset_path: {tmp_path}/in.jsonl\nexport_path: {tmp_path}/out.jsonl\nprocess:\n{process}"
    )
    return str(p)


def test_catalog_is_data_juicer_1_6_1():
    assert dj_op_catalog.DJ_VERSION == "1.6.1"
    assert len(dj_op_catalog.OPS) == 228
    assert dj_op_catalog.OPS["remove_specific_chars_mapper"][:2] == ("mapper", True)
    assert dj_op_catalog.OPS["general_field_filter"][0] == "filter"
    assert "text_key" in dj_op_catalog.BASE_PARAMS["mapper"]


def test_dj_only_op_without_data_juicer_names_the_extra(tmp_path):
    assert not dj_adapter.dj_available()
    with pytest.raises(UnknownOpError) as exc:
        get_op_class("remove_specific_chars_mapper")
    msg = str(exc.value)
    assert "'remove_specific_chars_mapper' is a Data-Juicer op not implemented natively" in msg
    assert "pip install airflow-provider-dj[data-juicer]` in its own environment" in msg
    with pytest.raises(RecipeError) as rexc:
        load_recipe(_recipe(tmp_path, "  - whitespace_normalization_mapper:\n  - remove_specific_chars_mapper:\n"))
    assert rexc.value.key == "process[1]" and rexc.value.file.endswith("r.yaml")
    assert "airflow-provider-dj[data-juicer]" in str(rexc.value)
    assert "data_juicer" not in sys.modules


def test_typos_still_get_a_suggestion_from_native_and_data_juicer_names():
    with pytest.raises(UnknownOpError, match="Did you mean 'remove_specific_chars_mapper'"):
        get_op_class("remove_specfic_chars_mapper")
    with pytest.raises(UnknownOpError, match="unknown op 'words_num_filtr'. Did you mean 'words_num_filter'"):
        get_op_class("words_num_filtr")


@pytest.mark.parametrize(
    "name,why",
    [
        ("random_selector", "is a Data-Juicer selector that this engine cannot run: it is a selector"),
        ("naive_grouper", "reshapes the whole dataset at once"),
        ("ray_document_deduplicator", "Ray-mode op that keeps its own cross-worker state"),
        ("document_minhash_deduplicator_with_uid", "only exact-hash deduplicators"),
        ("document_line_deduplicator", "only exact-hash deduplicators"),
    ],
)
def test_refused_data_juicer_ops_say_why_even_when_installed(dj_installed, name, why):
    with pytest.raises(UnknownOpError, match=why):
        get_op_class(name)


def test_native_op_wins_over_data_juicer(dj_installed):
    assert get_op_class("document_deduplicator").__module__ == "airflow_provider_dj.ops.dedup.exact"


def test_with_data_juicer_installed_recipe_validates_and_plans_without_importing_it(dj_installed, tmp_path):
    from airflow_provider_dj.engine.planning.plan import build_plan

    r = load_recipe(
        _recipe(
            tmp_path,
            "  - remove_specific_chars_mapper: {chars_to_remove: 'x'}\n"
            "  - general_field_filter: {filter_condition: 'n > 1'}\n"
            "  - image_deduplicator: {method: phash, consider_text: true}\n",
        )
    )
    plan = build_plan(r)
    assert [(o.name, o.kind, o.is_global) for o in plan.ops] == [
        ("remove_specific_chars_mapper", "mapper", False),
        ("general_field_filter", "filter", False),
        ("image_deduplicator", "deduplicator", True),
    ]
    assert [s.keys_for_global for s in plan.segments] == [2, None]
    assert "data_juicer" not in sys.modules


def test_adapted_op_arguments_checked_at_parse_with_data_juicer_rules(dj_installed, tmp_path):
    with pytest.raises(RecipeError) as exc:
        load_recipe(_recipe(tmp_path, "  - remove_specific_chars_mapper: {chars_to_remov: 'x'}\n"))
    assert exc.value.key == "process[0].remove_specific_chars_mapper.chars_to_remov"
    assert "Did you mean 'chars_to_remove'" in str(exc.value)
    with pytest.raises(RecipeError) as exc:
        load_recipe(_recipe(tmp_path, "  - general_field_filter: {filter_condition: 3}\n"))
    assert "must be str, got 3" in str(exc.value)
    # Data-Juicer's leniency: an integral float for an int, None for anything.
    load_recipe(
        _recipe(
            tmp_path,
            "  - text_chunk_mapper: {max_len: 10, split_pattern: null}\n"
            "  - agent_tool_type_mapper: {top_k_dominant: 2.0}\n",
        )
    )
    with pytest.raises(RecipeError, match="must be int, got 2.5"):
        load_recipe(_recipe(tmp_path, "  - agent_tool_type_mapper: {top_k_dominant: 2.5}\n"))


def test_dag_for_dj_only_op_without_data_juicer_is_a_broken_placeholder(tmp_path, monkeypatch):
    from airflow_provider_dj.dag_builder.factory import register_recipe_dags

    (tmp_path / "good.yaml").write_text(
        f"project_name: good\ndataset_path: {tmp_path}/in.jsonl\n"
        f"export_path: {tmp_path}/o.jsonl\nprocess:\n  - text_length_filter:\n"
    )
    (tmp_path / "djonly.yaml").write_text(
        f"project_name: djonly\ndataset_path: {tmp_path}/in.jsonl\n"
        f"export_path: {tmp_path}/o2.jsonl\nprocess:\n  - clean_ip_mapper:\n"
        f"  - chinese_convert_mapper: {{mode: s2t}}\n"
    )
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "data_juicer" else _real_find_spec(name, *a)
    )
    built = register_recipe_dags({}, str(tmp_path))
    assert set(built) == {"good", "dj_broken__djonly"}
    broken = built["dj_broken__djonly"]
    assert "'chinese_convert_mapper' is a Data-Juicer op not implemented natively" in broken.doc_md
    assert "airflow-provider-dj[data-juicer]" in broken.doc_md
    assert "data_juicer" not in sys.modules


def test_dag_for_dj_op_with_data_juicer_installed_has_the_global_step(dj_installed, tmp_path):
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(_recipe(tmp_path, "  - remove_comments_mapper:\n  - video_deduplicator:\n"))
    assert "global_op1_video_deduplicator" in dag.task_ids
    assert "data_juicer" not in sys.modules


def test_adapted_op_pickles_without_data_juicer(dj_installed):
    op = dj_adapter.adapter_class("remove_specific_chars_mapper")(text_key="body", chars_to_remove="x")
    back = pickle.loads(pickle.dumps(op))
    assert type(back) is type(op) and back.dj_args == {"chars_to_remove": "x"} and back.text_key == "body"


def test_stats_and_meta_handed_over_without_nulls_and_engine_columns_hidden():
    stats = pa.array(
        [{"a": 1, "b": None}, None, {"a": None, "b": 2.5}], pa.struct([("a", pa.int64()), ("b", pa.float64())])
    )
    t = pa.table({"text": ["x", "y", "z"], "__dj__stats__": stats, "__dj__input_row__": pa.array([7, 8, 9])})
    batch = dj_batches.table_to_batch(t, ensure=("__dj__meta__",))
    assert batch == {"text": ["x", "y", "z"], "__dj__stats__": [{"a": 1}, {}, {"b": 2.5}], "__dj__meta__": [{}, {}, {}]}


def test_merge_stats_keeps_existing_values_and_types_and_adds_new_fields():
    stats = pa.array([{"a": 1}, {"a": None}], pa.struct([("a", pa.int32())]))
    t = pa.table({"text": ["x", "y"], "__dj__stats__": stats})
    out = dj_batches.merge_stats(t, [{"a": 1, "c": True}, {"a": 5, "c": False}], "some_filter")
    col = out.column("__dj__stats__")
    assert col.type == pa.struct([("a", pa.int32()), ("c", pa.bool_())])
    assert col.to_pylist() == [{"a": 1, "c": True}, {"a": 5, "c": False}]
    # No statistic at all (an empty filter condition): no empty struct column, which parquet cannot hold.
    plain = pa.table({"text": ["x", "y"]})
    assert dj_batches.merge_stats(plain, [{}, {}], "f").column_names == ["text"]
    assert dj_batches.batch_to_table(plain, {"text": ["x", "y"], "__dj__stats__": [{}, {}]}, "f").column_names == [
        "text"
    ]


def test_batch_back_to_arrow_keeps_unchanged_columns_and_reattaches_row_ids():
    t = pa.table({"n": pa.array([1, 2], pa.int16()), "text": ["a", "b"], "__dj__input_row__": pa.array([4, 5])})
    out = dj_batches.batch_to_table(t, {"n": [1, 2], "text": ["A", "b"], "tag": [["x"], []]}, "m")
    assert out.column_names == ["n", "text", "tag", "__dj__input_row__"]
    assert out.schema.field("n").type == pa.int16()
    assert out.to_pylist() == [
        {"n": 1, "text": "A", "tag": ["x"], "__dj__input_row__": 4},
        {"n": 2, "text": "b", "tag": [], "__dj__input_row__": 5},
    ]
    with pytest.raises(dj_batches.RowCountChangedError, match="turned 2 samples into 3"):
        dj_batches._check_rows({"text": ["a", "b", "c"]}, 2, "splitter")


def test_exact_hash_global_phase_keeps_first_and_never_drops_empty_hashes():
    op = dj_adapter.adapter_class("image_deduplicator")(text_key="text")

    def part(values):
        return pa.table(
            {
                "key": pa.array([dj_batches.hash_key(v) for v in values], pa.binary(16)),
                "keep_always": pa.array([not v for v in values]),
            }
        )

    tables = [part(["h1", "", "h2"]), part(["h1", "", "h3", "h2"])]
    assert op.resolve_global(tables).tolist() == [True, True, True, False, True, True, False]
    assert np.asarray(op.duplicate_representatives(tables)).tolist() == [0, 1, 2, 0, 4, 5, 2]
