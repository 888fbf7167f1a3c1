"""The gateway app (FastAPI, its lifespan, projections) on a real SQLite or Postgres store and real NATS.

No registry-sync, scheduler or executor runs here: a benchmark's sync and a run's attempts are seeded as
the events those services record, so route tests are fast. Scores, intervals, ranks and leaderboards are
never written by hand: the real scoring code (regatta_scoring.Scorer) computes them from those attempts.
tests/e2e covers the real flow.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import nats
import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_scoring.scorer import Scorer
from regatta_shared.events import (
    ArtifactRef,
    AttemptFinished,
    AttemptScheduled,
    AttemptStarted,
    BenchmarkMetadata,
    BenchmarkSyncCompleted,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    RunExecutionCompleted,
    RunQueued,
    RunStarted,
    TaskInfo,
    Timings,
    Usage,
)
from regatta_shared.events.envelope import new_event
from regatta_shared.events.integrity import AttemptIntegrity
from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.schema import events as events_table
from regatta_shared.ids import attempt_id, benchmark_stream, run_stream
from regatta_shared.messaging.bus import ARTIFACTS_BUCKET
from regatta_shared.settings import Settings
from sqlalchemy import func, select, text

ADMIN_TOKEN = "rg_admin_token_for_tests"
CLI_HEADERS = {
    "Content-Type": "application/json",
    "User-Agent": "osmosis-cli/0.3.8",
    "X-Osmosis-CLI-Version": "0.3.8",
    "Accept-Encoding": "identity",
}


class Gateway:
    def __init__(self, client: TestClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.store: EventStore = client.app.state.store  # type: ignore[attr-defined]
        self.nats_url = settings.nats_url

    # --- requests ---------------------------------------------------------------------------------

    def cli(
        self,
        method: str,
        path: str,
        *,
        token: str = ADMIN_TOKEN,
        workspace: str | None = "default",
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        sent = {**CLI_HEADERS, "Authorization": f"Bearer {token}"}
        if workspace is not None:
            sent["X-Osmosis-Workspace"] = workspace
        sent.update(headers or {})
        if "json" in kwargs:
            kwargs["content"] = json.dumps(kwargs.pop("json")).encode()
        return self.client.request(method, f"/api/cli{path}", headers=sent, follow_redirects=False, **kwargs)

    def v1(
        self, method: str, path: str, *, token: str = ADMIN_TOKEN, workspace: str | None = None, **kwargs: Any
    ) -> Any:
        headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
        if workspace is not None:
            headers["X-Regatta-Workspace"] = workspace
        return self.client.request(
            method, f"/api/v1{path}", headers=headers, follow_redirects=False, **kwargs
        )

    def ok(self, response: Any, status: int = 200) -> Any:
        assert response.status_code == status, response.text
        return response.json() if response.content else None

    def settle(self) -> None:
        self.client.app.state.projections.catch_up()  # type: ignore[attr-defined]

    # --- identity ---------------------------------------------------------------------------------

    def workspace(self, name: str) -> str:
        return self.ok(self.v1("POST", "/workspaces", json={"name": name}, workspace="default"), 201)["id"]

    def member(self, workspace: str, email: str, role: str = "member") -> str:
        body = {"email": email, "role": role, "issue_token": True}
        return self.ok(self.v1("POST", f"/workspaces/{quote(workspace, safe='')}/members", json=body), 201)[
            "token"
        ]

    # --- seeded state -----------------------------------------------------------------------------

    def event_count(self) -> int:
        with self.store.read_engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(events_table)).scalar_one()

    def all_event_json(self) -> str:
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(select(events_table.c.data, events_table.c.metadata)).all()
        return json.dumps([[r[0], r[1]] for r in rows])

    def raw_rows(self, table: str) -> list[dict[str, Any]]:
        with self.store.read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(text(f"SELECT * FROM {table}")).mappings()]

    def benchmark(
        self,
        name: str,
        tasks: list[str],
        *,
        workspace: str = "default",
        token: str = ADMIN_TOKEN,
        ready: bool = True,
        categories: dict[str, str] | None = None,
        metadata: BenchmarkMetadata | None = None,
    ) -> str:
        """Add a folder benchmark; with `ready`, record the sync registry-sync would have made."""
        body = {"source_type": "folder", "path": f"/srv/benchmarks/{name}", "name": name}
        benchmark_id = self.ok(
            self.v1("POST", "/benchmarks", json=body, token=token, workspace=workspace), 201
        )["id"]
        if ready:
            record_sync(self.store, benchmark_id, name, tasks, categories=categories, metadata=metadata)
        self.settle()
        return benchmark_id

    def submit(
        self, config: dict[str, Any], *, workspace: str = "default", token: str = ADMIN_TOKEN
    ) -> dict[str, Any]:
        return self.ok(
            self.cli("POST", "/benchmark-runs", json=config, workspace=workspace, token=token), 201
        )

    def progress(
        self,
        run_id: str,
        *,
        finish: bool = True,
        artifacts: dict[str, bytes] | None = None,
        passes: Callable[[int, str], bool] | None = None,
        usage: Callable[[int, str, int], tuple[Usage, Timings]] | None = None,
        integrity: Callable[[int, str, int], AttemptIntegrity | None] | None = None,
        rewards: dict[str, float] | None = None,
    ) -> None:
        """record_progress, with `artifacts` (path -> bytes) stored in the object store and referenced by
        every attempt; then the read models catch up."""
        refs = [
            ArtifactRef(path=p, digest=_put_artifact(self.nats_url, b), size=len(b))
            for p, b in (artifacts or {}).items()
        ]
        record_progress(
            self.store,
            run_id,
            finish=finish,
            refs=refs,
            passes=passes,
            usage=usage,
            integrity=integrity,
            rewards=rewards,
        )
        self.settle()


def record_progress(
    store: EventStore,
    run_id: str,
    *,
    finish: bool = True,
    refs: list[ArtifactRef] | None = None,
    passes: Callable[[int, str], bool] | None = None,
    usage: Callable[[int, str, int], tuple[Usage, Timings]] | None = None,
    integrity: Callable[[int, str, int], AttemptIntegrity | None] | None = None,
    rewards: dict[str, float] | None = None,
) -> None:
    """Record what scheduler and executor would: each attempt passes when `passes(agent, task)` (default:
    agent 0 passes, the others fail), reports `usage(agent, task, attempt index)` (default: 120 tokens,
    $0.01, no timings) and the evidence `integrity(agent, task, attempt index)` (default: none, as under
    `local`), with `rewards` (every key of a reward.json) when given. With `finish`, execution completes
    and the real scoring code scores the run, finishes it and recomputes the benchmark's leaderboard."""
    passes = passes or (lambda agent, _task: agent == 0)
    with store.read_engine.connect() as conn:
        row = conn.execute(text("SELECT submission FROM rm_runs WHERE id = :id"), {"id": run_id}).first()
    assert row is not None, f"run {run_id} is not in the read models yet"
    submission = row[0] if isinstance(row[0], dict) else json.loads(row[0])
    k = submission["execution"]["attempts_per_task"]
    tasks = [t["name"] for t in submission["tasks"]]
    agents = submission["agents"]
    events: list[Any] = [
        RunQueued(run_id=run_id, expected_attempts=len(tasks) * len(agents) * k),
        RunStarted(run_id=run_id),
    ]
    for agent in agents:
        for task in tasks:
            for index in range(k):
                aid = attempt_id(run_id, agent["index"], task, index)
                outcome = "passed" if passes(agent["index"], task) else "failed"
                used, timings = (
                    usage(agent["index"], task, index)
                    if usage
                    else (Usage(input_tokens=100, output_tokens=20, cost_usd=0.01), Timings())
                )
                events += [
                    AttemptScheduled(
                        run_id=run_id,
                        attempt_id=aid,
                        agent_index=agent["index"],
                        task=task,
                        attempt_index=index,
                    ),
                    AttemptStarted(run_id=run_id, attempt_id=aid, try_number=1, executor_id="exec-test"),
                    AttemptFinished(
                        run_id=run_id,
                        attempt_id=aid,
                        agent_index=agent["index"],
                        task=task,
                        attempt_index=index,
                        try_number=1,
                        outcome=outcome,
                        rewards=rewards or {"reward": 1.0 if outcome == "passed" else 0.0},
                        primary_reward=1.0 if outcome == "passed" else 0.0,
                        usage=used,
                        timings=timings,
                        executor_id="exec-test",
                        artifacts=refs or [],
                        integrity=integrity(agent["index"], task, index) if integrity else None,
                    ),
                ]
    if finish:
        events.append(RunExecutionCompleted(run_id=run_id))
    stored = store.append(run_stream(run_id), [new_event(e, actor="run-scheduler") for e in events])
    if finish:
        scorer = Scorer(store)
        scorer.on_event(stored[-1])
        finished = [e for e in store.read_stream(run_stream(run_id)) if e.type == "RunFinished"]
        scorer.on_event(finished[0])


def record_sync(
    store: EventStore,
    benchmark_id: str,
    name: str,
    tasks: list[str],
    *,
    categories: dict[str, str] | None = None,
    metadata: BenchmarkMetadata | None = None,
) -> None:
    """The sync registry-sync would have recorded for a benchmark of `tasks`."""
    sync_id = f"sync_{benchmark_id}"
    infos = [
        TaskInfo(name=task, category=(categories or {}).get(task), digest=_digest(task)) for task in tasks
    ]
    events = [
        BenchmarkSyncStarted(benchmark_id=benchmark_id, sync_id=sync_id, total=len(tasks)),
        BenchmarkTasksSynced(benchmark_id=benchmark_id, sync_id=sync_id, page=1, tasks=infos),
        BenchmarkSyncCompleted(
            benchmark_id=benchmark_id,
            sync_id=sync_id,
            version="1.0",
            digest=_digest(name),
            task_count=len(tasks),
            metadata=metadata or BenchmarkMetadata(),
        ),
    ]
    store.append(benchmark_stream(benchmark_id), [new_event(e, actor="registry-sync") for e in events])


def _digest(text_: str) -> str:
    return "sha256:" + hashlib.sha256(text_.encode()).hexdigest()


def _put_artifact(nats_url: str, data: bytes) -> str:
    import asyncio

    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    async def put() -> None:
        nc = await nats.connect(nats_url)
        try:
            await (await nc.jetstream().object_store(ARTIFACTS_BUCKET)).put(digest, data)
        finally:
            await nc.close()

    asyncio.run(put())
    return digest


def demo_config(benchmark: str = "demo", **extra: Any) -> dict[str, Any]:
    """A submission body exactly as the CLI sends it (contract §4.4)."""
    body: dict[str, Any] = {
        "experiment_config": {"benchmark": benchmark},
        "agents": [
            {
                "harness": "oracle",
                "model": {"type": "hosted", "base_model": "none", "lora_model_name": "none"},
                "env": {},
            },
            {
                "harness": "nop",
                "model": {"type": "hosted", "base_model": "none", "lora_model_name": "none"},
                "env": {},
            },
        ],
    }
    body.update(extra)
    return body


def make_settings(database_url: str, nats_url: str, data_dir: Path) -> Settings:
    return Settings(
        NATS_URL=nats_url,
        DATABASE_URL=database_url,
        REGATTA_DATA_DIR=data_dir,
        REGATTA_BOOTSTRAP_TOKEN=ADMIN_TOKEN,
        REGATTA_HOSTED_BENCHMARKS=None,
        REGATTA_MASTER_KEY=None,
        # The seeded folder benchmarks live here (nothing is read from them: no registry-sync runs).
        REGATTA_SOURCE_ROOTS="/srv/benchmarks",
        # No default registry: route tests never reach the internet (test_default_registry.py sets one).
        REGATTA_DEFAULT_REGISTRY="",
    )


@pytest.fixture
def gateway(nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """The gateway on SQLite, for route tests whose subject is not the backend. A module whose subject
    depends on it (races, the store's secrets, projections' answers) overrides `gateway` with
    `gateway_on_both`; the store's own contract suite runs on both backends in test_event_store.py."""
    settings = make_settings(f"sqlite:///{tmp_path / 'events.db'}", nats_url, tmp_path / "data")
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


@pytest.fixture
def gateway_on_both(database_url: str, nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """The gateway on SQLite and on Postgres (the `database_url` fixture runs both)."""
    settings = make_settings(database_url, nats_url, tmp_path / "data")
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


@pytest.fixture
def pg_gateway(postgres_url: str, nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """The gateway on Postgres only, for tests whose subject is not the backend."""
    settings = make_settings(postgres_url, nats_url, tmp_path / "data")
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


@pytest.fixture
def services(database_url: str, tmp_path: Path) -> Iterator[Any]:
    """The gateway's service layer without the app (service_support.py), on SQLite and on Postgres."""
    from .service_support import Services

    services = Services(database_url, tmp_path / "data")
    yield services
    services.close()


@pytest.fixture
def pg_services(postgres_url: str, tmp_path: Path) -> Iterator[Any]:
    """The service layer on Postgres only, for tests whose subject is not the backend."""
    from .service_support import Services

    services = Services(postgres_url, tmp_path / "data")
    yield services
    services.close()
