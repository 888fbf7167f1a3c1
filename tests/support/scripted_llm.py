"""A test double of a paid model provider: an OpenAI-compatible chat-completions server on 127.0.0.1 that
replays a script of replies and reports token usage, so harnesses such as terminus-2 run end to end
offline and deterministically.

    with ScriptedLLM([terminus_reply(...), ...]) as llm:
        llm.base_url        # "http://127.0.0.1:<port>/v1", for `base_url` / OPENAI_BASE_URL
        llm.requests        # every request body received, in order
        llm.authorizations  # every Authorization header received

Plain http.server in a thread: no dependency, and the server keeps answering while the test's event
loop is busy running the trial.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def terminus_reply(
    keystrokes: Sequence[str] = (), *, task_complete: bool = False, duration: float = 0.1, analysis: str = ""
) -> str:
    """A reply in terminus-2's JSON format (harbor/agents/terminus_2/templates/terminus-json-plain.txt)."""
    return json.dumps(
        {
            "analysis": analysis or "Scripted analysis.",
            "plan": "Scripted plan.",
            "commands": [{"keystrokes": k, "duration": duration} for k in keystrokes],
            "task_complete": task_complete,
        }
    )


class ScriptedLLM:
    def __init__(
        self,
        replies: Sequence[str],
        *,
        prompt_tokens: int = 1000,
        completion_tokens: int = 50,
        model: str = "gpt-4o-mini",
    ) -> None:
        """Replies are served in order; once the script runs out, the last one repeats."""
        if not replies:
            raise ValueError("a script needs at least one reply")
        self.replies = list(replies)
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-llm", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, body: dict[str, Any], authorization: str | None) -> str:
        with self._lock:
            self.requests.append(body)
            self.authorizations.append(authorization)
            return self.replies[min(len(self.requests), len(self.replies)) - 1]

    def _completion(self, content: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-scripted-{self.calls}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output clean

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": llm.model, "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                content = llm._next(body, self.headers.get("Authorization"))
                completion = llm._completion(content)
                if body.get("stream"):
                    self._stream(completion)
                else:
                    self._json(200, completion)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, completion: dict[str, Any]) -> None:
                """The same reply as server-sent events: one content chunk, then usage, then [DONE]."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {k: completion[k] for k in ("id", "created", "model")} | {
                    "object": "chat.completion.chunk"
                }
                message = completion["choices"][0]["message"]
                chunks = [
                    base | {"choices": [{"index": 0, "delta": message, "finish_reason": None}]},
                    base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    base | {"choices": [], "usage": completion["usage"]},
                ]
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler
