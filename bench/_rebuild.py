"""The projection-rebuild half of bench/eventstore.py (see its docstring): a generated log of concurrent
runs, rebuilt into the gateway's read models one `apply` per event and batched, next to the raw driver."""

from __future__ import annotations

import cProfile
import pstats
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from _common import (
    RunLog,
    RunPlan,
    benchmark_events,
    identity_events,
    interleave,
    leaderboard_event,
    make_tasks,
    median,
    say,
)
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels.operations import OpsReadModels
from regatta_gateway.readmodels.tables import metadata as read_model_tables
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.eventstore.projections import ProjectionRunner
from sqlalchemy import Connection, MetaData

if TYPE_CHECKING:
    from eventstore import Sizes

REBUILD_BUDGET = 20_000.0  # events/s, judged as measured; the ratio to raw inserts is context


def profiled(label: str, fn: Callable[[], Any]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stderr)
    say(f"--- cProfile: {label} (top 25 by cumulative time) ---")
    stats.sort_stats("cumulative").print_stats(25)
    say(f"--- cProfile: {label} (top 15 by own time) ---")
    stats.sort_stats("tottime").print_stats(15)


class PerEvent:
    """The gateway projection without its batched path: one `apply` per event, as before batching."""

    def __init__(self, inner: ReadModels) -> None:
        self.inner = inner
        self.name = inner.name
        self.metadata: MetaData = inner.metadata

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        self.inner.apply(conn, event)


def fill_log(store: EventStore, sizes: Sizes) -> int:
    """Append a realistic log: identity, one benchmark, runs interleaved as concurrent runs are."""
    rng = random.Random(11)
    tasks = make_tasks(sizes.log_tasks, rng)
    count = 0
    for stream, events in (
        identity_events("ws_bench", "0" * 64),
        benchmark_events("bench", "ws_bench", tasks),
    ):
        count += len(store.append(stream, events))
    logs = [
        RunLog(
            RunPlan(
                f"run_{i:03d}", f"run {i}", "ws_bench", "bench", tasks, sizes.log_agents, sizes.log_attempts
            ),
            seed=100 + i,
        )
        for i in range(sizes.log_runs)
    ]
    for stream, piece in interleave(logs, chunk=200, rng=rng):
        count += len(store.append(stream, piece))
    stream, events = leaderboard_event("bench", logs)
    count += len(store.append(stream, events))
    return count


def dump(store: EventStore) -> dict[str, list[str]]:
    with store.read_engine.connect() as conn:
        return {
            tbl.name: sorted(repr(sorted(dict(r).items())) for r in conn.execute(tbl.select()).mappings())
            for tbl in read_model_tables.sorted_tables
        }


def reset(runner: ProjectionRunner) -> None:
    """What `rebuild` does before it catches up: empty read models, checkpoint at 0."""
    with runner.store.transaction() as conn:
        runner._reset(conn)


def rebuild_prefix(runner: ProjectionRunner, events: int) -> int:
    """A rebuild stopped after the batch that reaches `events` (the slow per-event path needs this)."""
    reset(runner)
    applied = 0
    while applied < events:
        count = runner.run_once()
        if not count:
            break
        applied += count
    return applied


def timed(fn: Callable[[], int]) -> float:
    started = time.perf_counter()
    count = fn()
    return count / (time.perf_counter() - started)


def rebuild_bench(
    backend: str, store: EventStore, sizes: Sizes, raw_rate: Callable[[], float], profile: bool
) -> list[list[Any]]:
    """Per-event vs batched on a prefix of the log (same events, alternating), then the batched
    rebuild of the whole log alternating with the raw driver's executemany as the machine's yardstick."""
    say(f"{backend}: generating a log of {sizes.log_attempt_total:,} attempts in {sizes.log_runs} runs")
    started = time.perf_counter()
    events = fill_log(store, sizes)
    say(f"{backend}: {events:,} events appended in {time.perf_counter() - started:.1f} s")
    batched = ProjectionRunner(store, ReadModels())
    per_event = ProjectionRunner(store, PerEvent(ReadModels()))
    prefix = min(sizes.per_event_prefix, events)
    rates: dict[str, list[float]] = {"per event": [], "batched": [], "whole": [], "raw": []}
    dumps = {}
    for r in range(2):
        say(f"{backend}: first {prefix:,} events, per event and batched, round {r + 1}/2")
        pair = [("per event", per_event), ("batched", batched)]
        for name, runner in pair if r == 0 else pair[::-1]:
            rates[name].append(timed(lambda runner=runner: rebuild_prefix(runner, prefix)))
            dumps[name] = dump(store)
        if dumps["per event"] != dumps["batched"]:
            raise SystemExit(f"{backend}: the batched projection did NOT reproduce the per-event read models")
    say(f"{backend}: per-event and batched rebuilds of the prefix produced identical read models")
    # Context: `regatta projections rebuild` also rebuilds the gateway's ops projection (audit log,
    # budgets, webhooks; readmodels/operations.py), batched too.
    ops = ProjectionRunner(store, OpsReadModels())
    ops.create_tables()
    say(f"{backend}: first {prefix:,} events, ops projection")
    ops_rate = timed(lambda: rebuild_prefix(ops, prefix))
    rounds = min(3, sizes.rounds)
    for r in range(rounds):
        say(f"{backend}: whole log, batched rebuild and raw executemany, round {r + 1}/{rounds}")
        if r % 2:
            rates["raw"].append(raw_rate())
        rates["whole"].append(timed(batched.rebuild))
        if not r % 2:
            rates["raw"].append(raw_rate())
    if profile:
        profiled(f"{backend} rebuild", batched.rebuild)
    normalised = median([w / raw for w, raw in zip(rates["whole"], rates["raw"], strict=True)])
    speedup = median([b / p for b, p in zip(rates["batched"], rates["per event"], strict=True)])
    verdict = "MET" if median(rates["whole"]) >= REBUILD_BUDGET else "NOT MET"
    return [
        [
            backend,
            f"first {prefix:,}",
            "ops projection (readmodels/operations.py, batched)",
            ops_rate,
            "",
            "context",
        ],
        [backend, f"first {prefix:,}", "per event (apply)", median(rates["per event"]), "", ""],
        [
            backend,
            f"first {prefix:,}",
            "batched (apply_batch)",
            median(rates["batched"]),
            "",
            f"{speedup:.1f}x",
        ],
        [backend, f"all {events:,}", "raw driver executemany", median(rates["raw"]), "1.00", ""],
        [
            backend,
            f"all {events:,}",
            "batched (apply_batch)",
            median(rates["whole"]),
            f"{normalised:.3f}",
            f"{verdict} (>= {REBUILD_BUDGET:,.0f} events/s)",
        ],
    ]
