"""Benchmark commands decided on the benchmark's stream: two requests that both passed the same check
cannot both be recorded. Each test holds the store's append lock while the requests are sent, so every
request has read and decided before any of them appends: the interleaving that used to record both."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from regatta_shared.events import BenchmarkSyncStarted, BenchmarkTasksSynced, TaskInfo
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore.store import _APPEND_LOCK
from regatta_shared.ids import benchmark_stream
from sqlalchemy import text

from .conftest import Gateway


@pytest.fixture
def gateway(gateway_on_both: Gateway) -> Gateway:
    """Races on both backends: each store serialises its appends its own way."""
    return gateway_on_both


WAITING_FOR_APPEND_LOCK = text(
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = :key"
    " AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def _wait_until_blocked(gateway: Gateway, writers: int) -> None:
    """Until `writers` appends wait for the lock. Postgres shows them in pg_locks; SQLite does not show
    a writer waiting for its lock, so there the requests get a generous head start instead."""
    if gateway.store.is_sqlite:
        time.sleep(2.0)
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with gateway.store.read_engine.connect() as conn:
            if conn.execute(WAITING_FOR_APPEND_LOCK, {"key": _APPEND_LOCK}).scalar_one() >= writers:
                return
        time.sleep(0.02)
    raise AssertionError(f"{writers} appends never waited for the lock")


def race(
    gateway: Gateway, *requests: Callable[[], Any], meanwhile: Callable[[Any], None] | None = None
) -> list[Any]:
    """Send `requests` at once while appends are held; `meanwhile` appends in the holding transaction
    (as registry-sync would between a request's read and its append)."""
    with ThreadPoolExecutor(len(requests)) as pool:
        with gateway.store.transaction() as conn:
            gateway.store.lock_appends(conn)  # SQLite: the transaction's BEGIN IMMEDIATE holds it already
            futures = [pool.submit(request) for request in requests]
            _wait_until_blocked(gateway, len(requests))
            if meanwhile is not None:
                meanwhile(conn)
        return [future.result(timeout=120) for future in futures]


def _types(gateway: Gateway, benchmark_id: str) -> list[str]:
    return [e.type for e in gateway.store.read_stream(benchmark_stream(benchmark_id))]


def test_two_concurrent_syncs_record_one_and_refuse_the_other(gateway: Gateway) -> None:
    benchmark_id = gateway.benchmark("demo", ["t1", "t2"])
    sync = lambda: gateway.v1("POST", f"/benchmarks/{benchmark_id}/sync")  # noqa: E731
    responses = race(gateway, sync, sync)
    assert sorted(r.status_code for r in responses) == [202, 409], [r.text for r in responses]
    refused = next(r for r in responses if r.status_code == 409).json()
    assert refused["code"] == "CONFLICT"
    assert refused["message"] == "A sync is already in progress"
    assert _types(gateway, benchmark_id).count("BenchmarkSyncRequested") == 1
    accepted = next(r for r in responses if r.status_code == 202).json()
    detail = gateway.ok(gateway.v1("GET", f"/benchmarks/{benchmark_id}"))
    assert detail["benchmark"]["sync_status"] == "pending", detail
    assert accepted["sync_status"] == "pending"


def test_two_concurrent_removals_record_one(gateway: Gateway) -> None:
    benchmark_id = gateway.benchmark("demo", ["t1"])
    remove = lambda: gateway.v1("DELETE", f"/benchmarks/{benchmark_id}")  # noqa: E731
    responses = race(gateway, remove, remove)
    assert sorted(r.status_code for r in responses) == [204, 404], [r.text for r in responses]
    assert next(r for r in responses if r.status_code == 404).json()["code"] == "NOT_FOUND"
    assert _types(gateway, benchmark_id).count("BenchmarkRemoved") == 1


def test_concurrent_remove_and_sync_never_sync_a_removed_benchmark(gateway: Gateway) -> None:
    benchmark_id = gateway.benchmark("demo", ["t1"])
    sync = lambda: gateway.v1("POST", f"/benchmarks/{benchmark_id}/sync")  # noqa: E731
    remove = lambda: gateway.v1("DELETE", f"/benchmarks/{benchmark_id}")  # noqa: E731
    synced, removed = race(gateway, sync, remove)
    assert removed.status_code == 204, removed.text
    types = _types(gateway, benchmark_id)
    assert types[-1] == "BenchmarkRemoved"
    if synced.status_code == 202:  # the sync was recorded first: the removal still holds after it
        assert types[-2:] == ["BenchmarkSyncRequested", "BenchmarkRemoved"]
    else:  # the removal was recorded first: the sync is refused as for any removed benchmark
        assert synced.status_code == 404, synced.text
        assert "BenchmarkSyncRequested" not in types
    assert gateway.v1("GET", f"/benchmarks/{benchmark_id}").status_code == 404


def test_a_registry_sync_append_in_between_does_not_refuse_a_removal(gateway: Gateway) -> None:
    """registry-sync appends pages without a version check; a removal that lost its version check to
    one is decided again and recorded, not answered 409."""
    benchmark_id = gateway.benchmark("demo", ["t1"], ready=False)
    stream = benchmark_stream(benchmark_id)
    started = BenchmarkSyncStarted(benchmark_id=benchmark_id, sync_id="sync_2", total=2)
    gateway.store.append(stream, [new_event(started, actor="registry-sync")])
    gateway.settle()
    page = BenchmarkTasksSynced(
        benchmark_id=benchmark_id,
        sync_id="sync_2",
        page=1,
        tasks=[TaskInfo(name="t1", digest="sha256:" + "1" * 64)],
    )

    def registry_sync_page(conn: Any) -> None:
        gateway.store.append_within(conn, stream, [new_event(page, actor="registry-sync")])

    remove = lambda: gateway.v1("DELETE", f"/benchmarks/{benchmark_id}")  # noqa: E731
    (removed,) = race(gateway, remove, meanwhile=registry_sync_page)
    assert removed.status_code == 204, removed.text
    assert _types(gateway, benchmark_id)[-2:] == ["BenchmarkTasksSynced", "BenchmarkRemoved"]


def test_a_sync_of_a_syncing_benchmark_is_refused_from_the_stream(gateway: Gateway) -> None:
    """The stream decides, not the read model: a sync started by registry-sync and not yet projected
    still refuses a new request."""
    benchmark_id = gateway.benchmark("demo", ["t1"])
    started = BenchmarkSyncStarted(benchmark_id=benchmark_id, sync_id="sync_2", total=1)
    gateway.store.append(benchmark_stream(benchmark_id), [new_event(started, actor="registry-sync")])
    response = gateway.v1("POST", f"/benchmarks/{benchmark_id}/sync")
    assert response.status_code == 409, response.text
    assert response.json()["message"] == "A sync is already in progress"
