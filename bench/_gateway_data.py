"""The dataset of bench/gateway_load.py (section 1 of its docstring): a bootstrapped admin, one benchmark
and runs of generated attempts, appended in large batches and folded into the gateway's read models by
its own projection in the same transactions, then VACUUM ANALYZE."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from _common import RunLog, RunPlan, benchmark_events, leaderboard_event, make_tasks, say
from regatta_gateway.commands.bootstrap import bootstrap
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels.operations import OpsReadModels
from regatta_shared.eventstore import EventStore, NewEvent
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.settings import Settings
from sqlalchemy import create_engine, text

TOKEN = "rg_bench_gateway_load_token"
BENCHMARK = "bench"
APPEND_BATCH = 5_000


@dataclass(frozen=True)
class Sizes:
    runs: int
    tasks: int
    agents: int
    attempts: int  # per task per agent

    @property
    def total(self) -> int:
        return self.runs * self.tasks * self.agents * self.attempts


FULL = Sizes(runs=10, tasks=2_000, agents=5, attempts=10)  # 10 runs x 100,000 attempts
QUICK = Sizes(runs=2, tasks=1_000, agents=5, attempts=10)  # 2 runs x 50,000 attempts


class Loader:
    """Appends in big batches and folds each batch into the read models in the same transaction."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.models = ReadModels()
        self.runner = ProjectionRunner(store, self.models)
        self.runner.create_tables()
        self.events = 0
        self.append_s = 0.0
        self.project_s = 0.0

    def write(self, stream: str, events: list[NewEvent]) -> None:
        with self.store.transaction() as conn:
            started = time.perf_counter()
            stored = self.store.append_within(conn, stream, events)
            appended = time.perf_counter()
            self.models.apply_batch(conn, stored)
            self.store.save_checkpoint(conn, self.runner.checkpoint_name, stored[-1].position)
            self.project_s += time.perf_counter() - appended
            self.append_s += appended - started
        self.events += len(stored)


def generate(url: str, sizes: Sizes) -> tuple[list[str], list[str], dict[str, float]]:
    """The dataset; returns (run ids, task names, timings)."""
    started = time.perf_counter()
    store = EventStore(url)
    store.create_schema()
    settings = Settings(REGATTA_BOOTSTRAP_TOKEN=TOKEN)  # type: ignore[call-arg]
    scope = bootstrap(store, settings)  # the same deterministic events the gateway appends at start
    assert scope is not None
    loader = Loader(store)
    loader.runner.catch_up()  # the bootstrap events
    rng = random.Random(5)
    tasks = make_tasks(sizes.tasks, rng)
    user = scope.principal.user_id
    loader.write(*benchmark_events(BENCHMARK, scope.workspace_id, tasks, page_size=500, actor=user))
    logs = []
    for i in range(sizes.runs):
        plan = RunPlan(
            f"run_bench{i:02d}",
            f"bench-run-{i:02d}",
            scope.workspace_id,
            BENCHMARK,
            tasks,
            sizes.agents,
            sizes.attempts,
            concurrency=64,
            scored_every=5_000,
            submitter=user,
        )
        log = RunLog(plan, seed=1000 + i, validate_every=997)
        logs.append(log)
        buffer: list[NewEvent] = []
        for event in log:
            buffer.append(event)
            if len(buffer) == APPEND_BATCH:
                loader.write(log.stream_id, buffer)
                buffer = []
        if buffer:
            loader.write(log.stream_id, buffer)
        elapsed = time.perf_counter() - started
        say(f"  run {i + 1}/{sizes.runs}: {loader.events:,} events so far, {elapsed:.0f} s")
    loader.write(*leaderboard_event(BENCHMARK, logs))
    # The ops projection (audit log, budgets, webhooks: readmodels/operations.py) serves none of the
    # reads measured here; folding 3M synthetic events into its audit log would only lengthen the
    # generation, so it starts at the end of the log.
    ops = ProjectionRunner(store, OpsReadModels())
    ops.create_tables()
    with store.transaction() as conn:
        store.save_checkpoint(conn, ops.checkpoint_name, store.last_position())
    generated = time.perf_counter() - started
    store.dispose()
    vacuum_started = time.perf_counter()
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("VACUUM ANALYZE"))
        size = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
    engine.dispose()
    timings = {
        "events": float(loader.events),
        "append_s": loader.append_s,
        "project_s": loader.project_s,
        "total_s": generated,
        "vacuum_s": time.perf_counter() - vacuum_started,
        "db_mb": size / 1e6,
    }
    return [log.plan.run_id for log in logs], [t.name for t in tasks], timings
