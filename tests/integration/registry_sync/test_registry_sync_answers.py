"""Answers of a registry and of the Harbor hub are read within bounds (issue 37): a server on 127.0.0.1 that
answers an endless body, a huge one, or one trickled a byte at a time is cut off at REGATTA_FETCH_MAX_MB
or REGATTA_FETCH_TIMEOUT_SEC with an error naming the bound, and the sync records no task.

The hub is read by Harbor's own client; the hostile server stands for the hub's Supabase API (the outside
service), so every request Harbor makes gets the hostile answer."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import harbor.auth.client
import pytest
from regatta_shared.events import BenchmarkSource
from regatta_shared.rules.ceilings import TaskFileBounds

from ..harbor_hub import HarborHub
from ..registry_sync_support import EXAMPLE_TASKS, SyncHarness, sync_harness

ROW = b'{"name": "evil", "version": "1.0", "description": "' + b"x" * 1000 + b'", "tasks": []},'
LIMIT_SEC = 2.0


class Hostile:
    """Answers every GET and POST with `mode`: `endless` (rows until the client hangs up, no length),
    `huge` (4 MiB of rows with their Content-Length), `trickle` (a byte every 0.2 s)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[str] = []
        self.hung_up = threading.Event()
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self) -> None:
                hostile.requests.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                huge = b"[" + ROW * (4 * 1024) + b"{}]"
                if hostile.mode == "huge":
                    self.send_header("Content-Length", str(len(huge)))
                self.end_headers()
                try:
                    if hostile.mode == "huge":
                        self.wfile.write(huge)
                        return
                    self.wfile.write(b"[")
                    deadline = time.monotonic() + 60  # never reached by a bounded reader
                    while time.monotonic() < deadline:
                        if hostile.mode == "endless":
                            self.wfile.write(ROW * 64)
                        else:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(0.2)
                except (BrokenPipeError, ConnectionResetError):
                    hostile.hung_up.set()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str) -> AsyncIterator[SyncHarness]:
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounds small enough for a quick test; the local server is allowed like an operator's registry."""
    monkeypatch.setenv("REGATTA_FETCH_MAX_MB", "1")
    monkeypatch.setenv("REGATTA_FETCH_TIMEOUT_SEC", str(LIMIT_SEC))
    monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", "127.0.0.1")


@pytest.fixture
def hostile_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hostile]:
    hub = Hostile("endless")
    monkeypatch.delenv("HARBOR_API_KEY", raising=False)
    # Harbor reads HARBOR_SUPABASE_URL at import; the running service gets it from its environment (e2e).
    monkeypatch.setattr(harbor.auth.client, "SUPABASE_URL", hub.url)
    monkeypatch.setattr(harbor.auth.client, "SUPABASE_PUBLISHABLE_KEY", "sb_publishable_standin")
    harbor.auth.client.reset_client()
    yield hub
    harbor.auth.client.reset_client()
    hub.close()


REASONS = {
    "endless": "answer larger than 1 MiB (REGATTA_FETCH_MAX_MB)",
    "huge": "answer larger than 1 MiB (REGATTA_FETCH_MAX_MB)",
    "trickle": f"answer not complete within {LIMIT_SEC:g} s (REGATTA_FETCH_TIMEOUT_SEC)",
}


async def failed_with_nothing_recorded(harness: SyncHarness, source: BenchmarkSource) -> str:
    """The sync's error, once it failed in time without recording a task."""
    started = time.monotonic()
    benchmark_id = harness.add(source, trusted=False)
    body = await harness.first_sync(benchmark_id)
    assert time.monotonic() - started < LIMIT_SEC + 10, "the answer was not cut off in time"
    assert body["sync_status"] == "failed", body
    assert body["tasks"] == [] and body["task_count"] == 0
    assert harness.events(benchmark_id, "BenchmarkTasksSynced") == []
    assert harness.events(benchmark_id, "BenchmarkSyncCompleted") == []
    return body["sync_error"]


@pytest.mark.parametrize("mode", ["endless", "huge", "trickle"])
async def test_a_registry_answer_past_its_bounds_is_cut_off(
    harness: SyncHarness, bounded: None, mode: str
) -> None:
    server = Hostile(mode)
    try:
        url = f"{server.url}/registry.json"
        source = BenchmarkSource(
            type="registry", ref="evil@1.0", registry_url=url, dataset="evil", version="1.0"
        )
        error = await failed_with_nothing_recorded(harness, source)
    finally:
        server.close()
    assert error == f"could not fetch registry_url: {REASONS[mode]}"
    assert server.requests == ["GET /registry.json"]


@pytest.mark.parametrize("mode", ["endless", "huge", "trickle"])
async def test_a_hub_answer_past_its_bounds_is_cut_off(
    harness: SyncHarness, bounded: None, hostile_hub: Hostile, mode: str
) -> None:
    hostile_hub.mode = mode
    source = BenchmarkSource(type="hub", ref="acme/mini@v1", dataset="acme/mini", version="v1")
    error = await failed_with_nothing_recorded(harness, source)
    assert error == f"hub dataset acme/mini@v1: {REASONS[mode]}", error
    # Harbor's client asked the hub once (no retry of a refused answer) and was cut off.
    assert len(hostile_hub.requests) == 1, hostile_hub.requests
    if mode != "huge":
        assert hostile_hub.hung_up.wait(5), "the reader never hung up"


@pytest.fixture
def stand_in_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HarborHub]:
    """The hub stand-in with acme/big@v1: one task whose archive is about 2 MiB (random bytes)."""
    hub = HarborHub().start()
    monkeypatch.delenv("HARBOR_API_KEY", raising=False)
    monkeypatch.setattr(harbor.auth.client, "SUPABASE_URL", hub.url)
    monkeypatch.setattr(harbor.auth.client, "SUPABASE_PUBLISHABLE_KEY", "sb_publishable_standin")
    harbor.auth.client.reset_client()
    task = tmp_path / "big"
    shutil.copytree(EXAMPLE_TASKS / "hello-file", task)
    (task / "environment").mkdir(exist_ok=True)
    (task / "environment" / "data.bin").write_bytes(random.randbytes(2 * 1024 * 1024))
    hub.publish_dataset("acme", "big", [hub.publish_task("acme", task)], ["v1"])
    yield hub
    harbor.auth.client.reset_client()
    hub.stop()


BIG = BenchmarkSource(type="hub", ref="acme/big@v1", dataset="acme/big", version="v1")


async def test_a_hub_archive_is_bounded_by_the_task_bounds_not_the_json_bound(
    harness: SyncHarness, bounded: None, stand_in_hub: HarborHub
) -> None:
    """REGATTA_FETCH_MAX_MB (1 here) bounds the hub's JSON; a task's archive may be as large as a task."""
    body = await harness.first_sync(harness.add(BIG, trusted=False))
    assert body["sync_status"] == "ready", body.get("sync_error")
    assert [t["name"] for t in body["tasks"]] == ["acme/big"]


async def test_a_hub_archive_larger_than_a_task_may_be_is_cut_off(
    harness: SyncHarness, bounded: None, stand_in_hub: HarborHub
) -> None:
    # The service's bounds as REGATTA_MAX_TASK_MB=1 and REGATTA_MAX_TASK_FILES=10 would set them.
    harness.sync.bounds = TaskFileBounds(max_bytes=1024 * 1024, max_files=10, max_expansion=200.0)
    benchmark_id = harness.add(BIG, trusted=False)
    body = await harness.first_sync(benchmark_id)
    assert body["sync_status"] == "failed" and body["tasks"] == []
    assert body["sync_error"].startswith("hub dataset acme/big@v1: answer larger than "), body["sync_error"]
    assert body["sync_error"].endswith(" MiB (REGATTA_MAX_TASK_MB)"), body["sync_error"]
    assert harness.events(benchmark_id, "BenchmarkTasksSynced") == []
    archive_reads = [r for r in stand_in_hub.requests if r.startswith("GET /storage/v1/object/")]
    assert len(archive_reads) == 1, stand_in_hub.requests
