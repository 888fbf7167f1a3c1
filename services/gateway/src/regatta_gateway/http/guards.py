"""Hostile HTTP input, refused at the edge before any route runs, so it changes nothing (invariant 8).

`RequestGuard` is the gateway's outermost ASGI middleware:

- A body larger than `REGATTA_MAX_BODY_BYTES` gets 413: at once when Content-Length says so (the body
  is never read), else as soon as the streamed chunks pass the limit. Memory stays bounded by the limit.
- Under /api/: a URL path with '.' or '..' segments or NUL/control characters, and a query parameter
  with NUL/control characters, get 400 naming them; a body in a media type the API does not read gets
  415; a JSON or TOML body that nests absurdly deep, or has a NUL or a lone surrogate in any string,
  gets 400 naming that field, and so does a non-finite number (JSON's NaN/Infinity, TOML's nan/inf),
  which no field means and which poisons every sum, timeout and score it reaches. Postgres stores
  neither NUL nor lone surrogates (the request would end in a 500 half-way), and a NUL truncates a name
  or path in every C API it reaches.

Bodies are read here (bounded) and replayed to the app, which reads them as before. A task archive upload
(`UPLOAD_ROUTES`) is the exception: only its URL is checked here, and its route streams the body to disk under
the task bounds (REGATTA_MAX_TASK_MB), checking its media type and declared length after authentication.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections import deque
from typing import Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from regatta_gateway.errors import Invalid, Refused, TooLarge, Unsupported
from regatta_gateway.http.errors import response

API_PREFIX = "/api/"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
TOML_ROUTES = frozenset({("POST", "/api/v1/runs")})  # the only route that reads a TOML body
# Task archives (tar.gz): streamed by the route itself, under the task bounds, never buffered here.
UPLOAD_ROUTES = frozenset({("POST", "/api/v1/benchmarks/uploads")})
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_DEPTH = 64
# JSON can carry a NUL or a lone surrogate only as an escape (raw ones are invalid JSON or UTF-8), and
# a non-finite number only as Python's NaN/Infinity extension.
SUSPECT_ESCAPE = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]|NaN|Infinity")


class _ClientGone(Exception):
    """The client disconnected while its body was read: there is nobody to answer."""


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        api = scope["path"].startswith(API_PREFIX)
        with_body = "transfer-encoding" in headers or headers.get("content-length", "0") != "0"
        media = _media_type(headers.get("content-type"))
        if (scope["method"], scope["path"]) in UPLOAD_ROUTES:
            # Its media type and size are checked by the route, after authentication.
            refusal = _url_problem(scope)
            if refusal is not None:
                await response(refusal)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        refusal = (_url_problem(scope) if api else None) or self._length_problem(headers)
        if refusal is None and api and with_body and scope["method"] in BODY_METHODS:
            refusal = _media_problem(scope, media)
        if refusal is None and with_body:
            try:
                body = await _read_bounded(receive, self.max_body_bytes)
            except _ClientGone:
                return
            if body is None:
                refusal = self._too_large()
            elif api and scope["method"] in BODY_METHODS and _may_be_hostile(body, media):
                # Parsing megabytes takes a while: off the event loop (this runs before authentication).
                refusal = await run_in_threadpool(_body_problem, body, media)
            if refusal is None:
                receive = _replay(body or b"", receive)
        if refusal is not None:
            await response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _length_problem(self, headers: dict[str, str]) -> Refused | None:
        declared = headers.get("content-length")
        if declared is None:
            return None
        if not declared.strip().isdigit():
            return Invalid("Content-Length must be a number", code="VALIDATION", field="Content-Length")
        return self._too_large() if int(declared) > self.max_body_bytes else None

    def _too_large(self) -> Refused:
        return TooLarge(
            f"The request body is larger than the limit of {self.max_body_bytes} bytes",
            code="PAYLOAD_TOO_LARGE",
            field="(body)",
            max_bytes=self.max_body_bytes,
        )


async def _read_bounded(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes `limit` (the rest is never read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """Hands the app the body already read, then the real channel (disconnects for SSE streams)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _printable(text: str) -> str:
    """A name safe to echo back: control characters and lone surrogates escaped, length bounded."""
    return text.encode("unicode_escape").decode("ascii")[:200]


def _url_problem(scope: Scope) -> Refused | None:
    path: str = scope["path"]  # percent-decoded by the server, so %2e%2e%2f arrives as ../
    if CONTROL.search(path):
        return Invalid(
            "The URL path must not contain NUL or control characters", code="VALIDATION", field="path"
        )
    if any(part in (".", "..") for part in path.split("/")):
        return Invalid("The URL path must not contain '.' or '..' segments", code="VALIDATION", field="path")
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if CONTROL.search(name) or CONTROL.search(value):
            field = _printable(name)
            return Invalid(
                f"{field} must not contain NUL or control characters", code="VALIDATION", field=field
            )
    return None


def _media_type(content_type: str | None) -> str | None:
    return content_type.split(";", 1)[0].strip().lower() if content_type is not None else None


def _media_problem(scope: Scope, media: str | None) -> Refused | None:
    # No Content-Type at all: the routes read the body as JSON, as they always did.
    if media is None or media == "application/json" or media.endswith("+json"):
        return None
    reads_toml = (scope["method"], scope["path"]) in TOML_ROUTES
    if reads_toml and "toml" in media:
        return None
    accepted = "application/json or application/toml" if reads_toml else "application/json"
    return Unsupported(
        f"Content-Type {_printable(media)!r} is not accepted here; send {accepted}",
        code="UNSUPPORTED_MEDIA_TYPE",
        field="Content-Type",
    )


def _may_be_hostile(body: bytes, media: str | None) -> bool:
    """Cheap byte-level test: a JSON body without a NUL or surrogate escape or NaN/Infinity, and with
    too few brackets to nest MAX_DEPTH deep, has nothing `_body_problem` could find: not parsed here."""
    if media is not None and "toml" in media:
        return True  # TOML spells nesting in more ways (dotted keys, headers); submissions are small
    return bool(SUSPECT_ESCAPE.search(body)) or body.count(b"[") + body.count(b"{") >= MAX_DEPTH


def _body_problem(body: bytes, media: str | None) -> Refused | None:
    """NUL, lone surrogates or absurd nesting in a JSON/TOML body; the routes name malformed bodies."""
    if not body:
        return None
    try:
        text = body.decode("utf-8")
        document = tomllib.loads(text) if media and "toml" in media else json.loads(text)
    except RecursionError:
        problem: tuple[str, str] | None = ("(body)", f"nests deeper than {MAX_DEPTH} levels")
    except ValueError:  # not UTF-8, not JSON, not TOML: the route reports it, naming the body
        return None
    else:
        problem = _first_problem(document)
    if problem is None:
        return None
    field = _printable(problem[0])
    return Invalid(f"{field} {problem[1]}", code="VALIDATION", field=field)


def _first_problem(document: Any) -> tuple[str, str] | None:
    """(dotted field, what is wrong) for the first bad key or string, level by level, else None.

    Iterative, so a hostile document cannot exhaust the stack here; a field's dotted name is built
    only for containers and for the culprit, so a body of a million scalars stays cheap.
    """
    if isinstance(document, str | float):
        wrong = _scalar_problem(document)
        return ("(body)", wrong) if wrong else None
    queue: deque[tuple[str, Any, int]] = deque([("", document, 0)])
    while queue:
        where, value, depth = queue.popleft()
        if not isinstance(value, dict | list):
            continue
        if depth >= MAX_DEPTH:
            return where or "(body)", f"nests deeper than {MAX_DEPTH} levels"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            wrong = _scalar_problem(item) if isinstance(item, str | float) else None
            if wrong is None and isinstance(key, str):
                wrong = _string_problem(key)
            if wrong or isinstance(item, dict | list):
                path = f"{where}.{key}" if where else str(key)
                if wrong:
                    return path, wrong
                queue.append((path, item, depth + 1))
    return None


def _scalar_problem(value: str | float) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else "must be a finite number"
    return _string_problem(value)


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL characters"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid Unicode"
    return None
