"""A real local HTTP server that speaks OpenAI's chat-completions API, for tests.

``llm_api_mapper`` talks to it over a real socket with its real client; only
the model is fake.  The server answers ``POST /v1/chat/completions`` and can
be scripted per prompt (the last message's content): each request for that
prompt consumes the next action of its script, then falls back to the
default answer (``answer to: <prompt>``, or ``default_answer(prompt)``).

Actions::

    "ok"                     the default answer
    ("text", "...")          exactly this content
    "empty"                  content ""
    ("status", 500)          an error status; ("status", 429, 1.5) adds Retry-After: 1.5
    ("slow", 2.0)            answer normally after 2 s (past the client's timeout)

It counts, per prompt, the requests received and the answers sent (an HTTP
200 delivered: what a paid endpoint would bill), the most requests in
flight at once, and the Authorization headers it saw.  ``kill_session_at``
SIGKILLs a process session (a whole ``dj-airflow run``) when the n-th request
arrives, before answering it: a crash in the middle of a batch.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class FakeChatServer:
    def __init__(self) -> None:
        self.scripts: dict[str, list[Any]] = {}
        self.default_answer: Callable[[str], str] = lambda prompt: f"answer to: {prompt}"
        self.delay_s = 0.0
        self.received: Counter = Counter()
        self.answered: Counter = Counter()
        self.auth_headers: list[str | None] = []
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.kill_session_at: tuple[int, int] | None = None  # (n-th request, session id)
        self.killed = False
        self._n = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> "FakeChatServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, prompt: str, *actions: Any) -> None:
        with self._lock:
            self.scripts.setdefault(prompt, []).extend(actions)

    def reset_counts(self) -> None:
        with self._lock:
            self.received.clear()
            self.answered.clear()
            self.bodies.clear()
            self.auth_headers.clear()
            self.max_in_flight = 0

    # -- request handling ------------------------------------------------------
    def _next_action(self, prompt: str) -> tuple[int, Any]:
        with self._lock:
            self._n += 1
            self.received[prompt] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            queue = self.scripts.get(prompt)
            action = queue.pop(0) if queue else "ok"
            return self._n, action

    def _kill_session(self, sid: int) -> None:
        self.killed = True
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid:
                    os.kill(int(name), signal.SIGKILL)
            except (OSError, IndexError, ValueError):
                continue

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, doc: dict | None, headers: dict | None = None) -> bool:
                data = json.dumps(doc or {}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    return True
                except OSError:  # the client gave up (timeout) before the answer
                    return False

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = body["messages"][-1]["content"]
                with server._lock:
                    server.auth_headers.append(self.headers.get("Authorization"))
                    server.bodies.append(body)
                n, action = server._next_action(prompt)
                try:
                    if server.kill_session_at and n == server.kill_session_at[0]:
                        server._kill_session(server.kill_session_at[1])
                        self.close_connection = True
                        return
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    content: str | None = server.default_answer(prompt)
                    if isinstance(action, tuple) and action[0] == "status":
                        headers = {"Retry-After": str(action[2])} if len(action) > 2 else {}
                        self._send(action[1], {"error": {"message": f"scripted {action[1]}"}}, headers)
                        return
                    if isinstance(action, tuple) and action[0] == "slow":
                        time.sleep(action[1])
                    elif isinstance(action, tuple) and action[0] == "text":
                        content = action[1]
                    elif action == "empty":
                        content = ""
                    doc = {
                        "id": f"cmpl-{n}",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                        ],
                        "usage": {
                            "prompt_tokens": len(prompt.split()),
                            "completion_tokens": 3,
                            "total_tokens": len(prompt.split()) + 3,
                        },
                    }
                    if self._send(200, doc):
                        with server._lock:
                            server.answered[prompt] += 1
                finally:
                    with server._lock:
                        server.in_flight -= 1

        return Handler
