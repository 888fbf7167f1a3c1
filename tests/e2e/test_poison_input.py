"""Issue 16, findings 4 and 5, on the running stack (every service its own process, real NATS/Postgres).

4: one event larger than NATS delivers, written straight into the store (past the gateway, which
   refuses it), must not stop the relay: it is set aside, and a run submitted right after finishes.
5: a registry_url answering a non-HTTP banner ends the sync `failed` after a bounded number of
   attempts, without a hot loop (bounded connections and log growth over a fixed window).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from regatta_shared.events import BenchmarkAdded, BenchmarkSource
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import benchmark_stream, new_id
from sqlalchemy import text

from tests.e2e.test_spine import DEMO

WINDOW_SEC = 5.0  # how long the stack is watched after the sync failed


def _event_count(store: EventStore) -> int:
    with store.read_engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM events")).scalar_one()


def test_an_undeliverable_event_is_set_aside_and_the_platform_keeps_flowing(make_stack, api_for) -> None:
    stack = make_stack(executors=1)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    store = EventStore(stack.database_url)
    try:
        # Through the gateway: refused, naming the field, nothing stored.
        before = _event_count(store)
        response = api.http.post(
            "/api/v1/benchmarks",
            json={"source_type": "folder", "path": "/srv/poison", "name": "x" * 3_000_000},
        )
        assert response.status_code == 400 and response.json()["field"] == "name", response.text
        assert _event_count(store) == before

        # Past the gateway: the event is stored, but the bus cannot carry it.
        benchmark_id = new_id("bm")
        poison = BenchmarkAdded(
            benchmark_id=benchmark_id,
            workspace_id="ws_poison",
            name="x" * 3_000_000,
            source=BenchmarkSource(type="folder", ref="/srv/poison"),
        )
        store.append(benchmark_stream(benchmark_id), [new_event(poison, actor="attacker")], 0)

        created = api.submit_toml(DEMO)
        detail = api.wait_run(created["id"])
        assert detail["benchmark_run"]["status"] == "finished"

        aside = store.set_aside_events()
        assert [(row["type"], row["stream_id"]) for row in aside] == [
            ("BenchmarkAdded", benchmark_stream(benchmark_id))
        ]
        assert aside[0]["size"] > 3_000_000
        assert api.http.get("/health").json()["relay_set_aside"] == 1
        relay_log = (stack.logs / "relay.log").read_text()
        assert "relay set aside event" in relay_log and "relay batch failed" not in relay_log
    finally:
        store.dispose()


@contextmanager
def _banner_server() -> Iterator[tuple[int, list[int]]]:
    """A TCP server on 127.0.0.1 that answers every connection with a non-HTTP banner and garbage."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    accepted = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted[0] += 1
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe garbage \x01\x02\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_a_registry_that_answers_a_banner_fails_the_sync_without_a_hot_loop(make_stack, api_for) -> None:
    # The banner server is on loopback: allow-listed, so the sync really talks to it.
    stack = make_stack(executors=1, REGATTA_OUTBOUND_ALLOW="127.0.0.1/32")
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    store = EventStore(stack.database_url)
    log = stack.logs / "registry-sync.log"
    try:
        with _banner_server() as (port, accepted):
            benchmark_id = new_id("bm")
            # Straight into the store: what registry-sync does with it is under test, whatever the
            # gateway's own checks on registry URLs.
            added = BenchmarkAdded(
                benchmark_id=benchmark_id,
                workspace_id="ws_banner",
                name="banner",
                source=BenchmarkSource(
                    type="registry",
                    ref="x@1.0",
                    dataset="x",
                    version="1.0",
                    registry_url=f"http://127.0.0.1:{port}/registry.json",
                ),
            )
            log_before = log.stat().st_size
            store.append(benchmark_stream(benchmark_id), [new_event(added, actor="attacker")], 0)

            def failed() -> list:
                return [
                    e for e in store.read_stream(benchmark_stream(benchmark_id)) if e.type.endswith("Failed")
                ]

            outcome = api.wait_for(failed, timeout=120)
            connections_at_failure = accepted[0]
            # A fixed window after the failure: nothing more may happen (no redelivery, no retry).
            deadline = time.monotonic() + WINDOW_SEC
            while time.monotonic() < deadline:
                time.sleep(0.25)
            assert 1 <= accepted[0] == connections_at_failure <= 2
            assert len(failed()) == 1
            reason = outcome[0].data["reason"]
            assert "registry" in reason, reason
            grown = log.read_text(errors="replace")[log_before:]
            assert grown.count("Traceback") <= 1, grown[-2000:]
            assert len(grown) < 20_000, f"registry-sync logged {len(grown)} characters"
    finally:
        store.dispose()
