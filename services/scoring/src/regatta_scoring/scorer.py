"""Service layer of scoring: provisional scores while a run runs, final ones and `finished` after it,
then the benchmark's leaderboard. Every number is computed here once and stored as an event."""

from __future__ import annotations

import time

from regatta_shared.envelope import deterministic_id, new_event
from regatta_shared.events import (
    AttemptFinished,
    LeaderboardComputed,
    RunExecutionCompleted,
    RunFinished,
    RunScored,
    RunStopped,
    RunSubmitted,
)
from regatta_shared.eventstore import EventStore, NewEvent, StoredEvent
from regatta_shared.ids import leaderboard_stream, run_stream

from .leaderboard import LeaderboardEntry, build_leaderboard, entries_from_run, rank_run_agents
from .scores import score_run, tally

PROVISIONAL_INTERVAL = 1.0


class Scorer:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._last_provisional: dict[str, float] = {}

    def on_events(self, events: list[StoredEvent]) -> None:
        """A batch: at most one provisional score per run, then the terminal events in order."""
        latest_finished: dict[str, StoredEvent] = {}
        for event in events:
            if event.type == AttemptFinished.type_name:
                latest_finished[event.data["run_id"]] = event
        for event in latest_finished.values():
            self.on_event(event)
        for event in events:
            if event.type != AttemptFinished.type_name:
                self.on_event(event)

    def on_event(self, event: StoredEvent) -> None:
        run_id = event.data.get("run_id")
        if event.type == AttemptFinished.type_name and run_id:
            now = time.monotonic()
            if now - self._last_provisional.get(run_id, 0.0) >= PROVISIONAL_INTERVAL:
                self._last_provisional[run_id] = now
                self.score(run_id, final=False, through=event.position)
        elif event.type == RunExecutionCompleted.type_name and run_id:
            finished = new_event(
                RunFinished(run_id=run_id), event_id=deterministic_id(run_id, "finished"), actor="scoring"
            )
            self.score(run_id, final=True, through=event.position, then=[finished])
        elif event.type == RunStopped.type_name and run_id:
            self.score(run_id, final=True, through=event.position)
        elif event.type == RunFinished.type_name and run_id:
            self.update_leaderboard(event.data.get("benchmark_id") or self._benchmark_of(run_id))

    def score(self, run_id: str, *, final: bool, through: int, then: list[NewEvent] | None = None) -> None:
        """`then`: events recorded in the same transaction as the scores (`finished` with the final ones)."""
        history = self.store.read_stream(run_stream(run_id))
        run = tally(history)
        if run is None:
            return
        if any(e.type in (RunFinished.type_name,) for e in history) and not final:
            return
        agents = rank_run_agents(score_run(run))
        scored = RunScored(run_id=run_id, final=final, agents=agents, through_position=through)
        key = "final" if final else f"provisional-{through}"
        scored_event = new_event(scored, event_id=deterministic_id(run_id, key), actor="scoring")
        # Insert-or-ignore by event id: events recorded earlier (final scores, by a scorer that crashed
        # before `finished`) are skipped, the rest stored.
        self.store.append(run_stream(run_id), [scored_event, *(then or [])])

    def _benchmark_of(self, run_id: str) -> str:
        first = self.store.read_stream(run_stream(run_id))[0]
        return first.data["benchmark_id"]

    def update_leaderboard(self, benchmark_id: str) -> None:
        entries: list[LeaderboardEntry] = []
        for submitted in self.store.read_all(0, 10**9, types=[RunSubmitted.type_name]):
            if submitted.data["benchmark_id"] != benchmark_id:
                continue
            entries.extend(entries_from_run(self.store.read_stream(submitted.stream_id)))
        rows = build_leaderboard(entries)
        stream = leaderboard_stream(benchmark_id)
        computed = LeaderboardComputed(benchmark_id=benchmark_id, rows=rows)
        self.store.append(stream, [new_event(computed, actor="scoring")])
