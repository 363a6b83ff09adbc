"""A small client for OpenAI-compatible ``POST {base_url}/chat/completions``.

Why our own and not an SDK: the op needs exactly one call, with retry rules
that match how paid endpoints behave (429 and 5xx are transient, other 4xx
are not), ``Retry-After`` honoured, and errors that never carry the API key.
httpx is already installed with Airflow, and its ``Client`` is thread-safe,
so one client with a connection cap serves the op's thread pool.

What a caller gets back:

* ``ChatAnswer``: the server answered (HTTP 200 with a well-formed body).
  Whether the *content* is usable is the op's validator's business.
* ``ChatRequestRejected``: the server refused this one request (400, 413,
  422: the prompt is too long, say).  A sample failure, not an outage.
* ``ChatConfigError``: 401/403/404 — the key, the model or the URL is wrong;
  retrying cannot help, the op must fail and say what to fix.
* ``ChatUnavailableError``: 429/5xx/timeouts/connection errors that outlived
  ``max_retries``.  The op fails; Airflow retries the task later, and calls
  already recorded are not paid again.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.ops.base import OpFatalError

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 425, 429})  # and every 5xx
REJECT_STATUSES = frozenset({400, 413, 422})


class ChatError(DJError, RuntimeError):
    """Base of the client's errors; messages never contain the API key."""


class ChatConfigError(ChatError, OpFatalError):
    """The endpoint refused the configuration (key, model, URL): fix the recipe or connection."""


class ChatUnavailableError(ChatError, OpFatalError):
    """The endpoint kept failing with transient errors after every retry."""


class ChatRequestRejected(ChatError):
    """The endpoint refused this one request (bad or too long prompt)."""


@dataclass
class ChatAnswer:
    content: str | None
    finish_reason: str | None = None
    usage: dict = field(default_factory=dict)
    model: str | None = None
    attempts: int = 1


@dataclass
class RetryPolicy:
    max_retries: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based).

        Full jitter over an exponential ceiling, so many workers hitting the
        same rate limit do not retry in lockstep; a server's ``Retry-After``
        is a floor (it knows when capacity returns).  Both are capped at
        ``backoff_max_s`` so one response cannot park a worker for an hour.
        """
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2 ** (attempt - 1)))
        wait = ceiling * (0.5 + 0.5 * rand())
        if retry_after is not None:
            wait = max(wait, retry_after)
        return max(0.0, min(wait, self.backoff_max_s))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def redact(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "***")
    return text


class ChatClient:
    """One endpoint, one key, a cap on concurrent connections.  Thread-safe."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        timeout_s: float,
        retry: RetryPolicy,
        concurrency: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self._api_key = api_key
        self.retry = retry
        self.timeout_s = timeout_s
        self._sleep = sleep
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            trust_env=False,  # no proxy surprises from the worker's environment
        )
        self._lock = threading.Lock()
        self.retries_done = 0

    def __repr__(self) -> str:  # never shows the key
        return f"ChatClient(url={self.url!r}, key={'***' if self._api_key else None})"

    def close(self) -> None:
        self._client.close()

    def complete(self, body: dict[str, Any]) -> ChatAnswer:
        """POST one request, retrying transient failures with backoff."""
        import httpx

        attempt = 0
        while True:
            attempt += 1
            problem: str
            retry_after: float | None = None
            try:
                resp = self._client.post(self.url, content=json.dumps(body, ensure_ascii=False).encode())
            except httpx.TimeoutException:
                problem = f"no answer within timeout_s={self.timeout_s}"
            except httpx.TransportError as exc:
                problem = f"connection error: {type(exc).__name__}: {exc}"
            else:
                status = resp.status_code
                if status == 200:
                    return self._parse(resp, attempt)
                snippet = redact(resp.text[:300], self._api_key)
                if status in (401, 403):
                    raise ChatConfigError(
                        f"{self.url} refused the API key (HTTP {status}): set the key in the Airflow connection "
                        f"(password) or the environment variable named by api_key_env. Server said: {snippet}"
                    )
                if status == 404:
                    raise ChatConfigError(
                        f"{self.url} answered HTTP 404: check base_url (it should end before /chat/completions, "
                        f"e.g. .../v1) and the model name {body.get('model')!r}. Server said: {snippet}"
                    )
                if status in REJECT_STATUSES:
                    raise ChatRequestRejected(f"HTTP {status}: {snippet}")
                if status not in RETRY_STATUSES and status < 500:
                    raise ChatConfigError(f"{self.url} answered HTTP {status}, which is not retryable: {snippet}")
                problem = f"HTTP {status}: {snippet}"
                retry_after = parse_retry_after(resp.headers.get("retry-after"))
            if attempt > self.retry.max_retries:
                raise ChatUnavailableError(
                    f"{self.url}: gave up after {attempt} attempts (max_retries={self.retry.max_retries}); "
                    f"last error: {problem}"
                )
            wait = self.retry.delay(attempt, retry_after)
            with self._lock:
                self.retries_done += 1
            log.info("chat completion attempt %d failed (%s); retrying in %.2fs", attempt, problem, wait)
            self._sleep(wait)

    def _parse(self, resp, attempt: int) -> ChatAnswer:
        """A 200 whose body is not a chat completion is an answer with no content (a sample failure)."""
        try:
            doc = resp.json()
            choice = doc["choices"][0]
            content = choice.get("message", {}).get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return ChatAnswer(None, "malformed_response", {}, None, attempt)
        if content is not None and not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        return ChatAnswer(content, choice.get("finish_reason"), usage, doc.get("model"), attempt)
