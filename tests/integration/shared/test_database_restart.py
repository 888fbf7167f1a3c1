"""A service started while Postgres is unreachable waits for it instead of failing its start."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from regatta_shared.events import RunStopRequested
from regatta_shared.eventstore import new_event
from regatta_shared.settings import Settings
from regatta_shared.system.service import make_store

pytestmark = pytest.mark.timeout(90)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


def _proxy_to_postgres(port: int, upstream: int, ready: threading.Event, stop: threading.Event) -> None:
    """Postgres reachable on `port` from now on: a plain TCP relay to the server on `upstream`."""

    async def serve() -> None:
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream)
            await asyncio.gather(_forward(reader, upstream_writer), _forward(upstream_reader, writer))

        server = await asyncio.start_server(relay, "127.0.0.1", port)
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()

    asyncio.run(serve())


def test_make_store_waits_for_a_database_that_is_not_answering_yet(postgres_url: str, tmp_path: Path) -> None:
    port, upstream = _free_port(), urlsplit(postgres_url).port
    assert upstream is not None
    through_proxy = postgres_url.replace(f"127.0.0.1:{upstream}", f"127.0.0.1:{port}")
    assert through_proxy != postgres_url
    settings = Settings(DATABASE_URL=through_proxy, REGATTA_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
    made: list[object] = []
    starting = threading.Thread(target=lambda: made.append(make_store(settings)), daemon=True)
    starting.start()
    starting.join(timeout=2.5)
    assert starting.is_alive() and not made, "nothing listens yet: make_store must keep trying, not fail"
    ready, stop = threading.Event(), threading.Event()
    proxy = threading.Thread(target=_proxy_to_postgres, args=(port, upstream, ready, stop), daemon=True)
    proxy.start()
    try:
        assert ready.wait(10)
        starting.join(timeout=30)
        assert made, "make_store returned once the database answered"
        store = made[0]
        store.append("run-r", [new_event(RunStopRequested(run_id="r"))])  # type: ignore[attr-defined]
        assert [e.type for e in store.read_stream("run-r")] == ["RunStopRequested"]  # type: ignore[attr-defined]
        store.engine.dispose()  # type: ignore[attr-defined]
    finally:
        stop.set()
        proxy.join(timeout=10)
