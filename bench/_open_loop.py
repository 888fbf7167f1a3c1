"""An open-loop HTTP/1.1 load generator (bench/gateway_load.py): requests leave on a fixed schedule
whether or not earlier ones have returned, and latency counts from the scheduled send time, so a stalled
server cannot hide its queue (no coordinated omission)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode


@dataclass(frozen=True)
class Request:
    at: float  # seconds after the start
    kind: str
    method: str
    path: str
    params: dict[str, Any] | None = None
    body: bytes | None = None


@dataclass(frozen=True)
class Result:
    kind: str
    latency_ms: float  # from the scheduled send time
    lag_ms: float  # how late the generator sent it
    ok: bool


class Connections:
    """A minimal HTTP/1.1 keep-alive client for the load. httpx's pool costs more CPU per request than
    the gateway spends serving it once hundreds of requests are in flight (its pool bookkeeping grows
    with them), and on two cores that starves the server it measures. Each request here takes an idle
    connection or opens one (open loop: never waits for a free one) and reads the reply by its
    Content-Length (or chunks)."""

    def __init__(self, base: str, token: str) -> None:
        address = base.removeprefix("http://")
        self.host, port = address.split(":")
        self.port = int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.head = f"Host: {address}\r\nAuthorization: Bearer {token}\r\n"

    async def request(self, request: Request) -> int:
        target = request.path + (f"?{urlencode(request.params)}" if request.params else "")
        body = request.body or b""
        extra = "Content-Type: application/toml\r\n" if body else ""
        head = f"{request.method} {target} HTTP/1.1\r\n{self.head}{extra}Content-Length: {len(body)}\r\n\r\n"
        while self.idle:
            # An idle connection the server has closed meanwhile (keep-alive timeout) answers with EOF
            # before any byte: drop it and try the next, then a new one.
            status = await self._exchange(*self.idle.pop(), head.encode() + body)
            if status is not None:
                return status
        opened = await asyncio.open_connection(self.host, self.port)
        return await self._exchange(*opened, head.encode() + body) or 0

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> int | None:
        try:
            writer.write(data)
            line = await reader.readline()
            if not line:
                writer.close()
                return None
            status = int(line.split()[1])
            length, chunked, close = 0, False, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection":
                    close = b"close" in value.lower()
            if chunked:
                while size := int((await reader.readline()).strip(), 16):
                    await reader.readexactly(size + 2)
                await reader.readline()
            else:
                await reader.readexactly(length)
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            writer.close()
            return 0
        if close:
            writer.close()
        else:
            self.idle.append((reader, writer))
        return status

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


async def drive(base: str, plan: list[Request], token: str) -> list[Result]:
    connections = Connections(base, token)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.5

    async def one(request: Request) -> Result:
        scheduled = start + request.at
        sent = loop.time()
        try:
            status = await asyncio.wait_for(connections.request(request), timeout=120)
        except TimeoutError:
            status = 0
        ok = status == (201 if request.method == "POST" else 200)
        return Result(request.kind, (loop.time() - scheduled) * 1000, (sent - scheduled) * 1000, ok)

    pending = []
    for request in plan:
        delay = start + request.at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        pending.append(asyncio.create_task(one(request)))
    results = list(await asyncio.gather(*pending))
    connections.close()
    return results
