"""``llm_api_mapper``: ask an OpenAI-compatible chat endpoint one question per sample.

The prompt is ``prompt_template`` formatted over the sample's fields
(``"Summarize: {text}"``); the answer goes to ``output_key``.  The op is
*expensive*: the engine feeds it small batches (``batch_size``, default 32)
and commits each batch's output, so a crash loses at most one batch of
work — and, thanks to the call record (``llm_call_record``), none of the
money: every answered call is recorded durably before it is used, keyed by
the input row and a hash of the full request, and looked up before calling.

Answers are validated (never empty; optionally ``answer_regex`` must match
the whole answer, or the answer must be JSON valid under
``answer_json_schema``).  An invalid answer is a *sample* failure: the row
leaves through the reserved ``__dj__row_error__`` column, which the engine
moves to ``failed/`` with the reason, whatever ``skip_op_error`` says.  An
endpoint that stays down (429/5xx/timeouts beyond ``max_retries``) or
refuses the configuration (401/403/404) fails the op instead: the task is
retried later, and answers already recorded are not paid for again.

The API key comes from an Airflow connection (``conn_id``: password = key,
host = base URL) or the environment variable ``api_key_env``; it is read at
run time only, is never part of the recipe, the plan, the call record, an
event or an error message.
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import pyarrow as pa

from airflow_provider_dj.core.host import get_connection, mask_secret
from airflow_provider_dj.ops.base import Mapper, OpArgumentError, OpFatalError
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN, ROW_ERROR_COLUMN
from airflow_provider_dj.ops.kernels.patterns import DOTALL, compile_user_pattern
from airflow_provider_dj.ops.llm.call_record import CallRecord, record_dir, request_hash
from airflow_provider_dj.ops.registry import register

log = logging.getLogger(__name__)


_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```$", re.DOTALL)


class LLMTemplateError(OpFatalError, ValueError):
    """The prompt template names a field the data does not have."""


class LLMConfigError(OpFatalError, ValueError):
    """The endpoint configuration (connection, base URL) is unusable."""


def template_fields(template: str) -> list[str]:
    """Top-level field names a ``str.format`` template uses (``{meta[title]}`` -> ``meta``)."""
    names: list[str] = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        top = re.split(r"[.\[]", field, maxsplit=1)[0]
        if top == "" or top.isdigit():
            raise ValueError(f"positional placeholder {{{field}}}: name a sample field instead, e.g. {{text}}")
        if top not in names:
            names.append(top)
    return names


def strip_code_fence(answer: str) -> str:
    m = _FENCE.match(answer.strip())
    return m.group(1).strip() if m else answer


@register
class LLMApiMapper(Mapper):
    """Call a chat-completions endpoint per sample; see the module docstring."""

    name = "llm_api_mapper"
    expensive = True
    default_batch_size = 32

    def __init__(
        self,
        *,
        model: str = "",
        prompt_template: str = "{text}",
        base_url: Optional[str] = None,
        conn_id: Optional[str] = None,
        api_key_env: str = "OPENAI_API_KEY",
        system_prompt: Optional[str] = None,
        output_key: str = "llm_answer",
        temperature: Optional[float] = None,
        max_tokens: Optional[int] = None,
        sampling_params: Optional[dict] = None,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        concurrency: int = 4,
        answer_regex: Optional[str] = None,
        answer_json_schema: Optional[dict] = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.check_values(
            dict(
                model=model,
                prompt_template=prompt_template,
                base_url=base_url,
                conn_id=conn_id,
                output_key=output_key,
                timeout_s=timeout_s,
                max_retries=max_retries,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
                concurrency=concurrency,
                answer_regex=answer_regex,
                answer_json_schema=answer_json_schema,
            )
        )
        self.model = model
        self.prompt_template = prompt_template
        self.fields = template_fields(prompt_template)
        self.base_url = base_url
        self.conn_id = conn_id
        self.api_key_env = api_key_env
        self.system_prompt = system_prompt
        self.output_key = output_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.sampling_params = dict(sampling_params or {})
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.concurrency = int(concurrency)
        self.answer_regex = answer_regex
        self._regex = (
            compile_user_pattern(answer_regex, op=self.name, arg="answer_regex", flags=DOTALL)
            if answer_regex is not None
            else None
        )
        self.answer_json_schema = answer_json_schema
        self._schema_validator = None
        self._record: CallRecord | None = None
        self._record_dir: str | None = None
        #: Cumulative counters for this op instance (logged per batch; tests read them).
        self.stats = {"rows": 0, "replayed": 0, "paid": 0, "rejected": 0, "invalid": 0, "retries": 0}

    def __repr__(self) -> str:
        return f"LLMApiMapper(model={self.model!r}, base_url={self.base_url!r}, conn_id={self.conn_id!r})"

    # -- validation (recipe time) -----------------------------------------
    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        if not args.get("model"):
            raise OpArgumentError("model", "llm_api_mapper needs 'model': the model name the endpoint serves")
        if not args.get("base_url") and not args.get("conn_id"):
            raise OpArgumentError(
                "base_url",
                "llm_api_mapper needs 'base_url' (e.g. http://host:8000/v1) or "
                "'conn_id' (an Airflow connection whose host is the base URL)",
            )
        try:
            template_fields(args.get("prompt_template", "{text}"))
        except ValueError as exc:
            raise OpArgumentError("prompt_template", f"prompt_template is not a usable template: {exc}") from None
        out = args.get("output_key", "llm_answer")
        if not out or str(out).startswith("__dj__"):
            raise OpArgumentError("output_key", f"output_key {out!r} is empty or reserved (__dj__*); pick a field name")
        for key, low in (("timeout_s", 0.0), ("backoff_base_s", 0.0), ("backoff_max_s", 0.0)):
            if key in args and not float(args[key]) > low:
                raise OpArgumentError(key, f"{key} must be > 0, got {args[key]!r}")
        if "max_retries" in args and int(args["max_retries"]) < 0:
            raise OpArgumentError("max_retries", f"max_retries must be >= 0, got {args['max_retries']!r}")
        if "concurrency" in args and int(args["concurrency"]) < 1:
            raise OpArgumentError("concurrency", f"concurrency must be >= 1, got {args['concurrency']!r}")
        if args.get("answer_regex") is not None:  # compiled as every user pattern is (regex, DOTALL)
            compile_user_pattern(args["answer_regex"], op=cls.name, arg="answer_regex", flags=DOTALL)
        if args.get("answer_json_schema") is not None:
            import jsonschema

            try:
                jsonschema.validators.validator_for(args["answer_json_schema"]).check_schema(args["answer_json_schema"])
            except jsonschema.SchemaError as exc:
                raise OpArgumentError(
                    "answer_json_schema", f"answer_json_schema is not a valid JSON schema: {exc.message}"
                ) from None

    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """The fields the prompt template names (not the text key unless it is one): the input check."""
        return dict.fromkeys(template_fields(args.get("prompt_template", "{text}")), "prompt_template")

    # -- run context ----------------------------------------------------------
    def bind_run_context(self, *, job_dir: str, op_index: int, partition_id: int) -> None:
        super().bind_run_context(job_dir=job_dir, op_index=op_index, partition_id=partition_id)
        directory = record_dir(job_dir, op_index, self.name, partition_id)
        if directory != self._record_dir:
            self._record_dir, self._record = directory, None

    def _call_record(self) -> CallRecord:
        if self._record is None:
            self._record = CallRecord(self._record_dir)  # None: not bound to a job, memory only
            if self._record.torn_lines:
                log.warning(
                    "%s: ignored %d torn line(s) in the call record %s (a writer was killed mid-write)",
                    self.name,
                    self._record.torn_lines,
                    self._record_dir,
                )
        return self._record

    def _endpoint(self) -> tuple[str, str | None]:
        """(base URL, API key), read now — at run time, never at DAG parse."""
        base, key = self.base_url, None
        if self.conn_id:
            conn = get_connection(self.conn_id)
            key = conn.password or None
            if not base:
                host = (conn.host or "").rstrip("/")
                if not host:
                    raise LLMConfigError(
                        f"connection {self.conn_id!r} has no host; set its host to the base "
                        f"URL (e.g. https://api.example/v1) or give base_url in the recipe"
                    )
                base = host if "://" in host else f"https://{host}{f':{conn.port}' if conn.port else ''}"
        if key is None and self.api_key_env:
            key = os.environ.get(self.api_key_env) or None
        # The host's log masker (Airflow's) then hides the key in task logs too, wherever it might appear.
        mask_secret(key)
        assert base
        return base, key

    # -- the work ---------------------------------------------------------------
    def _body(self, prompt: str) -> dict[str, Any]:
        messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.sampling_params}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def _validate(self, content: str | None) -> tuple[str | None, str | None]:
        """(cleaned answer, None) or (None, reason)."""
        if content is None or not content.strip():
            return None, "InvalidAnswer: empty answer"
        answer = content.strip()
        if self._regex is not None and self._regex.fullmatch(answer) is None:
            return None, f"InvalidAnswer: answer does not match answer_regex {self.answer_regex!r}: {answer[:200]!r}"
        if self.answer_json_schema is not None:
            import jsonschema

            answer = strip_code_fence(answer)
            try:
                doc = json.loads(answer)
            except ValueError as exc:
                return None, f"InvalidAnswer: answer is not JSON ({exc}): {answer[:200]!r}"
            if self._schema_validator is None:
                cls = jsonschema.validators.validator_for(self.answer_json_schema)
                self._schema_validator = cls(self.answer_json_schema)
            err = jsonschema.exceptions.best_match(self._schema_validator.iter_errors(doc))
            if err is not None:
                where = "/".join(str(p) for p in err.absolute_path) or "(root)"
                return None, f"InvalidAnswer: answer violates answer_json_schema at {where}: {err.message}"
        return answer, None

    def process_table(self, table: pa.Table) -> pa.Table:
        self._check_fields(table)
        n = table.num_rows
        row_ids = table.column(INPUT_ROW_COLUMN).to_pylist() if INPUT_ROW_COLUMN in table.column_names else [None] * n
        samples = table.select(self.fields).to_pylist() if self.fields else [{}] * n
        record = self._call_record()
        errors: list[str | None] = [None] * n
        contents: list[str | None] = [None] * n
        todo, replayed = self._plan_calls(samples, row_ids, record, errors, contents)
        paid = rejected = retries = 0
        if todo:
            paid, rejected, retries = self._call_api(todo, row_ids, record, errors, contents)
        else:
            record.flush()
        answers, invalid = self._validated_answers(contents, errors)
        self._count(rows=n, replayed=replayed, paid=paid, rejected=rejected, invalid=invalid, retries=retries)
        return self._with_answers(table, answers, errors)

    def _check_fields(self, table: pa.Table) -> None:
        """Raise LLMTemplateError when prompt_template names a field the data lacks."""
        missing = [f for f in self.fields if f not in table.column_names]
        if missing:
            shown = [c for c in table.column_names if not c.startswith("__dj__")]
            raise LLMTemplateError(
                f"{self.name}: prompt_template uses field(s) {missing} that the data does not "
                f"have; its fields are {shown}. Fix prompt_template or the data."
            )

    def _plan_calls(
        self, samples: list[dict], row_ids: list, record, errors: list, contents: list
    ) -> tuple[list[tuple[int, dict, str]], int]:
        """Fill each sample's prompt; return (the calls to pay for as (row, body, request hash), how
        many rows the call record answered).  A row whose prompt cannot be filled gets its error in
        ``errors``; a recorded answer goes to ``contents``."""
        todo: list[tuple[int, dict, str]] = []
        replayed = 0
        for i, sample in enumerate(samples):
            null = [f for f in self.fields if sample.get(f) is None]
            if null:
                errors[i] = f"MissingField: field(s) {null} are null in this sample; prompt_template needs them"
                continue
            try:
                prompt = self.prompt_template.format_map(sample)
            except (KeyError, IndexError, AttributeError, TypeError, ValueError) as exc:
                errors[i] = (
                    f"TemplateError: prompt_template cannot be filled from this sample: {type(exc).__name__}: {exc}"
                )
                continue
            body = self._body(prompt)
            req = request_hash(body)
            hit = record.lookup(row_ids[i], req)
            if hit is not None:
                contents[i] = hit.get("content")
                replayed += 1
            else:
                todo.append((i, body, req))
        return todo, replayed

    def _call_api(
        self, todo: list[tuple[int, dict, str]], row_ids: list, record, errors: list, contents: list
    ) -> tuple[int, int, int]:
        """Make the calls ``concurrency`` at a time, recording each answer; return (paid, rejected,
        retries).  A rejected request's error goes to ``errors``, an answer to ``contents``.  On an
        outage the queued calls are not started; those in flight finish and are recorded."""
        from airflow_provider_dj.ops.llm.client import ChatClient, ChatRequestRejected, RetryPolicy

        base, key = self._endpoint()
        client = ChatClient(
            base_url=base,
            api_key=key,
            timeout_s=self.timeout_s,
            retry=RetryPolicy(self.max_retries, self.backoff_base_s, self.backoff_max_s),
            concurrency=self.concurrency,
        )

        def call(item: tuple[int, dict, str]) -> tuple[int, str | None, str | None]:
            i, body, req = item
            try:
                ans = client.complete(body)
            except ChatRequestRejected as exc:
                return i, None, f"RequestRejected: {exc}"
            entry = record.add(
                row_ids[i],
                req,
                {
                    "content": ans.content,
                    "finish_reason": ans.finish_reason,
                    "usage": ans.usage,
                    "model": ans.model,
                    "attempts": ans.attempts,
                },
            )
            return i, entry["content"], None

        paid = rejected = 0
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="llm_api")
        try:
            for i, content, err in pool.map(call, todo):
                if err is not None:
                    errors[i] = err
                    rejected += 1
                else:
                    contents[i] = content
                    paid += 1
        finally:
            # On an outage, do not start queued calls; finish (and record) the ones in flight.
            pool.shutdown(wait=True, cancel_futures=True)
            retries = client.retries_done
            client.close()
            record.flush()
        return paid, rejected, retries

    def _validated_answers(self, contents: list, errors: list) -> tuple[list[str | None], int]:
        """Each answered row's content checked against answer_regex / answer_json_schema; return (the
        answers, how many were invalid).  An invalid answer's error goes to ``errors``."""
        answers: list[str | None] = [None] * len(contents)
        invalid = 0
        for i in range(len(contents)):
            if errors[i] is not None:
                continue
            answers[i], errors[i] = self._validate(contents[i])
            if errors[i] is not None:
                invalid += 1
        return answers, invalid

    def _count(self, **counts: int) -> None:
        """Add this table's counts to the op's stats and log them."""
        for k, v in counts.items():
            self.stats[k] += v
        log.info(
            "%s: %d rows, %d answered from the call record, %d paid calls (%d retries), %d rejected, "
            "%d invalid answers",
            self.name,
            counts["rows"],
            counts["replayed"],
            counts["paid"],
            counts["retries"],
            counts["rejected"],
            counts["invalid"],
        )

    def _with_answers(self, table: pa.Table, answers: list, errors: list) -> pa.Table:
        """The table with the answers in ``output_key`` and each row's error column.

        A failed row keeps its old ``output_key`` value, so failed/ shows the sample as it came in."""
        if self.output_key in table.column_names:
            idx = table.column_names.index(self.output_key)
            old = table.column(idx).to_pylist()
            values = [a if e is None else o for a, e, o in zip(answers, errors, old)]
            table = table.set_column(idx, self.output_key, pa.array(values, type=pa.string()))
        else:
            table = table.append_column(self.output_key, pa.array(answers, type=pa.string()))
        if ROW_ERROR_COLUMN in table.column_names:
            table = table.drop_columns([ROW_ERROR_COLUMN])
        return table.append_column(ROW_ERROR_COLUMN, pa.array(errors, type=pa.string()))
