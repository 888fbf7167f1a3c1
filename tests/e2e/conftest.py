"""The running stack (real nats-server, real Postgres, every service as its own process)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from regatta import nats_server
from regatta.stack import Stack

TERMINAL = ("finished", "failed", "stopped")


class Api:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.http = httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30.0
        )

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(f"/api/v1{path}", params=params)
        response.raise_for_status()
        return response.json()

    def submit_toml(self, text: str) -> dict[str, Any]:
        response = self.http.post(
            "/api/v1/runs", content=text.encode(), headers={"Content-Type": "application/toml"}
        )
        assert response.status_code == 201, response.text
        return response.json()

    def all_logs(self, run_id: str) -> list[dict[str, Any]]:
        """Every log entry, oldest first, by following the cursor to older pages."""
        pages: list[list[dict[str, Any]]] = []
        cursor = None
        while True:
            params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = self.get(f"/runs/{run_id}/logs", **params)
            pages.append(page["logs"])
            cursor = page["next_cursor"]
            if not cursor:
                return [entry for logs in reversed(pages) for entry in logs]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 120.0, every: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every)
        raise TimeoutError("condition not reached in time")

    def benchmark_ready(self, name: str) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            for row in self.get("/benchmarks")["benchmarks"]:
                if row["name"] == name and row["sync_status"] in ("ready", "failed"):
                    return row
            return None

        return self.wait_for(ready)

    def wait_run(self, run_id: str, timeout: float = 180.0) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            detail = self.get(f"/runs/{run_id}")
            return detail if detail["benchmark_run"]["status"] in TERMINAL else None

        return self.wait_for(done, timeout)


@pytest.fixture
def make_stack(tmp_path: Path, postgres_url: str) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(executors: int = 1, database_url: str | None = None, **env: str) -> Stack:
        """`database_url`: another database than the test's own one on the machine's Postgres."""
        # The platform's end-to-end tests run attempts under `local` whatever the machine has, so they
        # test the same thing everywhere; the container environment and `auto` have tests of their own
        # (test_container_stack.py, test_environment_choice.py) that name them.
        env.setdefault("REGATTA_EXECUTOR_ENVIRONMENT", "local")
        # A test's stack is stopped at its end, often with attempts still running: they need no grace
        # (the tests of the drain set their own, test_restarts.py).
        env.setdefault("REGATTA_EXECUTOR_GRACE_SEC", "1")
        stack = Stack(
            data_dir=tmp_path / f"stack{len(stacks)}",
            port=nats_server.free_port(),
            executors=executors,
            database_url=database_url or postgres_url,
            extra_env=env,
        )
        stacks.append(stack)
        stack.start()
        return stack

    yield make
    for stack in stacks:
        stack.stop()


@pytest.fixture
def api_for() -> Callable[[Stack], Api]:
    return Api


# --- browser fixtures for the web UI tests (Playwright driving Debian's chromium) -------------------------
# Playwright's sync API keeps its event loop marked as running on the main thread for as long as it is
# started, which breaks every pytest-asyncio test that follows. So the browser lives for one module only
# (each test_web_ui_*.py) and is stopped at its end, never for the whole session.

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, never a downloaded one (`playwright install` is not used on this machine)."""
    if not CHROMIUM.exists():
        from tests.conftest import unavailable

        unavailable(f"{CHROMIUM} is missing: apt-get install -y chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh context (cookies, storage) per test at 1280 px; each test's stack has its own port."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()
