"""``llm_api_mapper`` against a real local chat-completions server (tests/integration/fake_chat_server.py).

Nothing is mocked: the op's real httpx client talks HTTP to a real
ThreadingHTTPServer on 127.0.0.1; only the model behind it is fake.  The
engine's ``apply_op`` is used where the row-failure mechanism matters.
"""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.llm.call_record import decode_line, encode_line
from airflow_provider_dj.ops.llm.client import ChatConfigError, ChatUnavailableError, RetryPolicy, parse_retry_after
from airflow_provider_dj.ops.registry import create_op, get_op_class
from tests.integration.fake_chat_server import FakeChatServer

KEY = "sk-test-secret-0123456789"
FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.5, "timeout_s": 5.0}


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    s = FakeChatServer().start()
    yield s
    s.stop()


def make_op(server, **args):
    return create_op(
        "llm_api_mapper",
        {"base_url": server.base_url, "model": "fake-1", "prompt_template": "Q: {text}", **FAST, **args},
    )


def rows(n, start=0):
    return pa.table(
        {
            "text": [f"sample {i}" for i in range(start, start + n)],
            "__dj__input_row__": pa.array(range(start, start + n), type=pa.int64()),
        }
    )


def test_answers_land_in_output_key_with_the_key_from_the_environment(server):
    out = apply_op(make_op(server, system_prompt="be brief"), 0, rows(4), skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist() == [f"answer to: Q: sample {i}" for i in range(4)]
    assert out.table.column("text").to_pylist() == [f"sample {i}" for i in range(4)]
    assert "__dj__row_error__" not in out.table.column_names
    assert out.accounting["failed"] == 0 and out.accounting["rows_out"] == 4
    assert set(server.auth_headers) == {f"Bearer {KEY}"}
    assert server.bodies[0]["messages"][0] == {"role": "system", "content": "be brief"}
    assert server.bodies[0]["model"] == "fake-1"


def test_429_and_500_are_retried_then_answered(server):
    server.script("Q: sample 1", ("status", 500), ("status", 429, 0.05), ("status", 503))
    op = make_op(server)
    out = apply_op(op, 0, rows(3), skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist()[1] == "answer to: Q: sample 1"
    assert server.received["Q: sample 1"] == 4 and server.answered["Q: sample 1"] == 1
    assert op.stats["retries"] == 3 and op.stats["paid"] == 3


def test_slow_answer_times_out_and_is_retried(server):
    # The client's timeout (5 s) is far above a normal local answer even on a loaded machine, and
    # the slow answer far above the timeout: exactly one request times out.
    server.script("Q: sample 0", ("slow", 60.0))
    op = make_op(server)
    out = apply_op(op, 0, rows(2), skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist()[0] == "answer to: Q: sample 0"
    assert server.received["Q: sample 0"] == 2
    assert op.stats["retries"] == 1


def test_endpoint_down_fails_the_op_even_with_skip_op_error(server):
    """Retries exhausted: the op fails (the task retries later), rows are not dumped into failed/."""
    server.script("Q: sample 1", *[("status", 503)] * 3)
    with pytest.raises(ChatUnavailableError, match="gave up after 3 attempts"):
        apply_op(make_op(server, max_retries=2, concurrency=1), 0, rows(3), skip_op_error=True)
    assert server.received["Q: sample 1"] == 3  # not retried again row by row


def test_refused_key_is_a_config_error_that_never_shows_the_key(server):
    server.script("Q: sample 0", ("status", 401))
    op = make_op(server)
    with pytest.raises(ChatConfigError) as info:
        apply_op(op, 0, rows(1), skip_op_error=True)
    assert "api_key_env" in str(info.value) and KEY not in str(info.value)
    assert KEY not in repr(op)


def test_invalid_answers_fail_their_rows_with_reasons(server):
    server.script("Q: sample 0", "empty")
    server.script("Q: sample 1", ("text", "   \n"))
    server.script("Q: sample 2", ("status", 400))
    op = make_op(server)
    out = apply_op(op, 3, rows(5), skip_op_error=False)  # row failures do not need skip_op_error
    assert out.table.column("__dj__input_row__").to_pylist() == [3, 4]
    assert out.failed_rows.column("__dj__input_row__").to_pylist() == [0, 1, 2]
    assert out.failed_rows.column("text").to_pylist() == ["sample 0", "sample 1", "sample 2"]
    assert out.failed_reasons[:2] == ["InvalidAnswer: empty answer"] * 2
    assert out.failed_reasons[2].startswith("RequestRejected: HTTP 400")
    a = out.accounting
    assert (a["rows_in"], a["rows_out"], a["failed"], a["filtered"]) == (5, 2, 3, 0)


def test_regex_and_json_schema_validators(server):
    answers = {"Q: sample 0": "YES", "Q: sample 1": "maybe", "Q: sample 2": "no"}
    server.default_answer = lambda p: answers.get(p, "?")
    out = apply_op(make_op(server, answer_regex="(?i)yes|no"), 0, rows(3), skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist() == ["YES", "no"]
    assert "does not match answer_regex" in out.failed_reasons[0] and "'maybe'" in out.failed_reasons[0]

    schema = {"type": "object", "required": ["score"], "properties": {"score": {"type": "integer"}}}
    answers.update(
        {"Q: sample 0": '```json\n{"score": 3}\n```', "Q: sample 1": "not json", "Q: sample 2": '{"score": "high"}'}
    )
    out = apply_op(make_op(server, answer_json_schema=schema, model="fake-2"), 0, rows(3), skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist() == ['{"score": 3}']
    assert out.failed_reasons[0].startswith("InvalidAnswer: answer is not JSON")
    assert "at score" in out.failed_reasons[1] and "'high' is not of type 'integer'" in out.failed_reasons[1]


def test_output_over_the_text_key_keeps_failed_samples_intact(server):
    server.script("Q: sample 1", "empty")
    out = apply_op(make_op(server, output_key="text"), 0, rows(2), skip_op_error=False)
    assert out.table.column("text").to_pylist() == ["answer to: Q: sample 0"]
    assert out.failed_rows.column("text").to_pylist() == ["sample 1"]


def test_concurrency_cap_is_respected(server):
    # Each answer takes 1 s: long enough that the three requests of a round are surely at the server
    # at once, even when a loaded machine starts the client's threads late.
    server.delay_s = 1.0
    apply_op(make_op(server, concurrency=3), 0, rows(12), skip_op_error=False)
    assert sum(server.answered.values()) == 12
    assert server.max_in_flight == 3


def test_durable_record_means_a_rerun_pays_nothing_and_a_changed_request_pays_again(server, tmp_path):
    job = str(tmp_path / "job")
    server.script("Q: sample 2", "empty")
    first = make_op(server, concurrency=2)
    first.bind_run_context(job_dir=job, op_index=1, partition_id=0)
    out1 = apply_op(first, 1, rows(6), skip_op_error=False)
    assert first.stats["paid"] == 6 and out1.accounting["failed"] == 1
    files = glob.glob(os.path.join(job, "llm_calls", "op_001_llm_api_mapper", "partition_00000", "calls_*.jsonl"))
    assert len(files) == 1
    assert KEY not in open(files[0], encoding="utf-8").read()

    again = make_op(server, concurrency=2)  # a new process / task retry: a fresh op instance
    again.bind_run_context(job_dir=job, op_index=1, partition_id=0)
    out2 = apply_op(again, 1, rows(6), skip_op_error=False)
    assert again.stats == {"rows": 6, "replayed": 6, "paid": 0, "rejected": 0, "invalid": 1, "retries": 0}
    assert (
        out2.table.equals(out1.table) and out2.failed_reasons == out1.failed_reasons
    )  # the paid empty answer is replayed
    assert all(server.received[f"Q: sample {i}"] == 1 for i in range(6))

    changed = make_op(server, model="fake-other")
    changed.bind_run_context(job_dir=job, op_index=1, partition_id=0)
    apply_op(changed, 1, rows(6), skip_op_error=False)
    assert changed.stats["paid"] == 6
    assert all(server.received[f"Q: sample {i}"] == 2 for i in range(6))

    other_partition = make_op(server)
    other_partition.bind_run_context(job_dir=job, op_index=1, partition_id=1)
    apply_op(other_partition, 1, rows(2, start=6), skip_op_error=False)
    assert other_partition.stats["paid"] == 2


def test_a_torn_record_line_is_ignored_and_only_that_call_is_repaid(server, tmp_path):
    job = str(tmp_path / "job")
    op = make_op(server, concurrency=1)
    op.bind_run_context(job_dir=job, op_index=0, partition_id=0)
    apply_op(op, 0, rows(4), skip_op_error=False)
    [path] = glob.glob(os.path.join(job, "llm_calls", "*", "*", "calls_*.jsonl"))
    data = open(path, "rb").read()
    lines = data.splitlines(keepends=True)
    # kill -9 in the middle of writing the last line: half of it is on disk
    with open(path, "wb") as fh:
        fh.write(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    torn_row = decode_line(lines[-1])["row"]
    again = make_op(server, concurrency=1)
    again.bind_run_context(job_dir=job, op_index=0, partition_id=0)
    out = apply_op(again, 0, rows(4), skip_op_error=False)
    assert again._call_record().torn_lines == 1
    assert again.stats["paid"] == 1 and again.stats["replayed"] == 3
    assert server.received[f"Q: sample {torn_row}"] == 2
    assert out.table.column("llm_answer").to_pylist() == [f"answer to: Q: sample {i}" for i in range(4)]


def test_record_lines_detect_corruption():
    line = encode_line({"row": 1, "req": "abc", "content": "x"})
    assert decode_line(line)["content"] == "x"
    assert decode_line(line.replace(b'\\"x\\"', b'\\"y\\"')) is None  # checksum mismatch
    assert decode_line(line[:-5]) is None


def test_without_a_job_dir_the_record_is_in_memory(server):
    op = make_op(server)
    apply_op(op, 0, rows(3), skip_op_error=False)
    apply_op(op, 0, rows(3), skip_op_error=False)
    assert op.stats["paid"] == 3 and op.stats["replayed"] == 3
    assert sum(server.received.values()) == 3


def test_missing_template_field_fails_before_any_call(server):
    op = make_op(server, prompt_template="Title: {title}\n{text}")
    with pytest.raises(ValueError, match=r"uses field\(s\) \['title'\].*its fields are \['text'\]"):
        apply_op(op, 0, rows(2), skip_op_error=True)
    assert sum(server.received.values()) == 0


def test_null_field_fails_only_that_sample(server):
    t = pa.table({"text": ["a", None], "__dj__input_row__": pa.array([0, 1], type=pa.int64())})
    out = apply_op(make_op(server), 0, t, skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist() == ["answer to: Q: a"]
    assert out.failed_reasons == ["MissingField: field(s) ['text'] are null in this sample; prompt_template needs them"]


def test_key_and_base_url_from_an_airflow_connection(server, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_LLM",
        f'{{"conn_type": "http", "host": "{server.base_url}", "password": "sk-from-connection-42"}}',
    )
    op = create_op("llm_api_mapper", {"conn_id": "my_llm", "model": "fake-1", **FAST})
    out = apply_op(op, 0, rows(1), skip_op_error=False)
    assert out.table.column("llm_answer").to_pylist() == ["answer to: sample 0"]
    assert server.auth_headers == ["Bearer sk-from-connection-42"]


@pytest.mark.parametrize(
    "args,key,message",
    [
        ({"base_url": "http://x/v1"}, "model", "needs 'model'"),
        ({"model": "m"}, "base_url", "'base_url'"),
        ({"model": "m", "base_url": "u", "prompt_template": "{} {text}"}, "prompt_template", "positional"),
        ({"model": "m", "base_url": "u", "answer_regex": "("}, "answer_regex", "does not compile"),
        (
            {"model": "m", "base_url": "u", "answer_json_schema": {"type": "nope"}},
            "answer_json_schema",
            "not a valid JSON",
        ),
        ({"model": "m", "base_url": "u", "concurrency": 0}, "concurrency", ">= 1"),
        ({"model": "m", "base_url": "u", "output_key": "__dj__x"}, "output_key", "reserved"),
    ],
)
def test_recipe_time_validation(args, key, message):
    with pytest.raises(OpArgumentError, match=message) as info:
        get_op_class("llm_api_mapper").validate_args(args)
    assert info.value.key == key


def test_backoff_honours_retry_after_within_the_cap():
    policy = RetryPolicy(max_retries=5, backoff_base_s=1.0, backoff_max_s=10.0)
    assert policy.delay(1, None, rand=lambda: 0.0) == 0.5
    assert policy.delay(3, None, rand=lambda: 1.0) == 4.0
    assert policy.delay(10, None, rand=lambda: 1.0) == 10.0  # capped
    assert policy.delay(1, 7.0, rand=lambda: 0.0) == 7.0  # Retry-After is a floor
    assert policy.delay(1, 3600.0, rand=lambda: 0.0) == 10.0  # but never beyond backoff_max_s
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None
