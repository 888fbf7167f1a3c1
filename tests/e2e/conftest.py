"""The running stack (real nats-server, real Postgres, every service as its own process)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from regatta import nats_server
from regatta.stack import Stack
from tests.conftest import _create_database, _drop_database
from tests.support.gates import Gate, gate
from tests.support.processes import descendants

TERMINAL = ("finished", "failed", "stopped")
ACTIVE = ("pending", "queued", "running")


class Api:
    """The REST API as the stack's admin; in a tenant's workspace when given a `Tenant`."""

    def __init__(self, stack: Stack | Tenant) -> None:
        self.stack = stack
        headers = {"Authorization": f"Bearer {stack.token}"}
        if isinstance(stack, Tenant):
            headers["X-Regatta-Workspace"] = stack.workspace
        self.http = httpx.Client(base_url=stack.url, headers=headers, timeout=30.0)

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

    def artifact_texts(self, run_id: str, limit: int = 4000) -> str:
        """The run's small text artifacts (trajectory, verifier output, …), for a failing assertion's
        message: what the attempt saw is the first thing one needs when it did not pass."""
        manifest = self.get(f"/runs/{run_id}/downloads", types="artifacts,logs")
        parts = []
        for item in manifest["files"][:50]:
            body = httpx.get(item["url"], timeout=30.0).content[-limit:]
            if b"\0" not in body:
                parts.append(f"--- {item['path']}\n{body.decode(errors='replace')}")
        return "\n".join(parts) or "no artifacts"


def _new_stack(data_dir: Path, database_url: str, executors: int, env: dict[str, str]) -> Stack:
    # The platform's end-to-end tests run attempts under `local` whatever the machine has, so they
    # test the same thing everywhere; the container environment and `auto` have tests of their own
    # (test_container_stack.py, test_environment_choice.py) that name them.
    env.setdefault("REGATTA_EXECUTOR_ENVIRONMENT", "local")
    # A test's stack is stopped at its end, often with attempts still running: they need no grace
    # (the tests of the drain set their own, test_restarts.py).
    env.setdefault("REGATTA_EXECUTOR_GRACE_SEC", "1")
    return Stack(
        data_dir=data_dir,
        port=nats_server.free_port(),
        port_is_picked=True,
        executors=executors,
        database_url=database_url,
        extra_env=env,
        # The parallel phase of `make test` runs several stacks at once on two cores.
        ready_timeout=240.0,
    )


def _start(stack: Stack) -> None:
    """Started; else the error says what the service that exited last logged (pytest's temporary
    folders, and the logs in them, are gone a few sessions later)."""
    try:
        stack.start()
    except RuntimeError as error:
        tails = [
            f"--- {log.name} ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            for log in sorted(stack.logs.glob("*.log"))
            if log.stem in str(error)
        ]
        raise RuntimeError("\n".join([str(error), *tails])) from error


@pytest.fixture
def make_stack(tmp_path: Path, postgres_url: str) -> Iterator[Callable[..., Stack]]:
    """A stack of the test's own: for tests that kill, restart or reconfigure it, or that assert
    stack-wide state (every process log, every row of the database, the admin's default workspace)."""
    stacks: list[Stack] = []

    def make(executors: int = 1, database_url: str | None = None, **env: str) -> Stack:
        """`database_url`: another database than the test's own one on the session's Postgres."""
        stack = _new_stack(tmp_path / f"stack{len(stacks)}", database_url or postgres_url, executors, env)
        stacks.append(stack)
        _start(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop()


# --- a stack shared by the tests of one pytest worker, each test in a workspace of its own -------------
# Starting a stack costs 25-55 s on a loaded machine. Tests that neither kill nor reconfigure it, nor
# assert what only a stack of their own could show, share one per configuration for the whole session.


class Tenant:
    """A test's own workspace on a shared stack. Reads as the `Stack` (url, token, database_url,
    processes...) for what a test looks at, plus the workspace its requests, pages and CLI act in."""

    def __init__(self, stack: Stack, workspace: str, workspace_id: str) -> None:
        self.stack = stack
        self.workspace = workspace
        self.workspace_id = workspace_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stack, name)


def _check_alive(stack: Stack) -> None:
    """A shared stack whose service died would fail every later test for a reason of an earlier one."""
    dead = {key: process.returncode for key, process in stack.processes.items() if process.poll() is not None}
    if dead:
        pytest.fail(f"a service of the shared stack at {stack.data_dir} exited: {dead}; see {stack.logs}")


@pytest.fixture(scope="session")
def _shared_stacks(
    tmp_path_factory: pytest.TempPathFactory, postgres_admin_url: str
) -> Iterator[Callable[[int, dict[str, str]], Stack]]:
    stacks: dict[tuple[int, tuple[tuple[str, str], ...]], Stack] = {}
    databases: list[str] = []

    def get(executors: int, env: dict[str, str]) -> Stack:
        key = (executors, tuple(sorted(env.items())))
        if key not in stacks:
            databases.append(_create_database(postgres_admin_url))
            stack = _new_stack(tmp_path_factory.mktemp("shared-stack"), databases[-1], executors, dict(env))
            _start(stack)
            stacks[key] = stack
        _check_alive(stacks[key])
        return stacks[key]

    yield get
    for stack in stacks.values():
        stack.stop()
    for url in databases:
        _drop_database(postgres_admin_url, url)


@pytest.fixture
def shared_stack(_shared_stacks: Callable[[int, dict[str, str]], Stack]) -> Iterator[Callable[..., Tenant]]:
    """`shared_stack(executors=1, **env)`: a fresh workspace on this worker's running stack of that
    configuration (started on first use). At the test's end every run of the workspace still active is
    stopped and the executors are left with no sandbox, so the next test gets every slot."""
    tenants: list[Tenant] = []

    def share(executors: int = 1, **env: str) -> Tenant:
        stack = _shared_stacks(executors, env)
        name = f"t-{uuid.uuid4().hex[:12]}"
        with httpx.Client(base_url=stack.url, headers=_admin(stack), timeout=30.0) as http:
            created = http.post("/api/v1/workspaces", json={"name": name})
        assert created.status_code == 201, created.text
        tenants.append(Tenant(stack, name, created.json()["id"]))
        return tenants[-1]

    yield share
    for tenant in tenants:
        release(tenant)


def _admin(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.token}"}


def release(tenant: Tenant, timeout: float = 120.0) -> None:
    """What a test leaves running, stopped; and what is not the workspace's own (the admin's personal
    secrets, which every workspace sees), removed."""
    stack = tenant.stack
    api = Api(tenant)
    try:
        active = [run["id"] for run in _runs(api) if run["status"] in ACTIVE]
        for run_id in active:
            # 409: it ended meanwhile.
            assert api.http.post(f"/api/v1/runs/{run_id}/stop").status_code in (202, 409)
        api.wait_for(lambda: all(run["status"] in TERMINAL for run in _runs(api)), timeout, every=0.5)
        executors = [p.pid for key, p in stack.processes.items() if key.startswith("executor")]

        def no_sandbox() -> bool:
            return not any(process.name == "bwrap" for process in descendants(executors).values())

        api.wait_for(no_sandbox, timeout, every=0.2)
        personal = api.get("/secrets", scope="user")["environment_secrets"]
        for secret in personal:
            params = {"name": secret["name"], "scope": "user"}
            assert api.http.delete("/api/v1/secrets", params=params).status_code == 204
    finally:
        api.http.close()


def _runs(api: Api) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = api.get("/runs", limit=200, offset=offset)
        runs += page["benchmark_runs"]
        offset = page["next_offset"]
    return runs


@pytest.fixture
def host_gate() -> Iterator[Gate]:
    """A gate the test's local sandboxes can wait on (tests/support/gates.py), removed at the end."""
    with gate() as made:
        yield made


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
