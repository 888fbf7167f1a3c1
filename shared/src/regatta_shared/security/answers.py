"""Answers read from servers someone else runs (a registry's JSON, the Harbor hub) within bounds: at most
`max_bytes` of body, and at most `seconds` from sending the request to the body's last byte.

Without them an endless or huge body fills the reader's memory, and one that trickles a byte now and then
holds the reader for as long as the server likes (a per-read timeout never fires while bytes keep
coming). The bounds live in the HTTP transport (`outbound.guarded_client(answers=...)`), so every answer
a client reads is bounded, whoever's code (ours or Harbor's) reads it. The async transport bounds the
time strictly; the sync one checks it at each chunk, so a server that stops sending altogether is cut off
by the client's per-read timeout.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import anyio
import httpx

from ..settings import Settings

_MIB = 1024 * 1024


class AnswerRefused(Exception):
    """An answer past its bounds; `reason` names the bound and the setting, never the answer's content."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class AnswerBounds:
    max_bytes: int
    seconds: float
    bytes_setting: str = "REGATTA_FETCH_MAX_MB"
    seconds_setting: str = "REGATTA_FETCH_TIMEOUT_SEC"

    @classmethod
    def from_settings(cls, settings: Settings) -> AnswerBounds:
        return cls(settings.fetch_max_mb * _MIB, settings.fetch_timeout_sec)

    def too_large(self) -> AnswerRefused:
        shown = f"{self.max_bytes / _MIB:g} MiB" if self.max_bytes >= _MIB else f"{self.max_bytes} bytes"
        return AnswerRefused(f"answer larger than {shown} ({self.bytes_setting})")

    def too_slow(self) -> AnswerRefused:
        return AnswerRefused(f"answer not complete within {self.seconds:g} s ({self.seconds_setting})")


BoundsOf = Callable[[httpx.Request], AnswerBounds]


def per_request(answers: AnswerBounds | BoundsOf) -> BoundsOf:
    """The bounds of each request: the same for all, or chosen by the request (a hub's archives)."""
    if isinstance(answers, AnswerBounds):
        return lambda _request: answers
    return answers


def _declared_too_large(response: httpx.Response, bounds: AnswerBounds) -> bool:
    length = response.headers.get("content-length", "")
    return length.isdigit() and int(length) > bounds.max_bytes


class _AsyncBoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, bounds: AnswerBounds, deadline: float) -> None:
        self._inner = inner
        self._bounds = bounds
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        read = 0
        while True:
            try:
                with anyio.fail_after(max(self._deadline - time.monotonic(), 0.0)):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise self._bounds.too_slow() from None
            read += len(chunk)
            if read > self._bounds.max_bytes:
                raise self._bounds.too_large()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class AsyncBoundedTransport(httpx.AsyncBaseTransport):
    """`inner`, with every answer bounded by `answers` (or the bounds it gives for the request): the
    wait for its headers and the read of its body together within the seconds, the body within the
    bytes."""

    def __init__(self, inner: httpx.AsyncBaseTransport, answers: AnswerBounds | BoundsOf) -> None:
        self._inner = inner
        self._bounds_of = per_request(answers)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        bounds = self._bounds_of(request)
        deadline = time.monotonic() + bounds.seconds
        try:
            with anyio.fail_after(bounds.seconds):
                response = await self._inner.handle_async_request(request)
        except TimeoutError:
            raise bounds.too_slow() from None
        if _declared_too_large(response, bounds):
            await response.aclose()
            raise bounds.too_large()
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_AsyncBoundedStream(stream, bounds, deadline),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, bounds: AnswerBounds, deadline: float) -> None:
        self._inner = inner
        self._bounds = bounds
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
        read = 0
        for chunk in self._inner:
            read += len(chunk)
            if read > self._bounds.max_bytes:
                raise self._bounds.too_large()
            if time.monotonic() > self._deadline:
                raise self._bounds.too_slow()
            yield chunk

    def close(self) -> None:
        self._inner.close()


class BoundedTransport(httpx.BaseTransport):
    """The sync twin of AsyncBoundedTransport: the time is checked as each chunk arrives."""

    def __init__(self, inner: httpx.BaseTransport, answers: AnswerBounds | BoundsOf) -> None:
        self._inner = inner
        self._bounds_of = per_request(answers)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        bounds = self._bounds_of(request)
        deadline = time.monotonic() + bounds.seconds
        response = self._inner.handle_request(request)
        if _declared_too_large(response, bounds):
            response.close()
            raise bounds.too_large()
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_BoundedStream(stream, bounds, deadline),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()
